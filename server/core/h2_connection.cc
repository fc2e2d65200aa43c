// HTTP/2 connections (RFC 9113) over nghttp2, driven sans-IO as OpenSSL is: the connection's
// receive hands nghttp2 the bytes (nghttp2_session_mem_recv), and its one writer takes the
// frames nghttp2 makes (h2_session.h). Each stream owns an exchange and is planned, looked up,
// logged and counted as an HTTP/1.1 request is (PlanExchange, WriteHead, EndExchange); only how
// its head and body are framed differs.
//
//   first bytes = preface -> StartH2 -> H2Received -> nghttp2 callbacks: a stream's fields,
//   then H2PlanStream (may wait for a file: OnStreamFileReady) -> H2StartResponse
//   -> H2Flush: frames into `out`, file payloads read into place, one Send -> OnH2Send -> ...
#include <nghttp2/nghttp2.h>

#include <algorithm>
#include <cstring>

#include "io/assert.h"
#include "server/core/connection.h"
#include "server/core/h2_session.h"
#include "server/http/text.h"

namespace ringd {
namespace {

constexpr std::string_view kPreface("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n", 24);

// A DATA frame smaller than this is not made just to fill the end of the send buffer: the
// stream waits for the next buffer instead.
constexpr uint32_t kMinDataFrame = 1024;

std::string_view View(nghttp2_rcbuf* b) {
  if (b == nullptr) return {};
  const nghttp2_vec v = nghttp2_rcbuf_get_buf(b);
  return std::string_view(reinterpret_cast<const char*>(v.base), v.len);
}

Exchange* StreamOf(nghttp2_session* session, int32_t id) {
  return static_cast<Exchange*>(nghttp2_session_get_stream_user_data(session, id));
}

// The body's next piece once the one before is taken: a multipart part head or the closing
// tail into the exchange's head buffer (the response head went to nghttp2 already, which keeps
// its own copy), a slice of the file, or nothing (kDone).
void NextPiece(Exchange* ex) {
  const http::ResponsePlan& plan = ex->plan;
  while (ex->iov[0].iov_len == 0) {
    switch (ex->phase) {
      case Exchange::Phase::kSlice:
        if (ex->body_left > 0) return;
        if (!plan.multipart) {
          ex->phase = Exchange::Phase::kDone;
          return;
        }
        ++ex->part;
        if (ex->part < plan.ranges.count) {
          ex->phase = Exchange::Phase::kPartHead;
        } else {
          http::MultipartLayout layout(plan.ranges, plan.content_type, plan.file.size,
                                       plan.multipart_boundary);
          ex->iov[0] = iovec{ex->head, layout.Tail(ex->head)};
          ex->phase = Exchange::Phase::kDone;
        }
        break;
      case Exchange::Phase::kPartHead: {
        http::MultipartLayout layout(plan.ranges, plan.content_type, plan.file.size,
                                     plan.multipart_boundary);
        ex->iov[0] = iovec{ex->head, layout.PartHead(ex->part, ex->head)};
        ex->phase = Exchange::Phase::kSlice;
        ex->body_offset = plan.ranges.ranges[ex->part].first;
        ex->body_left = plan.ranges.ranges[ex->part].Length();
        break;
      }
      case Exchange::Phase::kListing:  // ReadBody takes the lister's pieces
        return;
      case Exchange::Phase::kTail:
      case Exchange::Phase::kDone:
        ex->phase = Exchange::Phase::kDone;
        return;
    }
  }
}

// Takes up to `max` bytes of the body's current piece for one DATA frame: where they come from
// goes in the exchange (h2_piece*), for SendData to copy or read.
size_t TakePiece(Exchange* ex, size_t max) {
  size_t n;
  if (ex->iov[0].iov_len > 0) {
    n = std::min(max, ex->iov[0].iov_len);
    ex->h2_piece_file = false;
    ex->h2_piece = static_cast<const char*>(ex->iov[0].iov_base);
    ex->iov[0].iov_base = static_cast<char*>(ex->iov[0].iov_base) + n;
    ex->iov[0].iov_len -= n;
  } else {
    RINGD_ASSERT(ex->phase == Exchange::Phase::kSlice && ex->body_left > 0);
    n = static_cast<size_t>(std::min<uint64_t>(max, ex->body_left));
    if (ex->file->content != nullptr) {
      ex->h2_piece_file = false;
      ex->h2_piece = ex->file->content + ex->body_offset;
    } else {
      ex->h2_piece_file = true;
      ex->h2_piece_offset = ex->body_offset;
    }
    ex->body_offset += n;
    ex->body_left -= n;
  }
  NextPiece(ex);
  return n;
}

bool BodyDone(const Exchange* ex) {
  return ex->iov[0].iov_len == 0 && ex->phase == Exchange::Phase::kDone;
}

// Whether every open stream waits on its client alone: for a window the client keeps shut (the
// stream's or the connection's) or for the rest of its request. A client that has finished
// sending can send neither a WINDOW_UPDATE nor a request byte, so such a stream never ends. A
// stream that waits on the shard (a file lookup, room in a batch, a listing's next piece) or
// whose body is all framed goes on by itself.
bool OnlyThePeerCanMove(H2Session* s) {
  for (const Exchange* ex = s->streams.front(); ex != nullptr; ex = s->streams.Next(ex)) {
    if (ex->h2_waiting || ex->h2_deferred || ex->h2_listing_wait) return false;
    if (ex->head_len != 0 && BodyDone(ex)) return false;
  }
  return true;
}

}  // namespace

// nghttp2's callbacks: `user` is the connection's H2Session.
struct H2Callbacks {
  static ConnectionMachine* Machine(void* user) {
    return static_cast<H2Session*>(user)->conn->machine;
  }

  // A new stream's HEADERS: it takes an exchange, or is refused when none is left.
  static int OnBeginHeaders(nghttp2_session* session, const nghttp2_frame* frame, void* user) {
    if (frame->hd.type != NGHTTP2_HEADERS || frame->headers.cat != NGHTTP2_HCAT_REQUEST) return 0;
    H2Session* s = static_cast<H2Session*>(user);
    ConnectionMachine* m = s->conn->machine;
    Exchange* ex = m->h2_exchanges_->Get();
    if (ex == nullptr) {
      ++m->stats_.h2_streams_refused;
      nghttp2_submit_rst_stream(session, NGHTTP2_FLAG_NONE, frame->hd.stream_id,
                                NGHTTP2_REFUSED_STREAM);
      return 0;
    }
    ex->conn = s->conn;
    ex->stream_id = frame->hd.stream_id;
    ex->waiter.wake = &ConnectionMachine::OnStreamFileReady;
    s->streams.PushBack(ex);
    ++s->stream_count;
    nghttp2_session_set_stream_user_data(session, frame->hd.stream_id, ex);
    return 0;
  }

  // A request field: counted against the same limits as an HTTP/1.1 head (a field section
  // larger is answered 431), and kept if the planner reads it.
  static int OnHeader(nghttp2_session* session, const nghttp2_frame* frame, nghttp2_rcbuf* name,
                      nghttp2_rcbuf* value, uint8_t, void* user) {
    if (frame->hd.type != NGHTTP2_HEADERS || frame->headers.cat != NGHTTP2_HCAT_REQUEST) return 0;
    Exchange* ex = StreamOf(session, frame->hd.stream_id);
    if (ex == nullptr || ex->h2_refused) return 0;
    const Config& config = Machine(user)->config_;
    const std::string_view n = View(name), v = View(value);
    ex->h2_head_bytes += static_cast<uint32_t>(n.size() + v.size() + 4);  // "name: value\r\n"
    if (ex->h2_head_bytes > config.max_request_head || ++ex->h2_fields_seen > config.max_headers) {
      ex->h2_refused = true;
      return 0;
    }
    const http::H2Field f = http::H2FieldOf(n);
    if (f == http::H2Field::kNone) {
      // --real-ip-header: the last field of that name (a proxy that adds one adds it last).
      if (Machine(user)->real_ip_ && http::EqualsIgnoreCase(n, config.real_ip_header)) {
        nghttp2_rcbuf*& real = ex->h2_fields[Exchange::kH2RealIpField];
        if (real != nullptr) nghttp2_rcbuf_decref(real);
        nghttp2_rcbuf_incref(value);
        real = value;
      }
      return 0;
    }
    nghttp2_rcbuf*& kept = ex->h2_fields[static_cast<size_t>(f)];
    if (kept == nullptr) {
      nghttp2_rcbuf_incref(value);
      kept = value;
    }
    return 0;
  }

  static int OnFrameRecv(nghttp2_session* session, const nghttp2_frame* frame, void* user) {
    ConnectionMachine* m = Machine(user);
    switch (frame->hd.type) {
      case NGHTTP2_HEADERS:
        if (frame->headers.cat == NGHTTP2_HCAT_REQUEST) {
          if (Exchange* ex = StreamOf(session, frame->hd.stream_id))
            m->H2PlanStream(static_cast<H2Session*>(user)->conn, ex);
        }
        break;
      case NGHTTP2_RST_STREAM:
        ++m->stats_.h2_resets_received;
        break;
      case NGHTTP2_GOAWAY:
        ++m->stats_.h2_goaways_received;
        break;
    }
    return 0;
  }

  static int OnFrameSend(nghttp2_session* session, const nghttp2_frame* frame, void* user) {
    ConnectionMachine* m = Machine(user);
    Exchange* ex = frame->hd.stream_id != 0 ? StreamOf(session, frame->hd.stream_id) : nullptr;
    switch (frame->hd.type) {
      case NGHTTP2_HEADERS:
        if (ex != nullptr) {  // the response head went out: logged as its head bytes
          ex->head_len = static_cast<uint32_t>(frame->hd.length + 9);
          ex->bytes_sent += ex->head_len;
        }
        break;
      case NGHTTP2_RST_STREAM:
        ++m->stats_.h2_resets_sent;
        break;
      case NGHTTP2_GOAWAY:
        ++m->stats_.h2_goaways_sent;
        break;
    }
    return 0;
  }

  static int OnStreamClose(nghttp2_session* session, int32_t id, uint32_t, void* user) {
    Exchange* ex = StreamOf(session, id);
    if (ex == nullptr) return 0;
    nghttp2_session_set_stream_user_data(session, id, nullptr);
    H2Session* s = static_cast<H2Session*>(user);
    ConnectionMachine* m = s->conn->machine;
    if (!s->HoldsPayloads()) {
      m->H2ReleaseStream(s->conn, ex);
      return 0;
    }
    // A read into a batch may still use its file, and a batch's file payloads count once sent:
    // released when no batch holds any (OnH2Send).
    m->StopWaiting(ex);
    s->streams.Remove(ex);
    s->closed.PushBack(ex);
    ex->h2_closed = true;
    return 0;
  }

  // Control frames and frame headers: copied into the batch being framed, as much as fits.
  static ssize_t Send(nghttp2_session*, const uint8_t* data, size_t length, int, void* user) {
    H2Batch* b = static_cast<H2Session*>(user)->batch[static_cast<H2Session*>(user)->fill];
    const size_t room = H2Batch::kBytes - b->len;
    if (room == 0) return NGHTTP2_ERR_WOULDBLOCK;
    const size_t n = std::min(room, length);
    std::memcpy(b->buf + b->len, data, n);
    b->len += static_cast<uint32_t>(n);
    return static_cast<ssize_t>(n);
  }

  // A DATA frame's payload: the frame is made only when it fits the batch whole (and, for file
  // bytes, a read is free), so SendData never has to refuse one. A payload sent from its file
  // (H2Session::sendfile) takes no room in the buffer: only its frame header does.
  static ssize_t ReadBody(nghttp2_session*, int32_t, uint8_t*, size_t length, uint32_t* flags,
                          nghttp2_data_source* source, void* user) {
    H2Session* s = static_cast<H2Session*>(user);
    H2Batch* b = s->batch[s->fill];
    Exchange* ex = static_cast<Exchange*>(source->ptr);
    const size_t room = H2Batch::kBytes - b->len;
    const bool file_next =
        ex->iov[0].iov_len == 0 && ex->file != nullptr && ex->file->content == nullptr;
    const bool from_file = file_next && s->sendfile;
    if (room < 9 + (from_file ? 0 : kMinDataFrame) ||
        (file_next && b->read_count == H2Batch::kMaxReads)) {
      ex->h2_deferred = true;  // resumed once a batch has gone out (OnH2Send)
      return NGHTTP2_ERR_DEFERRED;
    }
    if (ex->phase == Exchange::Phase::kListing && ex->iov[0].iov_len == 0) {
      // A listing's next piece, as the lister makes it; copied into the batch (SendData), then
      // handed back. Not made yet: the stream waits for the lister (OnStreamListingMore).
      DirLister* lister = Machine(user)->lister_.get();
      RINGD_ASSERT(!ex->h2_listing_piece);  // SendData handed the last one back
      const ListingPiece piece = lister->Next(ex->listing);
      if (piece.len == 0) {
        if (!lister->Ended(ex->listing)) {
          ex->h2_listing_wait = true;
          return NGHTTP2_ERR_DEFERRED;
        }
        ex->phase = Exchange::Phase::kDone;  // its last piece went out before it was known last
        ex->h2_piece_file = false;
        ex->h2_piece = ex->head;
        *flags |= NGHTTP2_DATA_FLAG_NO_COPY | NGHTTP2_DATA_FLAG_EOF;
        return 0;
      }
      ex->iov[0] = iovec{piece.data, piece.len};
      ex->h2_listing_piece = !piece.last;  // the last is not handed back: Release takes it
      if (piece.last) ex->phase = Exchange::Phase::kDone;
    }
    const size_t n = TakePiece(ex, from_file ? length : std::min(length, room - 9));
    *flags |= NGHTTP2_DATA_FLAG_NO_COPY;
    if (BodyDone(ex)) *flags |= NGHTTP2_DATA_FLAG_EOF;
    return static_cast<ssize_t>(n);
  }

  static int SendData(nghttp2_session*, nghttp2_frame* frame, const uint8_t* framehd, size_t length,
                      nghttp2_data_source* source, void* user) {
    H2Session* s = static_cast<H2Session*>(user);
    H2Batch* b = s->batch[s->fill];
    Exchange* ex = static_cast<Exchange*>(source->ptr);
    // A payload sent from its file takes no room in the buffer (H2Session::sendfile).
    const bool in_place = !(ex->h2_piece_file && s->sendfile);
    RINGD_ASSERT(frame->data.padlen == 0);                                  // ringd pads nothing
    RINGD_ASSERT(9 + (in_place ? length : 0) <= H2Batch::kBytes - b->len);  // ReadBody made room
    std::memcpy(b->buf + b->len, framehd, 9);
    b->len += 9;
    if (ex->h2_piece_file) {
      RINGD_ASSERT(b->read_count < H2Batch::kMaxReads);
      b->reads[b->read_count++] =
          H2Batch::Read{ex, b->len, static_cast<uint32_t>(length), ex->h2_piece_offset};
      if (!in_place) return 0;  // sent from the file between the bytes around it
    } else {
      std::memcpy(b->buf + b->len, ex->h2_piece, length);
      ex->bytes_sent += length;
      if (ex->h2_listing_piece && ex->iov[0].iov_len == 0) {  // a listing's piece, all copied
        ex->h2_listing_piece = false;
        Machine(user)->lister_->Consume(ex->listing);
      }
    }
    b->len += static_cast<uint32_t>(length);
    return 0;
  }
};

ConnectionMachine::Preface ConnectionMachine::H2Preface(const Connection* conn, const char* data,
                                                        size_t n) const {
  if (!config_.http2) return Preface::kNo;
  const std::string_view had(conn->in, conn->in_len);
  if (!kPreface.starts_with(had.substr(0, kPreface.size()))) return Preface::kNo;
  const size_t need = kPreface.size() - std::min(had.size(), kPreface.size());
  const std::string_view rest = kPreface.substr(kPreface.size() - need);
  if (n >= need) return std::string_view(data, need) == rest ? Preface::kYes : Preface::kNo;
  return rest.starts_with(std::string_view(data, n)) ? Preface::kPartial : Preface::kNo;
}

void ConnectionMachine::StartH2(Connection* conn, const char* data, size_t n) {
  SetState(conn, ConnState::kH2);
  if (conn->timer.list != nullptr) conn->timer.list->Disarm(&conn->timer);
  H2Session* s = new H2Session;
  s->conn = conn;
  s->send.owner = conn;
  s->send.callback = &ConnectionMachine::OnH2Send;
  // Plaintext only: over TLS the loop reads a file's bytes to encrypt them, so a payload read
  // into the batch costs no more and the records stay full.
  s->sendfile = config_.http2_sendfile && loop_->Transport(conn->fd).protocol.empty();
  h2_memory_.BeginSession();
  RINGD_ASSERT(nghttp2_session_server_new3(&s->session, h2_callbacks_, s, h2_options_,
                                           h2_memory_.mem()) == 0);
  s->frame_buf = h2_memory_.EndSession();
  const nghttp2_settings_entry settings[] = {
      {NGHTTP2_SETTINGS_MAX_CONCURRENT_STREAMS, config_.http2_max_streams},
      {NGHTTP2_SETTINGS_MAX_HEADER_LIST_SIZE, config_.max_request_head},
      {NGHTTP2_SETTINGS_NO_RFC7540_PRIORITIES, 1},
  };
  RINGD_ASSERT(nghttp2_submit_settings(s->session, NGHTTP2_FLAG_NONE, settings,
                                       sizeof settings / sizeof settings[0]) == 0);
  SessionOf(conn) = s;
  conn->h2 = true;
  ++stats_.h2_connections;
  // What came before these bytes (a preface split across receives) goes to nghttp2 first.
  if (conn->in != nullptr) {
    const ssize_t rv = nghttp2_session_mem_recv(
        s->session, reinterpret_cast<const uint8_t*>(conn->in), conn->in_len);
    RINGD_ASSERT(rv == static_cast<ssize_t>(conn->in_len));  // a prefix of the preface
    conn->in_len = 0;
    ReleaseInputIfEmpty(conn);
  }
  H2Received(conn, data, n);
}

void ConnectionMachine::H2Received(Connection* conn, const char* data, size_t n) {
  H2Session* s = SessionOf(conn);
  if (!s->failed) {
    const ssize_t rv =
        nghttp2_session_mem_recv(s->session, reinterpret_cast<const uint8_t*>(data), n);
    if (rv < 0) {
      // A connection error (a protocol error, a flood, too many CONTINUATION frames): GOAWAY
      // says which (nghttp2 has queued it already for some; a second is not queued), what is
      // queued goes out, then the connection closes.
      ++stats_.h2_connection_errors;
      s->failed = true;
      const uint32_t code =
          rv == NGHTTP2_ERR_FLOODED ? NGHTTP2_ENHANCE_YOUR_CALM : NGHTTP2_PROTOCOL_ERROR;
      nghttp2_session_terminate_session(s->session, code);
    }
  }
  H2Flush(conn);
}

// The writer's turn: the older batch goes out once it is whole, and a free batch is framed
// (its file payloads' reads started) while the other is read or sent.
void ConnectionMachine::H2Flush(Connection* conn) {
  H2Session* s = SessionOf(conn);
  if (conn->state != ConnState::kH2) return;
  for (;;) {
    H2Batch* next = s->batch[s->send_next];
    if (!s->sending && next != nullptr && next->state == H2Batch::State::kReady) {
      next->state = H2Batch::State::kSending;
      s->sending = true;
      if (conn->timer.list != &send_timers_) {
        s->progress_mark = s->bytes_sent;
        send_timers_.Arm(&conn->timer, loop_->MonotonicMs());
      }
      if (s->sendfile) {
        next->sent_at = 0;
        next->next_read = 0;
        H2SendPiece(conn, next);
      } else {
        s->iov = iovec{next->buf, next->len};
        loop_->Send(conn->fd, &s->iov, 1, &s->send);
      }
    }
    H2Batch*& fill = s->batch[s->fill];
    if (fill != nullptr && fill->state != H2Batch::State::kFree) break;  // both busy
    if (fill == nullptr) fill = TakeH2Batch(conn);
    if (nghttp2_session_send(s->session) != 0) {  // out of memory, or a callback failed
      ++stats_.h2_connection_errors;
      return Abort(conn);
    }
    if (fill->len == 0) break;  // nothing more to send now
    H2Batch* framed = fill;
    s->fill ^= 1;
    if (framed->read_count == 0 || s->sendfile) {  // no reads: payloads go from their files
      framed->state = H2Batch::State::kReady;
      continue;  // may go out at once, and the other batch be framed
    }
    // File payloads first; OnH2Read makes the batch ready once they are in.
    framed->state = H2Batch::State::kReading;
    framed->reads_in_flight = framed->read_count;
    for (uint32_t i = 0; i < framed->read_count; ++i) {
      const H2Batch::Read& r = framed->reads[i];
      loop_->Read(r.ex->file->fd, framed->buf + r.at, r.length, r.offset, &framed->read_ops[i]);
    }
  }
  if (!H2Busy(conn)) H2Settle(conn);
}

void ConnectionMachine::OnH2Read(io::Completion* c) {
  Connection* conn = static_cast<Connection*>(c->owner);
  ConnectionMachine* self = conn->machine;
  H2Session* s = self->SessionOf(conn);
  H2Batch* b = s->batch[0] != nullptr && c >= s->batch[0]->read_ops &&
                       c < s->batch[0]->read_ops + H2Batch::kMaxReads
                   ? s->batch[0]
                   : s->batch[1];
  H2Batch::Read& r = b->reads[c - b->read_ops];
  // A read may stop short of what it was asked (the loop's contract): the rest is asked for,
  // unless the file ended there (it was truncated) or the read failed.
  if (c->result > 0 && c->result < static_cast<int64_t>(r.length) &&
      conn->state != ConnState::kClosing) {
    const uint32_t got = static_cast<uint32_t>(c->result);
    r.at += got;
    r.length -= got;
    r.offset += got;
    return self->loop_->Read(r.ex->file->fd, b->buf + r.at, r.length, r.offset, c);
  }
  if (c->result != static_cast<int64_t>(r.length)) b->read_failed = true;
  if (--b->reads_in_flight > 0) return;
  b->state = H2Batch::State::kReady;
  if (conn->state == ConnState::kClosing) return self->MaybeFree(conn);
  if (b->read_failed) {
    // The file is shorter than planned (truncated): a frame already framed cannot be kept.
    ++self->stats_.truncated;
    self->LogConnectionError(conn, ErrorLevel::kError, "file was truncated", 0);
    return self->Abort(conn);
  }
  self->H2Flush(conn);  // the batch is whole: it goes out in its turn
}

// The send of batch `b` took its first `taken` bytes: the file payloads among them count for
// their streams (a payload cut part way, the part sent), and the streams closed meanwhile go
// once no batch holds payloads.
void ConnectionMachine::H2CountSent(Connection* conn, H2Batch* b, uint64_t taken) {
  H2Session* s = SessionOf(conn);
  for (uint32_t i = 0; i < b->read_count; ++i) {
    const H2Batch::Read& r = b->reads[i];
    if (taken > r.at) r.ex->bytes_sent += std::min<uint64_t>(r.length, taken - r.at);
  }
  b->read_count = 0;
  if (!s->HoldsPayloads()) {
    while (Exchange* ex = s->closed.front()) H2ReleaseStream(conn, ex);
  }
}

// A batch sent in pieces (H2Session::sendfile): the bytes of `buf` framed before its next file
// payload, that payload's frame header last, with MSG_MORE (the payload follows at once); then
// the payload from its file; after the last payload, the rest of `buf`. One piece at a time on
// the connection's one send Completion, so they leave in the order they were framed.
void ConnectionMachine::H2SendPiece(Connection* conn, H2Batch* b) {
  H2Session* s = SessionOf(conn);
  const bool payload_next = b->next_read < b->read_count;
  const uint32_t upto = payload_next ? b->reads[b->next_read].at : b->len;
  RINGD_ASSERT(b->sent_at <= upto);
  if (b->sent_at < upto) {
    b->sending_file = false;
    s->iov = iovec{b->buf + b->sent_at, upto - b->sent_at};
    return loop_->Send(conn->fd, &s->iov, 1, &s->send, payload_next);
  }
  RINGD_ASSERT(payload_next);  // a payload follows its frame header: `buf` is never empty before it
  const H2Batch::Read& r = b->reads[b->next_read];
  b->sending_file = true;
  loop_->SendFile(conn->fd, r.ex->file->fd, r.offset, r.length, &s->send);
}

// A piece of a batch sent in pieces went out (or failed: `taken` is how far it got): a payload's
// bytes count for its stream as they leave. True when the batch is over: every piece out, or
// this one failed or stopped short (a truncated file: `*truncated`).
bool ConnectionMachine::H2PieceSent(H2Batch* b, const io::Completion* c, uint64_t taken,
                                    bool* truncated) {
  if (b->sending_file) {
    const H2Batch::Read& r = b->reads[b->next_read++];
    r.ex->bytes_sent += taken;
    if (c->result >= 0 && taken < r.length) *truncated = true;
  } else {
    b->sent_at += static_cast<uint32_t>(taken);
  }
  return c->result < 0 || *truncated || (b->next_read == b->read_count && b->sent_at == b->len);
}

void ConnectionMachine::OnH2Send(io::Completion* c) {
  Connection* conn = static_cast<Connection*>(c->owner);
  ConnectionMachine* self = conn->machine;
  H2Session* s = self->SessionOf(conn);
  s->sending = false;
  H2Batch* sent = s->batch[s->send_next];
  const uint64_t taken = c->result >= 0 ? static_cast<uint64_t>(c->result) : c->done;
  bool truncated = false;
  if (s->sendfile) {
    const bool over = self->H2PieceSent(sent, c, taken, &truncated);
    if (!over && conn->state != ConnState::kClosing) {  // the batch's next piece
      s->bytes_sent += taken;
      if (taken > 0) s->stalled = false;
      s->sending = true;
      return self->H2SendPiece(conn, sent);
    }
    self->H2CountSent(conn, sent, 0);  // its payloads counted piece by piece
  } else {
    self->H2CountSent(conn, sent, taken);
  }
  sent->state = H2Batch::State::kFree;
  sent->len = 0;
  s->send_next ^= 1;
  if (conn->state == ConnState::kClosing) return self->MaybeFree(conn);
  if (c->result < 0) {
    ++self->stats_.send_errors;
    self->LogConnectionError(conn, ErrorLevel::kInfo, "send() failed",
                             static_cast<int>(-c->result));
    return self->Abort(conn);
  }
  if (truncated) {
    // The file is shorter than planned (truncated): its frame header said more.
    ++self->stats_.truncated;
    self->LogConnectionError(conn, ErrorLevel::kError, "file was truncated", 0);
    return self->Abort(conn);
  }
  s->bytes_sent += static_cast<uint64_t>(c->result);
  if (c->result > 0) s->stalled = false;
  // Streams that waited for room in a batch go on.
  for (Exchange* ex = s->streams.front(); ex != nullptr; ex = s->streams.Next(ex)) {
    if (ex->h2_deferred) {
      ex->h2_deferred = false;
      nghttp2_session_resume_data(s->session, ex->stream_id);
    }
  }
  self->H2Flush(conn);
}

// Nothing is in flight and nothing is queued: the connection closes, waits for its next stream
// (idle), or waits on its streams (files, flow control, request bodies) under the send timer.
void ConnectionMachine::H2Settle(Connection* conn) {
  H2Session* s = SessionOf(conn);
  if ((draining_ || s->goaway_asked) && !s->goaway) return H2GoAway(conn);
  const bool over =
      nghttp2_session_want_read(s->session) == 0 && nghttp2_session_want_write(s->session) == 0;
  // The client finished sending: the connection ends once its streams are done, or at once
  // when what they wait for can only come from the client (not at the send timeout, nor, in a
  // drain, at --shutdown-timeout-ms).
  if (s->failed || (conn->peer_closed && (s->stream_count == 0 || OnlyThePeerCanMove(s)))) {
    return Abort(conn);
  }
  if (over) {
    // GOAWAY is out and every stream is done: FIN, then read and drop until the client closes,
    // so that bytes it still sends cannot turn the close into a reset that destroys the last
    // frames (HTTP/1.1's lingering close).
    H2Free(conn);
    loop_->Shutdown(conn->fd, SHUT_WR);
    SetState(conn, ConnState::kLingering);
    linger_timers_.Arm(&conn->timer, loop_->MonotonicMs());
    return;
  }
  if (s->stream_count == 0) {
    for (H2Batch*& b : s->batch) {  // an idle connection holds no buffer
      if (b != nullptr) PutH2Batch(b);
      b = nullptr;
    }
    if (s->frame_buf != nullptr && s->quiet.list == nullptr) {
      h2_quiet_timers_.Arm(&s->quiet, loop_->MonotonicMs());
    }
    if (conn->timer.list != &idle_timers_) {
      idle_timers_.Arm(&conn->timer, loop_->MonotonicMs());
      host_->RoomMayHaveChanged();  // it can give way to a newcomer now
    }
  } else {
    h2_quiet_timers_.Disarm(&s->quiet);
    if (!s->stalled) H2CountStall(conn);
    if (conn->timer.list != &send_timers_) {
      s->progress_mark = s->bytes_sent;
      send_timers_.Arm(&conn->timer, loop_->MonotonicMs());
    }
  }
}

// A connection with no stream for kH2QuietMs hands its frame buffer's pages back: nghttp2 has
// nothing framed and unsent (checked again here), so the buffer's bytes are dead, and the next
// frame it writes finds zeroed pages.
void ConnectionMachine::H2Quiet(TimerNode* t) {
  H2Session* s =
      reinterpret_cast<H2Session*>(reinterpret_cast<char*>(t) - offsetof(H2Session, quiet));
  RINGD_ASSERT(s->frame_buf != nullptr && SessionOf(s->conn) == s);
  if (s->stream_count != 0 || s->sending || nghttp2_session_want_write(s->session) != 0) return;
  H2Memory::Quiet(s->frame_buf);
  ++stats_.h2_frame_buffers_released;
}

// Streams are open and nothing is queued: if one has body bytes that nghttp2 holds back (not
// waiting for a file or for room in a batch), the client's window is shut. Counted once until
// bytes go out again, by the window that holds it (the connection's first).
void ConnectionMachine::H2CountStall(Connection* conn) {
  H2Session* s = SessionOf(conn);
  for (const Exchange* ex = s->streams.front(); ex != nullptr; ex = s->streams.Next(ex)) {
    if (ex->head_len == 0 || ex->h2_waiting || ex->h2_deferred || BodyDone(ex)) continue;
    s->stalled = true;
    if (nghttp2_session_get_remote_window_size(s->session) <= 0) {
      ++stats_.h2_stalls_connection_window;
    } else {
      ++stats_.h2_stalls_stream_window;
    }
    return;
  }
}

// GOAWAY naming the last stream taken: those finish, newer ones are refused by nghttp2, and the
// connection closes once they are done (the drain, an idle timeout, giving way to a newcomer).
void ConnectionMachine::H2GoAway(Connection* conn) {
  H2Session* s = SessionOf(conn);
  if (conn->state != ConnState::kH2 || s->goaway) return;
  s->goaway = true;
  nghttp2_submit_goaway(s->session, NGHTTP2_FLAG_NONE,
                        nghttp2_session_get_last_proc_stream_id(s->session), NGHTTP2_NO_ERROR,
                        nullptr, 0);
  H2Flush(conn);
}

void ConnectionMachine::H2PlanStream(Connection* conn, Exchange* ex) {
  std::string_view values[http::kH2FieldCount];
  for (size_t i = 0; i < http::kH2FieldCount; ++i) values[i] = View(ex->h2_fields[i]);
  http::Header regular[http::kH2FieldCount];
  http::Request req;
  const int refused = ex->h2_refused ? 431 : http::BuildH2Request(values, regular, &req);
  H2Session* s = SessionOf(conn);
  if (refused == 400) {
    // A malformed request is a stream error (RFC 9113 section 8.1.1), not a response.
    ++stats_.h2_malformed;
    nghttp2_submit_rst_stream(s->session, NGHTTP2_FLAG_NONE, ex->stream_id, NGHTTP2_PROTOCOL_ERROR);
    return;
  }
  if (ex->lookups == 0 && !ex->h2_waiting) {  // a new request
    ++stats_.requests;
    ++stats_.h2_streams;
    BeginExchange(ex, {}, refused == 0 ? &req : nullptr);
  }
  ex->h2_waiting = false;
  if (refused != 0) {
    http::PlanError(refused, true, &ex->plan);
    return H2StartResponse(conn, ex);
  }
  if (!PlanExchange(conn, ex, req)) {
    ex->h2_waiting = true;
    return;
  }
  // --unknown-site=close: GOAWAY after the 421 (H2Settle), so that its frames go first.
  if (ex->plan.reason == kNoSiteClose) SessionOf(conn)->goaway_asked = true;
  H2StartResponse(conn, ex);
}

void ConnectionMachine::OnStreamFileReady(FileWaiter* w) {
  Exchange* ex =
      reinterpret_cast<Exchange*>(reinterpret_cast<char*>(w) - offsetof(Exchange, waiter));
  Connection* conn = ex->conn;
  ConnectionMachine* self = conn->machine;
  // Abort and a stream's close forget the waiter.
  RINGD_ASSERT(conn->state == ConnState::kH2 && ex->h2_waiting);
  self->H2PlanStream(conn, ex);
  self->H2Flush(conn);
}

// The lister made another piece of a listing a stream sends: the stream goes on, if it waited.
void ConnectionMachine::OnStreamListingMore(void* arg) {
  Exchange* ex = static_cast<Exchange*>(arg);
  Connection* conn = ex->conn;
  if (conn->state != ConnState::kH2 || ex->h2_closed || !ex->h2_listing_wait) return;
  ex->h2_listing_wait = false;
  ConnectionMachine* self = conn->machine;
  nghttp2_session_resume_data(self->SessionOf(conn)->session, ex->stream_id);
  self->H2Flush(conn);
}

void ConnectionMachine::H2StartResponse(Connection* conn, Exchange* ex) {
  http::ResponsePlan& plan = ex->plan;
  plan.keep_alive = true;  // a stream's end is not the connection's: no Connection field
  size_t n = WriteHead(ex);
  http::H2ResponseField fields[http::kMaxH2ResponseFields];
  size_t count = http::H2ResponseFields(ex->head, n, fields, http::kMaxH2ResponseFields);
  if (count == 0) {  // more fields than a HEADERS frame of ours carries: 500, as a long head
    if (ex->file != nullptr) FilesOf(ex).Unpin(ex->file);
    ex->file = nullptr;
    http::PlanError(500, true, &plan);
    if (ex->head_request) plan.send_body = false;
    n = WriteHead(ex);
    count = http::H2ResponseFields(ex->head, n, fields, http::kMaxH2ResponseFields);
    RINGD_ASSERT(count > 0);
  }
  nghttp2_nv nv[http::kMaxH2ResponseFields];
  for (size_t i = 0; i < count; ++i) {
    nv[i] = nghttp2_nv{reinterpret_cast<uint8_t*>(const_cast<char*>(fields[i].name.data())),
                       reinterpret_cast<uint8_t*>(const_cast<char*>(fields[i].value.data())),
                       fields[i].name.size(), fields[i].value.size(), NGHTTP2_NV_FLAG_NONE};
  }
  ex->head_len = 1;  // begun; the HEADERS frame's size replaces it once sent (OnFrameSend)
  // The body, piece by piece (TakePiece): memory (an error page, a cached file or its range)
  // or file slices, multipart part heads and tail between them.
  ex->iov[0] = iovec{nullptr, 0};
  ex->phase = Exchange::Phase::kDone;
  ex->part = 0;
  const bool body = plan.send_body && (plan.content_length > 0 || plan.streamed_body);
  if (body) {
    if (plan.streamed_body) {
      RINGD_ASSERT(ex->listing != nullptr);  // the one body streamed: a listing's
      ex->phase = Exchange::Phase::kListing;
      ex->h2_listing_piece = ex->h2_listing_wait = false;
      lister_->Follow(ex->listing, &ConnectionMachine::OnStreamListingMore, ex);
    } else if (!plan.inline_body.empty()) {
      ex->iov[0] = iovec{const_cast<char*>(plan.inline_body.data()), plan.inline_body.size()};
    } else if (plan.multipart) {
      ex->phase = Exchange::Phase::kPartHead;
    } else {
      const auto [first, length] = http::BodySlice(plan);
      RINGD_ASSERT(ex->file != nullptr);  // a plan with a file body pinned it
      if (ex->file->content != nullptr) {
        ex->iov[0] = iovec{ex->file->content + first, length};
      } else {
        ex->phase = Exchange::Phase::kSlice;
        ex->body_offset = first;
        ex->body_left = length;
      }
    }
  }
  nghttp2_data_provider provider;
  provider.source.ptr = ex;
  provider.read_callback = &H2Callbacks::ReadBody;
  H2Session* s = SessionOf(conn);
  const int rv =
      nghttp2_submit_response(s->session, ex->stream_id, nv, count, body ? &provider : nullptr);
  RINGD_ASSERT_MSG(rv == 0, "nghttp2_submit_response: %s", nghttp2_strerror(rv));
  // nghttp2 has copied the fields, which view the head buffer: a multipart body's first part
  // head may go there now.
  if (body) NextPiece(ex);
  // Planning is over: the fields it read are no longer needed.
  for (nghttp2_rcbuf*& f : ex->h2_fields) {
    if (f != nullptr) nghttp2_rcbuf_decref(f);
    f = nullptr;
  }
}

// The one release path for a stream's exchange: its waiter, log line, file pin and fields.
void ConnectionMachine::H2ReleaseStream(Connection* conn, Exchange* ex) {
  H2Session* s = SessionOf(conn);
  StopWaiting(ex);
  EndExchange(conn, ex);
  if (ex->file != nullptr) FilesOf(ex).Unpin(ex->file);
  ex->file = nullptr;
  ReleaseListing(ex);
  ReleaseVariant(ex);
  LeaveSite(ex);
  for (nghttp2_rcbuf*& f : ex->h2_fields) {
    if (f != nullptr) nghttp2_rcbuf_decref(f);
    f = nullptr;
  }
  (ex->h2_closed ? s->closed : s->streams).Remove(ex);
  --s->stream_count;
  h2_exchanges_->Put(ex);
}

bool ConnectionMachine::H2Busy(const Connection* conn) {
  if (!conn->h2) return false;
  const H2Session* s = SessionOf(conn);
  if (s->sending) return true;
  for (const H2Batch* b : s->batch) {
    if (b != nullptr && b->reads_in_flight > 0) return true;
  }
  return false;
}

// The connection is ending: no stream waits for a file any more, and a send in flight ends now.
void ConnectionMachine::H2Abort(Connection* conn) {
  H2Session* s = SessionOf(conn);
  if (s == nullptr) return;
  for (Exchange* ex = s->streams.front(); ex != nullptr; ex = s->streams.Next(ex)) StopWaiting(ex);
  if (s->sending) loop_->Shutdown(conn->fd, SHUT_RDWR);
}

// The session goes, with every stream it still has (their lines logged as cut short).
void ConnectionMachine::H2Free(Connection* conn) {
  if (!conn->h2) return;
  H2Session*& slot = SessionOf(conn);
  H2Session* s = slot;
  if (s == nullptr) return;
  RINGD_ASSERT(!H2Busy(conn));
  for (H2Batch* b : s->batch) {  // never sent: the connection ended before their send
    if (b != nullptr) b->read_count = 0;
  }
  while (Exchange* ex = s->closed.front()) H2ReleaseStream(conn, ex);
  while (Exchange* ex = s->streams.front()) H2ReleaseStream(conn, ex);
  h2_quiet_timers_.Disarm(&s->quiet);
  nghttp2_session_del(s->session);
  for (H2Batch* b : s->batch) {
    if (b != nullptr) PutH2Batch(b);
  }
  delete s;
  slot = nullptr;
  conn->h2 = false;
}

// The send timer of an h2 connection: it stands while streams are open. Cut only when nothing
// has moved for --send-timeout-ms (a client that keeps its window shut, or stopped reading).
void ConnectionMachine::H2ExpireSendTimer(Connection* conn) {
  H2Session* s = SessionOf(conn);
  const uint64_t moved = s->bytes_sent + (s->sending ? s->send.done : 0);
  if (moved > s->progress_mark) {
    s->progress_mark = moved;
    return send_timers_.Arm(&conn->timer, loop_->MonotonicMs());
  }
  // A stream waiting for the lister (its status or its next piece) waits on the shard, not on
  // the client: another period, as over HTTP/1.1.
  for (const Exchange* ex = s->streams.front(); ex != nullptr; ex = s->streams.Next(ex)) {
    if (ex->h2_listing_wait || (ex->listing != nullptr && lister_->Waiting(ex->listing))) {
      return send_timers_.Arm(&conn->timer, loop_->MonotonicMs());
    }
  }
  ++stats_.send_timeouts;
  Abort(conn);
}

// Batches go back to a short list of spares rather than to the allocator: a connection whose
// streams come in bursts takes one or two per burst, and the spares' pages stay touched.
H2Batch* ConnectionMachine::TakeH2Batch(Connection* conn) {
  H2Batch* b;
  if (h2_spare_batches_.empty()) {
    b = new H2Batch;
  } else {
    b = h2_spare_batches_.back();
    h2_spare_batches_.pop_back();
  }
  RINGD_ASSERT(b->state == H2Batch::State::kFree && b->len == 0 && b->read_count == 0 &&
               b->reads_in_flight == 0);
  b->read_failed = false;
  for (io::Completion& c : b->read_ops) {
    c.owner = conn;
    c.callback = &ConnectionMachine::OnH2Read;
  }
  return b;
}

void ConnectionMachine::PutH2Batch(H2Batch* b) {
  RINGD_ASSERT(b->reads_in_flight == 0);
  b->state = H2Batch::State::kFree;
  b->len = 0;
  b->read_count = 0;
  if (h2_spare_batches_.size() < kH2SpareBatches) {
    h2_spare_batches_.push_back(b);
  } else {
    delete b;
  }
}

void ConnectionMachine::MakeH2Callbacks() {
  nghttp2_session_callbacks* cb;
  RINGD_ASSERT(nghttp2_session_callbacks_new(&cb) == 0);
  nghttp2_session_callbacks_set_on_begin_headers_callback(cb, &H2Callbacks::OnBeginHeaders);
  nghttp2_session_callbacks_set_on_header_callback2(cb, &H2Callbacks::OnHeader);
  nghttp2_session_callbacks_set_on_frame_recv_callback(cb, &H2Callbacks::OnFrameRecv);
  nghttp2_session_callbacks_set_on_frame_send_callback(cb, &H2Callbacks::OnFrameSend);
  nghttp2_session_callbacks_set_on_stream_close_callback(cb, &H2Callbacks::OnStreamClose);
  nghttp2_session_callbacks_set_send_callback(cb, &H2Callbacks::Send);
  nghttp2_session_callbacks_set_send_data_callback(cb, &H2Callbacks::SendData);
  h2_callbacks_ = cb;
  h2_spare_batches_.reserve(kH2SpareBatches);
  nghttp2_option* opt;
  RINGD_ASSERT(nghttp2_option_new(&opt) == 0);
  // The preface was matched before the session began (H2Preface) and is fed to it whole.
  // Priorities are RFC 9218's; RFC 7540's trees are ignored.
  nghttp2_option_set_server_fallback_rfc7540_priorities(opt, 0);
  h2_options_ = opt;
}

void ConnectionMachine::FreeH2Callbacks() {
  if (h2_callbacks_ != nullptr) nghttp2_session_callbacks_del(h2_callbacks_);
  if (h2_options_ != nullptr) nghttp2_option_del(h2_options_);
  for (H2Batch* b : h2_spare_batches_) delete b;
}

}  // namespace ringd
