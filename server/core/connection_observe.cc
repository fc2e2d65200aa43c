// The connections' observability hooks: what a response's exchange records when it begins and
// ends (the duration histogram, counters by status and body path, the access log line), and the
// client's address for the log. Everything here runs on the shard's thread.
#include <arpa/inet.h>
#include <sys/socket.h>
#include <time.h>

#include <algorithm>
#include <cstring>

#include "io/assert.h"
#include "server/core/connection.h"

namespace ringd {
namespace {

int64_t MonotonicNs() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * 1000000000 + ts.tv_nsec;
}

// The first line of what the client sent, without its line end.
std::string_view FirstLine(std::string_view bytes) {
  const size_t end = bytes.find_first_of("\r\n");
  return end == std::string_view::npos ? bytes : bytes.substr(0, end);
}

// The request line exactly as sent (nginx's $request): from the method to the line end. The
// parser accepted a whole head, so the line end is there.
std::string_view RequestLine(const http::Request& req) {
  const char* begin = req.method_text.data();
  const char* p = req.target.data() + req.target.size();
  while (*p != '\r' && *p != '\n') ++p;
  return std::string_view(begin, static_cast<size_t>(p - begin));
}

// HTTP/2 has no request line: nginx logs "$method $path HTTP/2.0". Made in `line`, cut to its
// size.
std::string_view H2RequestLine(const http::Request& req,
                               char (&line)[RequestCapture::kRequestMax]) {
  size_t n = 0;
  for (std::string_view part :
       {req.method_text, std::string_view(" "), req.target, std::string_view(" HTTP/2.0")}) {
    const size_t take = std::min(part.size(), sizeof line - n);
    std::memcpy(line + n, part.data(), take);
    n += take;
  }
  return std::string_view(line, n);
}

}  // namespace

std::string_view ConnectionMachine::ClientOf(const Connection* conn,
                                             char (&out)[INET6_ADDRSTRLEN]) const {
  if (peers_ != nullptr) {
    return std::string_view(out, peers_[conns_->IndexOf(conn)].Format(out, sizeof out));
  }
  PeerAddress peer;  // unknown ("-") on a direct descriptor, or a socket already reset
  sockaddr_storage ss;
  socklen_t len = sizeof ss;
  if (conn->fd < io::kDirectHandle &&
      ::getpeername(conn->fd, reinterpret_cast<sockaddr*>(&ss), &len) == 0) {
    peer.Set(ss);
  }
  return std::string_view(out, peer.Format(out, sizeof out));
}

// The client's address, for the access log: kept beside the connection (in peers_, by slot)
// rather than in it, so that without the log no connection carries one.
void ConnectionMachine::NotePeer(Connection* conn) {
  if (peers_ == nullptr) return;
  PeerAddress& peer = peers_[conns_->IndexOf(conn)];
  peer = PeerAddress{};  // unknown until found: the slot's last connection was another client
  // A direct descriptor (the bypass tier) has no process fd to ask: its peer stays unknown ("-").
  if (conn->fd >= io::kDirectHandle) return;
  sockaddr_storage ss;
  socklen_t len = sizeof ss;
  if (::getpeername(conn->fd, reinterpret_cast<sockaddr*>(&ss), &len) == 0) peer.Set(ss);
}

// The plan's reason is the cause; a lookup that decided it adds its path and errno. Runs right
// after planning, while the request and the planner's scratch (failed_path) are still valid.
void ConnectionMachine::LogPlanError(Connection* conn, const Exchange* ex,
                                     const http::Request& req) {
  const http::ResponsePlan& plan = ex->plan;
  ErrorEvent e;
  e.level = ErrorLevelOf(plan.status);
  e.cause = plan.reason;
  e.status = plan.status;
  e.path = plan.failed_path;
  e.error = plan.failed_error;
  char addr[INET6_ADDRSTRLEN];
  // The request's client when the limits or --real-ip-from found it (a PROXY header's before
  // TLS, or the one a trusted proxy named), else the connection's.
  e.client = ex->client.family != 0 ? std::string_view(addr, ex->client.Format(addr, sizeof addr))
                                    : ClientOf(conn, addr);
  char line[RequestCapture::kRequestMax];
  e.request = ex->stream_id != 0 ? H2RequestLine(req, line) : RequestLine(req);
  error_log_->Write(e, date_sec_);
}

void ConnectionMachine::LogConnectionError(Connection* conn, ErrorLevel level, const char* cause,
                                           int error, std::string_view path) {
  if (error_log_ == nullptr || !error_log_->Wants(level)) return;
  ErrorEvent e;
  e.level = level;
  e.cause = cause;
  e.error = error;
  e.path = path;
  char addr[INET6_ADDRSTRLEN];
  e.client = ClientOf(conn, addr);
  // The request under way, when the access log keeps its line (the receive buffer is gone).
  if (conn->ex != nullptr && conn->ex->logged) e.request = conn->ex->capture.request();
  error_log_->Write(e, date_sec_);
}

bool ConnectionMachine::NoteProxiedClient(Connection* conn, const http::ClientAddress* named) {
  if (!config_.client_rules.empty()) {
    http::ClientAddress client;
    if (named != nullptr) {
      client = *named;
    } else {  // LOCAL (the proxy's own health check) or no address: the socket's peer
      sockaddr_storage ss;
      socklen_t len = sizeof ss;
      if (::getpeername(conn->fd, reinterpret_cast<sockaddr*>(&ss), &len) == 0) client.Set(ss);
    }
    if (!config_.client_rules.Allows(client)) {
      ++stats_.clients_denied;
      stats_.last_refused = client;
      Abort(conn);
      return false;
    }
  }
  if (peers_ != nullptr && named != nullptr) peers_[conns_->IndexOf(conn)] = *named;
  if (conn_counts_ != nullptr && !CountConnection(conn, ConnClient(conn))) {
    Abort(conn);
    return false;
  }
  return true;
}

void ConnectionMachine::BeginExchange(Exchange* ex, std::string_view raw,
                                      const http::Request* req) {
  ex->started_ns = timing_ ? MonotonicNs() : 0;
  RINGD_ASSERT(ex->site == nullptr);  // left when its exchange before was released
  ex->bytes_sent = 0;
  ex->logged = log_ != nullptr;
  ex->client = http::ClientAddress{};
  if (log_ == nullptr) return;
  if (req != nullptr && ex->stream_id != 0) {
    char line[RequestCapture::kRequestMax];
    ex->capture.Set(H2RequestLine(*req, line), req->Find("Referer"), req->Find("User-Agent"));
  } else if (req != nullptr) {
    ex->capture.Set(RequestLine(*req), req->Find("Referer"), req->Find("User-Agent"));
  } else {
    ex->capture.Set(FirstLine(raw), {}, {});
  }
}

void ConnectionMachine::EndExchange(Connection* conn, Exchange* ex) {
  const http::ResponsePlan& plan = ex->plan;
  const bool started = ex->head_len > 0;
  // Closed before its response began (waiting for file metadata): nginx's 499.
  const int status = started ? plan.status : 499;
  BodyPath path = BodyPath::kNone;
  if (started && plan.send_body && (plan.content_length > 0 || plan.streamed_body)) {
    if (!plan.inline_body.empty() || plan.streamed_body) {
      path = BodyPath::kInline;
    } else if (ex->file != nullptr && ex->file->content != nullptr) {
      path = BodyPath::kCached;
    } else {
      path = BodyPath::kFile;
    }
  }
  metrics_.Record(status, path, ex->bytes_sent);
  if (ex->site != nullptr) {
    ++ex->site->requests;
  } else if (sites_ != nullptr) {
    ++default_site_requests_;
  }
  uint64_t duration_us = 0;
  if (ex->started_ns != 0) {
    duration_us = static_cast<uint64_t>(MonotonicNs() - ex->started_ns) / 1000;
    metrics_.Observe(duration_us);
  }
  if (log_ == nullptr || !ex->logged) return;
  char addr[INET6_ADDRSTRLEN];
  LogLine line;
  const io::TransportInfo transport = loop_->Transport(conn->fd);
  if (real_ip_ && ex->client.family != 0) {
    line.remote_addr = std::string_view(addr, ex->client.Format(addr, sizeof addr));
  } else if (!transport.client.empty()) {
    line.remote_addr = transport.client;  // named by a PROXY protocol header before TLS
  } else {
    const PeerAddress& peer = peers_[conns_->IndexOf(conn)];
    line.remote_addr = std::string_view(addr, peer.Format(addr, sizeof addr));
  }
  line.request = ex->capture.request();
  line.status = status;
  line.bytes_sent = ex->bytes_sent;
  line.body_bytes = ex->bytes_sent > ex->head_len ? ex->bytes_sent - ex->head_len : 0;
  line.referer = ex->capture.referer();
  line.user_agent = ex->capture.agent();
  line.request_time_us = duration_us;
  line.tls_protocol = transport.protocol;
  line.tls_cipher = transport.cipher;
  line.tls_server_name = transport.server_name;
  line.tls_resumed = transport.resumed;
  if (ex->site != nullptr) {
    line.server_name = ex->site->name;
  } else if (sites_ != nullptr) {
    line.server_name = "-";
  }
  log_->Write(line, date_sec_);
}

}  // namespace ringd
