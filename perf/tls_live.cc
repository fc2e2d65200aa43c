// What an idle server-side TLS session keeps allocated: OpenSSL's allocations routed through
// CRYPTO_set_mem_functions, a session (tls/openssl_tls.h) driven over memory by an OpenSSL client
// through a handshake and one request and response, then trimmed as an idle connection is; the
// client is freed, and every allocation made since the session began that is still alive is
// listed by the site that made it (OpenSSL's file:line), with the bytes asked for and the bytes
// the allocator gave (malloc_usable_size: mimalloc's class) and what ringd's routing takes
// (tls/tls_memory.h: the smaller of that and a 16-byte step's block).
//
//   bazel build //perf:tls_live && bazel-bin/perf/tls_live --version 1.3 --response_bytes 600
//
// The first connections warm the library's shared state (providers, method caches): only the
// last one is listed.
#include <malloc.h>
#include <openssl/bio.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "server/tls/openssl_tls.h"
#include "server/tls/tls_memory.h"

ABSL_FLAG(std::string, version, "1.3", "the client's highest TLS version: 1.2 or 1.3");
ABSL_FLAG(int, response_bytes, 600, "plaintext bytes of the response the server sends");
ABSL_FLAG(int, connections, 3, "connections made; the last one is listed");
ABSL_FLAG(bool, resume, false, "the listed connection resumes the previous one's session");

namespace {

struct Site {
  const char* file;
  int line;
  size_t size;
  uint64_t serial;
};

std::map<void*, Site>* live = nullptr;  // every OpenSSL allocation alive
uint64_t serial = 0;

void* Malloc(size_t n, const char* file, int line) {
  void* p = std::malloc(n);
  if (p != nullptr) (*live)[p] = Site{file, line, n, ++serial};
  return p;
}
void Free(void* p, const char*, int) {
  if (p == nullptr) return;
  live->erase(p);
  std::free(p);
}
void* Realloc(void* p, size_t n, const char* file, int line) {
  if (p != nullptr) live->erase(p);
  void* q = std::realloc(p, n);
  if (q != nullptr) (*live)[q] = Site{file, line, n, ++serial};
  return q;
}

// A self-signed ECDSA P-256 certificate, as PEM files in a temporary directory.
ringd::tls::TlsCertPair MakeCert() {
  EVP_PKEY* key = EVP_EC_gen("P-256");
  X509* x = X509_new();
  X509_set_version(x, 2);
  ASN1_INTEGER_set(X509_get_serialNumber(x), 1);
  X509_gmtime_adj(X509_getm_notBefore(x), -60);
  X509_gmtime_adj(X509_getm_notAfter(x), 86400L * 30);
  X509_set_pubkey(x, key);
  X509_NAME* subject = X509_get_subject_name(x);
  X509_NAME_add_entry_by_txt(subject, "CN", MBSTRING_ASC,
                             reinterpret_cast<const unsigned char*>("origin.test"), -1, -1, 0);
  X509_set_issuer_name(x, subject);
  X509_sign(x, key, EVP_sha256());
  char dir[] = "/tmp/tls_live.XXXXXX";
  if (mkdtemp(dir) == nullptr) std::abort();
  ringd::tls::TlsCertPair pair{std::string(dir) + "/c.crt", std::string(dir) + "/c.key"};
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

// Moves records both ways until neither side has anything to say; returns the server's plaintext.
std::string Pump(SSL* client, BIO* c_in, BIO* c_out, ringd::tls::TlsSession* s) {
  std::string plain;
  for (int round = 0; round < 50; ++round) {
    SSL_do_handshake(client);
    bool moved = false;
    char buf[16384];
    size_t n = 0;
    while (BIO_read_ex(c_out, buf, sizeof buf, &n) == 1) {
      s->Feed(buf, n);
      moved = true;
    }
    char p[4096];
    while (size_t got = s->ReadPlain(p, sizeof p)) plain.append(p, got);
    while ((n = s->TakeOutput(buf, sizeof buf)) > 0) {
      BIO_write(c_in, buf, static_cast<int>(n));
      moved = true;
    }
    if (!moved) break;
  }
  return plain;
}

}  // namespace

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  live = new std::map<void*, Site>();
  if (CRYPTO_set_mem_functions(&Malloc, &Realloc, &Free) != 1) {
    std::fprintf(stderr, "tls_live: OpenSSL has allocated already\n");
    return 1;
  }
  ringd::tls::TicketKeys keys(43200);
  ringd::tls::TlsOptions o;
  o.pairs = {MakeCert()};
  o.tickets = &keys;
  absl::StatusOr<std::shared_ptr<ringd::tls::OpenSslFactory>> made =
      ringd::tls::OpenSslFactory::Create(o);
  if (!made.ok()) {
    std::fprintf(stderr, "tls_live: %s\n", std::string(made.status().message()).c_str());
    return 1;
  }
  std::shared_ptr<ringd::tls::OpenSslFactory> factory = *std::move(made);
  SSL_CTX* cctx = SSL_CTX_new(TLS_client_method());
  SSL_CTX_set_max_proto_version(
      cctx, absl::GetFlag(FLAGS_version) == "1.2" ? TLS1_2_VERSION : TLS1_3_VERSION);
  static const unsigned char kAlpn[] = {8, 'h', 't', 't', 'p', '/', '1', '.', '1'};
  SSL_CTX_set_alpn_protos(cctx, kAlpn, sizeof kAlpn);
  const std::string response(static_cast<size_t>(absl::GetFlag(FLAGS_response_bytes)), 'x');
  const std::string request = "GET /index.html HTTP/1.1\r\nHost: origin.test\r\n\r\n";
  SSL_SESSION* ticket = nullptr;
  const int connections = std::max(1, absl::GetFlag(FLAGS_connections));
  std::vector<std::unique_ptr<ringd::tls::TlsSession>> kept;
  uint64_t first = 0;
  for (int i = 0; i < connections; ++i) {
    const bool listed = i == connections - 1;
    if (listed) first = serial + 1;
    std::unique_ptr<ringd::tls::TlsSession> s = factory->Make();
    SSL* client = SSL_new(cctx);
    BIO* c_in = BIO_new(BIO_s_mem());
    BIO* c_out = BIO_new(BIO_s_mem());
    BIO_set_mem_eof_return(c_in, -1);
    SSL_set_bio(client, c_in, c_out);
    SSL_set_connect_state(client);
    SSL_set_tlsext_host_name(client, "origin.test");
    if (absl::GetFlag(FLAGS_resume) && ticket != nullptr) SSL_set_session(client, ticket);
    Pump(client, c_in, c_out, s.get());
    size_t n = 0;
    SSL_write_ex(client, request.data(), request.size(), &n);
    const std::string got = Pump(client, c_in, c_out, s.get());
    if (!s->HandshakeDone() || got != request) {
      std::fprintf(stderr, "tls_live: the exchange failed (handshake %d, %zu bytes)\n",
                   s->HandshakeDone(), got.size());
      return 1;
    }
    s->WritePlain(response.data(), response.size());
    Pump(client, c_in, c_out, s.get());
    char buf[16384];
    while (SSL_read_ex(client, buf, sizeof buf, &n) == 1) {
    }
    Pump(client, c_in, c_out, s.get());  // tickets the client read, and what it answered
    s->Trim();
    if (SSL_SESSION* got_ticket = SSL_get1_session(client)) {
      SSL_SESSION_free(ticket);
      ticket = got_ticket;
    }
    SSL_shutdown(client);  // its close_notify is never delivered: freed without it, the
    SSL_free(client);      // client would mark its session not resumable
    std::printf("%s %s resumed=%d\n", std::string(s->Version()).c_str(),
                std::string(s->Cipher()).c_str(), s->Resumed());
    kept.push_back(std::move(s));  // idle, alive
  }
  SSL_SESSION_free(ticket);
  ticket = nullptr;
  // The listed connection's allocations still alive, by site.
  struct Total {
    size_t count = 0, asked = 0, usable = 0, routed = 0;
  };
  std::map<std::string, Total> by_site;
  Total all;
  for (const auto& [p, site] : *live) {
    if (site.serial < first) continue;
    const size_t usable = malloc_usable_size(p);
    Total& t = by_site[std::string(site.file) + ":" + std::to_string(site.line)];
    ++t.count;
    t.asked += site.size;
    t.usable += usable;
    t.routed += ringd::tls::RoutedBytes(site.size);
    ++all.count;
    all.asked += site.size;
    all.usable += usable;
    all.routed += ringd::tls::RoutedBytes(site.size);
  }
  std::vector<std::pair<std::string, Total>> rows(by_site.begin(), by_site.end());
  std::sort(rows.begin(), rows.end(),
            [](const auto& a, const auto& b) { return a.second.asked > b.second.asked; });
  std::printf("%-50s %6s %8s %8s %8s\n", "site", "count", "asked", "usable", "routed");
  for (const auto& [name, t] : rows)
    std::printf("%-50s %6zu %8zu %8zu %8zu\n", name.c_str(), t.count, t.asked, t.usable, t.routed);
  std::printf("%-50s %6zu %8zu %8zu %8zu\n", "total", all.count, all.asked, all.usable, all.routed);
  SSL_CTX_free(cctx);
  return 0;
}
