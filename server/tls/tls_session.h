// The TLS seam: one connection's TLS session as a state machine over buffers, with no socket and
// no IO of its own (picotls's model, and what OpenSSL does over a BIO of ours). Ciphertext from
// the ring goes in with Feed; plaintext comes out of ReadPlain; plaintext to send goes in with
// WritePlain; the records to send (handshake, application data, alerts, close_notify) are sent
// from the session's own memory (PeekOutput, ConsumeOutput). TlsLoop (tls_loop.h) drives it from
// the loop's completions; OpenSSL implements it in production (openssl_tls.h) and the shard
// simulator can stand in a deterministic one.
//
//   session->Feed(ciphertext, n);
//   while ((got = session->ReadPlain(buf, sizeof buf)) > 0) Deliver(buf, got);
//   session->WritePlain(head, head_len);
//   const char* records;
//   size_t n = session->PeekOutput(&records);   // send them from where they are, then
//   session->ConsumeOutput(n);                  // once the send has completed
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
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
  // answers are queued for output.
  virtual void Feed(const char* data, size_t len) = 0;
  // Decrypted application bytes, up to `cap`: > 0 bytes; 0 when it needs more ciphertext (or the
  // peer closed: see Ended()); the handshake advances as a side effect.
  virtual size_t ReadPlain(char* out, size_t cap) = 0;
  // Encrypts all of `data` into records queued for output (never partial: the output grows).
  // False once the session cannot send (an error, or not yet past the handshake).
  virtual bool WritePlain(const char* data, size_t len) = 0;
  // The records waiting to be sent: how many bytes.
  virtual size_t PendingOutput() const = 0;
  // The oldest of them, in the session's own memory (no copy): *data and the count returned
  // (0: none) stay valid and unchanged, whatever the session queues meanwhile, until
  // ConsumeOutput gives them back; until then PeekOutput returns the same bytes. The count may
  // be less than PendingOutput (what was queued after them comes next).
  virtual size_t PeekOutput(const char** data) = 0;
  // The first `n` bytes PeekOutput returned have been sent.
  virtual void ConsumeOutput(size_t n) = 0;
  // Up to `cap` of the waiting records copied into `out` and consumed, oldest first.
  size_t TakeOutput(char* out, size_t cap) {
    size_t taken = 0;
    const char* data = nullptr;
    while (taken < cap) {
      const size_t n = std::min(PeekOutput(&data), cap - taken);
      if (n == 0) break;
      std::memcpy(out + taken, data, n);
      ConsumeOutput(n);
      taken += n;
    }
    return taken;
  }
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
  // After Ended() == kPlainHttp: the start of the plaintext the client sent (what the session
  // had been fed), for the 400 the shard answers and the request line it logs.
  virtual std::string_view PlainHttpRequest() const { return {}; }
};

// Makes a server-side session per accepted TLS connection. Shared by every shard: Make must be
// safe to call from several threads at once.
class TlsSessionFactory {
 public:
  virtual ~TlsSessionFactory() = default;
  virtual std::unique_ptr<TlsSession> Make() = 0;
};

}  // namespace ringd::tls
