// The shard simulator's oracle and invariants: each response checked against what its request
// asked and the files' history, and after every step the properties that must hold whatever the
// order of events (nothing stalls, the backlog moves, the send queue's aging bound, promised
// pieces, lingering closes that read). See shard_sim_internal.h.
#include <algorithm>
#include <cstdio>
#include <cstring>
#include <string>

#include "server/http/conditional.h"
#include "server/http/decimal.h"
#include "server/http/range.h"
#include "server/http/response_plan.h"
#include "tests/sim/shard_sim_internal.h"

namespace ringd::sim::internal {

std::string Lower(std::string s) {
  for (char& ch : s) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
  return s;
}

int ParseResponse(const std::string& in, bool head_request, Resp* r, size_t* consumed,
                  std::string* why) {
  const size_t end = in.find("\r\n\r\n");
  if (end == std::string::npos) {
    if (in.size() > 8192) {
      *why = "response head over 8 KiB";
      return -1;
    }
    return 0;
  }
  *r = Resp{};
  if (in.compare(0, 9, "HTTP/1.1 ") != 0 || end < 12) {
    *why = "bad status line: " + in.substr(0, std::min<size_t>(end, 60));
    return -1;
  }
  uint64_t status;
  if (!http::ParseDecimal(std::string_view(in).substr(9, 3), &status)) {
    *why = "bad status line: " + in.substr(0, std::min<size_t>(end, 60));
    return -1;
  }
  r->status = static_cast<int>(status);
  size_t pos = in.find("\r\n") + 2;
  while (pos < end + 2) {
    const size_t eol = in.find("\r\n", pos);
    const std::string line = in.substr(pos, eol - pos);
    pos = eol + 2;
    if (line.empty()) break;
    const size_t colon = line.find(':');
    if (colon == std::string::npos) {
      *why = "header without a colon: " + line;
      return -1;
    }
    std::string value = line.substr(colon + 1);
    while (!value.empty() && value[0] == ' ') value.erase(0, 1);
    const std::string name = Lower(line.substr(0, colon));
    if (r->headers.count(name) != 0) {
      *why = "duplicate header " + name;
      return -1;
    }
    r->headers[name] = value;
  }
  r->close = r->headers.count("connection") != 0 && Lower(r->headers["connection"]) == "close";
  uint64_t length = 0;
  auto cl = r->headers.find("content-length");
  if (cl != r->headers.end()) {
    if (!http::ParseDecimal(cl->second, &length)) {
      *why = "bad Content-Length: " + cl->second;
      return -1;
    }
  } else if (r->status != 304) {
    *why = "no Content-Length";
    return -1;
  }
  const bool body = !head_request && r->status != 304;
  const size_t body_len = body ? static_cast<size_t>(length) : 0;
  if (in.size() < end + 4 + body_len) return 0;
  r->body = in.substr(end + 4, body_len);
  *consumed = end + 4 + body_len;
  return 1;
}

std::string ErrorPage(int status) {
  http::ResponsePlan plan;
  http::PlanError(status, false, &plan);
  return std::string(plan.inline_body);
}

namespace {

// A response header's value ("" when absent).
std::string HeaderOf(const Resp& r, const char* name) {
  const auto it = r.headers.find(name);
  return it == r.headers.end() ? std::string() : it->second;
}

// An error page: its status, its Content-Length, and (but for a HEAD) its body.
bool MatchErrorPage(const Req& q, const Resp& r, int status, std::string* why) {
  if (r.status != status) {
    *why = "status " + std::to_string(r.status) + ", expected " + std::to_string(status);
    return false;
  }
  const std::string page = ErrorPage(status);
  if (HeaderOf(r, "content-length") != std::to_string(page.size())) {
    *why = "error page Content-Length";
    return false;
  }
  if (!q.head && r.body != page) {
    *why = "error page body";
    return false;
  }
  return true;
}

}  // namespace

// The oldest moment whose file versions a response to `q` may show: the request's own time, less
// what the open-file cache may hold an entry for (valid_ms, and one more valid_ms while a
// revalidation runs beside the requests; none of that with valid_ms 0). Never before the last
// root switch before it was sent: the shard takes a switch up at the start of its next turn,
// before it reads anything sent after it, and nothing from the old root may answer then. A
// version of the new root's that an edit in the switch's own millisecond replaced was there
// after the switch all the same: the window starts at the switch's edit, not its millisecond.
WorldInstant Sim::WindowStart(const Req& q) const {
  WorldInstant lo{q.sent_ms - 2 * static_cast<int64_t>(config_.open_file_cache_valid_ms) - 2};
  if (q.root_generation > 0) {
    const WorldInstant& switched = root_switch_at_[q.root_generation - 1];
    if (lo <= switched) lo = switched;
  }
  return lo;
}

bool Sim::FileChanged(const Req& q, const std::string& path) const {
  auto it = world_.history.find(path);
  if (it == world_.history.end()) return false;
  const WorldInstant lo = WindowStart(q);
  for (const PathVersion& v : it->second) {
    if (!(v.from() <= lo) && v.from_ms > 1000) return true;  // (the tree was built at 1000)
  }
  return false;
}

// A satisfiable Range of this version (`content`): 206, the Content-Range of one range or the
// multipart layout of several, and exactly those bytes.
bool Sim::MatchRanges(const Resp& r, const std::string& content, const http::RangeSet& set,
                      const Route& route, std::string* why) const {
  const uint64_t size = content.size();
  if (r.status != 206) {
    *why = "status " + std::to_string(r.status) + ", expected 206";
    return false;
  }
  std::string expected;
  if (set.count == 1) {
    const http::ByteRange& b = set.ranges[0];
    const std::string cr = "bytes " + std::to_string(b.first) + "-" + std::to_string(b.last) + "/" +
                           std::to_string(size);
    if (HeaderOf(r, "content-range") != cr) {
      *why = "Content-Range " + HeaderOf(r, "content-range") + ", expected " + cr;
      return false;
    }
    expected = content.substr(b.first, b.Length());
  } else {
    // The boundary is drawn at random by the shard: take it from the response.
    const std::string ct = HeaderOf(r, "content-type");
    const std::string prefix = "multipart/byteranges; boundary=";
    if (ct.compare(0, prefix.size(), prefix) != 0) {
      *why = "multipart Content-Type " + ct;
      return false;
    }
    const std::string boundary = ct.substr(prefix.size());
    http::MultipartLayout layout(set, mime_.ForPath(route.path), size, boundary);
    char part[http::MultipartLayout::kMaxPartHead + 8];
    for (size_t i = 0; i < set.count; ++i) {
      expected.append(part, layout.PartHead(i, part));
      expected += content.substr(set.ranges[i].first, set.ranges[i].Length());
    }
    char tail[http::MultipartLayout::kMaxBoundary + 16];
    expected.append(tail, layout.Tail(tail));
  }
  if (r.body != expected) {
    *why = "206 body differs from this version's bytes";
    return false;
  }
  return true;
}

bool Sim::MatchVersion(const Req& q, const Resp& r, const PathVersion& v, const Route& route,
                       const std::string& selected, std::string* why) {
  if (v.inode == nullptr || v.inode->dir) return MatchErrorPage(q, r, 404, why);
  const std::string& content = *v.inode->content;
  const uint64_t size = content.size();
  char etag_buf[64];
  const std::string etag(etag_buf, http::FormatETag(v.inode->mtime_sec, size, etag_buf));
  auto header = [&](const char* name) { return HeaderOf(r, name); };
  if (!q.inm.empty() && q.inm == etag) {
    if (r.status != 304) {
      *why = "status " + std::to_string(r.status) + ", expected 304";
      return false;
    }
    return true;
  }
  if (r.status == 304) {
    *why = "304 for an ETag that does not match";
    return false;
  }
  if (r.status == 200 || r.status == 206) {
    if (header("etag") != etag) {
      *why = "ETag " + header("etag") + ", this version's is " + etag;
      return false;
    }
  }
  if (!q.head && !q.range.empty()) {
    http::RangeSet set;
    switch (http::ParseRange(q.range, size, config_.max_ranges, &set)) {
      case http::RangeOutcome::kIgnore:
        break;
      case http::RangeOutcome::kUnsatisfiable:
        return MatchErrorPage(q, r, 416, why);
      case http::RangeOutcome::kSatisfiable:
        return MatchRanges(r, content, set, route, why);
    }
  }
  if (r.status != 200) {
    *why = "status " + std::to_string(r.status) + ", expected 200";
    return false;
  }
  if (header("content-length") != std::to_string(size)) {
    *why =
        "Content-Length " + header("content-length") + ", this version has " + std::to_string(size);
    return false;
  }
  if (!q.head && r.body != content) {
    *why = "200 body differs from this version of " + selected;
    return false;
  }
  return true;
}

void Sim::CheckResponse(Client& c, const Req& q, const Resp& r) {
  ++result_.responses;
  const bool refused_allowed =
      world_.counters.open_transient > q.transient_at_send || Refused() > q.refused_at_send;
  // Whether the response may (must) end the connection.
  const bool closing_status = r.status == 400 || r.status == 413 || r.status == 414 ||
                              r.status == 431 || r.status == 500 || r.status == 501 ||
                              r.status == 503 || r.status == 505;
  const bool must_close = c.h2 == nullptr && (q.closes || closing_status ||
                                               q.nth >= config_.max_requests_per_connection);
  if (must_close && !r.close) {
    return Fail("client %u: response %d to request %u lacks Connection: close", c.id, r.status,
                q.nth);
  }
  if (r.close && !must_close && !c.fin_sent && !draining_) {
    return Fail("client %u: response %d to request %u says Connection: close for no reason", c.id,
                r.status, q.nth);
  }
  if (r.status == 503) {
    if (!refused_allowed) {
      return Fail("client %u: 503 with no failed open or refused lookup since the request", c.id);
    }
    return;
  }
  if (q.expect_error) {
    if (r.status != 400 && r.status != 414 && r.status != 431 && r.status != 501 &&
        r.status != 505) {
      return Fail("client %u: malformed request answered %d", c.id, r.status);
    }
    return;
  }
  if (q.expect_status != 0) {
    if (r.status != q.expect_status) {
      return Fail("client %u: request %u answered %d, expected %d", c.id, q.nth, r.status,
                  q.expect_status);
    }
    return;
  }
  const Route& route = *q.route;
  switch (route.kind) {
    case Route::kStatus: {
      PathVersion v;  // not a file: the page for the status
      if (r.status != route.status) {
        return Fail("client %u: %s answered %d, expected %d", c.id, route.target.c_str(), r.status,
                    route.status);
      }
      const std::string page = ErrorPage(route.status);
      if (!q.head && r.body != page) return Fail("client %u: wrong error page", c.id);
      return;
    }
    case Route::kRedirect:
      if (r.status != 301 || r.headers.count("location") == 0 ||
          r.headers.at("location") != route.location) {
        return Fail("client %u: %s answered %d (Location %s), expected 301 to %s", c.id,
                    route.target.c_str(), r.status,
                    r.headers.count("location") ? r.headers.at("location").c_str() : "-",
                    route.location.c_str());
      }
      return;
    case Route::kFile:
      break;
  }
  CheckFileResponse(c, q, r);
}

// A file's response: from its .gz sibling when the client takes gzip and it has one, and matching
// one of the versions the file had while the request was on its way.
void Sim::CheckFileResponse(Client& c, const Req& q, const Resp& r) {
  const Route& route = *q.route;
  // With a .gz sibling and a client that takes gzip, the sibling is the selected file: its bytes,
  // its size for ranges (a 416 names it too, without Content-Encoding).
  const bool gz_expected = route.has_gz && q.gzip && config_.precompressed;
  const bool transient = world_.counters.open_transient > q.transient_at_send;
  const auto enc = r.headers.find("content-encoding");
  if (enc != r.headers.end() && (enc->second != "gzip" || !gz_expected)) {
    return Fail("client %u: Content-Encoding %s for %s (gzip accepted %d)", c.id,
                enc->second.c_str(), route.target.c_str(), q.gzip);
  }
  // A failed lookup of the sibling (EMFILE) serves the file itself: not an error.
  if (enc == r.headers.end() && gz_expected && (r.status == 200 || r.status == 206) && !transient) {
    return Fail("client %u: %s not served from its .gz sibling though the client takes gzip", c.id,
                route.target.c_str());
  }
  std::vector<std::string> selected;
  if (enc != r.headers.end() || (gz_expected && r.status != 200 && r.status != 206)) {
    selected.push_back(route.path + ".gz");
  }
  if (enc == r.headers.end()) selected.push_back(route.path);
  const WorldInstant lo = WindowStart(q);
  int candidates = 0;
  std::string why;
  for (const std::string& path : selected) {
    for (const PathVersion& v : world_.history[path]) {
      if (v.to() <= lo || v.from_ms > world_.now_ms) continue;
      ++candidates;
      if (MatchVersion(q, r, v, route, path, &why)) {
        if ((r.status == 200 || r.status == 206) && r.headers.count("etag") != 0)
          c.etags[route.path] = r.headers.at("etag");
        return;
      }
    }
  }
  Fail(
      "client %u: %s %s (request %u, range '%s', inm '%s') answered %d: matches none of %d "
      "versions (last mismatch: %s)",
      c.id, q.head ? "HEAD" : "GET", route.target.c_str(), q.nth, q.range.c_str(), q.inm.c_str(),
      r.status, candidates, why.c_str());
}

void Sim::ReadResponses(Client& c) {
  while (!c.inbox.empty() && result_.ok) {
    if (c.pending.empty() || c.close_response) {
      return Fail("client %u: %zu bytes nobody asked for: %.40s", c.id, c.inbox.size(),
                  c.inbox.c_str());
    }
    Resp r;
    size_t consumed = 0;
    std::string why;
    const int rc = ParseResponse(c.inbox, c.pending.front().head, &r, &consumed, &why);
    if (rc < 0) return Fail("client %u: unparsable response: %s", c.id, why.c_str());
    if (rc == 0) return;
    c.inbox.erase(0, consumed);
    const Req q = c.pending.front();
    c.pending.pop_front();
    world_.Trace("client %u: response %d to request %u (%s %s)%s", c.id, r.status, q.nth,
                 q.head ? "HEAD" : "GET", q.route != nullptr ? q.route->target.c_str() : "-",
                 r.close ? " (close)" : "");
    CheckResponse(c, q, r);
    if (r.close) {
      c.close_response = true;
      c.close_response_ms = world_.now_ms;
      c.pending.clear();  // not owed: the server said it ends here
      c.outbox.clear();
    } else if (c.pending.empty() && c.outbox.empty()) {
      c.idle_since_ms = world_.now_ms;
      if (c.style == Style::kSitter && c.batches_left == 0) {
        c.stopped_reading = true;  // sits idle from here on, whatever the server does
        world_.Trace("client %u sits idle", c.id);
        continue;
      }
      // Between batches: sometimes a short pause, sometimes an idle gap past keep-alive.
      const int64_t gap =
          rng_.Chance(250) ? static_cast<int64_t>(rng_.Range(1, 2 * config_.keepalive_timeout_ms))
                           : static_cast<int64_t>(rng_.Below(30));
      c.next_write_ms = world_.now_ms + gap;
    }
  }
}

// An HTTP/2 client's streams that closed: each answered as the same request over HTTP/1.1 would
// be (any order), or reset only where the server may reset one.
void Sim::ReadH2Responses(Client& c, SimSocket& s) {
  std::string why;
  const std::string bytes = std::move(c.inbox);
  c.inbox.clear();
  if (!c.h2->Feed(bytes, &why)) return Fail("client %u: %s", c.id, why.c_str());
  for (SimH2Client::Done& d : c.h2->TakeDone()) {
    auto it = std::find_if(c.pending.begin(), c.pending.end(),
                           [&](const Req& q) { return q.stream_id == d.stream_id; });
    if (it == c.pending.end()) return Fail("client %u: stream %d nobody asked for", c.id, d.stream_id);
    const Req q = *it;
    c.pending.erase(it);
    world_.Trace("client %u: stream %d: %d (reset %u) to request %u (%s %s)", c.id, d.stream_id,
                 d.status, d.reset, q.nth, q.head ? "HEAD" : "GET",
                 q.route != nullptr ? q.route->target.c_str() : "-");
    if (q.cancelled) {  // whatever came, the client stopped caring
      c.h2_cancelled.push_back(q);
      continue;
    }
    if (d.reset != 0) {
      // Refused (no exchange left on the shard, or past a GOAWAY's last stream); or cut because
      // its file changed under it.
      const bool changed = q.route != nullptr && q.route->kind == Route::kFile &&
                           (FileChanged(q, q.route->path) || FileChanged(q, q.route->path + ".gz"));
      if (d.reset != 7 /* REFUSED_STREAM */ && !changed && !draining_) {
        return Fail("client %u: stream %d (request %u) reset with code %u", c.id, d.stream_id,
                    q.nth, d.reset);
      }
      continue;
    }
    Resp r;
    r.status = d.status;
    r.headers = std::move(d.headers);
    r.body = std::move(d.body);
    CheckResponse(c, q, r);
    if (!result_.ok) return;
  }
  c.outbox += c.h2->Output();  // acknowledgements and window updates
  (void)s;
  if (c.pending.empty() && c.outbox.empty()) {
    c.idle_since_ms = world_.now_ms;
    const int64_t gap =
        rng_.Chance(250) ? static_cast<int64_t>(rng_.Range(1, 2 * config_.keepalive_timeout_ms))
                         : static_cast<int64_t>(rng_.Below(30));
    c.next_write_ms = world_.now_ms + gap;
  }
}

bool Sim::AnyFileChanged(const Client& c) const {
  const auto changed = [&](const Req& q) {
    return q.route != nullptr && q.route->kind == Route::kFile &&
           (FileChanged(q, q.route->path) || FileChanged(q, q.route->path + ".gz"));
  };
  return std::any_of(c.pending.begin(), c.pending.end(), changed) ||
         std::any_of(c.h2_cancelled.begin(), c.h2_cancelled.end(), changed);
}

void Sim::EndConnection(Client& c, const char* how) {
  SimSocket& s = world_.sockets[c.sock];
  world_.Trace("client %u: connection ends (%s), %zu pending, %zu bytes partial", c.id, how,
               c.pending.size(), c.inbox.size());
  c.ended = true;
  c.idle_since_ms = INT64_MAX;
  s.client_closed = true;
  s.client_fin = true;
  if (c.misbehaved || draining_) return;
  if (!c.inbox.empty()) {
    const Req& q = c.pending.front();
    if (!AnyFileChanged(c)) {
      return Fail(
          "client %u: response to request %u truncated (%zu bytes, %s) though its file "
          "did not change",
          c.id, q.nth, c.inbox.size(), how);
    }
    return;
  }
  if (c.pending.empty() || c.close_response) return;
  // HTTP/2: streams past the GOAWAY's last stream were never taken; a client retries them.
  if (c.h2 != nullptr && std::none_of(c.pending.begin(), c.pending.end(), [&](const Req& p) {
        return c.h2->MayBeAnswered(p.stream_id);
      })) {
    return;
  }
  const Req& q = c.pending.front();
  // A file that changed under its transfer ends the connection (Content-Length cannot be kept),
  // and the close may reset it (pipelined input unread) before the client has read the
  // responses ahead of that one: nginx does the same.
  if (AnyFileChanged(c)) return;
  // A request that reached a connection the server was closing as idle (a keep-alive timeout,
  // or giving way at the connection limit) may go unanswered, as long as the server had not
  // read any of it; HTTP clients retry those. That includes a request pipelined behind one the
  // server had answered, whose bytes had not reached it yet: from the server's side the
  // connection was idle, and nginx closes it the same way.
  if (s.received_before_abort <= q.start_offset) return;
  Fail(
      "client %u: connection ended (%s) with %zu requests unanswered; the server had read "
      "%llu of %llu bytes (request %u at %llu)",
      c.id, how, c.pending.size(), static_cast<unsigned long long>(s.received_before_abort),
      static_cast<unsigned long long>(c.stream_offset), q.nth,
      static_cast<unsigned long long>(q.start_offset));
}

// At the connection limit an idle keep-alive connection gives way to a newcomer: nobody waits
// in the backlog for long while some connection has sat idle all that time.
// The aging bound: no body waits for a send slot longer than --send-max-wait-ms (plus the
// millisecond the simulation may add between two steps), whatever the slots' holders do.
void Sim::CheckSendQueue() {
  const SendQueue& q = shard_->send_queue();
  const int64_t bound = static_cast<int64_t>(config_.send_max_wait_ms) + 1;
  if (q.stats().max_wait_ms > bound) {
    return Fail("a body waited %lld ms for a send slot (bound %lld ms)",
                static_cast<long long>(q.stats().max_wait_ms), static_cast<long long>(bound));
  }
  if (q.NextDeadlineMs() != INT64_MAX && world_.now_ms - q.NextDeadlineMs() > 1) {
    return Fail(
        "a body has waited %lld ms for a send slot and is still waiting (bound %lld ms)",
        static_cast<long long>(world_.now_ms - q.NextDeadlineMs() + config_.send_max_wait_ms),
        static_cast<long long>(bound));
  }
  if (!config_.send_srpt && (q.waiting() > 0 || q.in_flight() > 0)) {
    return Fail("--send-order=fair queued a send");
  }
}

// A SendFile that promised the body's next piece (`more`) keeps its socket corked: the next
// piece starts within the send queue's aging bound (plus the simulation's steps), or the socket
// closes. A promise kept by nothing would hold a response's last bytes back from the client.
void Sim::CheckPromises() {
  const int64_t bound = static_cast<int64_t>(config_.send_max_wait_ms) + 2;
  for (const SimSocket& s : world_.sockets) {
    if (!s.promised || s.server_closed || world_.now_ms - s.promised_ms <= bound) continue;
    return Fail("fd %d: a SendFile promised the body's next piece %lld ms ago, and none came", s.fd,
                static_cast<long long>(world_.now_ms - s.promised_ms));
  }
}

// A lingering close reads until the client closes: once the client is done sending (FIN, or
// closed), the server, which has shut its own side down (SHUT_WR) and waits to close, must see
// the end of stream and close soon, not sit out the linger timeout with nothing reading it.
void Sim::CheckLingering() {
  const int64_t now = world_.now_ms;
  for (SimSocket& s : world_.sockets) {
    // And a client known to be still sending after its close request (bytes past it taken from
    // the socket before the server ended its receive, or a receive that ended with bytes left)
    // must see a lingering close, not a close that its next bytes turn into a reset.
    if (s.closed_on_talker) {
      s.closed_on_talker = false;
      return Fail(
          "server fd %d closed at once on a client still sending after its close request "
          "(had taken %llu bytes, the request ends at %llu; told of bytes left: %s)",
          s.fd, static_cast<unsigned long long>(s.TakenBeforeEnd()),
          static_cast<unsigned long long>(s.close_request_end), s.told_input_left ? "yes" : "no");
    }
    if (!s.accepted || s.server_closed || s.server_reset || !s.server_shut_wr || s.server_shut_rd ||
        !(s.client_fin || s.client_reset)) {
      s.fin_while_lingering_ms = -1;
      continue;
    }
    if (s.fin_while_lingering_ms < 0) s.fin_while_lingering_ms = now;
    if (now - s.fin_while_lingering_ms > kCloseNoticeMs) {
      return Fail(
          "server fd %d lingers %lld ms after its client closed: nothing reads the "
          "connection",
          s.fd, static_cast<long long>(now - s.fin_while_lingering_ms));
    }
  }
}

void Sim::CheckBacklog() {
  // The newcomer that has waited longest: first in the backlog, or accepted by the loop and
  // parked by the shard for a connection slot (no receive started on it yet) while its client
  // still waits.
  int64_t since = INT64_MAX;
  if (!world_.backlog.empty()) since = world_.sockets[world_.backlog.front()].connect_ms;
  for (size_t i : world_.accepted_unread) {
    const SimSocket& s = world_.sockets[i];
    if (!s.client_reset && !s.client_closed) since = std::min(since, s.connect_ms);
  }
  if (since == INT64_MAX) return;
  const int64_t now = world_.now_ms;
  const int64_t waited = now - since;
  if (waited < kBacklogWaitMs) return;
  for (const auto& cp : clients_) {
    const Client& c = *cp;
    const SimSocket& s = world_.sockets[c.sock];
    // A connection the server has already shut down is giving way (lingering until the client
    // closes); it cannot give way twice.
    if (c.ended || !s.accepted || s.server_closed || s.server_shut_wr ||
        c.idle_since_ms > now - kBacklogWaitMs)
      continue;
    return Fail(
        "a newcomer has waited %lld ms to be accepted while client %u has been idle "
        "for %lld ms",
        static_cast<long long>(waited), c.id, static_cast<long long>(now - c.idle_since_ms));
  }
}

// TLS, after every step: after a session refused input, nothing but what it had queued and
// its alert goes out; a connection the server closed sent close_notify first unless it was cut
// (the client gone, the server's abort, or bad input); a client that never finishes its
// handshake is closed by the header timeout.
void Sim::CheckTls() {
  for (SimSocket& s : world_.sockets) {
    if (!s.tls) continue;
    if (s.tls_bad_input && s.sent_total > s.tls_bad_input_end) {
      return Fail(
          "fd %d: %llu record bytes sent after bad input, but only %llu were queued up to "
          "the alert",
          s.fd, static_cast<unsigned long long>(s.sent_total),
          static_cast<unsigned long long>(s.tls_bad_input_end));
    }
    if (!s.server_closed || s.tls_close_checked) continue;
    s.tls_close_checked = true;
    const bool cut = s.client_reset || s.client_closed || s.server_shut_rd || s.tls_bad_input;
    if (s.tls_handshake_done && !cut && s.sent_total < s.tls_close_notify_end) {
      return Fail("fd %d: closed after its handshake without sending close_notify (%s)", s.fd,
                  s.tls_close_notify_end == UINT64_MAX ? "none queued" : "queued, not sent");
    }
  }
  const int64_t bound = static_cast<int64_t>(config_.header_timeout_ms) + kCloseNoticeMs;
  for (const auto& cp : clients_) {
    const Client& c = *cp;
    if (c.ended || c.tls_fault != Client::TlsFault::kStall) continue;
    const SimSocket& s = world_.sockets[c.sock];
    if (!s.accepted || s.server_closed || s.server_shut_wr || s.server_reset) continue;
    if (world_.now_ms - s.accept_ms > bound) {
      return Fail(
          "client %u: its handshake stalled, and %lld ms after the accept the server "
          "still holds it (header timeout %u ms)",
          c.id, static_cast<long long>(world_.now_ms - s.accept_ms), config_.header_timeout_ms);
    }
  }
}

// A TLS client at the end of its stream: after the server's alert when it refused input, after
// its close_notify when the handshake was done, unless the server cut the connection.
void Sim::TlsStreamEnd(Client& c, SimSocket& s) {
  SimTlsClient& t = *c.tls;
  tls_counters_.alerts_seen += t.alert();
  tls_counters_.close_notify_seen += t.close_notify();
  if (c.tls_fault == Client::TlsFault::kStall) ++tls_counters_.stalled_closed;
  if (s.server_shut_rd) return;  // cut: the server's abort, or close_notify not taken in time
  if (s.tls_alert_queued && !t.alert()) {
    return Fail(
        "client %u: the server's session refused its input, and the stream ended "
        "without the alert",
        c.id);
  }
  if (t.server_hello() && !s.tls_bad_input && !t.close_notify()) {
    return Fail("client %u: end of stream after the handshake without close_notify%s", c.id,
                t.partial() ? " (a record cut short)" : "");
  }
}

void Sim::CheckStall(Client& c) {
  if (c.ended || c.misbehaved || c.stopped_reading) return;
  const int64_t now = world_.now_ms;
  if (c.close_response && now - c.close_response_ms > kCloseNoticeMs) {
    return Fail("client %u: no end of stream %lld ms after a Connection: close response", c.id,
                static_cast<long long>(now - c.close_response_ms));
  }
  if (!c.pending.empty() && c.outbox.empty() && now - c.last_progress_ms > stall_limit_ms_) {
    Fail("client %u: %zu requests outstanding and nothing for %lld ms", c.id, c.pending.size(),
         static_cast<long long>(now - c.last_progress_ms));
  }
}

}  // namespace ringd::sim::internal
