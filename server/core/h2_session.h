// An HTTP/2 connection's own state (h2_connection.cc): its nghttp2 session, the streams whose
// exchanges it owns, and its one writer. A connection becomes one when its first bytes are the
// connection preface (h2c with prior knowledge, or h2 chosen by ALPN, whose client sends the same
// preface over TLS).
//
// The writer: nghttp2 serializes frames into `out` (send_callback); a DATA frame's payload is
// copied there from memory (cached small files, error pages, multipart part heads) or read there
// from its file by the loop (Loop::Read, up to kMaxReads at once, each into its frame's place);
// then one Send takes the whole buffer. So over TLS the records are full (never one per 9-byte
// frame header), and one send carries the frames of many streams. One send or one batch of reads
// is in flight at a time; the connection keeps reading while it waits (WINDOW_UPDATE,
// RST_STREAM, PING and new streams are taken as they come).
#pragma once

#include <cstdint>

#include "io/loop.h"
#include "mem/intrusive_list.h"
#include "server/core/connection.h"

struct nghttp2_session;

namespace ringd {

struct H2Session {
  // The most file payloads one send buffer holds: a full buffer of 16 KiB frames.
  static constexpr uint32_t kMaxReads = 8;
  // The send buffer: kMaxReads frames of the largest DATA payload ringd sends (16 KiB, the
  // default SETTINGS_MAX_FRAME_SIZE every client keeps) with their headers, and room for
  // HEADERS and control frames beside them.
  static constexpr uint32_t kOutBytes = kMaxReads * (16384 + 9) + 8192;

  Connection* conn = nullptr;
  nghttp2_session* session = nullptr;
  // The streams with an exchange, oldest first.
  mem::IntrusiveList<Exchange, &Exchange::h2_link> streams;
  uint32_t stream_count = 0;
  // Streams nghttp2 closed while `out` held file payloads (read_count): their files stay pinned
  // (a read may still use the fd), and their last payloads count once sent, when `out` has gone.
  mem::IntrusiveList<Exchange, &Exchange::h2_link> closed;

  char* out = nullptr;  // kOutBytes while the connection has something to send; else null
  uint32_t out_len = 0;
  iovec iov{};
  io::Completion send;
  bool sending = false;  // `send` is in flight
  struct Read {
    Exchange* ex;  // the stream, whose file (ex->file) is read
    uint32_t at;   // where in `out`
    uint32_t length;
    uint64_t offset;
  };
  Read reads[kMaxReads];
  io::Completion read_ops[kMaxReads];
  // The file payloads framed into `out`, each read into place before `out` is sent (a buffer
  // may take them in several batches, each read before nghttp2 frames more). Their entries stay
  // until the send of `out` ends: then each counts into its stream's bytes_sent as far as the
  // send took it ($body_bytes_sent: what left; a payload from memory counts as it is framed),
  // and the streams nghttp2 closed meanwhile (on `closed`) go.
  uint32_t read_count = 0;
  uint32_t reads_started = 0;  // of read_count
  uint32_t reads_in_flight = 0;
  bool read_failed = false;  // a file ended early (truncated): the frame is wrong

  uint64_t bytes_sent = 0;     // everything the kernel took, for the send timer's progress
  uint64_t progress_mark = 0;  // bytes_sent when the send timer was armed
  bool goaway = false;         // GOAWAY queued: the connection ends once its streams have
  bool failed = false;         // the session cannot go on: close once what is queued is out
};
// Every idle HTTP/2 connection holds one (docs/ARCHITECTURE.md, "HTTP/2": memory).
static_assert(sizeof(H2Session) <= 1664);

}  // namespace ringd
