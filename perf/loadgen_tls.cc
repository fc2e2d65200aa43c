#include "perf/loadgen_tls.h"

#include <openssl/err.h>

#include "perf/loadgen_options.h"

namespace ringd::perf {

namespace {

// A ticket the server sent (OpenSSL's new-session callback: TLS 1.3 tickets as they arrive,
// after the handshake; a TLS 1.2 session at the handshake's end): the connection's slot keeps
// the newest for its next connection.
int KeepTicket(SSL* ssl, SSL_SESSION* session) {
  auto** slot = static_cast<SSL_SESSION**>(SSL_get_app_data(ssl));
  if (slot == nullptr || SSL_SESSION_is_resumable(session) != 1) return 0;  // the library frees it
  if (*slot != nullptr) SSL_SESSION_free(*slot);
  *slot = session;
  return 1;
}

}  // namespace

TlsClient::~TlsClient() {
  if (ctx_ != nullptr) SSL_CTX_free(ctx_);
}

bool TlsClient::Init(const Options& o, std::string* why) {
  ctx_ = SSL_CTX_new(TLS_client_method());
  if (ctx_ == nullptr) {
    *why = "SSL_CTX_new failed";
    return false;
  }
  SSL_CTX_set_min_proto_version(ctx_, TLS1_2_VERSION);
  SSL_CTX_set_max_proto_version(ctx_, o.tls_max_version == 12 ? TLS1_2_VERSION : TLS1_3_VERSION);
  SSL_CTX_set_verify(ctx_, SSL_VERIFY_NONE, nullptr);
  // The slot that resumes keeps its tickets itself (KeepTicket); no cache of the library's.
  SSL_CTX_set_session_cache_mode(ctx_, SSL_SESS_CACHE_CLIENT | SSL_SESS_CACHE_NO_INTERNAL_STORE);
  SSL_CTX_sess_set_new_cb(ctx_, &KeepTicket);
  // Read whole records' worth from the socket at once (without it, two recv per record), give
  // the buffers back while idle (10,000 idle connections), and take a FIN without
  // close_notify as the end of the session, as browsers do.
  SSL_CTX_set_read_ahead(ctx_, 1);
  SSL_CTX_set_mode(ctx_, SSL_MODE_RELEASE_BUFFERS);
  SSL_CTX_set_options(ctx_, SSL_OP_IGNORE_UNEXPECTED_EOF);
  if (SSL_CTX_set1_groups_list(ctx_, o.tls_groups.c_str()) != 1) {
    *why = "--tls-groups: OpenSSL refuses '" + o.tls_groups + "'";
    return false;
  }
  if (SSL_CTX_set_ciphersuites(ctx_, o.tls_ciphersuites.c_str()) != 1) {
    *why = "--tls-ciphersuites: OpenSSL refuses '" + o.tls_ciphersuites + "'";
    return false;
  }
  // TLS 1.2: the ECDHE AES-GCM suites, AES-128 first (the same cipher as the TLS 1.3 default).
  SSL_CTX_set_cipher_list(ctx_,
                          "ECDHE-ECDSA-AES128-GCM-SHA256:ECDHE-RSA-AES128-GCM-SHA256:"
                          "ECDHE-ECDSA-AES256-GCM-SHA384:ECDHE-RSA-AES256-GCM-SHA384");
  sni_ = o.tls_sni;
  return true;
}

SSL* TlsClient::Start(int fd, SSL_SESSION** ticket) const {
  SSL* ssl = SSL_new(ctx_);
  if (ssl == nullptr) return nullptr;
  SSL_SESSION* offer = ticket != nullptr ? *ticket : nullptr;
  if (SSL_set_fd(ssl, fd) != 1 ||
      (!sni_.empty() && SSL_set_tlsext_host_name(ssl, sni_.c_str()) != 1) ||
      (offer != nullptr && SSL_set_session(ssl, offer) != 1)) {
    SSL_free(ssl);
    ERR_clear_error();
    return nullptr;
  }
  if (ticket != nullptr) {
    // Offered once: the session holds its own reference while it is offered.
    if (offer != nullptr) SSL_SESSION_free(offer);
    *ticket = nullptr;
    SSL_set_app_data(ssl, ticket);
  }
  SSL_set_connect_state(ssl);
  return ssl;
}

TlsIo TlsStatus(SSL* ssl, int r) {
  if (r > 0) return TlsIo::kDone;
  switch (SSL_get_error(ssl, r)) {
    case SSL_ERROR_WANT_READ:
      return TlsIo::kWantRead;
    case SSL_ERROR_WANT_WRITE:
      return TlsIo::kWantWrite;
    case SSL_ERROR_ZERO_RETURN:
      return TlsIo::kClosed;
    default:
      // The error queue is per thread: left behind, it would be blamed on the next call.
      ERR_clear_error();
      return TlsIo::kFailed;
  }
}

void TlsEnd(SSL* ssl) {
  // A TLS 1.2 session resumed with no new ticket (the library calls KeepTicket only for a new
  // one) is offered again: a TLS 1.2 ticket stands for many connections.
  auto** slot = static_cast<SSL_SESSION**>(SSL_get_app_data(ssl));
  if (slot != nullptr && *slot == nullptr && SSL_version(ssl) == TLS1_2_VERSION &&
      SSL_session_reused(ssl) == 1) {
    SSL_SESSION* s = SSL_get1_session(ssl);
    if (s != nullptr && SSL_SESSION_is_resumable(s) == 1) {
      *slot = s;
    } else if (s != nullptr) {
      SSL_SESSION_free(s);
    }
  }
  SSL_set_app_data(ssl, nullptr);
  SSL_set_quiet_shutdown(ssl, 1);
  SSL_shutdown(ssl);
  SSL_free(ssl);
  ERR_clear_error();
}

}  // namespace ringd::perf
