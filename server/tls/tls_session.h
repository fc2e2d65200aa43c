// The TLS seam: one connection's TLS session as a state machine over buffers, with no socket and
// no IO of its own (picotls's model, and what OpenSSL does over memory BIOs). Ciphertext from the
// ring goes in with Feed; plaintext comes out of ReadPlain; plaintext to send goes in with
// WritePlain; the records to send (handshake, application data, alerts, close_notify) come out
// of TakeOutput. TlsLoop (tls_loop.h) drives it from the loop's completions; OpenSSL implements
// it in production (openssl_tls.h) and the shard simulator can stand in a deterministic one.
//
//   session->Feed(ciphertext, n);
//   while ((got = session->ReadPlain(buf, sizeof buf)) > 0) Deliver(buf, got);
//   session->WritePlain(head, head_len);
//   size_t n = session->TakeOutput(send_buffer, sizeof send_buffer);   // then send them
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

namespace ringd::tls {

// How a session ended, for the connection's last word and the metrics.
enum class TlsEnd : uint8_t {
  kNone,         // still open
  kCloseNotify,  // the peer closed cleanly
  kBadInput,     // a record or handshake message the session refused (an alert is queued)
  kPlainHttp,    // a plaintext HTTP request came to the TLS port (no alert: the peer speaks no TLS)
};

class TlsSession {
 public:
  virtual ~TlsSession() = default;

  // Ciphertext the peer sent; the session keeps what it cannot use yet. Handshake records it
  // answers are queued for TakeOutput.
  virtual void Feed(const char* data, size_t len) = 0;
  // Decrypted application bytes, up to `cap`: > 0 bytes; 0 when it needs more ciphertext (or the
  // peer closed: see Ended()); the handshake advances as a side effect.
  virtual size_t ReadPlain(char* out, size_t cap) = 0;
  // Encrypts all of `data` into records queued for output (never partial: the output grows).
  // False once the session cannot send (an error, or not yet past the handshake).
  virtual bool WritePlain(const char* data, size_t len) = 0;
  // The records waiting to be sent: how many bytes, and up to `cap` of them moved, oldest first,
  // into the caller's buffer (which stays the caller's while a send of it is in flight).
  virtual size_t PendingOutput() const = 0;
  virtual size_t TakeOutput(char* out, size_t cap) = 0;
  // Queues close_notify (once).
  virtual void Close() = 0;
  // Gives back the memory the session holds for records it has no bytes of (a connection going
  // idle calls it).
  virtual void Trim() {}
  // Bytes of buffers the session holds for records in either direction (after Trim on an idle
  // session: none).
  virtual size_t BufferBytes() const { return 0; }
  // Whether ciphertext or decrypted bytes are held that ReadPlain has not handed out yet (a
  // receive cancelled now leaves input unread).
  virtual bool HasBufferedInput() const = 0;

  virtual bool HandshakeDone() const = 0;
  virtual TlsEnd Ended() const = 0;
  // What was negotiated, for logs and metrics (empty before the handshake is done).
  virtual std::string_view Version() const = 0;
  virtual std::string_view Cipher() const = 0;
  virtual std::string_view ServerName() const = 0;
  virtual bool Resumed() const = 0;
};

// Makes a server-side session per accepted TLS connection. Shared by every shard: Make must be
// safe to call from several threads at once.
class TlsSessionFactory {
 public:
  virtual ~TlsSessionFactory() = default;
  virtual std::unique_ptr<TlsSession> Make() = 0;
};

}  // namespace ringd::tls
