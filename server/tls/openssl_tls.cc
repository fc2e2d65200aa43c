#include "server/tls/openssl_tls.h"

#include <openssl/bio.h>
#include <openssl/core_names.h>
#include <openssl/err.h>
#include <openssl/ocsp.h>
#include <openssl/pem.h>
#include <openssl/rand.h>
#include <openssl/sha.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <ctime>
#include <memory>
#include <string_view>
#include <thread>

#include "io/assert.h"

namespace ringd::tls {
namespace {

// The library's last error, as one line (empty when it has none).
std::string LastError() {
  const unsigned long e = ERR_get_error();
  ERR_clear_error();
  if (e == 0) return "";
  char buf[256];
  ERR_error_string_n(e, buf, sizeof buf);
  return buf;
}

// A certificate's DNS names (subjectAltName, else the common name), sorted: certificates with
// the same names serve the same site.
std::vector<std::string> NamesOf(X509* cert) {
  std::vector<std::string> names;
  auto* sans =
      static_cast<GENERAL_NAMES*>(X509_get_ext_d2i(cert, NID_subject_alt_name, nullptr, nullptr));
  if (sans != nullptr) {
    for (int i = 0; i < sk_GENERAL_NAME_num(sans); ++i) {
      const GENERAL_NAME* n = sk_GENERAL_NAME_value(sans, i);
      if (n->type != GEN_DNS) continue;
      const ASN1_IA5STRING* s = n->d.dNSName;
      names.emplace_back(reinterpret_cast<const char*>(ASN1_STRING_get0_data(s)),
                         static_cast<size_t>(ASN1_STRING_length(s)));
    }
    GENERAL_NAMES_free(sans);
  }
  if (names.empty()) {
    char cn[256] = "";
    X509_NAME_get_text_by_NID(X509_get_subject_name(cert), NID_commonName, cn, sizeof cn);
    names.emplace_back(cn);
  }
  std::sort(names.begin(), names.end());
  return names;
}

// The host name of the ClientHello's server_name extension (RFC 6066 section 3), or "" when it
// has none or it is malformed (then the handshake goes on with the default site, and OpenSSL's
// own parse of the extension refuses what it must). It views the ClientHello: valid in the
// ClientHello callback only.
std::string_view ServerNameOf(SSL* ssl) {
  const unsigned char* p = nullptr;
  size_t len = 0;
  if (SSL_client_hello_get0_ext(ssl, TLSEXT_TYPE_server_name, &p, &len) != 1 || len < 2) return "";
  size_t list = (size_t{p[0]} << 8) | p[1];
  if (list != len - 2) return "";
  p += 2;
  while (list >= 3) {
    const unsigned type = p[0];
    const size_t n = (size_t{p[1]} << 8) | p[2];
    if (n > list - 3) return "";
    if (type == TLSEXT_NAMETYPE_host_name)
      return std::string_view(reinterpret_cast<const char*>(p + 3), n);
    p += 3 + n;
    list -= 3 + n;
  }
  return "";
}

int64_t Seconds(const ASN1_TIME* time) {
  tm t{};
  if (ASN1_TIME_to_tm(time, &t) != 1) return 0;
  return static_cast<int64_t>(timegm(&t));
}

// ALPN: h2 when the client offers it and HTTP/2 is on (`arg` non-null), else HTTP/1.1 when the
// client offers it; otherwise no ALPN at all (the client may still speak HTTP/1.1, as clients
// without ALPN do). The server's order decides (RFC 7301 3.2): a client offering both gets h2.
int SelectAlpn(SSL*, const unsigned char** out, unsigned char* out_len, const unsigned char* in,
               unsigned int in_len, void* arg) {
  static const unsigned char kH2First[] = {2, 'h', '2', 8, 'h', 't', 't', 'p', '/', '1', '.', '1'};
  static const unsigned char kHttp11[] = {8, 'h', 't', 't', 'p', '/', '1', '.', '1'};
  const bool h2 = arg != nullptr;
  unsigned char* selected = nullptr;
  if (SSL_select_next_proto(&selected, out_len, h2 ? kH2First : kHttp11,
                            h2 ? sizeof kH2First : sizeof kHttp11, in,
                            in_len) != OPENSSL_NPN_NEGOTIATED) {
    return SSL_TLSEXT_ERR_NOACK;
  }
  *out = selected;
  return SSL_TLSEXT_ERR_OK;
}

SSL_CTX* NewContext(const TlsOptions& o, std::string* error) {
  SSL_CTX* ctx = SSL_CTX_new(TLS_server_method());
  if (ctx == nullptr) {
    *error = "TLS: cannot create a context: " + LastError();
    return nullptr;
  }
  const int min = o.min_version == "1.3" ? TLS1_3_VERSION : TLS1_2_VERSION;
  bool ok = SSL_CTX_set_min_proto_version(ctx, min) == 1 &&
            SSL_CTX_set_max_proto_version(ctx, TLS1_3_VERSION) == 1;
  if (ok && SSL_CTX_set_cipher_list(ctx, o.ciphers.c_str()) != 1) {
    *error = "--tls-ciphers: OpenSSL takes none of '" + o.ciphers + "'";
    ok = false;
  } else if (ok && SSL_CTX_set_ciphersuites(ctx, o.ciphersuites.c_str()) != 1) {
    *error = "--tls-ciphersuites: OpenSSL takes none of '" + o.ciphersuites + "'";
    ok = false;
  }
  if (!ok) {
    if (error->empty()) *error = "TLS: cannot set the protocol versions: " + LastError();
    SSL_CTX_free(ctx);
    return nullptr;
  }
  SSL_CTX_set_options(
      ctx, SSL_OP_NO_RENEGOTIATION | SSL_OP_CIPHER_SERVER_PREFERENCE | SSL_OP_NO_COMPRESSION);
  SSL_CTX_set1_groups_list(ctx, "X25519:P-256:P-384");
  // Resumption by stateless tickets only: no server-side session cache to grow or share.
  SSL_CTX_set_session_cache_mode(ctx, SSL_SESS_CACHE_OFF);
  SSL_CTX_set_max_early_data(ctx, 0);
  // No SSL_MODE_RELEASE_BUFFERS: it frees the record buffers after every record and allocates
  // them again for the next, twice per keep-alive request. A session keeps them while it serves
  // and gives them back when the connection goes idle (Trim, SSL_free_buffers).
  // The callback's argument says only whether h2 is offered: any non-null pointer means yes.
  static char h2_on;
  SSL_CTX_set_alpn_select_cb(ctx, &SelectAlpn, o.http2 ? &h2_on : nullptr);
  SSL_CTX_set_num_tickets(ctx, o.tickets_per_handshake);
  if (o.tickets_per_handshake == 0) SSL_CTX_set_options(ctx, SSL_OP_NO_TICKET);
  if (o.tickets != nullptr) {
    SSL_CTX_set_app_data(ctx, o.tickets);
    SSL_CTX_set_tlsext_ticket_key_evp_cb(ctx, &TicketKeys::Callback);
  }
  return ctx;
}

// Bytes queued one way through the session's BIO: appended at the end, taken from the front.
// It holds no memory while empty once Release has run; while in use it keeps its capacity (a
// connection moving a body reuses it record after record).
class ByteQueue {
 public:
  size_t size() const { return end_ - begin_; }
  size_t capacity() const { return cap_; }
  const char* data() const { return buf_.get() + begin_; }
  void Drop(size_t n) {
    RINGD_ASSERT(n <= size());
    begin_ += n;
    if (begin_ == end_) begin_ = end_ = 0;
  }
  void Append(const char* data, size_t len) {
    if (len == 0) return;
    if (len > cap_ - end_) Make(len);
    std::memcpy(buf_.get() + end_, data, len);
    end_ += len;
  }
  size_t Take(char* out, size_t cap) {
    const size_t n = std::min(cap, size());
    if (n == 0) return 0;
    std::memcpy(out, buf_.get() + begin_, n);
    begin_ += n;
    if (begin_ == end_) begin_ = end_ = 0;
    return n;
  }
  // Frees the buffer when it holds nothing; otherwise keeps just what it holds.
  void Release() {
    if (size() == cap_) return;
    if (size() == 0) {
      buf_.reset();
      cap_ = begin_ = end_ = 0;
      return;
    }
    Resize(size());
  }

 private:
  // Room for `len` more bytes at the end: the held bytes moved to the front, the buffer grown
  // (at least doubled) when they still do not fit.
  void Make(size_t len) {
    if (cap_ - size() >= len) {
      std::memmove(buf_.get(), buf_.get() + begin_, size());
      end_ = size();
      begin_ = 0;
      return;
    }
    Resize(std::max({cap_ * 2, size() + len, kMinBytes}));
  }
  void Resize(size_t cap) {
    std::unique_ptr<char[]> next(new char[cap]);
    if (size() > 0) std::memcpy(next.get(), buf_.get() + begin_, size());
    end_ = size();
    begin_ = 0;
    buf_ = std::move(next);
    cap_ = cap;
  }
  static constexpr size_t kMinBytes = 512;

  std::unique_ptr<char[]> buf_;
  size_t cap_ = 0;
  size_t begin_ = 0;
  size_t end_ = 0;
};

}  // namespace

// One thread's hold on one generation of a ReloadableTls: the sessions it made there keep the
// factory alive by a count only that thread touches, not by the factory's shared count (an
// atomic on a line every shard would write, per session).
struct FactoryPin {
  std::shared_ptr<const OpenSslFactory> factory;
  uint64_t sessions = 0;  // live sessions made from it on its thread
  bool current = true;    // still its thread's pin for the newest generation
  std::thread::id thread = std::this_thread::get_id();
};

namespace {

// A session is ended on the thread that made it (a shard's), or once that thread has exited
// (a shard's loop is destroyed after its thread is joined; the exit left its pin not current).
// The last one of a pin no longer current frees it.
void Unpin(FactoryPin* pin) {
  RINGD_ASSERT(pin->thread == std::this_thread::get_id() || !pin->current);
  RINGD_ASSERT(pin->sessions > 0);
  if (--pin->sessions == 0 && !pin->current) delete pin;
}

class OpenSslSession final : public TlsSession {
 public:
  // The factory kept alive by a pin (ReloadableTls) or, without one, by a shared reference.
  OpenSslSession(SSL_CTX* ctx, std::shared_ptr<const OpenSslFactory> factory, FactoryPin* pin)
      : factory_(std::move(factory)), pin_(pin), ssl_(SSL_new(ctx)) {
    RINGD_ASSERT(ssl_ != nullptr);
    // One BIO for both directions, over the session's two queues: the SSL owns it.
    BIO* bio = BIO_new(Method());
    RINGD_ASSERT(bio != nullptr);
    BIO_set_data(bio, this);
    BIO_set_init(bio, 1);
    SSL_set_bio(ssl_, bio, bio);
    SSL_set_accept_state(ssl_);
  }
  ~OpenSslSession() override {
    SSL_free(ssl_);
    if (pin_ != nullptr) Unpin(pin_);
  }

  void Feed(const char* data, size_t len) override { in_.Append(data, len); }

  size_t ReadPlain(char* out, size_t cap) override {
    if (ended_ != TlsEnd::kNone) return 0;
    if (!handshake_done_) {
      const int r = SSL_do_handshake(ssl_);
      if (r != 1) {
        Fail(SSL_get_error(ssl_, r));
        return 0;
      }
      handshake_done_ = true;
    }
    size_t n = 0;
    if (SSL_read_ex(ssl_, out, cap, &n) == 1) return n;
    Fail(SSL_get_error(ssl_, 0));
    return 0;
  }

  bool WritePlain(const char* data, size_t len) override {
    if (!handshake_done_ || ended_ == TlsEnd::kBadInput || ended_ == TlsEnd::kPlainHttp ||
        closed_) {
      return false;
    }
    while (len > 0) {
      size_t n = 0;
      if (SSL_write_ex(ssl_, data, len, &n) != 1) {
        Fail(SSL_get_error(ssl_, 0));
        return false;
      }
      data += n;
      len -= n;
    }
    return true;
  }

  size_t PendingOutput() const override { return lent_.size() + out_.size(); }

  // The records queued so far are lent whole; records made while they are out go to the other
  // queue, so the lent bytes never move. The two buffers trade places send after send.
  size_t PeekOutput(const char** data) override {
    if (lent_.size() == 0 && out_.size() > 0) std::swap(lent_, out_);
    *data = lent_.data();
    return lent_.size();
  }
  void ConsumeOutput(size_t n) override { lent_.Drop(n); }

  void Close() override {
    if (closed_ || !handshake_done_ || ended_ == TlsEnd::kBadInput) return;
    RINGD_ASSERT(ended_ != TlsEnd::kPlainHttp);  // only before the handshake is done
    closed_ = true;
    SSL_shutdown(ssl_);  // queues close_notify; the peer's is not waited for
    ERR_clear_error();
  }

  // The queues give their buffers back (a partial record waiting for its rest keeps just its
  // bytes), and the library its record buffers (SSL_free_buffers keeps them where they hold a
  // partial record or unread plaintext).
  void Trim() override {
    in_.Release();
    lent_.Release();
    out_.Release();
    SSL_free_buffers(ssl_);
  }

  size_t BufferBytes() const override {
    return in_.capacity() + lent_.capacity() + out_.capacity();
  }

  bool HasBufferedInput() const override { return in_.size() > 0 || SSL_pending(ssl_) > 0; }

  bool HandshakeDone() const override { return handshake_done_; }
  TlsEnd Ended() const override { return ended_; }
  std::string_view Version() const override { return handshake_done_ ? SSL_get_version(ssl_) : ""; }
  std::string_view Cipher() const override {
    return handshake_done_ ? SSL_get_cipher_name(ssl_) : "";
  }
  std::string_view ServerName() const override {
    const char* name = SSL_get_servername(ssl_, TLSEXT_NAMETYPE_host_name);
    return name != nullptr ? name : "";
  }
  bool Resumed() const override { return handshake_done_ && SSL_session_reused(ssl_) == 1; }
  std::string_view PlainHttpRequest() const override {
    return plain_request_ != nullptr ? std::string_view(*plain_request_) : std::string_view();
  }

 private:
  // The BIO the library reads ciphertext from (in_, filled by Feed) and writes records to (out_,
  // lent to the sends by PeekOutput). Empty input is "more to come" (a retry), never end of stream.
  static BIO_METHOD* Method() {
    static BIO_METHOD* const method = [] {
      BIO_METHOD* m = BIO_meth_new(BIO_get_new_index() | BIO_TYPE_SOURCE_SINK, "ringd session");
      RINGD_ASSERT(m != nullptr && BIO_meth_set_write_ex(m, &BioWrite) == 1 &&
                   BIO_meth_set_read_ex(m, &BioRead) == 1 && BIO_meth_set_ctrl(m, &BioCtrl) == 1);
      return m;
    }();
    return method;
  }
  static OpenSslSession* Of(BIO* bio) { return static_cast<OpenSslSession*>(BIO_get_data(bio)); }
  static int BioWrite(BIO* bio, const char* data, size_t len, size_t* written) {
    BIO_clear_retry_flags(bio);
    Of(bio)->out_.Append(data, len);
    *written = len;
    return 1;
  }
  static int BioRead(BIO* bio, char* out, size_t cap, size_t* read) {
    BIO_clear_retry_flags(bio);
    OpenSslSession* self = Of(bio);
    *read = self->in_.Take(out, cap);
    // The first bytes the library takes: a record's header, or the start of a plaintext request
    // (SSL_R_HTTP_REQUEST), which it does not give back.
    if (self->first_len_ < sizeof self->first_ && !self->handshake_done_) {
      const size_t n = std::min(*read, sizeof self->first_ - self->first_len_);
      std::memcpy(self->first_ + self->first_len_, out, n);
      self->first_len_ = static_cast<uint8_t>(self->first_len_ + n);
    }
    if (*read > 0) return 1;
    BIO_set_retry_read(bio);
    return 0;
  }
  static long BioCtrl(BIO* bio, int cmd, long, void*) {
    switch (cmd) {
      case BIO_CTRL_PENDING:
        return static_cast<long>(Of(bio)->in_.size());
      case BIO_CTRL_WPENDING:
        return static_cast<long>(Of(bio)->PendingOutput());
      case BIO_CTRL_FLUSH:
      case BIO_CTRL_DUP:
        return 1;
      default:
        return 0;
    }
  }

  // After a call that did not succeed: more input needed, a clean close, or bad input (the
  // library has queued its alert in the output).
  void Fail(int err) {
    if (err == SSL_ERROR_WANT_READ || err == SSL_ERROR_WANT_WRITE) return;
    ended_ = err == SSL_ERROR_ZERO_RETURN ? TlsEnd::kCloseNotify : TlsEnd::kBadInput;
    if (ended_ == TlsEnd::kBadInput && !handshake_done_ &&
        ERR_GET_REASON(ERR_peek_error()) == SSL_R_HTTP_REQUEST) {
      ended_ = TlsEnd::kPlainHttp;
      // What the library took, then what it left: an error's path, so a copy of its own.
      plain_request_ = std::make_unique<std::string>(first_, first_len_);
      plain_request_->append(in_.data(), in_.size());
    }
    ERR_clear_error();  // the error queue is per thread: leave nothing for the next session
  }

  // The contexts (and the SNI callback's argument) this session was made from stay alive with it:
  // through the pin where it has one, else through factory_.
  std::shared_ptr<const OpenSslFactory> factory_;
  FactoryPin* pin_;
  SSL* ssl_;
  ByteQueue in_;    // ciphertext fed, not yet read by the library
  ByteQueue lent_;  // records PeekOutput has lent, until they are consumed
  ByteQueue out_;   // records the library wrote since
  std::unique_ptr<std::string> plain_request_;  // PlainHttpRequest(), once known
  bool handshake_done_ = false;
  bool closed_ = false;
  TlsEnd ended_ = TlsEnd::kNone;
  char first_[5];  // a record header's length: the bytes the library takes before it refuses
  uint8_t first_len_ = 0;
};

}  // namespace

namespace {

// A --tls-cert file's certificate and the chain behind it, and its --tls-key file's key; freed
// with it (the SSL_CTX takes references of its own).
struct LoadedPair {
  X509* cert = nullptr;
  STACK_OF(X509) * chain = nullptr;
  EVP_PKEY* key = nullptr;
  LoadedPair() = default;
  LoadedPair(const LoadedPair&) = delete;
  LoadedPair& operator=(const LoadedPair&) = delete;
  ~LoadedPair() {
    sk_X509_pop_free(chain, X509_free);
    X509_free(cert);
    EVP_PKEY_free(key);
  }
};

// The PEM readers' passphrase callback: ringd has no passphrase to give. Without one, OpenSSL
// asks for it on the terminal, or on stdin where there is none: start-up, or a SIGHUP reload on
// the thread that handles signals, would wait there for a line that never comes. `asked` says
// that a key wanted one.
int NoPassphrase(char*, int, int, void* asked) {
  *static_cast<bool*>(asked) = true;
  return -1;
}

// Reads a pair and checks that the key is the certificate's (and, with `refuse_expired`, that the
// certificate is still valid); false with a line saying why.
bool LoadPair(const TlsCertPair& pair, bool refuse_expired, LoadedPair* out, std::string* error) {
  bool asked = false;
  BIO* cert_bio = BIO_new_file(pair.cert_file.c_str(), "r");
  if (cert_bio == nullptr) {
    *error = "--tls-cert: cannot read '" + pair.cert_file + "': " + std::strerror(errno);
    ERR_clear_error();
    return false;
  }
  out->cert = PEM_read_bio_X509(cert_bio, nullptr, NoPassphrase, &asked);
  out->chain = sk_X509_new_null();
  while (X509* extra = PEM_read_bio_X509(cert_bio, nullptr, NoPassphrase, &asked))
    sk_X509_push(out->chain, extra);
  ERR_clear_error();  // the loop above ends on "no start line"
  BIO_free(cert_bio);
  if (out->cert == nullptr) {
    *error = "--tls-cert: '" + pair.cert_file + "' holds no PEM certificate";
    return false;
  }
  BIO* key_bio = BIO_new_file(pair.key_file.c_str(), "r");
  if (key_bio == nullptr) {
    *error = "--tls-key: cannot read '" + pair.key_file + "': " + std::strerror(errno);
    ERR_clear_error();
    return false;
  }
  asked = false;
  out->key = PEM_read_bio_PrivateKey(key_bio, nullptr, NoPassphrase, &asked);
  BIO_free(key_bio);
  if (out->key == nullptr) {
    *error = asked ? "--tls-key: '" + pair.key_file +
                         "' is encrypted: give ringd the key without a passphrase (openssl pkey "
                         "-in KEY -out PLAIN)"
                   : "--tls-key: '" + pair.key_file + "' holds no PEM private key";
    ERR_clear_error();
    return false;
  }
  if (X509_check_private_key(out->cert, out->key) != 1) {
    ERR_clear_error();
    *error = "--tls-key: '" + pair.key_file + "' is not the key of '" + pair.cert_file + "'";
    return false;
  }
  if (refuse_expired && X509_cmp_current_time(X509_get0_notAfter(out->cert)) <= 0) {
    *error = "--tls-cert: '" + pair.cert_file +
             "' has expired (--tls-expired=refuse; renew it, or serve it with "
             "--tls-expired=serve)";
    return false;
  }
  return true;
}

// The certificate's issuer, from its chain, with a reference of its own; null if the chain
// lacks it.
X509* IssuerOf(const LoadedPair& loaded) {
  for (int i = 0; i < sk_X509_num(loaded.chain); ++i) {
    X509* candidate = sk_X509_value(loaded.chain, i);
    if (X509_check_issued(candidate, loaded.cert) == X509_V_OK) {
      X509_up_ref(candidate);
      return candidate;
    }
  }
  return nullptr;
}

// Why a response answers for none of the certificates, for the line that drops it: for a
// certificate of the same issuer but another serial (the response fetched for the certificate
// before a renewal), for another issuer's, or unknowable because no certificate's chain holds
// its issuer.
std::string Unmatched(OCSP_BASICRESP* basic, const std::vector<X509*>& leaves,
                      const std::vector<X509*>& issuers, const std::vector<std::string>& files) {
  bool any_issuer = false;
  for (size_t i = 0; i < leaves.size(); ++i) {
    if (issuers[i] == nullptr) continue;
    any_issuer = true;
    OCSP_CERTID* id = OCSP_cert_to_id(nullptr, leaves[i], issuers[i]);
    if (id == nullptr) continue;
    bool same_issuer = false;
    for (int r = 0; r < OCSP_resp_count(basic) && !same_issuer; ++r) {
      const OCSP_CERTID* answered = OCSP_SINGLERESP_get0_id(OCSP_resp_get0(basic, r));
      same_issuer = answered != nullptr && OCSP_id_issuer_cmp(answered, id) == 0;
    }
    OCSP_CERTID_free(id);
    if (same_issuer) {
      return "answers for another certificate of the issuer of '" + files[i] +
             "', not for it (a response for the certificate before a renewal?): fetch one for "
             "the certificate now in '" +
             files[i] + "'";
    }
  }
  if (!any_issuer) {
    return "cannot be matched: no --tls-cert file holds its certificate's issuer after it (give "
           "the full chain)";
  }
  return "answers for none of the certificates (another issuer's)";
}

}  // namespace

absl::StatusOr<std::shared_ptr<OpenSslFactory>> OpenSslFactory::Create(const TlsOptions& options) {
  if (options.pairs.empty()) {
    return absl::InvalidArgumentError("TLS: no certificate (--tls-cert FILE --tls-key FILE)");
  }
  std::string why;  // what the loading steps below say on failure
  std::string* error = &why;
  std::shared_ptr<OpenSslFactory> f(new OpenSslFactory());
  std::vector<std::vector<std::string>> site_names;
  // Each certificate and its issuer (from its chain; null if the chain lacks it), in order, with
  // references of their own until the OCSP responses are matched to them.
  std::vector<X509*> leaves, issuers;
  struct Unref {
    std::vector<X509*>* list;
    ~Unref() {
      for (X509* x : *list) X509_free(x);
    }
  } unref_leaves{&leaves}, unref_issuers{&issuers};
  for (const TlsCertPair& pair : options.pairs) {
    LoadedPair loaded;
    if (!LoadPair(pair, options.refuse_expired, &loaded, error) ||
        !f->AddCertificate(options, pair, loaded.cert, loaded.chain, loaded.key, &site_names,
                           error)) {
      return absl::FailedPreconditionError(why);
    }
    X509_up_ref(loaded.cert);
    leaves.push_back(loaded.cert);
    issuers.push_back(IssuerOf(loaded));
  }
  if (!f->LoadStaples(options.ocsp_files, leaves, issuers, error)) {
    return absl::FailedPreconditionError(why);
  }
  // SNI: the default site's context picks another site's by the name the client asked for, as
  // the ClientHello arrives: before a ticket is looked at, so that the session id context it is
  // checked against is the chosen site's.
  SSL_CTX_set_client_hello_cb(f->sites_[0].ctx, &OpenSslFactory::OnClientHello, f.get());
  // The library asks the context in use after SNI chose one: every site's gets the callback.
  if (!f->staples_.empty()) {
    for (Site& site : f->sites_) {
      SSL_CTX_set_tlsext_status_cb(site.ctx, &OpenSslFactory::OnStatusRequest);
      SSL_CTX_set_tlsext_status_arg(site.ctx, f.get());
    }
  }
  return f;
}

// A loaded pair into its site: the site whose certificates have the same names (another key
// type), or a new one.
bool OpenSslFactory::AddCertificate(const TlsOptions& options, const TlsCertPair& pair, X509* cert,
                                    STACK_OF(X509) * chain, EVP_PKEY* key,
                                    std::vector<std::vector<std::string>>* site_names,
                                    std::string* error) {
  const std::vector<std::string> names = NamesOf(cert);
  size_t s = 0;
  while (s < site_names->size() && (*site_names)[s] != names) ++s;
  if (s == site_names->size()) {
    SSL_CTX* ctx = NewContext(options, error);
    if (ctx == nullptr) return false;
    // A session resumes only on the site that issued it (RFC 6066 section 3: a server MUST NOT
    // resume a session for another name): its session id context is a digest of the site's
    // names, the same across reloads while the names stay.
    std::string joined;
    for (const std::string& n : names) joined += n + '\n';
    unsigned char digest[SHA256_DIGEST_LENGTH];
    SHA256(reinterpret_cast<const unsigned char*>(joined.data()), joined.size(), digest);
    static_assert(sizeof digest <= SSL_MAX_SID_CTX_LENGTH);
    SSL_CTX_set_session_id_context(ctx, digest, sizeof digest);
    sites_.push_back(Site{ctx, nullptr, {}});
    site_names->push_back(names);
  }
  Site& site = sites_[s];
  const int type = EVP_PKEY_get_base_id(key);
  if (std::find(site.key_types.begin(), site.key_types.end(), type) != site.key_types.end()) {
    *error =
        "--tls-cert: '" + pair.cert_file + "' has the names and key type of an earlier certificate";
    return false;
  }
  if (SSL_CTX_use_cert_and_key(site.ctx, cert, key, chain, 1) != 1) {
    *error = "--tls-cert: OpenSSL refuses '" + pair.cert_file + "': " + LastError();
    return false;
  }
  site.key_types.push_back(type);
  char subject[256] = "";
  X509_NAME_oneline(X509_get_subject_name(cert), subject, sizeof subject);
  certificates_.push_back(Certificate{pair.cert_file, subject, Seconds(X509_get0_notAfter(cert)),
                                      "", 0, Seconds(X509_get0_notBefore(cert))});
  if (site.leaf == nullptr) {
    X509_up_ref(cert);
    site.leaf = cert;
  }
  return true;
}

bool OpenSslFactory::LoadStaples(const std::vector<std::string>& files,
                                 const std::vector<X509*>& leaves,
                                 const std::vector<X509*>& issuers, std::string* error) {
  for (const std::string& file : files) {
    BIO* bio = BIO_new_file(file.c_str(), "rb");
    if (bio == nullptr) {
      *error = "--tls-ocsp: cannot read '" + file + "': " + std::strerror(errno);
      ERR_clear_error();
      return false;
    }
    OCSP_RESPONSE* response = d2i_OCSP_RESPONSE_bio(bio, nullptr);
    BIO_free(bio);
    if (response == nullptr) {
      ERR_clear_error();
      *error = "--tls-ocsp: '" + file + "' holds no DER OCSP response";
      return false;
    }
    const int response_status = OCSP_response_status(response);
    OCSP_BASICRESP* basic = response_status == OCSP_RESPONSE_STATUS_SUCCESSFUL
                                ? OCSP_response_get1_basic(response)
                                : nullptr;
    // A response that cannot be used for its certificate is left out, with a line: the
    // handshake goes without a staple (clients ask the responder themselves), and the
    // certificates load all the same.
    auto drop = [this](const std::string& ocsp_file, const std::string& why) {
      dropped_ocsp_.push_back(ocsp_file);
      warnings_.push_back("--tls-ocsp: " + why + "; not stapled, the handshake goes without it");
    };
    auto done = [&](const std::string& why) {
      OCSP_BASICRESP_free(basic);
      OCSP_RESPONSE_free(response);
      ERR_clear_error();
      if (why.empty()) return true;
      *error = why;
      return false;
    };
    if (basic == nullptr) {
      return done("--tls-ocsp: '" + file + "' is the responder's refusal (" +
                  OCSP_response_status_str(response_status) + "), not an answer");
    }
    size_t matched = leaves.size();
    int status = -1, reason = -1;
    ASN1_GENERALIZEDTIME *revoked_at = nullptr, *this_update = nullptr, *next_update = nullptr;
    for (size_t i = 0; i < leaves.size() && matched == leaves.size(); ++i) {
      if (issuers[i] == nullptr) continue;
      OCSP_CERTID* id = OCSP_cert_to_id(nullptr, leaves[i], issuers[i]);
      if (id != nullptr && OCSP_resp_find_status(basic, id, &status, &reason, &revoked_at,
                                                 &this_update, &next_update) == 1) {
        matched = i;
      }
      OCSP_CERTID_free(id);
    }
    if (matched == leaves.size()) {
      std::vector<std::string> cert_files;
      for (const Certificate& c : certificates_) cert_files.push_back(c.file);
      drop(file, "'" + file + "' " + Unmatched(basic, leaves, issuers, cert_files));
      done("");
      continue;
    }
    Certificate& cert = certificates_[matched];
    if (!cert.ocsp_file.empty())
      return done("--tls-ocsp: '" + file + "' and '" + cert.ocsp_file + "' both answer for '" +
                  cert.file + "'");
    if (status != V_OCSP_CERTSTATUS_GOOD) {
      return done("--tls-ocsp: '" + file + "' says '" + cert.file + "' is " +
                  OCSP_cert_status_str(status));
    }
    // Five minutes of slack for clocks, as OpenSSL's own checks allow.
    if (OCSP_check_validity(this_update, next_update, 300, -1) != 1) {
      drop(file, "'" + file + "' is out of date (its nextUpdate has passed): fetch a fresh one");
      done("");
      continue;
    }
    int64_t next_update_sec = 0;
    tm t{};
    if (next_update != nullptr && ASN1_TIME_to_tm(next_update, &t) == 1)
      next_update_sec = static_cast<int64_t>(timegm(&t));
    unsigned char* der = nullptr;
    const int len = i2d_OCSP_RESPONSE(response, &der);
    if (len <= 0) return done("--tls-ocsp: cannot encode '" + file + "': " + LastError());
    X509_up_ref(leaves[matched]);
    staples_.push_back(
        Staple{leaves[matched], std::string(reinterpret_cast<char*>(der), len), next_update_sec});
    OPENSSL_free(der);
    cert.ocsp_file = file;
    cert.ocsp_next_update_sec = next_update_sec;
    done("");
  }
  return true;
}

// A client asked for the certificate's status: the response read for the certificate chosen
// for it, unless that response has gone stale (a stale staple makes strict clients fail; none
// makes them ask the responder themselves).
int OpenSslFactory::OnStatusRequest(SSL* ssl, void* arg) {
  const auto* self = static_cast<const OpenSslFactory*>(arg);
  X509* cert = SSL_get_certificate(ssl);
  if (cert == nullptr) return SSL_TLSEXT_ERR_NOACK;
  for (const Staple& staple : self->staples_) {
    if (staple.cert != cert && X509_cmp(staple.cert, cert) != 0) continue;
    if (staple.next_update_sec != 0 && TicketKeys::WallSeconds() >= staple.next_update_sec)
      return SSL_TLSEXT_ERR_NOACK;
    void* copy = OPENSSL_memdup(staple.der.data(), staple.der.size());  // the session frees it
    if (copy == nullptr) return SSL_TLSEXT_ERR_NOACK;
    SSL_set_tlsext_status_ocsp_resp(ssl, copy, static_cast<long>(staple.der.size()));
    return SSL_TLSEXT_ERR_OK;
  }
  return SSL_TLSEXT_ERR_NOACK;
}

OpenSslFactory::~OpenSslFactory() {
  for (Staple& s : staples_) X509_free(s.cert);
  for (Site& s : sites_) {
    X509_free(s.leaf);
    SSL_CTX_free(s.ctx);
  }
}

int OpenSslFactory::OnClientHello(SSL* ssl, int*, void* arg) {
  const auto* self = static_cast<const OpenSslFactory*>(arg);
  std::string_view name = ServerNameOf(ssl);
  // A fully qualified name's trailing dot names the same host (RFC 1034 section 3.1); RFC 6066
  // leaves it out of server_name, yet some clients send it, and nginx matches it without.
  if (name.size() > 1 && name.back() == '.') name.remove_suffix(1);
  if (name.empty()) return SSL_CLIENT_HELLO_SUCCESS;
  for (size_t i = 1; i < self->sites_.size(); ++i) {
    if (X509_check_host(self->sites_[i].leaf, name.data(), name.size(), 0, nullptr) == 1) {
      SSL_set_SSL_CTX(ssl, self->sites_[i].ctx);  // and its session id context
      break;
    }
  }
  return SSL_CLIENT_HELLO_SUCCESS;  // no match: the default site, as nginx's default_server
}

std::unique_ptr<TlsSession> OpenSslFactory::Make() {
  return std::make_unique<OpenSslSession>(sites_[0].ctx, shared_from_this(), nullptr);
}

std::unique_ptr<TlsSession> OpenSslFactory::MakePinned(FactoryPin* pin) const {
  ++pin->sessions;
  return std::make_unique<OpenSslSession>(sites_[0].ctx, nullptr, pin);
}

// Ticket keys ------------------------------------------------------------------------------

int64_t TicketKeys::WallSeconds() { return static_cast<int64_t>(std::time(nullptr)); }

bool TicketKeys::SystemRandom(unsigned char* out, int n) { return RAND_bytes(out, n) == 1; }

TicketKeys::TicketKeys(int64_t rotate_sec, int64_t (*now_sec)(),
                       bool (*random)(unsigned char* out, int n))
    : rotate_sec_(rotate_sec), now_sec_(now_sec), random_(random) {
  RINGD_ASSERT(rotate_sec_ > 0);
  RINGD_ASSERT_MSG(Fresh(now_sec_(), &ring_[0].current),
                   "no random bytes for the first ticket key");
  live_.store(&ring_[0], std::memory_order_release);
}

bool TicketKeys::Fresh(int64_t now_sec, Key* out) const {
  Key k;
  if (!random_(k.name, sizeof k.name) || !random_(k.aes, sizeof k.aes) ||
      !random_(k.hmac, sizeof k.hmac)) {
    return false;
  }
  k.born_sec = now_sec;
  *out = k;
  return true;
}

uint64_t TicketKeys::rotations() const { return live_.load(std::memory_order_acquire)->rotations; }

uint64_t TicketKeys::rotation_locks() const {
  return rotation_locks_.load(std::memory_order_relaxed);
}

const TicketKeys::Generation* TicketKeys::Live(int64_t now) {
  const Generation* g = live_.load(std::memory_order_acquire);
  if (now - g->current.born_sec < rotate_sec_) return g;
  std::lock_guard<std::mutex> lock(rotate_mu_);
  rotation_locks_.fetch_add(1, std::memory_order_relaxed);
  g = live_.load(std::memory_order_acquire);  // another thread may have rotated meanwhile
  const int64_t age = now - g->current.born_sec;
  if (age < rotate_sec_) return g;
  Key fresh;
  // This handshake fails (OpenSSL ends it with an internal error alert); the keys stay.
  if (!Fresh(now, &fresh)) return nullptr;
  Generation& next = ring_[(g->rotations + 1) % kGenerations];
  next.previous = g->current;
  next.has_previous = age < 2 * rotate_sec_;
  next.current = fresh;
  next.rotations = g->rotations + 1;
  live_.store(&next, std::memory_order_release);
  return &next;
}

int TicketKeys::Callback(SSL* ssl, unsigned char* key_name, unsigned char* iv,
                         EVP_CIPHER_CTX* cipher, EVP_MAC_CTX* mac, int encrypt) {
  auto* self = static_cast<TicketKeys*>(SSL_CTX_get_app_data(SSL_get_SSL_CTX(ssl)));
  RINGD_ASSERT(self != nullptr);
  // Encrypting: 1. Decrypting: 1, resume and the ticket stands; 2, resume and send a new ticket;
  // 0, unknown, a full handshake. A TLS 1.3 ticket is renewed whatever its key: clients offer
  // one once (RFC 8446 appendix C.4), so a resumption without a new ticket leaves the next
  // connection a full handshake (OpenSSL renews them so under its own keys, nginx under its key
  // files). A TLS 1.2 ticket may be offered again: renewed only when its key is the previous one.
  int verdict = !encrypt && SSL_version(ssl) == TLS1_3_VERSION ? 2 : 1;
  const int64_t now = self->now_sec_();
  const Generation* g = self->Live(now);
  if (g == nullptr) return -1;
  // A key encrypts for one period and decrypts for two.
  const bool previous_valid = g->has_previous && now - g->previous.born_sec < 2 * self->rotate_sec_;
  Key key;
  if (encrypt) {
    key = g->current;
    std::memcpy(key_name, key.name, sizeof key.name);
  } else if (std::memcmp(key_name, g->current.name, sizeof key.name) == 0) {
    key = g->current;
  } else if (previous_valid && std::memcmp(key_name, g->previous.name, sizeof key.name) == 0) {
    key = g->previous;
    verdict = 2;
  } else {
    return 0;  // a ticket from before the previous rotation (or another process): full handshake
  }
  if (encrypt && !self->random_(iv, 16)) return -1;
  OSSL_PARAM params[] = {
      OSSL_PARAM_construct_octet_string(OSSL_MAC_PARAM_KEY, key.hmac, sizeof key.hmac),
      OSSL_PARAM_construct_utf8_string(OSSL_MAC_PARAM_DIGEST, const_cast<char*>("SHA256"), 0),
      OSSL_PARAM_construct_end()};
  const int ok = encrypt ? EVP_EncryptInit_ex(cipher, EVP_aes_256_cbc(), nullptr, key.aes, iv)
                         : EVP_DecryptInit_ex(cipher, EVP_aes_256_cbc(), nullptr, key.aes, iv);
  if (ok != 1 || EVP_MAC_CTX_set_params(mac, params) != 1) return -1;
  return verdict;
}

// Reloading --------------------------------------------------------------------------------

namespace {

std::atomic<uint64_t> reloadables_made{0};

// A thread's pins, one per ReloadableTls it makes sessions from (a process has one; tests a few).
// At the thread's exit a pin with no session left is freed; one with sessions left is theirs.
struct ThreadPins {
  static constexpr size_t kSlots = 4;
  struct Slot {
    uint64_t owner = 0;  // the ReloadableTls's id (0: free)
    uint64_t generation = 0;
    FactoryPin* pin = nullptr;
  };
  Slot slots[kSlots];
  static void Drop(Slot* slot) {
    if (slot->pin != nullptr) {
      slot->pin->current = false;
      if (slot->pin->sessions == 0) delete slot->pin;
    }
    *slot = Slot{};
  }
  ~ThreadPins() {
    for (Slot& slot : slots) Drop(&slot);
  }
};
thread_local ThreadPins thread_pins;

}  // namespace

ReloadableTls::ReloadableTls() : id_(reloadables_made.fetch_add(1) + 1) {}

ReloadableTls::~ReloadableTls() = default;

absl::Status ReloadableTls::Load(const TlsOptions& options) {
  absl::StatusOr<std::shared_ptr<OpenSslFactory>> next = OpenSslFactory::Create(options);
  if (!next.ok()) return next.status();
  std::lock_guard<std::mutex> lock(mu_);
  current_ = *std::move(next);
  generation_.fetch_add(1, std::memory_order_release);
  return absl::OkStatus();
}

// The thread's pin of the newest generation, made (under the lock) once per generation per
// thread: a session made between reloads takes no lock and writes nothing another thread reads.
std::unique_ptr<TlsSession> ReloadableTls::Make() {
  const uint64_t generation = generation_.load(std::memory_order_acquire);
  ThreadPins::Slot* slot = nullptr;
  for (ThreadPins::Slot& s : thread_pins.slots) {
    if (s.owner == id_) slot = &s;
  }
  if (slot == nullptr) {
    for (ThreadPins::Slot& s : thread_pins.slots) {
      if (slot == nullptr && s.owner == 0) slot = &s;
    }
    if (slot == nullptr) {  // more ReloadableTls than slots: the first slot's goes
      slot = &thread_pins.slots[0];
      ThreadPins::Drop(slot);
    }
    slot->owner = id_;
  }
  if (slot->pin == nullptr || slot->generation != generation) {
    std::shared_ptr<OpenSslFactory> f;
    uint64_t g = 0;
    {
      std::lock_guard<std::mutex> lock(mu_);
      f = current_;
      g = generation_.load(std::memory_order_relaxed);
    }
    pin_locks_.fetch_add(1, std::memory_order_relaxed);
    RINGD_ASSERT(f != nullptr);
    const uint64_t owner = slot->owner;
    ThreadPins::Drop(slot);
    slot->owner = owner;
    slot->generation = g;
    slot->pin = new FactoryPin;
    slot->pin->factory = std::move(f);
  }
  return slot->pin->factory->MakePinned(slot->pin);
}

std::vector<OpenSslFactory::Certificate> ReloadableTls::certificates() const {
  std::lock_guard<std::mutex> lock(mu_);
  return current_ != nullptr ? current_->certificates()
                             : std::vector<OpenSslFactory::Certificate>{};
}

std::vector<std::string> ReloadableTls::dropped_ocsp() const {
  std::lock_guard<std::mutex> lock(mu_);
  return current_ != nullptr ? current_->dropped_ocsp() : std::vector<std::string>{};
}

std::vector<std::string> ReloadableTls::warnings() const {
  std::lock_guard<std::mutex> lock(mu_);
  return current_ != nullptr ? current_->warnings() : std::vector<std::string>{};
}

uint64_t ReloadableTls::generation() const { return generation_.load(std::memory_order_acquire); }

uint64_t ReloadableTls::pin_locks() const { return pin_locks_.load(std::memory_order_relaxed); }

}  // namespace ringd::tls
