// An HTTP/2 connection's own state (h2_connection.cc): its nghttp2 session, the streams whose
// exchanges it owns, and its one writer. A connection becomes one when its first bytes are the
// connection preface (h2c with prior knowledge, or h2 chosen by ALPN, whose client sends the same
// preface over TLS).
//
// The writer: nghttp2 serializes frames into a batch's buffer (send_callback); a DATA frame's
// payload is copied there from memory (cached small files, error pages, multipart part heads) or
// read there from its file by the loop (Loop::Read, up to kMaxReads at once, each into its frame's
// place); then one Send takes the whole buffer. So over TLS the records are full (never one per
// 9-byte frame header), and one send carries the frames of many streams. Two batches take turns:
// while one is sent, the next is framed and its file bytes read, so a large body's reads wait
// for no send and its sends for no read. The connection keeps reading all the while
// (WINDOW_UPDATE, RST_STREAM, PING and new streams are taken as they come).
//
// With --http2-sendfile, in plaintext (h2c) the file payloads are not read: the buffer holds the
// frames without them, and the batch goes out in pieces, in order: the bytes framed before a
// payload (its frame header last) with Send and MSG_MORE, then the payload with SendFile
// (H2SendPiece), and so on; the frames after the last payload with one more Send.
#pragma once

#include <cstdint>

#include "io/loop.h"
#include "mem/intrusive_list.h"
#include "server/core/connection.h"
#include "server/core/timer_list.h"

struct nghttp2_session;

namespace ringd {

// One buffer of frames on its way: framed, its file payloads read into place, sent. A connection
// holds batches only while it has something to send; the shard keeps a few spares.
struct H2Batch {
  // The most file reads one batch starts: a full buffer of 16 KiB frames.
  static constexpr uint32_t kMaxReads = 8;
  // The buffer: kMaxReads frames of the largest DATA payload ringd sends (16 KiB, the default
  // SETTINGS_MAX_FRAME_SIZE every client keeps) with their headers, and room for HEADERS and
  // control frames beside them.
  static constexpr uint32_t kBytes = kMaxReads * (16384 + 9) + 8192;
  enum class State : uint8_t { kFree, kReading, kReady, kSending };

  State state = State::kFree;
  uint32_t len = 0;
  // A file payload: read into place, and counted for its stream once the send took it (a
  // payload cut part way counts the part sent), so $body_bytes_sent says what left.
  struct Read {
    Exchange* ex;  // the stream, whose file (ex->file) is read
    uint32_t at;   // where in `buf`
    uint32_t length;
    uint64_t offset;
  };
  Read reads[kMaxReads];
  io::Completion read_ops[kMaxReads];
  uint32_t read_count = 0;  // file payloads framed into the batch, until its send ends
  uint32_t reads_in_flight = 0;
  bool read_failed = false;  // a file ended early (truncated): a frame already framed is wrong
  // Sent in pieces (H2Session::sendfile): `buf` holds no payloads, and each `at` says where its
  // payload goes between the bytes of `buf`. How far the send has come: the bytes of `buf` sent,
  // the payloads sent, and whether the piece in flight is a payload (SendFile) or bytes (Send).
  uint32_t sent_at = 0;
  uint32_t next_read = 0;
  bool sending_file = false;
  char buf[kBytes];
};

struct H2Session {
  Connection* conn = nullptr;
  nghttp2_session* session = nullptr;
  // The streams with an exchange, oldest first.
  mem::IntrusiveList<Exchange, &Exchange::h2_link> streams;
  uint32_t stream_count = 0;
  // Streams nghttp2 closed while a batch held file payloads: their files stay pinned (a read
  // may still use the fd) and their lines wait (the payloads count once sent) until no batch
  // holds any.
  mem::IntrusiveList<Exchange, &Exchange::h2_link> closed;

  // The batches, taken in turn: `fill` is framed next, `send_next` goes out next (the older).
  H2Batch* batch[2] = {nullptr, nullptr};
  uint8_t fill = 0;
  uint8_t send_next = 0;
  iovec iov{};
  io::Completion send;
  bool sending = false;  // `send` is in flight (batch[send_next])

  uint64_t bytes_sent = 0;     // everything the kernel took, for the send timer's progress
  uint64_t progress_mark = 0;  // bytes_sent when the send timer was armed
  // GOAWAY once what is queued has gone out (--unknown-site=close), as the drain sends it.
  bool goaway_asked = false;
  bool goaway = false;   // GOAWAY queued: the connection ends once its streams have
  bool failed = false;   // the session cannot go on: close once what is queued is out
  bool stalled = false;  // a stream has body bytes and no window to send them: counted once
  // File payloads go out with SendFile beside their frame headers, not read into the batch
  // (--http2-sendfile, plaintext only: over TLS the loop would read and encrypt them anyway).
  bool sendfile = false;

  // nghttp2's frame buffer (H2Memory), and the timer that hands its pages back once the
  // connection has had no stream for kH2QuietMs.
  void* frame_buf = nullptr;
  TimerNode quiet;

  // Whether a batch holds file payloads not yet sent (a closed stream waits on `closed`).
  bool HoldsPayloads() const {
    for (const H2Batch* b : batch) {
      if (b != nullptr && b->read_count > 0) return true;
    }
    return false;
  }
};
// Every idle HTTP/2 connection holds one (docs/ARCHITECTURE.md, "HTTP/2": memory).
static_assert(sizeof(H2Session) <= 328);

}  // namespace ringd
