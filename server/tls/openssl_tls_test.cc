// The OpenSSL session against a real OpenSSL client, both over memory (no sockets): handshakes
// on both versions, ALPN, SNI and key types, resumption, records split to single bytes, bad
// input, close_notify, and the start-up checks of certificates and keys.
#include "server/tls/openssl_tls.h"

#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/ocsp.h>
#include <openssl/pem.h>
#include <openssl/rand.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <string>
#include <thread>
#include <utility>

#include "gtest/gtest.h"

namespace ringd::tls {
namespace {

// A self-signed certificate for `name` with a key of `type` ("EC" or "RSA"), written as PEM
// files; `days` may be negative for one that has expired.
TlsCertPair MakeCert(const std::string& name, const char* type, int days = 30) {
  EVP_PKEY* key = std::string(type) == "EC" ? EVP_EC_gen("P-256") : EVP_RSA_gen(2048);
  X509* x = X509_new();
  X509_set_version(x, 2);
  ASN1_INTEGER_set(X509_get_serialNumber(x), 1);
  X509_gmtime_adj(X509_getm_notBefore(x), days < 0 ? 86400L * (days - 2) : -60);
  X509_gmtime_adj(X509_getm_notAfter(x), 86400L * days);
  X509_set_pubkey(x, key);
  X509_NAME* subject = X509_get_subject_name(x);
  X509_NAME_add_entry_by_txt(subject, "CN", MBSTRING_ASC,
                             reinterpret_cast<const unsigned char*>(name.c_str()), -1, -1, 0);
  X509_set_issuer_name(x, subject);
  X509V3_CTX v3;
  X509V3_set_ctx_nodb(&v3);
  X509V3_set_ctx(&v3, x, x, nullptr, nullptr, 0);
  X509_EXTENSION* san =
      X509V3_EXT_conf_nid(nullptr, &v3, NID_subject_alt_name, ("DNS:" + name).c_str());
  X509_add_ext(x, san, -1);
  X509_EXTENSION_free(san);
  X509_sign(x, key, EVP_sha256());
  const std::string base = ::testing::TempDir() + "/" + name + "-" + type + std::to_string(days);
  TlsCertPair pair{base + ".crt", base + ".key"};
  FILE* f = std::fopen(pair.cert_file.c_str(), "w");
  PEM_write_X509(f, x);
  std::fclose(f);
  f = std::fopen(pair.key_file.c_str(), "w");
  PEM_write_PrivateKey(f, key, nullptr, nullptr, 0, nullptr, nullptr);
  std::fclose(f);
  X509_free(x);
  EVP_PKEY_free(key);
  return pair;
}

// An OpenSSL client over memory BIOs, and the server session it talks to.
class Client {
 public:
  Client(TlsSession* server, const char* sni = nullptr, int max_version = TLS1_3_VERSION,
         const char* sigalgs = nullptr)
      : server_(server) {
    ctx_ = SSL_CTX_new(TLS_client_method());
    SSL_CTX_set_max_proto_version(ctx_, max_version);
    if (sigalgs != nullptr) SSL_CTX_set1_sigalgs_list(ctx_, sigalgs);
    static const unsigned char kAlpn[] = {2, 'h', '2', 8, 'h', 't', 't', 'p', '/', '1', '.', '1'};
    SSL_CTX_set_alpn_protos(ctx_, kAlpn, sizeof kAlpn);
    ssl_ = SSL_new(ctx_);
    in_ = BIO_new(BIO_s_mem());
    out_ = BIO_new(BIO_s_mem());
    BIO_set_mem_eof_return(in_, -1);
    SSL_set_bio(ssl_, in_, out_);
    SSL_set_connect_state(ssl_);
    if (sni != nullptr) SSL_set_tlsext_host_name(ssl_, sni);
  }
  ~Client() {
    SSL_free(ssl_);
    SSL_CTX_free(ctx_);
  }
  SSL* ssl() { return ssl_; }

  // Moves bytes both ways until neither side has anything to say; `chunk` splits the client's
  // records into pieces of that many bytes. Returns what the server decrypted.
  std::string Pump(size_t chunk = 1 << 20) {
    std::string plain;
    for (int round = 0; round < 50; ++round) {
      SSL_do_handshake(ssl_);
      bool moved = false;
      char buf[16384];
      size_t n = 0;
      while (BIO_read_ex(out_, buf, std::min(sizeof buf, chunk), &n) == 1) {
        server_->Feed(buf, n);
        moved = true;
        char p[4096];
        while (size_t got = server_->ReadPlain(p, sizeof p)) plain.append(p, got);
      }
      char p[4096];
      while (size_t got = server_->ReadPlain(p, sizeof p)) plain.append(p, got);
      while ((n = server_->TakeOutput(buf, sizeof buf)) > 0) {
        BIO_write(in_, buf, static_cast<int>(n));
        moved = true;
      }
      if (!moved) break;
    }
    return plain;
  }
  std::string Read() {
    std::string plain;
    char buf[4096];
    size_t n = 0;
    while (SSL_read_ex(ssl_, buf, sizeof buf, &n) == 1) plain.append(buf, n);
    return plain;
  }

 private:
  TlsSession* server_;
  SSL_CTX* ctx_;
  SSL* ssl_;
  BIO* in_;
  BIO* out_;
};

// The factory, or null with the error's one line in *error.
std::shared_ptr<OpenSslFactory> Create(const TlsOptions& o, std::string* error) {
  absl::StatusOr<std::shared_ptr<OpenSslFactory>> f = OpenSslFactory::Create(o);
  if (!f.ok()) {
    *error = std::string(f.status().message());
    return nullptr;
  }
  return *std::move(f);
}

std::shared_ptr<OpenSslFactory> Factory(std::vector<TlsCertPair> pairs, std::string* error) {
  TlsOptions o;
  o.pairs = std::move(pairs);
  return Create(o, error);
}

// ALPN picks h2 from a client offering h2 and http/1.1 while HTTP/2 is on (above), and
// http/1.1 with --http2=false.
TEST(OpenSslTls, AlpnOffersHttp11AloneWithoutHttp2) {
  std::string error;
  TlsOptions o;
  o.pairs = {MakeCert("origin.test", "EC")};
  o.http2 = false;
  auto f = Create(o, &error);
  ASSERT_NE(f, nullptr) << error;
  std::unique_ptr<TlsSession> s = f->Make();
  Client c(s.get(), "origin.test");
  c.Pump();
  ASSERT_TRUE(s->HandshakeDone());
  const unsigned char* alpn = nullptr;
  unsigned int alpn_len = 0;
  SSL_get0_alpn_selected(c.ssl(), &alpn, &alpn_len);
  EXPECT_EQ(std::string(reinterpret_cast<const char*>(alpn), alpn_len), "http/1.1");
}

TEST(OpenSslTls, HandshakesAndCarriesRequestsBothWays) {
  std::string error;
  auto f = Factory({MakeCert("origin.test", "EC")}, &error);
  ASSERT_NE(f, nullptr) << error;
  for (int version : {TLS1_2_VERSION, TLS1_3_VERSION}) {
    std::unique_ptr<TlsSession> s = f->Make();
    Client c(s.get(), "origin.test", version);
    c.Pump();
    ASSERT_TRUE(s->HandshakeDone());
    EXPECT_EQ(s->Version(), version == TLS1_3_VERSION ? "TLSv1.3" : "TLSv1.2");
    EXPECT_EQ(s->ServerName(), "origin.test");
    EXPECT_FALSE(s->Resumed());
    const unsigned char* alpn = nullptr;
    unsigned int alpn_len = 0;
    SSL_get0_alpn_selected(c.ssl(), &alpn, &alpn_len);
    EXPECT_EQ(std::string(reinterpret_cast<const char*>(alpn), alpn_len), "h2");
    const std::string request = "GET / HTTP/1.1\r\nHost: origin.test\r\n\r\n";
    SSL_write(c.ssl(), request.data(), static_cast<int>(request.size()));
    EXPECT_EQ(c.Pump(), request);
    ASSERT_TRUE(s->WritePlain("HTTP/1.1 200 OK\r\n\r\n", 19));
    c.Pump();
    EXPECT_EQ(c.Read(), "HTTP/1.1 200 OK\r\n\r\n");
    // close_notify both ways.
    s->Close();
    c.Pump();
    EXPECT_EQ(SSL_get_shutdown(c.ssl()) & SSL_RECEIVED_SHUTDOWN, 0);  // read on demand
    c.Read();
    EXPECT_NE(SSL_get_shutdown(c.ssl()) & SSL_RECEIVED_SHUTDOWN, 0);
    SSL_shutdown(c.ssl());
    c.Pump();
    EXPECT_EQ(s->Ended(), TlsEnd::kCloseNotify);
  }
}

TEST(OpenSslTls, TrimmingBetweenExchangesKeepsTheSessionWorking) {
  std::string error;
  auto f = Factory({MakeCert("origin.test", "RSA")}, &error);  // a large first flight
  ASSERT_NE(f, nullptr) << error;
  std::unique_ptr<TlsSession> s = f->Make();
  Client c(s.get());
  c.Pump();
  ASSERT_TRUE(s->HandshakeDone());
  for (int i = 0; i < 3; ++i) {
    s->Trim();
    const std::string request = "GET /" + std::to_string(i) + " HTTP/1.1\r\nHost: x\r\n\r\n";
    SSL_write(c.ssl(), request.data(), static_cast<int>(request.size()));
    EXPECT_EQ(c.Pump(), request);
    const std::string body(100000, static_cast<char>('a' + i));  // grows the output queue
    ASSERT_TRUE(s->WritePlain(body.data(), body.size()));
    c.Pump();
    EXPECT_EQ(c.Read(), body);
  }
}

TEST(OpenSslTls, RecordsSplitToSingleBytesStillArrive) {
  std::string error;
  auto f = Factory({MakeCert("origin.test", "EC")}, &error);
  ASSERT_NE(f, nullptr) << error;
  std::unique_ptr<TlsSession> s = f->Make();
  Client c(s.get());
  c.Pump(/*chunk=*/1);
  ASSERT_TRUE(s->HandshakeDone());
  const std::string request = "GET /a HTTP/1.1\r\nHost: x\r\n\r\n";
  SSL_write(c.ssl(), request.data(), static_cast<int>(request.size()));
  EXPECT_EQ(c.Pump(1), request);
}

TEST(OpenSslTls, AnIdleSessionHoldsNoBufferAndRecordsSplitToBytesPassBothWays) {
  std::string error;
  auto f = Factory({MakeCert("origin.test", "EC")}, &error);
  ASSERT_NE(f, nullptr) << error;
  for (int version : {TLS1_2_VERSION, TLS1_3_VERSION}) {
    std::unique_ptr<TlsSession> s = f->Make();
    Client c(s.get(), "origin.test", version);
    c.Pump();
    ASSERT_TRUE(s->HandshakeDone());
    EXPECT_GT(s->BufferBytes(), 0u);  // the handshake's records went through the queues
    s->Trim();
    EXPECT_EQ(s->BufferBytes(), 0u);
    // A request record fed a byte at a time, trimmed after each: the session holds at most its
    // bytes (the library takes a partial record into its own buffer).
    const std::string request = "GET /split HTTP/1.1\r\nHost: x\r\n\r\n";
    SSL_write(c.ssl(), request.data(), static_cast<int>(request.size()));
    std::string record;
    char buf[4096];
    int n = 0;
    while ((n = BIO_read(SSL_get_wbio(c.ssl()), buf, sizeof buf)) > 0) record.append(buf, n);
    ASSERT_GT(record.size(), request.size());
    std::string plain;
    for (size_t i = 0; i < record.size(); ++i) {
      s->Feed(&record[i], 1);
      while (size_t got = s->ReadPlain(buf, sizeof buf)) plain.append(buf, got);
      s->Trim();
      EXPECT_LE(s->BufferBytes(), i + 1);
    }
    EXPECT_EQ(plain, request);
    EXPECT_EQ(s->BufferBytes(), 0u);
    // The response taken a byte at a time still decrypts; then nothing is held.
    const std::string body(40000, 'r');
    ASSERT_TRUE(s->WritePlain(body.data(), body.size()));
    EXPECT_GE(s->BufferBytes(), body.size());
    while (s->PendingOutput() > 0) {
      char byte;
      ASSERT_EQ(s->TakeOutput(&byte, 1), 1u);
      BIO_write(SSL_get_rbio(c.ssl()), &byte, 1);
    }
    EXPECT_EQ(c.Read(), body);
    s->Trim();
    EXPECT_EQ(s->BufferBytes(), 0u);
    EXPECT_FALSE(s->HasBufferedInput());
  }
}

TEST(OpenSslTls, LentRecordsStayPutWhileMoreAreQueued) {
  std::string error;
  auto f = Factory({MakeCert("origin.test", "EC")}, &error);
  ASSERT_NE(f, nullptr) << error;
  std::unique_ptr<TlsSession> s = f->Make();
  Client c(s.get());
  c.Pump();
  ASSERT_TRUE(s->HandshakeDone());
  const std::string first(30000, 'a'), second(70000, 'b');
  ASSERT_TRUE(s->WritePlain(first.data(), first.size()));
  const char* lent = nullptr;
  const size_t n = s->PeekOutput(&lent);
  ASSERT_GT(n, first.size());
  const std::string copy(lent, n);
  ASSERT_TRUE(s->WritePlain(second.data(), second.size()));  // queued behind, in other memory
  EXPECT_EQ(std::string(lent, n), copy);
  const char* again = nullptr;
  EXPECT_EQ(s->PeekOutput(&again), n);
  EXPECT_EQ(again, lent);
  EXPECT_GT(s->PendingOutput(), n + second.size());
  BIO_write(SSL_get_rbio(c.ssl()), lent, static_cast<int>(n));
  s->ConsumeOutput(n);
  EXPECT_EQ(c.Read(), first);
  c.Pump();
  EXPECT_EQ(c.Read(), second);
  EXPECT_EQ(s->PendingOutput(), 0u);
}

TEST(OpenSslTls, GarbageGetsAnAlertAndEndsTheSession) {
  std::string error;
  auto f = Factory({MakeCert("origin.test", "EC")}, &error);
  ASSERT_NE(f, nullptr) << error;
  std::unique_ptr<TlsSession> s = f->Make();
  // A handshake record whose ClientHello is nonsense.
  const char garbage[] = "\x16\x03\x01\x00\x08\x01\x00\x00\x04junk";
  s->Feed(garbage, sizeof garbage - 1);
  char buf[64];
  EXPECT_EQ(s->ReadPlain(buf, sizeof buf), 0u);
  EXPECT_EQ(s->Ended(), TlsEnd::kBadInput);
  EXPECT_FALSE(s->HandshakeDone());
  EXPECT_FALSE(s->WritePlain("x", 1));
  // An alert record: content type 21.
  ASSERT_GT(s->PendingOutput(), 0u);
  ASSERT_GT(s->TakeOutput(buf, sizeof buf), 0u);
  EXPECT_EQ(buf[0], 21);
}

TEST(OpenSslTls, PlainHttpOnATlsPortIsToldApart) {
  std::string error;
  auto f = Factory({MakeCert("origin.test", "EC")}, &error);
  ASSERT_NE(f, nullptr) << error;
  std::unique_ptr<TlsSession> s = f->Make();
  const std::string plain = "GET / HTTP/1.1\r\nHost: x\r\n\r\n";
  s->Feed(plain.data(), plain.size());
  char buf[64];
  EXPECT_EQ(s->ReadPlain(buf, sizeof buf), 0u);
  EXPECT_EQ(s->Ended(), TlsEnd::kPlainHttp);
  EXPECT_EQ(s->PendingOutput(), 0u);  // no alert: the peer does not speak TLS
  EXPECT_EQ(s->PlainHttpRequest(), plain) << "what the shard answers and logs";
  // Fed a byte at a time, the same.
  s = f->Make();
  for (char c : plain) {
    s->Feed(&c, 1);
    s->ReadPlain(buf, sizeof buf);
  }
  EXPECT_EQ(s->Ended(), TlsEnd::kPlainHttp);
  EXPECT_EQ(s->PlainHttpRequest(), plain.substr(0, 5));  // all it had when it told
}

// A full handshake with `f` (server name `sni`, at most `version`), a record read so that TLS
// 1.3's tickets arrive, and a clean close: the session the client keeps.
SSL_SESSION* TicketFrom(OpenSslFactory* f, const char* sni, int version) {
  std::unique_ptr<TlsSession> s = f->Make();
  Client c(s.get(), sni, version);
  c.Pump();
  EXPECT_TRUE(s->HandshakeDone());
  // TLS 1.3 tickets come after the handshake: a read takes them in.
  EXPECT_TRUE(s->WritePlain("x", 1));
  c.Pump();
  c.Read();
  SSL_SESSION* ticket = SSL_get1_session(c.ssl());
  SSL_shutdown(c.ssl());  // a client freed without its close_notify drops the session
  return ticket;
}

TEST(OpenSslTls, ResumesWithATicketOnBothVersions) {
  std::string error;
  auto f = Factory({MakeCert("origin.test", "EC")}, &error);
  ASSERT_NE(f, nullptr) << error;
  for (int version : {TLS1_2_VERSION, TLS1_3_VERSION}) {
    SSL_SESSION* ticket = TicketFrom(f.get(), nullptr, version);
    ASSERT_NE(ticket, nullptr);
    ASSERT_EQ(SSL_SESSION_is_resumable(ticket), 1);
    std::unique_ptr<TlsSession> s = f->Make();  // another connection, any shard
    Client c(s.get(), nullptr, version);
    SSL_set_session(c.ssl(), ticket);
    c.Pump();
    ASSERT_TRUE(s->HandshakeDone());
    EXPECT_TRUE(s->Resumed()) << version << " client says " << SSL_session_reused(c.ssl())
                              << " err " << ERR_peek_error() << " ticket lifetime "
                              << SSL_SESSION_get_ticket_lifetime_hint(ticket) << " has ticket "
                              << SSL_SESSION_has_ticket(ticket);
    SSL_SESSION_free(ticket);
  }
}

int tickets_seen = 0;
int CountTicket(SSL*, SSL_SESSION*) {
  ++tickets_seen;
  return 0;  // not kept: the library frees it
}

TEST(OpenSslTls, SendsTheTicketsAskedForAndNoneWhenOff) {
  std::string error;
  const TlsCertPair cert = MakeCert("origin.test", "EC");
  for (uint32_t n : {0u, 1u, 2u}) {
    TlsOptions o;
    o.pairs = {cert};
    o.tickets_per_handshake = n;
    auto f = Create(o, &error);
    ASSERT_NE(f, nullptr) << error;
    for (int version : {TLS1_2_VERSION, TLS1_3_VERSION}) {
      std::unique_ptr<TlsSession> s = f->Make();
      Client c(s.get(), nullptr, version);
      SSL_CTX* cctx = SSL_get_SSL_CTX(c.ssl());
      SSL_CTX_set_session_cache_mode(cctx,
                                     SSL_SESS_CACHE_CLIENT | SSL_SESS_CACHE_NO_INTERNAL_STORE);
      SSL_CTX_sess_set_new_cb(cctx, &CountTicket);
      tickets_seen = 0;
      c.Pump();
      ASSERT_TRUE(s->HandshakeDone());
      ASSERT_TRUE(s->WritePlain("x", 1));
      c.Pump();
      c.Read();
      SSL_SESSION* session = SSL_get1_session(c.ssl());
      ASSERT_NE(session, nullptr);
      if (version == TLS1_3_VERSION) {
        EXPECT_EQ(tickets_seen, static_cast<int>(n)) << "TLS 1.3, " << n << " asked for";
      } else {
        EXPECT_EQ(SSL_SESSION_has_ticket(session), n > 0 ? 1 : 0) << "TLS 1.2, " << n;
      }
      SSL_SESSION_free(session);
      SSL_shutdown(c.ssl());
    }
  }
}

// A connection resuming `ticket` on `f` (TLS 1.3), reading the reply so that the tickets sent
// after the handshake are taken in: whether it resumed, how many new tickets it got, and the
// newest of them (null for none; the caller frees it).
struct Resumption {
  bool resumed = false;
  int new_tickets = 0;
  SSL_SESSION* newest = nullptr;
};
SSL_SESSION* newest_ticket = nullptr;
int KeepNewestTicket(SSL*, SSL_SESSION* session) {
  ++tickets_seen;
  SSL_SESSION_free(newest_ticket);
  newest_ticket = session;
  return 1;  // kept: freed by the next one or by the caller
}
Resumption Resume(OpenSslFactory* f, SSL_SESSION* ticket) {
  std::unique_ptr<TlsSession> s = f->Make();
  Client c(s.get());
  SSL_CTX* cctx = SSL_get_SSL_CTX(c.ssl());
  SSL_CTX_set_session_cache_mode(cctx, SSL_SESS_CACHE_CLIENT | SSL_SESS_CACHE_NO_INTERNAL_STORE);
  SSL_CTX_sess_set_new_cb(cctx, &KeepNewestTicket);
  SSL_set_session(c.ssl(), ticket);
  tickets_seen = 0;
  newest_ticket = nullptr;
  c.Pump();
  Resumption r;
  if (s->HandshakeDone() && s->WritePlain("x", 1)) {
    c.Pump();
    c.Read();
    r.resumed = s->Resumed();
  }
  SSL_shutdown(c.ssl());
  r.new_tickets = tickets_seen;
  r.newest = std::exchange(newest_ticket, nullptr);
  return r;
}

// Browsers offer a TLS 1.3 ticket once (RFC 8446 appendix C.4): a resumed connection gets a
// fresh ticket, under the shared keys as under OpenSSL's own, so that a chain of connections
// resumes link after link. One ticket, whatever --tls-tickets asks after a full handshake.
TEST(OpenSslTls, AResumedTls13ConnectionGetsOneFreshTicketThatResumesInTurn) {
  TicketKeys keys(/*rotate_sec=*/43200);
  const TlsCertPair cert = MakeCert("origin.test", "EC");
  for (uint32_t n : {1u, 2u}) {
    for (TicketKeys* shared : {&keys, static_cast<TicketKeys*>(nullptr)}) {
      TlsOptions o;
      o.pairs = {cert};
      o.tickets = shared;
      o.tickets_per_handshake = n;
      std::string error;
      auto f = Create(o, &error);
      ASSERT_NE(f, nullptr) << error;
      SSL_SESSION* ticket = TicketFrom(f.get(), nullptr, TLS1_3_VERSION);
      ASSERT_NE(ticket, nullptr);
      for (int link = 1; link <= 3; ++link) {
        Resumption r = Resume(f.get(), ticket);
        SSL_SESSION_free(ticket);
        EXPECT_TRUE(r.resumed) << "link " << link << ", " << n << " per full handshake";
        EXPECT_EQ(r.new_tickets, 1) << "link " << link << ", " << n << " per full handshake, "
                                    << (shared != nullptr ? "shared keys" : "OpenSSL's keys");
        ticket = r.newest;
        if (ticket == nullptr) break;
      }
      SSL_SESSION_free(ticket);
    }
  }
}

int64_t fake_now = 1000;
int64_t FakeNow() { return fake_now; }

// A full handshake then a resumption attempt with its ticket, on `first` then `second`; whether
// the second resumed.
bool ResumesAcross(OpenSslFactory* first, OpenSslFactory* second, void (*between)() = nullptr) {
  SSL_SESSION* ticket = TicketFrom(first, nullptr, TLS1_3_VERSION);
  if (between != nullptr) between();
  std::unique_ptr<TlsSession> s = second->Make();
  Client c(s.get());
  SSL_set_session(c.ssl(), ticket);
  c.Pump();
  SSL_SESSION_free(ticket);
  return s->HandshakeDone() && s->Resumed();
}

TEST(OpenSslTls, TicketKeysOutliveAReloadAndRotateWithThePreviousStillAccepted) {
  fake_now = 1000;
  TicketKeys keys(/*rotate_sec=*/100, &FakeNow);
  TlsOptions o;
  o.pairs = {MakeCert("origin.test", "EC")};
  o.tickets = &keys;
  std::string error;
  auto before = Create(o, &error);
  auto after = Create(o, &error);  // a reload: new contexts, the same keys
  ASSERT_NE(after, nullptr) << error;
  EXPECT_TRUE(ResumesAcross(before.get(), after.get()));
  // One rotation: the ticket's key is the previous one, still accepted.
  EXPECT_TRUE(ResumesAcross(after.get(), after.get(), [] { fake_now += 150; }));
  EXPECT_EQ(keys.rotations(), 1u);
  // Two rotations after it was issued: a full handshake.
  EXPECT_FALSE(ResumesAcross(after.get(), after.get(), [] { fake_now += 250; }));
  // Without shared keys, another generation's contexts cannot read the ticket.
  o.tickets = nullptr;
  auto own_a = Create(o, &error);
  auto own_b = Create(o, &error);
  EXPECT_FALSE(ResumesAcross(own_a.get(), own_b.get()));
}

std::atomic<int64_t> shared_now{1000};
int64_t SharedNow() { return shared_now.load(); }

// Two shards issuing and opening tickets at once read the keys with no lock (TSan finds no
// race); a rotation meanwhile takes the rotation lock, and only a rotation does.
TEST(OpenSslTls, TwoThreadsIssueAndOpenTicketsAtOnceWithNoLockButRotations) {
  TicketKeys keys(/*rotate_sec=*/100, &SharedNow);
  TlsOptions o;
  o.pairs = {MakeCert("origin.test", "EC")};
  o.tickets = &keys;
  std::string error;
  auto f = Create(o, &error);
  ASSERT_NE(f, nullptr) << error;
  constexpr int kRounds = 12;
  auto hammer = [&f](std::atomic<int>* resumed) {
    for (int i = 0; i < kRounds; ++i) resumed->fetch_add(ResumesAcross(f.get(), f.get()) ? 1 : 0);
  };
  std::atomic<int> resumed_a{0}, resumed_b{0};
  {
    std::thread a(hammer, &resumed_a), b(hammer, &resumed_b);
    a.join();
    b.join();
  }
  EXPECT_EQ(resumed_a.load() + resumed_b.load(), 2 * kRounds);
  EXPECT_EQ(keys.rotation_locks(), 0u) << "a lock taken on a ticket's way";
  // Rotations while both go on: fewer than the ring holds, each a lock or two (both threads may
  // find the key old at once).
  std::atomic<bool> stop{false};
  auto rotate = [&] {
    for (int r = 0; r < 3 && !stop.load(); ++r) {
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
      shared_now.fetch_add(100);
    }
  };
  {
    std::thread a(hammer, &resumed_a), b(hammer, &resumed_b), clock(rotate);
    a.join();
    b.join();
    stop.store(true);
    clock.join();
  }
  EXPECT_LT(keys.rotations(), TicketKeys::kGenerations);
  EXPECT_GE(keys.rotation_locks(), keys.rotations());
  EXPECT_LE(keys.rotation_locks(), 2 * keys.rotations());
  // One more handshake after the last rotation: the keys are up to date, and it resumes.
  const uint64_t locks = keys.rotation_locks();
  EXPECT_TRUE(ResumesAcross(f.get(), f.get()));
  EXPECT_LE(keys.rotation_locks(), locks + 1);
}

bool random_fails = false;
bool FlakyRandom(unsigned char* out, int n) { return !random_fails && RAND_bytes(out, n) == 1; }

// A full TLS 1.3 handshake with `f`, whose session tickets need random bytes (a key's, an IV);
// whether it came to an end with no error.
bool Handshakes(OpenSslFactory* f) {
  std::unique_ptr<TlsSession> s = f->Make();
  Client c(s.get());
  c.Pump();
  return s->HandshakeDone() && s->Ended() == TlsEnd::kNone;
}

// Random bytes that cannot be had (RAND_bytes failing) fail the handshake that needed them for a
// ticket, not the process; the keys stay, and the next handshake rotates them.
TEST(OpenSslTls, RandomBytesThatCannotBeHadFailThatHandshakeAlone) {
  fake_now = 1000;
  random_fails = false;
  TicketKeys keys(/*rotate_sec=*/100, &FakeNow, &FlakyRandom);
  TlsOptions o;
  o.pairs = {MakeCert("origin.test", "EC")};
  o.tickets = &keys;
  std::string error;
  auto f = Create(o, &error);
  ASSERT_NE(f, nullptr) << error;
  EXPECT_TRUE(Handshakes(f.get()));
  random_fails = true;
  EXPECT_FALSE(Handshakes(f.get())) << "a ticket's IV";
  fake_now += 150;
  EXPECT_FALSE(Handshakes(f.get())) << "a rotation's key";
  EXPECT_EQ(keys.rotations(), 0u);
  random_fails = false;
  EXPECT_TRUE(Handshakes(f.get()));
  EXPECT_EQ(keys.rotations(), 1u);
}

// Shards make sessions at once with no lock between reloads: each thread pins a generation on
// its first Make after a reload, once; a session begun before a reload finishes on its own.
TEST(OpenSslTls, TwoThreadsMakeSessionsWithOnePinEachPerGeneration) {
  ReloadableTls tls;
  TlsOptions o;
  o.pairs = {MakeCert("origin.test", "EC")};
  ASSERT_EQ(tls.Load(o), absl::OkStatus());
  constexpr int kSessions = 8;
  std::atomic<int> handshakes{0}, before_reload{0};
  std::atomic<bool> reloaded{false};
  auto shard = [&] {
    auto handshake = [&](TlsSession* s) {
      Client c(s);
      c.Pump();
      handshakes.fetch_add(s->HandshakeDone() ? 1 : 0);
    };
    std::unique_ptr<TlsSession> held = tls.Make();  // its handshake waits for the reload
    for (int i = 0; i < kSessions; ++i) handshake(tls.Make().get());
    before_reload.fetch_add(1);
    while (!reloaded.load()) std::this_thread::yield();
    for (int i = 0; i < kSessions; ++i) handshake(tls.Make().get());
    handshake(held.get());
  };
  std::thread a(shard), b(shard);
  while (before_reload.load() < 2) std::this_thread::yield();
  EXPECT_EQ(tls.pin_locks(), 2u) << "a lock taken per session";
  ASSERT_EQ(tls.Load(o), absl::OkStatus());
  reloaded.store(true);
  a.join();
  b.join();
  EXPECT_EQ(tls.pin_locks(), 4u);
  EXPECT_EQ(handshakes.load(), 2 * (2 * kSessions + 1));
}

TEST(OpenSslTls, AFailedReloadKeepsTheCertificatesInUse) {
  ReloadableTls tls;
  TlsOptions o;
  o.pairs = {MakeCert("origin.test", "EC")};
  ASSERT_EQ(tls.Load(o), absl::OkStatus());
  std::unique_ptr<TlsSession> in_flight = tls.Make();  // a handshake begun before the reload
  TlsOptions bad = o;
  bad.pairs[0].key_file = "/nonexistent.key";
  const absl::Status failed = tls.Load(bad);
  EXPECT_NE(failed.message().find("cannot read '/nonexistent.key'"), absl::string_view::npos)
      << failed;
  EXPECT_EQ(tls.generation(), 1u);
  ASSERT_EQ(tls.Load(o), absl::OkStatus());
  EXPECT_EQ(tls.generation(), 2u);
  // The session made before both reloads still completes its handshake.
  Client c(in_flight.get());
  c.Pump();
  EXPECT_TRUE(in_flight->HandshakeDone());
  std::unique_ptr<TlsSession> fresh = tls.Make();
  Client d(fresh.get());
  d.Pump();
  EXPECT_TRUE(fresh->HandshakeDone());
}

TEST(OpenSslTls, SniAndKeyTypeChooseTheCertificate) {
  std::string error;
  auto f = Factory({MakeCert("a.test", "EC"), MakeCert("a.test", "RSA"), MakeCert("b.test", "EC")},
                   &error);
  ASSERT_NE(f, nullptr) << error;
  auto served = [&](const char* sni, const char* sigalgs, int version) {
    std::unique_ptr<TlsSession> s = f->Make();
    Client c(s.get(), sni, version, sigalgs);
    c.Pump();
    EXPECT_TRUE(s->HandshakeDone());
    X509* peer = SSL_get1_peer_certificate(c.ssl());
    char cn[64] = "";
    X509_NAME_get_text_by_NID(X509_get_subject_name(peer), NID_commonName, cn, sizeof cn);
    const std::string what =
        std::string(cn) + "/" +
        (EVP_PKEY_get_base_id(X509_get0_pubkey(peer)) == EVP_PKEY_EC ? "EC" : "RSA");
    X509_free(peer);
    return what;
  };
  EXPECT_EQ(served("b.test", nullptr, TLS1_3_VERSION), "b.test/EC");
  EXPECT_EQ(served("a.test", nullptr, TLS1_3_VERSION), "a.test/EC");
  EXPECT_EQ(served("a.test", "rsa_pss_rsae_sha256", TLS1_3_VERSION), "a.test/RSA");
  EXPECT_EQ(served("a.test", "RSA+SHA256", TLS1_2_VERSION), "a.test/RSA");
  EXPECT_EQ(served("b.test.", nullptr, TLS1_3_VERSION), "b.test/EC");  // fully qualified
  EXPECT_EQ(served("B.Test", nullptr, TLS1_3_VERSION), "b.test/EC");
  EXPECT_EQ(served("b.test..", nullptr, TLS1_3_VERSION), "a.test/EC");      // not a host name
  EXPECT_EQ(served("unknown.test", nullptr, TLS1_3_VERSION), "a.test/EC");  // the default site
  EXPECT_EQ(served(nullptr, nullptr, TLS1_3_VERSION), "a.test/EC");
  EXPECT_EQ(f->certificates().size(), 3u);
}

// RFC 6066 section 3: a server MUST NOT resume a session for another name than it was made for;
// it makes a new one. A ticket from a.test offered with SNI b.test gets a full handshake and
// b.test's certificate; offered to a.test again, it resumes. On both versions.
TEST(OpenSslTls, ATicketResumesOnlyOnTheSiteThatIssuedIt) {
  std::string error;
  auto f = Factory({MakeCert("a.test", "EC"), MakeCert("b.test", "EC")}, &error);
  ASSERT_NE(f, nullptr) << error;
  for (int version : {TLS1_2_VERSION, TLS1_3_VERSION}) {
    SSL_SESSION* ticket = TicketFrom(f.get(), "a.test", version);
    ASSERT_NE(ticket, nullptr);
    ASSERT_EQ(SSL_SESSION_is_resumable(ticket), 1);
    auto offer = [&](const char* sni, std::string* cn) {
      std::unique_ptr<TlsSession> s = f->Make();
      Client c(s.get(), sni, version);
      SSL_set_session(c.ssl(), ticket);
      c.Pump();
      EXPECT_TRUE(s->HandshakeDone()) << sni;
      X509* peer = SSL_get1_peer_certificate(c.ssl());
      char name[64] = "";
      if (peer != nullptr)
        X509_NAME_get_text_by_NID(X509_get_subject_name(peer), NID_commonName, name, sizeof name);
      X509_free(peer);
      *cn = name;
      return s->Resumed();
    };
    std::string cn;
    EXPECT_FALSE(offer("b.test", &cn)) << "TLS version " << version;
    EXPECT_EQ(cn, "b.test");
    EXPECT_TRUE(offer("a.test", &cn)) << "TLS version " << version;
    EXPECT_EQ(cn, "a.test");
    SSL_SESSION_free(ticket);
  }
  EXPECT_EQ(ERR_peek_error(), 0u);
}

TEST(OpenSslTls, BadCertificatesAndKeysAreOneClearLine) {
  std::string error;
  const TlsCertPair a = MakeCert("a.test", "EC");
  const TlsCertPair b = MakeCert("b.test", "EC");
  EXPECT_EQ(Factory({{a.cert_file, b.key_file}}, &error), nullptr);
  EXPECT_EQ(error, "--tls-key: '" + b.key_file + "' is not the key of '" + a.cert_file + "'");
  EXPECT_EQ(Factory({{"/nonexistent.crt", a.key_file}}, &error), nullptr);
  EXPECT_EQ(error, "--tls-cert: cannot read '/nonexistent.crt': No such file or directory");
  EXPECT_EQ(Factory({{a.cert_file, a.cert_file}}, &error), nullptr);
  EXPECT_NE(error.find("holds no PEM private key"), std::string::npos) << error;
  EXPECT_EQ(Factory({{a.key_file, a.key_file}}, &error), nullptr);
  EXPECT_NE(error.find("holds no PEM certificate"), std::string::npos) << error;
  // An expired certificate loads unless --tls-expired=refuse (ringd says so, and serves on).
  const TlsCertPair old = MakeCert("old.test", "EC", -1);
  auto expired = Factory({old}, &error);
  ASSERT_NE(expired, nullptr) << error;
  EXPECT_LT(expired->certificates()[0].not_after_sec, TicketKeys::WallSeconds());
  TlsOptions refuse;
  refuse.pairs = {old};
  refuse.refuse_expired = true;
  EXPECT_EQ(Create(refuse, &error), nullptr);
  EXPECT_EQ(error, "--tls-cert: '" + old.cert_file +
                       "' has expired (--tls-expired=refuse; renew it, or serve it with "
                       "--tls-expired=serve)");
  EXPECT_EQ(Factory({a, a}, &error), nullptr);
  EXPECT_NE(error.find("the names and key type of an earlier certificate"), std::string::npos);
  EXPECT_EQ(ERR_peek_error(), 0u);  // nothing left on the thread's error queue
}

// A key with a passphrase is refused in one line, and its passphrase is never asked for: OpenSSL
// would ask on the terminal, or read stdin where there is none, and wait there (at start-up, or
// on the thread that handles signals when SIGHUP reloads). stdin here is a pipe that stays open:
// a read of it would never return.
TEST(OpenSslTls, AnEncryptedKeyIsOneClearLineNotAPrompt) {
  const TlsCertPair a = MakeCert("enc.test", "EC");
  const std::string encrypted = a.key_file + ".enc";
  {
    FILE* in = std::fopen(a.key_file.c_str(), "r");
    EVP_PKEY* key = PEM_read_PrivateKey(in, nullptr, nullptr, nullptr);
    std::fclose(in);
    ASSERT_NE(key, nullptr);
    FILE* out = std::fopen(encrypted.c_str(), "w");
    char pass[] = "secret";
    ASSERT_EQ(PEM_write_PrivateKey(out, key, EVP_aes_256_cbc(), nullptr, 0, nullptr, pass), 1);
    std::fclose(out);
    EVP_PKEY_free(key);
  }
  int pipe_fds[2];
  ASSERT_EQ(::pipe(pipe_fds), 0);
  const int saved_stdin = ::dup(0);
  ASSERT_EQ(::dup2(pipe_fds[0], 0), 0);
  std::string error;
  EXPECT_EQ(Factory({{a.cert_file, encrypted}}, &error), nullptr);
  ::dup2(saved_stdin, 0);
  for (int fd : {saved_stdin, pipe_fds[0], pipe_fds[1]}) ::close(fd);
  EXPECT_EQ(error, "--tls-key: '" + encrypted +
                       "' is encrypted: give ringd the key without a passphrase (openssl pkey -in "
                       "KEY -out PLAIN)");
  EXPECT_EQ(ERR_peek_error(), 0u);
}

// A CA, and a leaf for `name` it signed, written as PEM files: the leaf's file holds its chain
// (the CA after it), as a full chain from an ACME client does.
struct Pki {
  EVP_PKEY* ca_key = nullptr;
  X509* ca = nullptr;
  X509* leaf = nullptr;
  TlsCertPair pair;
  ~Pki() {
    X509_free(leaf);
    X509_free(ca);
    EVP_PKEY_free(ca_key);
  }
};

X509* Sign(X509_NAME* subject, EVP_PKEY* pub, X509* issuer, EVP_PKEY* issuer_key, long serial,
           const std::string& san) {
  X509* x = X509_new();
  X509_set_version(x, 2);
  ASN1_INTEGER_set(X509_get_serialNumber(x), serial);
  X509_gmtime_adj(X509_getm_notBefore(x), -60);
  X509_gmtime_adj(X509_getm_notAfter(x), 86400L * 30);
  X509_set_pubkey(x, pub);
  X509_set_subject_name(x, subject);
  X509_set_issuer_name(x, issuer != nullptr ? X509_get_subject_name(issuer) : subject);
  if (!san.empty()) {
    X509V3_CTX v3;
    X509V3_set_ctx_nodb(&v3);
    X509V3_set_ctx(&v3, issuer != nullptr ? issuer : x, x, nullptr, nullptr, 0);
    X509_EXTENSION* ext = X509V3_EXT_conf_nid(nullptr, &v3, NID_subject_alt_name, san.c_str());
    X509_add_ext(x, ext, -1);
    X509_EXTENSION_free(ext);
  }
  X509_sign(x, issuer_key, EVP_sha256());
  return x;
}

void MakePki(const std::string& name, Pki* pki, bool chain_in_file = true) {
  pki->ca_key = EVP_EC_gen("P-256");
  X509_NAME* ca_name = X509_NAME_new();
  X509_NAME_add_entry_by_txt(ca_name, "CN", MBSTRING_ASC,
                             reinterpret_cast<const unsigned char*>("test CA"), -1, -1, 0);
  pki->ca = Sign(ca_name, pki->ca_key, nullptr, pki->ca_key, 1, "");
  X509_NAME_free(ca_name);
  EVP_PKEY* key = EVP_EC_gen("P-256");
  X509_NAME* leaf_name = X509_NAME_new();
  X509_NAME_add_entry_by_txt(leaf_name, "CN", MBSTRING_ASC,
                             reinterpret_cast<const unsigned char*>(name.c_str()), -1, -1, 0);
  pki->leaf = Sign(leaf_name, key, pki->ca, pki->ca_key, 2, "DNS:" + name);
  X509_NAME_free(leaf_name);
  const std::string base = ::testing::TempDir() + "/" + name + "-chain";
  pki->pair = TlsCertPair{base + ".crt", base + ".key"};
  FILE* f = std::fopen(pki->pair.cert_file.c_str(), "w");
  PEM_write_X509(f, pki->leaf);
  if (chain_in_file) PEM_write_X509(f, pki->ca);
  std::fclose(f);
  f = std::fopen(pki->pair.key_file.c_str(), "w");
  PEM_write_PrivateKey(f, key, nullptr, nullptr, 0, nullptr, nullptr);
  std::fclose(f);
  EVP_PKEY_free(key);
}

// An OCSP response from the CA about `pki`'s leaf, written as DER; `next_update_sec` from now
// (negative: stale).
std::string WriteOcsp(const Pki& pki, const std::string& file, int status = V_OCSP_CERTSTATUS_GOOD,
                      long next_update_sec = 3600) {
  OCSP_BASICRESP* basic = OCSP_BASICRESP_new();
  OCSP_CERTID* id = OCSP_cert_to_id(nullptr, pki.leaf, pki.ca);
  ASN1_TIME* this_update = X509_gmtime_adj(nullptr, next_update_sec < 0 ? 2 * next_update_sec : 0);
  ASN1_TIME* next_update = X509_gmtime_adj(nullptr, next_update_sec);
  ASN1_TIME* revoked = status == V_OCSP_CERTSTATUS_REVOKED ? this_update : nullptr;
  OCSP_basic_add1_status(basic, id, status, OCSP_REVOKED_STATUS_KEYCOMPROMISE, revoked, this_update,
                         next_update);
  OCSP_basic_sign(basic, pki.ca, pki.ca_key, EVP_sha256(), nullptr, 0);
  OCSP_RESPONSE* response = OCSP_response_create(OCSP_RESPONSE_STATUS_SUCCESSFUL, basic);
  const std::string path = ::testing::TempDir() + "/" + file;
  BIO* out = BIO_new_file(path.c_str(), "wb");
  i2d_OCSP_RESPONSE_bio(out, response);
  BIO_free(out);
  OCSP_RESPONSE_free(response);
  OCSP_BASICRESP_free(basic);
  OCSP_CERTID_free(id);
  ASN1_TIME_free(this_update);
  ASN1_TIME_free(next_update);
  return path;
}

// The OCSP response the server stapled for a client that asked for one ("" when none), and
// its certificate status as the client reads it.
std::string Stapled(OpenSslFactory* f, const char* sni, int version, int* cert_status) {
  std::unique_ptr<TlsSession> s = f->Make();
  Client c(s.get(), sni, version);
  SSL_set_tlsext_status_type(c.ssl(), TLSEXT_STATUSTYPE_ocsp);
  c.Pump();
  EXPECT_TRUE(s->HandshakeDone());
  const unsigned char* p = nullptr;
  const long len = SSL_get_tlsext_status_ocsp_resp(c.ssl(), &p);
  if (len <= 0 || p == nullptr) return "";
  const unsigned char* q = p;
  OCSP_RESPONSE* response = d2i_OCSP_RESPONSE(nullptr, &q, len);
  OCSP_BASICRESP* basic = OCSP_response_get1_basic(response);
  X509* peer = SSL_get1_peer_certificate(c.ssl());
  *cert_status = -1;
  // The staple names the certificate the client got (its issuer is the CA the test made).
  for (int i = 0; i < OCSP_resp_count(basic); ++i) {
    OCSP_SINGLERESP* single = OCSP_resp_get0(basic, i);
    *cert_status = OCSP_single_get0_status(single, nullptr, nullptr, nullptr, nullptr);
  }
  X509_free(peer);
  OCSP_BASICRESP_free(basic);
  OCSP_RESPONSE_free(response);
  return std::string(reinterpret_cast<const char*>(p), static_cast<size_t>(len));
}

TEST(OpenSslTls, StaplesTheOcspResponseOfTheCertificateChosen) {
  Pki a, b;
  MakePki("staple-a.test", &a);
  MakePki("staple-b.test", &b);
  TlsOptions o;
  o.pairs = {a.pair, b.pair};
  // In any order: each response finds its certificate.
  o.ocsp_files = {WriteOcsp(b, "b.ocsp"), WriteOcsp(a, "a.ocsp")};
  std::string error;
  auto f = Create(o, &error);
  ASSERT_NE(f, nullptr) << error;
  for (int version : {TLS1_2_VERSION, TLS1_3_VERSION}) {
    int status = -2;
    const std::string for_a = Stapled(f.get(), "staple-a.test", version, &status);
    EXPECT_FALSE(for_a.empty()) << version;
    EXPECT_EQ(status, V_OCSP_CERTSTATUS_GOOD);
    const std::string for_b = Stapled(f.get(), "staple-b.test", version, &status);
    EXPECT_FALSE(for_b.empty()) << version;
    EXPECT_NE(for_a, for_b);  // each site's own response
  }
  ASSERT_EQ(f->certificates().size(), 2u);
  EXPECT_EQ(f->certificates()[0].ocsp_file, o.ocsp_files[1]);
  EXPECT_GT(f->certificates()[0].ocsp_next_update_sec, 0);
  // Without --tls-ocsp, nothing is stapled.
  o.ocsp_files.clear();
  auto plain = Create(o, &error);
  ASSERT_NE(plain, nullptr) << error;
  int status = -2;
  EXPECT_EQ(Stapled(plain.get(), "staple-a.test", TLS1_3_VERSION, &status), "");
}

TEST(OpenSslTls, BadOcspResponsesAreOneClearLine) {
  Pki a, other;
  MakePki("ocsp-a.test", &a);
  MakePki("ocsp-other.test", &other);
  auto load = [](std::vector<TlsCertPair> pairs, std::vector<std::string> ocsp,
                 std::string* error) {
    TlsOptions o;
    o.pairs = std::move(pairs);
    o.ocsp_files = std::move(ocsp);
    return Create(o, error);
  };
  std::string error;
  EXPECT_EQ(load({a.pair}, {"/nonexistent.ocsp"}, &error), nullptr);
  EXPECT_EQ(error, "--tls-ocsp: cannot read '/nonexistent.ocsp': No such file or directory");
  EXPECT_EQ(load({a.pair}, {a.pair.cert_file}, &error), nullptr);
  EXPECT_EQ(error, "--tls-ocsp: '" + a.pair.cert_file + "' holds no DER OCSP response");
  const std::string revoked = WriteOcsp(a, "revoked.ocsp", V_OCSP_CERTSTATUS_REVOKED);
  EXPECT_EQ(load({a.pair}, {revoked}, &error), nullptr);
  EXPECT_EQ(error, "--tls-ocsp: '" + revoked + "' says '" + a.pair.cert_file + "' is revoked");
  const std::string good = WriteOcsp(a, "good.ocsp");
  EXPECT_EQ(load({a.pair}, {good, good}, &error), nullptr);
  EXPECT_NE(error.find("both answer for"), std::string::npos) << error;
  EXPECT_NE(load({a.pair}, {good}, &error), nullptr) << error;
  EXPECT_EQ(ERR_peek_error(), 0u);
}

// A response that cannot serve its certificate (for another certificate, one whose issuer no
// chain holds, or out of date) is left out with a line naming why; the certificates load, and
// the handshake goes without a staple.
TEST(OpenSslTls, OcspResponsesThatCannotBeStapledAreDroppedWithTheirCause) {
  Pki a, other, unchained;
  MakePki("drop-a.test", &a);
  MakePki("drop-other.test", &other);
  MakePki("drop-unchained.test", &unchained, /*chain_in_file=*/false);
  // The certificate renewed: the same CA, another serial; the response is the old one's.
  Pki renewed;
  EVP_PKEY* key = EVP_EC_gen("P-256");
  X509_NAME* name = X509_NAME_new();
  X509_NAME_add_entry_by_txt(name, "CN", MBSTRING_ASC,
                             reinterpret_cast<const unsigned char*>("drop-a.test"), -1, -1, 0);
  X509* leaf = Sign(name, key, a.ca, a.ca_key, 3, "DNS:drop-a.test");
  X509_NAME_free(name);
  const std::string base = ::testing::TempDir() + "/drop-renewed";
  const TlsCertPair renewed_pair{base + ".crt", base + ".key"};
  FILE* f = std::fopen(renewed_pair.cert_file.c_str(), "w");
  PEM_write_X509(f, leaf);
  PEM_write_X509(f, a.ca);
  std::fclose(f);
  f = std::fopen(renewed_pair.key_file.c_str(), "w");
  PEM_write_PrivateKey(f, key, nullptr, nullptr, 0, nullptr, nullptr);
  std::fclose(f);
  X509_free(leaf);
  EVP_PKEY_free(key);

  struct Case {
    TlsCertPair pair;
    std::string ocsp;
    std::string says;
  };
  const std::string before_renewal = WriteOcsp(a, "drop-before-renewal.ocsp");
  const std::string for_other = WriteOcsp(other, "drop-other.ocsp");
  const std::string for_unchained = WriteOcsp(unchained, "drop-unchained.ocsp");
  const std::string stale = WriteOcsp(a, "drop-stale.ocsp", V_OCSP_CERTSTATUS_GOOD, -3600);
  const Case cases[] = {
      {renewed_pair, before_renewal,
       "--tls-ocsp: '" + before_renewal + "' answers for another certificate of the issuer of '" +
           renewed_pair.cert_file +
           "', not for it (a response for the certificate before a renewal?): fetch one for the "
           "certificate now in '" +
           renewed_pair.cert_file + "'; not stapled, the handshake goes without it"},
      {a.pair, for_other,
       "--tls-ocsp: '" + for_other +
           "' answers for none of the certificates (another issuer's); not stapled, the "
           "handshake goes without it"},
      {unchained.pair, for_unchained,
       "--tls-ocsp: '" + for_unchained +
           "' cannot be matched: no --tls-cert file holds its certificate's issuer after it (give "
           "the full chain); not stapled, the handshake goes without it"},
      {a.pair, stale,
       "--tls-ocsp: '" + stale +
           "' is out of date (its nextUpdate has passed): fetch a fresh one; not stapled, the "
           "handshake goes without it"},
  };
  for (const Case& c : cases) {
    TlsOptions o;
    o.pairs = {c.pair};
    o.ocsp_files = {c.ocsp};
    std::string error;
    auto loaded = Create(o, &error);
    ASSERT_NE(loaded, nullptr) << error;
    EXPECT_EQ(loaded->warnings(), std::vector<std::string>{c.says});
    EXPECT_EQ(loaded->dropped_ocsp(), std::vector<std::string>{c.ocsp});
    EXPECT_EQ(loaded->certificates()[0].ocsp_file, "");
    if (c.pair.cert_file == a.pair.cert_file) {
      int status = -2;
      EXPECT_EQ(Stapled(loaded.get(), "drop-a.test", TLS1_3_VERSION, &status), "");
    }
  }
  EXPECT_EQ(ERR_peek_error(), 0u);
}

}  // namespace
}  // namespace ringd::tls
