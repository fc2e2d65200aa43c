// Sending a response after its head: the file body chunk by chunk through the shard's send
// queue (send_queue.h), multipart part heads and tail, and the completion that drives the next
// piece. The request side of the state machine is connection.cc.
//
//   StartResponse (connection.cc) -> OnSend -> SendNext -> Admit: StartBodyChunk, or wait
//   -> PumpSends (a slot came back, or the aging bound) -> ... -> FinishResponse
#include <algorithm>
#include <cstddef>
#include <cstring>

#include "io/assert.h"
#include "server/core/connection.h"

namespace ringd {
namespace {

// The send budget per SendFile call: each completion is progress, which re-arms the send
// timer, and a slow client cannot hold a pipe for long. With --send-order=srpt a chunk that holds
// a send slot is a quarter of that, and the queue chooses again after each, so that a shorter
// response waits for less (one loop turn's worth at --send-turn-bytes 256 KiB).
constexpr uint64_t kFileChunk = 1 << 20;
constexpr uint64_t kSlotChunk = 256 << 10;

}  // namespace

void ConnectionMachine::OnSend(io::Completion* c) {
  Connection* conn = static_cast<Connection*>(c->owner);
  ConnectionMachine* self = conn->machine;
  // A body chunk that held a send slot gives it back; once this connection has had its turn
  // (its next chunk queued or started, or the response over), the queue starts whoever is next.
  const bool held_slot = conn->ex->ticket.holds_slot;
  self->sends_->Done(&conn->ex->ticket, self->loop_->MonotonicMs());
  self->Sent(conn, c);
  if (held_slot) self->PumpSends();
}

void ConnectionMachine::Sent(Connection* conn, io::Completion* c) {
  Exchange* ex = conn->ex;
  const Exchange::Sending sent = ex->sending;  // the send that ended
  ex->sending = Exchange::Sending::kNone;
  // What the kernel took counts ($body_bytes_sent), whether the send completed or was cut (an
  // abort, a reset, an error): `done` is how far a failed send got (loop.h).
  ex->bytes_sent += c->result >= 0 ? static_cast<uint64_t>(c->result) : c->done;
  if (conn->state == ConnState::kClosing) return MaybeFree(conn);
  if (c->result < 0) {  // reset by the peer, or an error of the socket or the file
    ++stats_.send_errors;
    LogConnectionError(conn, ErrorLevel::kInfo, "send() failed", static_cast<int>(-c->result));
    return Abort(conn);
  }
  if (sent == Exchange::Sending::kFile) {
    const uint64_t asked = ex->chunk;
    if (static_cast<uint64_t>(c->result) < asked) {
      // The file is shorter than when we planned: it was truncated. Content-Length cannot be
      // kept, so the connection ends here.
      ++stats_.truncated;
      LogConnectionError(conn, ErrorLevel::kError, "file was truncated", 0,
                         ex->file != nullptr ? std::string_view(ex->file->path) : "");
      return Abort(conn);
    }
    ex->body_offset += asked;
    ex->body_left -= asked;
  }
  ArmSendTimer(conn);  // progress
  SendNext(conn);
}

// A chunk that holds a slot is short, so that the queue chooses again soon; one that needs no
// slot (its client or the disk is slow) is long, so that fewer, larger reads are in flight.
uint64_t ConnectionMachine::ChunkBytes(const Connection* conn) const {
  return config_.send_srpt && !conn->ex->ticket.slow ? kSlotChunk : kFileChunk;
}

// The next chunk of a file body, once the send queue has let it go.
void ConnectionMachine::StartBodyChunk(Connection* conn) {
  Exchange* ex = conn->ex;
  RINGD_ASSERT(conn->state == ConnState::kSending && ex != nullptr &&
               ex->phase == Exchange::Phase::kSlice && ex->body_left > 0 &&
               ex->sending == Exchange::Sending::kNone);
  ex->chunk = std::min(ex->body_left, ChunkBytes(conn));
  SendFileChunk(conn, ex->body_offset, ex->chunk);
}

// Starts every queued body chunk the send queue lets go now: a freed slot's next holder, and
// any that reached the aging bound. Never runs a callback (starting a send only submits it).
void ConnectionMachine::PumpSends() {
  const int64_t now_ms = loop_->MonotonicMs();  // now_ms_ is stale after a Poll that slept
  while (SendTicket* t = sends_->Next(now_ms)) {
    StartBodyChunk(
        reinterpret_cast<Exchange*>(reinterpret_cast<char*>(t) - offsetof(Exchange, ticket))->conn);
  }
}

// Sends the next piece of a response whose body is not a single in-memory send.
void ConnectionMachine::SendNext(Connection* conn) {
  Exchange* ex = conn->ex;
  const http::ResponsePlan& plan = ex->plan;
  switch (ex->phase) {
    case Exchange::Phase::kSlice:
      if (ex->body_left > 0) {
        if (ex->file->content != nullptr) {
          ex->iov[0] = iovec{ex->file->content + ex->body_offset, ex->body_left};
          ex->body_left = 0;
          return SendBuffers(conn, 1);
        }
        // A file body goes through the send queue: it starts now, or waits (least remaining
        // response bytes first) for a slot or the aging bound.
        const uint64_t total = ex->head_len + (plan.send_body ? plan.content_length : 0);
        const uint64_t remaining = total > ex->bytes_sent ? total - ex->bytes_sent : 0;
        // (The loop's clock, not the turn's: a Poll that slept has made now_ms_ stale, and a
        // stale queueing time would age this send early.)
        if (sends_->Admit(&ex->ticket, remaining, loop_->MonotonicMs())) {
          return StartBodyChunk(conn);
        }
        return PumpSends();  // the slot this connection just gave back may be its own again
      }
      if (!plan.multipart) break;
      ++ex->part;
      ex->phase =
          ex->part < plan.ranges.count ? Exchange::Phase::kPartHead : Exchange::Phase::kTail;
      return SendNext(conn);
    case Exchange::Phase::kPartHead: {
      http::MultipartLayout layout(plan.ranges, plan.content_type, plan.file.size,
                                   plan.multipart_boundary);
      const size_t n = layout.PartHead(ex->part, ex->head);
      ex->iov[0] = iovec{ex->head, n};
      ex->phase = Exchange::Phase::kSlice;
      ex->body_offset = plan.ranges.ranges[ex->part].first;
      ex->body_left = plan.ranges.ranges[ex->part].Length();
      return SendBuffers(conn, 1, BodyFollowsAtOnce(conn));  // the part head and its body
    }
    case Exchange::Phase::kTail: {
      http::MultipartLayout layout(plan.ranges, plan.content_type, plan.file.size,
                                   plan.multipart_boundary);
      ex->iov[0] = iovec{ex->head, layout.Tail(ex->head)};
      ex->phase = Exchange::Phase::kDone;
      return SendBuffers(conn, 1);
    }
    case Exchange::Phase::kListing:
      return SendListingPiece(conn);
    case Exchange::Phase::kDone:
      break;
  }
  FinishResponse(conn);
}

// A listing's body (--autoindex): each piece the lister has made, as an HTTP/1.1 chunk (its size
// line in the room before it, its CRLF after; the last chunk behind the last piece), or as it
// is for HTTP/1.0 (the close ends the body). The piece goes back to the lister once sent; when
// the next is not made yet, the lister's wake-up (OnListingMore) sends it. So the listing's
// bytes in ringd are the lister's ring, however slowly the client reads.
void ConnectionMachine::SendListingPiece(Connection* conn) {
  Exchange* ex = conn->ex;
  DirListing* l = ex->listing;
  RINGD_ASSERT(ex->phase == Exchange::Phase::kListing && ex->sending == Exchange::Sending::kNone &&
               !ex->listing_wait);
  if (ex->listing_piece_out) {
    ex->listing_piece_out = false;
    lister_->Consume(l);
  }
  static constexpr std::string_view kLastChunk = "0\r\n\r\n";
  const bool chunked = !ex->plan.http10;
  const ListingPiece piece = lister_->Next(l);
  if (piece.len == 0) {
    if (!lister_->Ended(l)) {
      ex->listing_wait = true;
      return;
    }
    // Its last piece went out before the lister said it was the last.
    ex->phase = Exchange::Phase::kDone;
    if (!chunked) return SendNext(conn);
    ex->iov[0] = iovec{const_cast<char*>(kLastChunk.data()), kLastChunk.size()};
    return SendBuffers(conn, 1);
  }
  char* begin = piece.data;
  size_t len = piece.len;
  if (chunked) {
    char line[DirLister::kPieceFront];
    size_t n = 0;
    for (size_t v = len; v != 0; v >>= 4) line[n++] = "0123456789abcdef"[v & 15];
    begin -= n + 2;
    for (size_t i = 0; i < n; ++i) begin[i] = line[n - 1 - i];
    std::memcpy(begin + n, "\r\n", 2);
    std::memcpy(piece.data + piece.len, "\r\n", 2);
    len += n + 4;
    if (piece.last) {
      std::memcpy(piece.data + piece.len + 2, kLastChunk.data(), kLastChunk.size());
      len += kLastChunk.size();
    }
    static_assert(DirLister::kPieceBytes < (uint64_t{1} << 32) && DirLister::kPieceFront >= 8 + 2 &&
                  DirLister::kPieceBack >= 2 + 5);
  }
  // The last piece is not handed back: the response ends with it, and releases the listing.
  if (piece.last) {
    ex->phase = Exchange::Phase::kDone;
  } else {
    ex->listing_piece_out = true;
  }
  ex->iov[0] = iovec{begin, len};
  SendBuffers(conn, 1);
}

// The lister made another piece of a listing this connection sends: it goes out now, unless a
// send is in flight (its completion takes it).
void ConnectionMachine::OnListingMore(void* arg) {
  Connection* conn = static_cast<Connection*>(arg);
  Exchange* ex = conn->ex;
  if (conn->state != ConnState::kSending || ex == nullptr || !ex->listing_wait) return;
  ex->listing_wait = false;
  conn->machine->SendListingPiece(conn);
}

}  // namespace ringd
