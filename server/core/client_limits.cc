// The connections' per-client limits (--limit-conn, --limit-req) and the real client of a
// request (--real-ip-from), and a site's --allow / --deny: where the shard's tables
// (server/http/client_limits.h) meet its connections. Everything here runs on the shard's thread,
// and only with one of those flags.
#include <nghttp2/nghttp2.h>
#include <sys/socket.h>

#include "io/assert.h"
#include "server/core/connection.h"
#include "server/http/text.h"

namespace ringd {

http::ClientAddress ConnectionMachine::ConnClient(const Connection* conn) const {
  // Named by a PROXY header before TLS: the TlsLoop keeps it as text.
  const std::string_view named = loop_->Transport(conn->fd).client;
  if (!named.empty()) {
    if (std::optional<http::ClientAddress> a = http::ParseAddress(named)) return *a;
  }
  if (peers_ != nullptr) return peers_[conns_->IndexOf(conn)];
  return http::ClientAddress{};
}

bool ConnectionMachine::CountConnection(const Connection* conn, const http::ClientAddress& client) {
  const size_t slot = conns_->IndexOf(conn);
  RINGD_ASSERT(conn_counted_[slot] != 1);  // counted once
  const http::LimitKey key = http::KeyOf(client, static_cast<int>(config_.limit_ipv6_prefix));
  if (!conn_counts_->Acquire(key)) {
    conn_counted_[slot] = 0;
    ++stats_.limit_conn_refused;
    if (error_log_ != nullptr && error_log_->Wants(ErrorLevel::kError)) {
      ErrorEvent e;
      e.cause = "limiting connections by --limit-conn";
      char addr[INET6_ADDRSTRLEN];
      e.client = std::string_view(addr, client.Format(addr, sizeof addr));
      error_log_->Write(e, date_sec_);
    }
    return false;
  }
  conn_keys_[slot] = key;
  conn_counted_[slot] = 1;
  stats_.limit_conn_clients = conn_counts_->clients();
  return true;
}

void ConnectionMachine::UncountConnection(const Connection* conn) {
  const size_t slot = conns_->IndexOf(conn);
  if (conn_counted_[slot] == 1) conn_counts_->Release(conn_keys_[slot]);
  conn_counted_[slot] = 0;
  stats_.limit_conn_clients = conn_counts_->clients();
  // Every client counted holds a connection.
  RINGD_ASSERT(conn_counts_->clients() <= live_);
}

bool ConnectionMachine::RefusedByRate(Connection* conn, Exchange* ex, const http::Request& req) {
  ex->client = ConnClient(conn);
  if (real_ip_) {
    // Every field of that name, in order: a proxy may add its own rather than extend one.
    std::string_view values[8];
    size_t count = 0;
    if (ex->stream_id != 0 && ex->h2_fields[Exchange::kH2RealIpField] != nullptr) {
      const nghttp2_vec v = nghttp2_rcbuf_get_buf(ex->h2_fields[Exchange::kH2RealIpField]);
      values[count++] = std::string_view(reinterpret_cast<const char*>(v.base), v.len);
    }
    for (size_t i = 0; ex->stream_id == 0 && i < req.num_headers; ++i) {
      const http::Header& h = req.headers[i];
      if (h.name.size() != config_.real_ip_header.size() ||
          !http::EqualsIgnoreCase(h.name, config_.real_ip_header)) {
        continue;
      }
      if (count == 8) {  // keep the last eight: the nearest proxies' are last
        for (size_t j = 1; j < 8; ++j) values[j - 1] = values[j];
        count = 7;
      }
      values[count++] = h.value;
    }
    ex->client = http::RealClient(ex->client, values, count, config_.real_ip_from,
                                  config_.real_ip_recursive);
  }
  if (rates_ == nullptr) return false;
  const http::RateTable::Verdict v =
      rates_->Take(http::KeyOf(ex->client, static_cast<int>(config_.limit_ipv6_prefix)), now_ms_);
  stats_.limit_req_evicted = rates_->evictions();
  stats_.limit_req_clients = rates_->used();
  if (v.allowed) return false;
  ++stats_.limit_req_refused;
  http::PlanError(static_cast<int>(config_.limit_req_status), req, &ex->plan);
  ex->plan.keep_alive = req.keep_alive;  // the client did nothing wrong but ask too often
  ex->plan.retry_after_s = v.retry_after_s;
  ex->plan.reason = "limiting requests by --limit-req";
  return true;
}

bool ConnectionMachine::RefusedBySite(Connection* conn, Exchange* ex, const http::Request& req) {
  // With --real-ip-from the client is the one a trusted proxy named (RefusedByRate found it
  // before the site was chosen), as nginx's realip module gives allow/deny; else the
  // connection's (a PROXY header's, or the socket's peer: peers_ is kept with site rules).
  if (!real_ip_) ex->client = ConnClient(conn);
  if (ex->site->client_rules->Allows(ex->client)) return false;
  ++stats_.site_clients_denied;
  http::PlanError(403, req, &ex->plan);  // keeps the connection as the request asked
  ex->plan.reason = kSiteDenied;
  ex->plan_number = ++plans_;
  if (error_log_ != nullptr && error_log_->Wants(ErrorLevelOf(ex->plan.status))) {
    LogPlanError(conn, ex, req);
  }
  return true;
}

}  // namespace ringd
