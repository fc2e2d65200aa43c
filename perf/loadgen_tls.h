// ringd-load's TLS client side (--tls): one SSL_CTX for every connection, and the non-blocking
// steps of a session over a socket that ringd-load owns and polls itself (OpenSSL's socket BIO
// reads and writes it; ringd-load's epoll says when to call again).
//
//   TlsClient tls;
//   if (!tls.Init(o, &why)) ...;
//   SSL* ssl = tls.Start(fd, last_session);            // null: could not make one
//   switch (TlsStatus(ssl, SSL_do_handshake(ssl))) ... // kWantRead: wait for EPOLLIN, ...
//   TlsEnd(ssl, &last_session);                          // before close(fd)
//
// Key exchange on the groups asked for (X25519 by default), TLS 1.3 ciphersuites as asked
// (TLS_AES_128_GCM_SHA256 by default, so every server encrypts with what `openssl speed -evp
// aes-128-gcm` measures), no certificate check: the harness's certificate is self-signed and
// the servers are on loopback. The client keeps no session cache: a caller that wants
// resumption keeps the last session of each connection slot and offers it to the next.
#pragma once

#include <openssl/ssl.h>

#include <string>

namespace ringd::perf {

struct Options;

// What an SSL_* call that returned `r` means for the caller.
enum class TlsIo {
  kDone,       // it did what was asked
  kWantRead,   // call again when the socket is readable
  kWantWrite,  // call again when the socket is writable
  kClosed,     // the peer ended the session (close_notify or a plain EOF)
  kFailed,     // a protocol or socket error
};

class TlsClient {
 public:
  TlsClient() = default;
  TlsClient(const TlsClient&) = delete;
  TlsClient& operator=(const TlsClient&) = delete;
  ~TlsClient();

  // False, with the reason in *why, when OpenSSL refuses the options (an unknown group, say).
  bool Init(const Options& o, std::string* why);
  // A client session on `fd` (connecting or connected), offering `resume` when not null.
  SSL* Start(int fd, SSL_SESSION* resume) const;

 private:
  SSL_CTX* ctx_ = nullptr;
  std::string sni_;
};

TlsIo TlsStatus(SSL* ssl, int r);

// Frees a session without sending close_notify (the socket is closed next; the server has
// usually sent its own already). When `keep` is not null and the session can be resumed, it
// replaces *keep (TLS 1.3 tickets arrive after the handshake: take the session at the end).
void TlsEnd(SSL* ssl, SSL_SESSION** keep);

}  // namespace ringd::perf
