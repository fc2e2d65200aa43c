// The per-connection request/response state machine: the same code drives every io backend.
//
//   recv bytes -> input buffer -> parse -> plan (file cache; may wait) -> head + body sends
//   -> next pipelined request, or idle (no buffer held), or graceful close.
#include "server/core/connection.h"

#include <sys/socket.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "io/assert.h"
#include "server/http/proxy_protocol.h"

namespace ringd {
namespace {

Connection* ConnOf(FileWaiter* w) {
  return reinterpret_cast<Exchange*>(reinterpret_cast<char*>(w) - offsetof(Exchange, waiter))->conn;
}

// File lookups one request may wait for (the path, its index file, a precompressed sibling, ...)
// before it is answered 503: a bound on re-planning, whatever the cache does.
constexpr uint32_t kMaxLookupsPerRequest = 8;

// Whether any of the plan's views points into the planner's scratch (Exchange::plan).
bool ViewsScratch(const http::ResponsePlan& plan, const http::PlanScratch& scratch) {
  const uintptr_t begin = reinterpret_cast<uintptr_t>(&scratch);
  for (std::string_view v : {plan.file_path, plan.etag, plan.last_modified, plan.location}) {
    if (reinterpret_cast<uintptr_t>(v.data()) - begin < sizeof scratch) return true;
  }
  return false;
}

}  // namespace

void ConnectionMachine::ArmRecv(Connection* conn) {
  conn->recv_active = true;
  conn->recv_paused = false;
  conn->recv_ending = false;
  loop_->Recv(conn->fd, &conn->recv);
}

// Backpressure, in one place. While a response is in flight (or being planned) the input buffer
// keeps what arrives; once another delivery might not fit, the receive pauses and the kernel's
// socket buffer holds the rest. A paused receive delivers nothing, so no byte is ever dropped
// (PauseRecv's contract), and reading resumes as soon as there is room again.
void ConnectionMachine::UpdateRecv(Connection* conn) {
  if (!conn->recv_active || conn->recv_ending || conn->state == ConnState::kClosing ||
      conn->state == ConnState::kEndingRecv || conn->state == ConnState::kLingering) {
    return;
  }
  // The last response is in flight, whole, to a client that asked to close and sent nothing
  // after its request: there is nothing more to read, so the receive ends now, beside the send,
  // rather than from Abort once the send is done. The send's completion and the receive's last
  // one then come back in the same turn of the loop and the connection closes a turn sooner, with
  // one io_uring_enter fewer (docs/PERFORMANCE.md, "The receive ends with the last request").
  if (conn->state == ConnState::kSending && conn->wants_close &&
      conn->ex->phase == Exchange::Phase::kDone && !ClientMaySend(conn)) {
    ++stats_.recv_ended_early;
    conn->recv_ending = true;
    return loop_->Cancel(&conn->recv);
  }
  const bool busy = conn->state == ConnState::kSending || conn->state == ConnState::kWaitingFile;
  const bool pause = busy && conn->in_len + config_.recv_buffer_size > input_pool_->buffer_size();
  if (pause && !conn->recv_paused) {
    conn->recv_paused = true;
    loop_->PauseRecv(&conn->recv);
  } else if (!pause && conn->recv_paused) {
    conn->recv_paused = false;
    loop_->ResumeRecv(&conn->recv);
  }
}

// Between requests: no buffer held, and a deadline for the next one (or for the rest of a body
// being skipped, which gets a short one of its own).
void ConnectionMachine::WaitForRequest(Connection* conn) {
  if (conn->peer_closed) return Abort(conn);
  (conn->discard > 0 ? discard_timers_ : idle_timers_).Arm(&conn->timer, loop_->MonotonicMs());
  host_->RoomMayHaveChanged();  // an idle connection can give way to a newcomer now
}

void ConnectionMachine::OnRecv(io::Completion* c) {
  Connection* conn = static_cast<Connection*>(c->owner);
  ConnectionMachine* self = conn->machine;
  if (!c->more) conn->recv_active = false;
  // A cancelled receive that leaves bytes unread in the socket: the client is still sending, so
  // a connection closing after its last response lingers rather than close on them (a reset).
  // Otherwise it ended like any cancelled receive.
  int64_t result = c->result;
  // A TLS listener's PROXY header has named the client by the first plaintext that comes.
  if (self->conn_counted_ != nullptr && self->conn_counted_[self->conns_->IndexOf(conn)] == 2 &&
      result > 0) {
    self->conn_counted_[self->conns_->IndexOf(conn)] = 0;
    if (!self->CountConnection(conn, self->ConnClient(conn))) return self->Abort(conn);
  }
  if (result == io::kRecvCancelledWithInput) {
    conn->more_input_expected = true;
    result = -ECANCELED;
  }
  if (result > 0) {
    self->Received(conn, c->data, static_cast<size_t>(result));
  } else if (result == 0) {
    // The client finished sending. A response in flight (or being planned) still goes out;
    // an incomplete head can never complete.
    conn->peer_closed = true;
    if (conn->state == ConnState::kReading || conn->state == ConnState::kLingering) {
      return self->Abort(conn);
    }
    // HTTP/2: streams in flight finish, then the connection closes (H2Settle).
    if (conn->state == ConnState::kH2) {
      if (!self->H2Busy(conn)) self->H2Settle(conn);
      return;
    }
  } else if (result != -ECANCELED && conn->state != ConnState::kClosing) {
    // Plaintext HTTP on a TLS port (the TLS loop ended the receive): answered as nginx does, in
    // plaintext, and logged and counted as any response.
    if (result == -EPROTO && conn->state == ConnState::kReading && conn->ex == nullptr) {
      const std::string_view plain = self->loop_->Transport(conn->fd).plain_http_request;
      if (!plain.empty()) return self->RespondError(conn, http::kPlainHttpToHttps, plain);
    }
    // A reset or other socket error; or the TLS loop refused the PROXY protocol header before
    // TLS (ECONNREFUSED: counted there, as ringd_proxy_refused_total or clients denied).
    if (result != -ECONNREFUSED) {
      ++self->stats_.recv_errors;
      if (result == -EPROTO) {  // the TLS loop's word for bad input
        const bool handshaken = !self->loop_->Transport(conn->fd).protocol.empty();
        self->LogConnectionError(conn, ErrorLevel::kInfo,
                                 handshaken ? "bad TLS record" : "TLS handshake failed", 0);
      } else {
        self->LogConnectionError(conn, ErrorLevel::kInfo, "recv() failed",
                                 static_cast<int>(-result));
      }
    }
    return self->Abort(conn);
  }
  // Closing already (Abort cancelled this receive, and it ended with the cancellation, or with the
  // reset that raced it): this was the callback the connection waited for.
  if (conn->state == ConnState::kClosing) return self->MaybeFree(conn);
  // The last response is out and CloseGracefully waited for this, the receive's last word: it
  // now knows whether the client sent more after all (more_input_expected, or end of stream) and
  // closes or lingers.
  if (!c->more && conn->state == ConnState::kEndingRecv) return self->CloseGracefully(conn);
  // Lingering on a receive that UpdateRecv ended with the last request (its last callback the
  // cancellation, or bytes the kernel had received before it): a lingering connection reads
  // until the client closes, so it reads again.
  if (conn->state == ConnState::kLingering && !c->more && (result == -ECANCELED || result > 0)) {
    ++self->stats_.recv_rearmed_to_linger;
    return self->ArmRecv(conn);
  }
  // Otherwise the receive ended with the cancellation of a pause (the loop keeps those to
  // itself) or with end of stream while a response is in flight: nothing more to do here.
}

void ConnectionMachine::Received(Connection* conn, const char* data, size_t n) {
  if (conn->state == ConnState::kClosing || conn->state == ConnState::kLingering) return;
  if (conn->state == ConnState::kEndingRecv) {
    conn->more_input_expected = true;  // after the last response: never answered, linger
    return;
  }
  RINGD_ASSERT(n <= config_.recv_buffer_size);  // the loop's contract: one buffer at most
  if (conn->proxy_header && (!TakeProxyHeader(conn, &data, &n) || n == 0)) return;
  if (conn->state == ConnState::kH2) return H2Received(conn, data, n);
  // A connection's first bytes say its protocol: the HTTP/2 preface, or an HTTP/1.1 request.
  // Until 24 bytes have come, a prefix of the preface waits in the input buffer (its first 18
  // bytes would parse as an HTTP/1.1 head).
  if (conn->requests == 0 && conn->state == ConnState::kReading && conn->discard == 0) {
    switch (H2Preface(conn, data, n)) {
      case Preface::kYes:
        return StartH2(conn, data, n);
      case Preface::kPartial:
        if (conn->in == nullptr && !Stash(conn)) return;
        std::memcpy(conn->in + conn->in_len, data, n);
        conn->in_len += static_cast<uint32_t>(n);
        return;
      case Preface::kNo:
        break;
    }
  }
  if (conn->state == ConnState::kSending && conn->wants_close) {
    // The response in flight is the last: nothing after it will be answered. Drop the bytes
    // (lingering close reads and drops the rest) rather than let them fill the buffer.
    conn->more_input_expected = true;
    return;
  }
  // Skip request body bytes first (a body is never parsed as the next request).
  if (conn->discard > 0) {
    const size_t skip = conn->discard < n ? static_cast<size_t>(conn->discard) : n;
    conn->discard -= skip;
    data += skip;
    n -= skip;
    if (n == 0) {
      // The skipped body is complete: the connection is idle now, on the keep-alive deadline.
      if (conn->discard == 0 && conn->state == ConnState::kReading && conn->in == nullptr)
        WaitForRequest(conn);
      return;
    }
  }
  // The common case: nothing pending, and the bytes hold whole requests. They are parsed and
  // answered straight from the receive buffer; only what is left over (a partial head, pipelined
  // requests behind a response, a request waiting for file metadata) is copied, so most
  // connections never touch an input buffer.
  if (conn->in == nullptr && conn->state == ConnState::kReading)
    return ProcessDirect(conn, data, n);
  if (conn->in == nullptr && !Stash(conn)) return;
  // Always room: while reading, the buffer holds at most a partial head (no more than
  // max_request_head plus the empty lines before it, or the parser has answered 431) and is
  // sized for that plus one delivery; while busy, UpdateRecv paused the receive before another
  // delivery could overflow it. A reading connection that finds no room all the same is
  // answered 431 (it sent a head too large) rather than trusted further.
  if (conn->state == ConnState::kReading && n > input_pool_->buffer_size() - conn->in_len) {
    return RespondError(conn, 431);
  }
  RINGD_ASSERT(n <= input_pool_->buffer_size() - conn->in_len);
  std::memcpy(conn->in + conn->in_len, data, n);
  conn->in_len += static_cast<uint32_t>(n);
  if (conn->state == ConnState::kReading) ProcessInput(conn);
  UpdateRecv(conn);
}

// A ",proxy" listener's connection begins with a PROXY protocol header: it is parsed as it
// comes (a prefix waits in the input buffer, at most kMaxProxyHeader bytes of it, so a header
// split across receives, even byte by byte, reads as one that came whole), then stripped, and the
// rest of the delivery goes on as HTTP. True with *data and *n past the header once it is
// whole; false while it is partial, or when it closed the connection (no header, a malformed
// one, or a client --allow/--deny refuses).
bool ConnectionMachine::TakeProxyHeader(Connection* conn, const char** data, size_t* n) {
  RINGD_ASSERT(conn->state == ConnState::kReading && conn->requests == 0);
  const size_t had = conn->in_len;  // header bytes from earlier receives
  http::ProxyHeader h;
  if (conn->in == nullptr) {
    h = http::ParseProxyHeader(std::string_view(*data, *n));
  } else {
    // Only the header's bytes are needed to judge it: never more than its bound.
    const size_t take = std::min(*n, http::kMaxProxyHeader - had);
    std::memcpy(conn->in + had, *data, take);
    conn->in_len += static_cast<uint32_t>(take);
    h = http::ParseProxyHeader(std::string_view(conn->in, conn->in_len));
  }
  switch (h.status) {
    case http::ProxyStatus::kPartial:
      // Partial means every byte so far is the header's: fewer than its bound.
      RINGD_ASSERT(had + *n < http::kMaxProxyHeader);
      RINGD_ASSERT(input_pool_->buffer_size() >= http::kMaxProxyHeader);
      if (conn->in == nullptr) {
        if (!Stash(conn)) return false;
        std::memcpy(conn->in, *data, *n);
        conn->in_len = static_cast<uint32_t>(*n);
      }
      return false;
    case http::ProxyStatus::kMissing:
      ++stats_.proxy_missing;
      Abort(conn);
      return false;
    case http::ProxyStatus::kMalformed:
      ++stats_.proxy_malformed;
      Abort(conn);
      return false;
    case http::ProxyStatus::kDone:
      break;
  }
  // The header was partial before this delivery, so it ends within it.
  RINGD_ASSERT(h.length > had && h.length - had <= *n);
  *data += h.length - had;
  *n -= h.length - had;
  conn->proxy_header = false;
  if (conn->in != nullptr) {
    conn->in_len = 0;
    ReleaseInputIfEmpty(conn);
  }
  return NoteProxiedClient(conn, h.has_source ? &h.source : nullptr);
}

void ConnectionMachine::ProcessInput(Connection* conn) {
  while (conn->state == ConnState::kReading && conn->in_len > 0) {
    http::Request req;
    const std::string_view buf(conn->in, conn->in_len);
    const http::ParseResult r =
        http::ParseRequest(buf, conn->parsed_len, limits_, headers_, config_.max_headers, &req);
    if (r.status == http::ParseStatus::kNeedMore) {
      conn->parsed_len = conn->in_len;
      if (conn->in_len >= input_pool_->buffer_size())
        return RespondError(conn, 431, std::string_view(conn->in, conn->in_len));
      // The client finished sending (during the response before): the rest of this head will
      // never come, and with the receive over only the header timer would end the wait. As for
      // an incomplete head at end of stream (OnRecv): closed now. Abort may free the connection
      // here (nothing is in flight), and FinishResponse, the caller then, returns at once.
      if (conn->peer_closed) return Abort(conn);
      if (conn->timer.list != &header_timers_)
        header_timers_.Arm(&conn->timer, loop_->MonotonicMs());
      return;
    }
    if (r.status == http::ParseStatus::kError)
      return RespondError(conn, r.error_status, std::string_view(conn->in, conn->in_len));
    ++conn->requests;
    ++stats_.requests;
    if (Plan(conn, req, r.consumed)) return;  // waiting for file metadata: the head stays
    DropHead(conn, r.consumed);
  }
  ReleaseInputIfEmpty(conn);
  if (conn->state == ConnState::kReading && conn->in == nullptr) WaitForRequest(conn);
}

// Takes an input buffer for a connection that has none. It cannot run dry: the pool has one
// buffer per connection. Returns false (the connection is shed) if it did anyway.
bool ConnectionMachine::Stash(Connection* conn) {
  conn->in = input_pool_->Get();
  conn->in_len = 0;
  conn->parsed_len = 0;
  if (conn->in != nullptr) return true;
  ++stats_.overloaded;
  Abort(conn);
  return false;
}

// Parses and answers requests straight from bytes the loop received, copying only leftovers.
void ConnectionMachine::ProcessDirect(Connection* conn, const char* data, size_t n) {
  bool partial = false;
  while (n > 0 && conn->state == ConnState::kReading) {
    http::Request req;
    const http::ParseResult r = http::ParseRequest(std::string_view(data, n), 0, limits_, headers_,
                                                   config_.max_headers, &req);
    if (r.status == http::ParseStatus::kNeedMore) {
      partial = true;
      break;
    }
    if (r.status == http::ParseStatus::kError)
      return RespondError(conn, r.error_status, std::string_view(data, n));
    ++conn->requests;
    ++stats_.requests;
    if (Plan(conn, req, r.consumed)) break;  // waiting for file metadata: keep the head (below)
    data += r.consumed;
    n -= r.consumed;
    const size_t skip = conn->discard < n ? static_cast<size_t>(conn->discard) : n;
    data += skip;
    n -= skip;
    conn->discard -= skip;
  }
  if (n > 0) {
    if (conn->state == ConnState::kClosing) return;
    if (conn->state == ConnState::kSending && conn->wants_close) {
      conn->more_input_expected = true;  // behind the last response: never answered
      return;
    }
    // The leftovers of one delivery always fit: the buffer is at least one delivery larger
    // than the largest head (Setup), so nothing is ever clipped.
    RINGD_ASSERT(n <= input_pool_->buffer_size());
    if (!Stash(conn)) return;
    std::memcpy(conn->in, data, n);
    conn->in_len = static_cast<uint32_t>(n);
    if (partial) ProcessInput(conn);  // arms the header timer, or answers 431
    return UpdateRecv(conn);
  }
  if (conn->state == ConnState::kReading) return WaitForRequest(conn);
  UpdateRecv(conn);  // a response under way: the receive may end with it
}

// Plans a parsed request and starts its response. Returns true when planning must wait for file
// metadata (the caller keeps the request's bytes); false once a response is under way (the
// caller then drops the head and `conn->discard` body bytes).
bool ConnectionMachine::Plan(Connection* conn, const http::Request& req, size_t head_bytes) {
  // The pool holds one exchange per connection, so this cannot fail; if it does, the process
  // stops loudly rather than serving on.
  RINGD_ASSERT_MSG(conn->ex != nullptr || TakeExchange(conn), "exchange pool exhausted");
  Exchange* ex = conn->ex;
  if (ex->lookups == 0) BeginExchange(ex, {}, &req);  // a new request
  conn->client_keep_alive = req.keep_alive;
  ex->input_follows = conn->in_len > head_bytes && conn->in_len - head_bytes > req.content_length;
  if (!PlanExchange(conn, ex, req)) {
    SetState(conn, ConnState::kWaitingFile);
    send_timers_.Arm(&conn->timer, loop_->MonotonicMs());
    return true;
  }
  // Whatever the answer, a refused lookup's 503 too (it closes): a body still on its way is
  // skipped, or lingered on before the close, so that it cannot reset the connection under the
  // response.
  if (req.body == http::BodyFraming::kChunked || req.content_length > ex->plan.discard_body) {
    conn->more_input_expected = true;  // a body we will not read: linger before closing
  }
  conn->discard = ex->plan.discard_body;
  StartResponse(conn, ex);
  return false;
}

int ConnectionMachine::ChooseSite(const Connection* conn, const http::Request& req) const {
  char buf[http::kMaxHostName + 1];
  const int site =
      sites_->table.Match(http::NormalizeHost(http::RequestHost(req.host, req.target), buf));
  // Over TLS the certificate was chosen by the server name (SNI): a host of another site than
  // that name's is not this connection's to answer (RFC 9110 section 7.4).
  const std::string_view sni = loop_->Transport(conn->fd).server_name;
  if (!sni.empty() && sites_->table.Match(http::NormalizeHost(sni, buf)) != site)
    return kSniMismatch;
  if (site != http::SiteTable::kNoSite) return site + 1;
  switch (sites_->unknown) {
    case UnknownSite::kDefault:
      return 0;
    case UnknownSite::kMisdirected:
      return kMisdirected;
    case UnknownSite::kClose:
      return kCloseNow;
  }
  return 0;
}

bool ConnectionMachine::PlanExchange(Connection* conn, Exchange* ex, const http::Request& req) {
  const bool https_redirect = conn->https_redirect;
  ex->head_request = req.method == http::Method::kHead;
  if (ex->lookups == 0 && ex->listing == nullptr && (rates_ != nullptr || real_ip_) &&
      RefusedByRate(conn, ex, req)) {
    ex->plan_number = ++plans_;
    if (error_log_ != nullptr && error_log_->Wants(ErrorLevelOf(ex->plan.status))) {
      LogPlanError(conn, ex, req);
    }
    return true;
  }
  if (ex->lookups == 0 && sites_ != nullptr) {
    const int site = ChooseSite(conn, req);
    RINGD_ASSERT(ex->site == nullptr);
    if (site > 0) {
      ex->site = site_files_[site - 1].get();
      ++ex->site->exchanges;
      if (ex->site->client_rules != nullptr && RefusedBySite(conn, ex, req)) return true;
    }
    if (site < 0) {
      http::PlanError(421, req, &ex->plan);
      ex->plan.reason = site == kSniMismatch ? "the host is another site than the TLS server name"
                                             : "the host names no site";
      // --unknown-site=close: the connection ends after the answer.
      if (site == kCloseNow) {
        ex->plan.keep_alive = false;
        ex->plan.reason = kNoSiteClose;
      }
      ex->plan_number = ++plans_;
      return true;
    }
  }
  FileCache& files = FilesOf(ex);
  if (ex->lookups == 0) ex->plan_since = files.validations();
  RequestLookup::MadeListing made;
  if (ex->listing != nullptr) made = {ex->listing->dir, {ex->listing->status}};
  RequestLookup source(&files, ex->plan_since, ex->listing != nullptr ? &made : nullptr,
                       compressor_.get());
  const http::PlannerConfig* planner = &planner_;
  if (ex->site != nullptr) {
    planner = https_redirect ? &ex->site->redirect_planner : &ex->site->planner;
  } else if (https_redirect) {
    planner = &redirect_planner_;
  }
  const http::PlanStep step = http::PlanResponse(req, *planner, source, *scratch_, &ex->plan);
  ex->plan_number = ++plans_;
  if (step.status == http::PlanStatus::kNeedListing) {
    // Made off the shard (DirLister); the plan is made again once it is.
    RINGD_ASSERT(lister_ != nullptr && ex->listing == nullptr);
    if (++ex->lookups <= kMaxLookupsPerRequest) {
      ex->listing = lister_->Start(files.root_fd(), step.lookup_path, step.listing_url_path,
                                   &ex->waiter, &planner->autoindex_format);
      if (ex->listing != nullptr) return false;
    }
    ++stats_.lookup_refused;  // every listing slot is taken: 503, as a full cache
    http::PlanError(503, req, &ex->plan);
  } else if (step.status == http::PlanStatus::kNeedLookup) {
    if (++ex->lookups <= kMaxLookupsPerRequest && files.Fetch(step.lookup_path, &ex->waiter)) {
      for (std::string_view p : step.prefetch) {
        if (!p.empty()) files.Prefetch(p);
      }
      return false;
    }
    // The cache cannot take another entry now (all pinned or loading), or this request keeps
    // needing lookups: answer 503 rather than wait without bound.
    ++stats_.lookup_refused;
    http::PlanError(503, req, &ex->plan);
  } else if (!ex->plan.file_path.empty()) {
    ex->file = source.Pin(ex->plan.file_path);
    // Planned from a cached entry that must still be there.
    RINGD_ASSERT_MSG(ex->file != nullptr, "planned file not in the cache");
    // --compress: the coding this client takes is made for the next request (this one is
    // answered as the file is, without waiting).
    if (ex->plan.compress_wanted != http::Coding::kIdentity && ex->file->fd >= 0) {
      compressor_->Start(ex->file->fd, ex->file->meta, ex->plan.compress_wanted);
    }
  } else if (ex->plan.variant && ex->plan.send_body) {
    // A variant's bytes go out: held until the response is done. (A 304 or HEAD sends none.)
    RINGD_ASSERT(ex->variant == nullptr && source.found_variant() != nullptr);
    ex->variant = source.found_variant();
    compressor_->Pin(ex->variant);
    if (ex->plan.send_body) compressor_->NoteSaved(ex->plan.file.size - ex->plan.content_length);
  }
  ex->lookups = 0;
  // The level test first: with the error log filtering the status out, this is all it costs.
  if (error_log_ != nullptr && ex->plan.status >= 400 &&
      error_log_->Wants(ErrorLevelOf(ex->plan.status))) {
    LogPlanError(conn, ex, req);
  }
  return true;
}

void ConnectionMachine::OnFileReady(FileWaiter* w) {
  Connection* conn = ConnOf(w);
  ConnectionMachine* self = conn->machine;
  RINGD_ASSERT(conn->state == ConnState::kWaitingFile);  // Abort forgets the waiter
  self->SetState(conn, ConnState::kReading);
  // Parse the head again rather than keep the parsed request: it is cheap, and it keeps the
  // connection object small.
  http::Request req;
  const http::ParseResult r =
      http::ParseRequest(std::string_view(conn->in, conn->in_len), 0, self->limits_, self->headers_,
                         self->config_.max_headers, &req);
  RINGD_ASSERT(r.status == http::ParseStatus::kDone);  // it parsed before it waited
  if (self->Plan(conn, req, r.consumed)) return;       // another path to look up
  if (conn->state == ConnState::kClosing) return;
  self->DropHead(conn, r.consumed);
  if (conn->state == ConnState::kReading) self->ProcessInput(conn);
  self->UpdateRecv(conn);
}

void ConnectionMachine::ConsumeInput(Connection* conn, size_t n) {
  if (n >= conn->in_len) {
    conn->in_len = 0;
  } else {
    std::memmove(conn->in, conn->in + n, conn->in_len - n);
    conn->in_len -= static_cast<uint32_t>(n);
  }
  conn->parsed_len = 0;
}

// Drops an answered request's head from the input buffer, then as much of its body (the
// `discard` bytes Plan set) as has already arrived.
void ConnectionMachine::DropHead(Connection* conn, size_t head_bytes) {
  ConsumeInput(conn, head_bytes);
  const uint32_t skip =
      conn->discard < conn->in_len ? static_cast<uint32_t>(conn->discard) : conn->in_len;
  ConsumeInput(conn, skip);
  conn->discard -= skip;
}

void ConnectionMachine::ReleaseInputIfEmpty(Connection* conn) {
  if (conn->in != nullptr && conn->in_len == 0) {
    input_pool_->Put(conn->in);
    conn->in = nullptr;
  }
}

void ConnectionMachine::RespondError(Connection* conn, int status, std::string_view raw) {
  if (conn->ex == nullptr && !TakeExchange(conn)) return Abort(conn);
  BeginExchange(conn->ex, raw, nullptr);
  http::PlanError(status, false, &conn->ex->plan);
  conn->more_input_expected = true;
  conn->in_len = 0;  // nothing after a framing error can be trusted
  conn->parsed_len = 0;
  ReleaseInputIfEmpty(conn);
  StartResponse(conn, conn->ex);
}

void ConnectionMachine::StartResponse(Connection* conn, Exchange* ex) {
  http::ResponsePlan& plan = ex->plan;
  // Views into the scratch are the latest plan's: no other plan ran since (Exchange::plan).
  RINGD_ASSERT(ex->plan_number == plans_ || !ViewsScratch(plan, *scratch_));
  // A client that has half-closed sends nothing more, so its last response closes the
  // connection; requests it pipelined before its end of stream are here, behind this one, and
  // are answered first (as nginx does), however long this one waited for its file.
  const bool last_of_peer = conn->peer_closed && !ex->input_follows;
  if (conn->requests >= config_.max_requests_per_connection || draining_ || last_of_peer) {
    plan.keep_alive = false;
  }
  const size_t n = WriteHead(ex);
  ex->send.owner = conn;
  ex->send.callback = &ConnectionMachine::OnSend;
  ex->part = 0;
  SetState(conn, ConnState::kSending);
  conn->wants_close = !plan.keep_alive;
  ArmSendTimer(conn);

  // The common cases go out in one send: head alone, head + error page, head + cached content.
  ex->iov[0] = iovec{ex->head, n};
  int iovcnt = 1;
  ex->phase = Exchange::Phase::kDone;
  if (plan.send_body && plan.streamed_body) {
    RINGD_ASSERT(ex->listing != nullptr);  // the one body streamed: a listing's
    ex->phase = Exchange::Phase::kListing;
    ex->listing_piece_out = ex->listing_wait = false;
    lister_->Follow(ex->listing, &ConnectionMachine::OnListingMore, conn);
  } else if (plan.send_body && plan.content_length > 0) {
    if (!plan.inline_body.empty()) {
      ex->iov[1] = iovec{const_cast<char*>(plan.inline_body.data()), plan.inline_body.size()};
      iovcnt = 2;
    } else if (plan.multipart) {
      ex->phase = Exchange::Phase::kPartHead;
    } else {
      const auto [first, length] = http::BodySlice(plan);
      if (ex->file != nullptr && ex->file->content != nullptr) {
        ex->iov[1] = iovec{ex->file->content + first, length};
        iovcnt = 2;
      } else {
        ex->phase = Exchange::Phase::kSlice;
        ex->body_offset = first;
        ex->body_left = length;
      }
    }
  }
  // A body that fits behind the head in its buffer is copied there: one buffer goes out with a
  // plain send, where two take a sendmsg (the kernel copies a msghdr and imports an iovec array
  // for each; measured in docs/PERFORMANCE.md, "One buffer for a small response").
  if (iovcnt == 2 && n + ex->iov[1].iov_len <= sizeof ex->head) {
    std::memcpy(ex->head + n, ex->iov[1].iov_base, ex->iov[1].iov_len);
    ex->iov[0].iov_len = n + ex->iov[1].iov_len;
    iovcnt = 1;
  }
  // The whole response in one send, and the connection ends after it: the response and the FIN
  // (CloseGracefully's shutdown) leave in one segment instead of two, which costs both ends less.
  // Or the body's first bytes follow at once: the head waits in the socket (MSG_MORE) to leave
  // in their first segment.
  const bool fin_follows = ex->phase == Exchange::Phase::kDone && conn->wants_close;
  SendBuffers(conn, iovcnt, fin_follows || BodyFollowsAtOnce(conn));
}

size_t ConnectionMachine::WriteHead(Exchange* ex) {
  http::ResponsePlan& plan = ex->plan;
  size_t n = http::WriteResponseHead(plan, std::string_view(date_, http::kHttpDateLen), "ringd",
                                     ex->head, sizeof ex->head);
  if (n == 0) {  // a head larger than its buffer (a very long Location): answer 500 instead
    if (ex->file != nullptr) FilesOf(ex).Unpin(ex->file);
    ex->file = nullptr;
    http::PlanError(500, plan.keep_alive, &plan);
    if (ex->head_request) plan.send_body = false;  // a HEAD's answer has no body
    n = http::WriteResponseHead(plan, std::string_view(date_, http::kHttpDateLen), "ringd",
                                ex->head, sizeof ex->head);
  }
  ex->head_len = static_cast<uint32_t>(n);
  // The head holds them now, and the next plan overwrites what they view: nothing reads them
  // after this, and an empty view is all a later reader could find.
  plan.file_path = plan.etag = plan.last_modified = plan.location = {};
  return n;
}

// Whether a head (or a multipart part head) about to go out can wait in the socket for the body
// (MSG_MORE, as nginx's tcp_nopush holds its header for the file behind it): only with
// --tcp-nopush, and only when the body starts as soon as the head is sent, not after a wait in
// the send queue. (A body that must come from the disk still holds its head until its first
// bytes are read, as nginx's; the kernel sends held bytes alone after about 200 ms.)
bool ConnectionMachine::BodyFollowsAtOnce(const Connection* conn) const {
  const Exchange* ex = conn->ex;
  // (A listing's pieces come when the lister makes them: its head is not held for them.)
  if (!config_.tcp_nopush || ex->phase == Exchange::Phase::kDone ||
      ex->phase == Exchange::Phase::kListing)
    return false;
  if (ex->phase != Exchange::Phase::kSlice) return true;  // a part head or its slice: a Send
  if (ex->file == nullptr || ex->file->content != nullptr) return true;  // a Send from memory
  return sends_->WouldAdmit(&ex->ticket, ex->plan.content_length);
}

void ConnectionMachine::SendBuffers(Connection* conn, int iovcnt, bool more) {
  Exchange* ex = conn->ex;
  RINGD_ASSERT(ex->sending == Exchange::Sending::kNone);
  ex->sending = Exchange::Sending::kBuffers;
  loop_->Send(conn->fd, ex->iov, iovcnt, &ex->send, more);
}

void ConnectionMachine::SendFileChunk(Connection* conn, uint64_t offset, uint64_t length) {
  Exchange* ex = conn->ex;
  RINGD_ASSERT(ex->sending == Exchange::Sending::kNone);
  ex->sending = Exchange::Sending::kFile;
  // More of the same slice follows (Sent -> SendNext -> the send queue, which may make it wait
  // its turn), so the loop may keep the socket corked from chunk to chunk: one partial segment
  // per body, not one per chunk.
  const bool next_chunk_follows = ex->body_left > length;
  loop_->SendFile(conn->fd, ex->file->fd, offset, length, &ex->send, next_chunk_follows);
}

void ConnectionMachine::FinishResponse(Connection* conn) {
  ReleaseExchange(conn);
  if (conn->wants_close || draining_) return CloseGracefully(conn);
  SetState(conn, ConnState::kReading);
  // With its receive over (as after the client's end of stream during the response), ProcessInput
  // may end the connection and free it (WaitForRequest -> Abort -> MaybeFree), and there is no
  // receive to resume. With a receive in flight it cannot be freed before that receive's last
  // callback.
  if (!conn->recv_active) return ProcessInput(conn);
  ProcessInput(conn);  // pipelined requests already buffered
  UpdateRecv(conn);    // room again: resume a paused receive
}

// Whether the client may still send once its last request is answered: bytes already here, a
// body being skipped, input after a framing error or behind the last response, a client that
// asked to keep the connection (it may have pipelined more requests that are still on their way,
// and closing on them would reset the connection and destroy the response), or a paused receive
// (the loop may hold bytes that came before the pause took effect, unseen here: PauseRecv).
bool ConnectionMachine::ClientMaySend(const Connection* conn) const {
  return conn->in_len > 0 || conn->discard > 0 || conn->more_input_expected ||
         conn->client_keep_alive || conn->recv_paused;
}

// After the last response. If the client may still be sending (unread input, a body we skip,
// an error that stopped reading), stop sending (FIN) and read until it closes, so that those
// bytes cannot turn our close into a reset that destroys the response in flight (nginx's
// lingering close). Otherwise close at once: a client that asked to close is done sending.
void ConnectionMachine::CloseGracefully(Connection* conn) {
  const bool unread = ClientMaySend(conn);
  conn->in_len = 0;
  ReleaseInputIfEmpty(conn);
  // The last response is out, and nothing says the client sends more; but its receive has yet to
  // end (UpdateRecv's cancel on its way, or still running), and its last callback may say that
  // bytes came after all, or were left unread (kRecvCancelledWithInput). Abort would wait for that
  // callback before closing anyway, so the choice waits for it too (OnRecv), and costs no turn.
  if (!unread && !conn->peer_closed && conn->recv_active && conn->state == ConnState::kSending) {
    SetState(conn, ConnState::kEndingRecv);
    // Nothing is sent from here on, and the loop ends the receive promptly (Cancel's last
    // callback): no timer, as for kClosing. The send timer would take the wait for a stall.
    if (conn->timer.list != nullptr) conn->timer.list->Disarm(&conn->timer);
    if (!conn->recv_ending) {
      conn->recv_ending = true;
      loop_->Cancel(&conn->recv);
    }
    return;
  }
  // Closing now: the close itself sends the FIN, with the last response if it was held back
  // (MSG_MORE), in one segment. A shutdown(SHUT_WR) first would send no fewer packets, and would
  // cost a system call per close, and an io-wq hop on the bypass tier.
  if (!unread || conn->peer_closed) return Abort(conn);
  // The receive ended with the last request (UpdateRecv), yet bytes came after it: read again,
  // and linger as for any client that may still send. (One whose cancellation is still on its
  // way re-arms from its last callback: OnRecv.)
  if (!conn->recv_active) {
    ++stats_.recv_rearmed_to_linger;
    ArmRecv(conn);
  }
  // Lingering: FIN now, then read (and drop) until the client closes. (Not linked to the last
  // send through the ring: a linked request resolves its fd when it runs, and by then the number
  // may belong to a new connection.)
  loop_->Shutdown(conn->fd, SHUT_WR);
  SetState(conn, ConnState::kLingering);
  if (conn->recv_paused) {  // read (and drop) whatever the client still sends
    conn->recv_paused = false;
    loop_->ResumeRecv(&conn->recv);
  }
  linger_timers_.Arm(&conn->timer, loop_->MonotonicMs());
}

// Every change of a connection's state goes through here, and only these changes exist:
//
//   kReading -> kWaitingFile -> kReading        (a file lookup, then planning again)
//   kReading -> kSending -> kReading            (a response, then the next request)
//   kSending -> kLingering                      (the last response sent; reading until EOF)
//   kSending -> kEndingRecv -> kLingering       (the last response sent to a client that seemed
//                                                done; its receive's last callback says it sent
//                                                more; otherwise Abort closes it)
//   kReading -> kLingering                      (an idle connection giving way to a newcomer)
//   any but kClosing -> kClosing                (Abort; freed once nothing is in flight)
void ConnectionMachine::SetState(Connection* conn, ConnState next) {
  const ConnState from = conn->state;
  bool ok = false;
  switch (next) {
    case ConnState::kReading:
      ok = from == ConnState::kWaitingFile || from == ConnState::kSending;
      break;
    case ConnState::kWaitingFile:
      ok = from == ConnState::kReading;
      break;
    case ConnState::kSending:
      ok = from == ConnState::kReading && conn->ex != nullptr;
      break;
    case ConnState::kEndingRecv:
      ok = from == ConnState::kSending && conn->ex == nullptr;  // the response is over
      break;
    case ConnState::kLingering:  // after the last response, or an idle one giving way
      ok = from == ConnState::kSending || from == ConnState::kEndingRecv ||
           from == ConnState::kReading || from == ConnState::kH2;
      break;
    case ConnState::kH2:  // the connection preface came
      ok = from == ConnState::kReading && conn->ex == nullptr && conn->requests == 0;
      break;
    case ConnState::kClosing:
      ok = from != ConnState::kClosing;
      break;
  }
  RINGD_ASSERT_MSG(ok, "connection state %d -> %d", static_cast<int>(from), static_cast<int>(next));
  --state_counts_[static_cast<int>(from)];
  ++state_counts_[static_cast<int>(next)];
  conn->state = next;
}

// A response begins (or waits for file metadata): its exchange, from the shard's pool, which
// holds one per connection. False if it ran dry all the same.
bool ConnectionMachine::TakeExchange(Connection* conn) {
  Exchange* ex = exchanges_->Get();
  if (ex == nullptr) return false;
  ex->conn = conn;
  ex->waiter.wake = &ConnectionMachine::OnFileReady;
  ex->ticket.slow = conn->send_slow;
  conn->ex = ex;
  return true;
}

// The one release path for what a response holds: the file pin and the exchange.
void ConnectionMachine::ReleaseExchange(Connection* conn) {
  Exchange* ex = conn->ex;
  if (ex == nullptr) return;
  // Not waiting for a file (Abort forgets the waiter), out of the send queue (Abort), and no
  // slot held: a slot goes back when its send ends (OnSend), and no exchange is released while
  // a send is in flight.
  RINGD_ASSERT(!ex->waiter.waiting() && !ex->ticket.queued() && !ex->ticket.holds_slot);
  conn->send_slow = ex->ticket.slow;
  EndExchange(conn, ex);  // metrics and the access log line
  if (ex->file != nullptr) FilesOf(ex).Unpin(ex->file);
  ex->file = nullptr;
  ReleaseListing(ex);
  ReleaseVariant(ex);
  LeaveSite(ex);
  exchanges_->Put(ex);
  conn->ex = nullptr;
}

// The send-stall deadline, from now; a send that moves bytes before it passes earns another
// (Tick checks the in-flight operation's progress), so only a client that takes nothing for
// --send-timeout-ms is cut, however slowly it reads (nginx's send_timeout).
void ConnectionMachine::ArmSendTimer(Connection* conn) {
  conn->ex->send_progress = 0;  // the operation about to start has sent nothing yet
  send_timers_.Arm(&conn->timer, loop_->MonotonicMs());
}

void ConnectionMachine::Abort(Connection* conn) {
  if (conn->state == ConnState::kClosing) return;
  if (conn->ex != nullptr) {
    StopWaiting(conn->ex);              // waiting for a file or a listing, or woken and not yet run
    sends_->Remove(&conn->ex->ticket);  // waiting for a send slot
  }
  if (conn->h2) H2Abort(conn);
  SetState(conn, ConnState::kClosing);
  if (conn->timer.list != nullptr) conn->timer.list->Disarm(&conn->timer);
  // A send in flight may wait on a slow client: shutdown ends it now. The receive is cancelled
  // through the loop. Their last callbacks then free the connection (MaybeFree).
  if (conn->ex != nullptr && conn->ex->sending != Exchange::Sending::kNone)
    loop_->Shutdown(conn->fd, SHUT_RDWR);
  if (conn->recv_active) loop_->Cancel(&conn->recv);
  MaybeFree(conn);
}

void ConnectionMachine::StopWaiting(Exchange* ex) {
  FilesOf(ex).Forget(&ex->waiter);
  if (ex->listing != nullptr && lister_->Waiting(ex->listing)) ReleaseListing(ex);
}

void ConnectionMachine::ReleaseVariant(Exchange* ex) {
  if (ex->variant == nullptr) return;
  compressor_->Unpin(ex->variant);
  ex->variant = nullptr;
}

void ConnectionMachine::ReleaseListing(Exchange* ex) {
  if (ex->listing == nullptr) return;
  lister_->Release(ex->listing);
  ex->listing = nullptr;
}

}  // namespace ringd
