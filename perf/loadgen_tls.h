// ringd-load's TLS client side (--tls): one SSL_CTX for every connection, and the non-blocking
// steps of a session over a socket that ringd-load owns and polls itself (OpenSSL's socket BIO
// reads and writes it; ringd-load's epoll says when to call again).
//
//   TlsClient tls;
//   if (!tls.Init(o, &why)) ...;
//   SSL* ssl = tls.Start(fd, &slot_ticket);            // null: could not make one
//   switch (TlsStatus(ssl, SSL_do_handshake(ssl))) ... // kWantRead: wait for EPOLLIN, ...
//   TlsEnd(ssl);                                         // before close(fd)
//
// Key exchange on the groups asked for (X25519 by default), TLS 1.3 ciphersuites as asked
// (TLS_AES_128_GCM_SHA256 by default, so every server encrypts with what `openssl speed -evp
// aes-128-gcm` measures), no certificate check: the harness's certificate is self-signed and
// the servers are on loopback. The client keeps no session cache: a caller that wants
// resumption gives each connection slot a ticket of its own, which holds the newest ticket the
// slot's connections were sent. A TLS 1.3 ticket is offered once, as browsers do (RFC 8446
// appendix C.4): a connection that resumes and is sent no new ticket leaves its slot a full
// handshake next. A TLS 1.2 session that resumed is kept to offer again, as browsers do.
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
  // A client session on `fd` (connecting or connected). With `ticket` (a slot's; null: no
  // resumption), it offers *ticket when there is one and empties the slot; a ticket the server
  // sends on this connection fills it again, until TlsEnd.
  SSL* Start(int fd, SSL_SESSION** ticket) const;

 private:
  SSL_CTX* ctx_ = nullptr;
  std::string sni_;
};

TlsIo TlsStatus(SSL* ssl, int r);

// Frees a session without sending close_notify (the socket is closed next; the server has
// usually sent its own already).
void TlsEnd(SSL* ssl);

}  // namespace ringd::perf
