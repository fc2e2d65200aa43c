#include "server/observe/metrics.h"

#include <algorithm>
#include <array>
#include <cstdio>
#include <utility>

namespace ringd {
namespace {

// Label values here are our own words (numbers, fixed names) except io_reason, which is escaped.
std::string Escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (c == '\\' || c == '"') {
      out += '\\';
      out += c;
    } else if (c == '\n') {
      out += "\\n";
    } else {
      out += c;
    }
  }
  return out;
}

class Writer {
 public:
  explicit Writer(std::string* out) : out_(out) {}

  void Family(const char* name, const char* type, const char* help) {
    *out_ += "# HELP ";
    *out_ += name;
    *out_ += ' ';
    *out_ += help;
    *out_ += "\n# TYPE ";
    *out_ += name;
    *out_ += ' ';
    *out_ += type;
    *out_ += '\n';
  }
  // labels: "" or `a="b",c="d"` (without braces).
  void Sample(const char* name, const std::string& labels, uint64_t value) {
    *out_ += name;
    if (!labels.empty()) *out_ += "{" + labels + "}";
    *out_ += ' ';
    *out_ += std::to_string(value);
    *out_ += '\n';
  }
  void SampleF(const char* name, const std::string& labels, double value) {
    char buf[64];
    std::snprintf(buf, sizeof buf, "%.6f", value);
    *out_ += name;
    if (!labels.empty()) *out_ += "{" + labels + "}";
    *out_ += ' ';
    *out_ += buf;
    *out_ += '\n';
  }

 private:
  std::string* out_;
};

std::string ShardLabel(int shard) { return "shard=\"" + std::to_string(shard) + "\""; }

using Shards = std::vector<ShardView>;

// One family of /metrics: its name, type and help, and where its samples come from. A family
// with `per_shard` has one sample per shard that answered; one with `samples` writes its own
// (process-wide values, labelled kinds, the histogram).
struct Metric {
  const char* name;
  const char* type;
  const char* help;
  uint64_t (*per_shard)(const ShardSnapshot&) = nullptr;
  void (*samples)(Writer&, const char* name, const Shards&, const ProcessInfo&) = nullptr;
};

// For each shard that answered, one sample per (kind, value) that `kinds` gives.
template <size_t N>
void KindSamples(Writer& w, const char* name, const Shards& shards,
                 std::array<std::pair<const char*, uint64_t>, N> (*kinds)(const ShardStats&)) {
  for (const ShardView& v : shards) {
    if (!v.up) continue;
    for (const auto& [kind, n] : kinds(v.snapshot->stats)) {
      w.Sample(name, ShardLabel(v.shard) + ",kind=\"" + kind + "\"", n);
    }
  }
}

void InfoSamples(Writer& w, const char* name, const Shards&, const ProcessInfo& p) {
  w.Sample(name,
           "version=\"" + Escape(p.version) + "\",backend=\"" + Escape(p.backend) +
               "\",io_reason=\"" + Escape(p.io_reason) + "\"",
           1);
}

void BuildInfoSamples(Writer& w, const char* name, const Shards&, const ProcessInfo& p) {
  w.Sample(name, "version=\"" + Escape(p.version) + "\",commit=\"" + Escape(p.commit) + "\"", 1);
}

void CertificateSamples(Writer& w, const char* name, const Shards&, const ProcessInfo& p) {
  for (const ProcessInfo::Certificate& c : p.tls_certificates)
    w.Sample(name, "file=\"" + Escape(c.file) + "\"", static_cast<uint64_t>(c.not_after_sec));
}

void ExpiredSamples(Writer& w, const char* name, const Shards&, const ProcessInfo& p) {
  for (const ProcessInfo::Certificate& c : p.tls_certificates)
    w.Sample(name, "file=\"" + Escape(c.file) + "\"", c.not_after_sec <= p.now_sec ? 1 : 0);
}

void OcspDroppedSamples(Writer& w, const char* name, const Shards&, const ProcessInfo& p) {
  for (const std::string& file : p.tls_ocsp_dropped)
    w.Sample(name, "ocsp=\"" + Escape(file) + "\"", 1);
}

void OcspSamples(Writer& w, const char* name, const Shards&, const ProcessInfo& p) {
  for (const ProcessInfo::Certificate& c : p.tls_certificates) {
    if (c.ocsp_file.empty() || c.ocsp_next_update_sec == 0) continue;
    w.Sample(name, "file=\"" + Escape(c.file) + "\",ocsp=\"" + Escape(c.ocsp_file) + "\"",
             static_cast<uint64_t>(c.ocsp_next_update_sec));
  }
}

void ShardUpSamples(Writer& w, const char* name, const Shards& shards, const ProcessInfo&) {
  for (const ShardView& v : shards) w.Sample(name, ShardLabel(v.shard), v.up ? 1 : 0);
}

void RequestSamples(Writer& w, const char* name, const Shards& shards, const ProcessInfo&) {
  for (const ShardView& v : shards) {
    if (!v.up) continue;
    for (int c = 0; c < kStatusClasses; ++c) {
      for (int b = 0; b < kBodyPaths; ++b) {
        w.Sample(name,
                 ShardLabel(v.shard) + ",code=\"" + kStatusClassNames[c] + "\",body=\"" +
                     kBodyPathNames[b] + "\"",
                 v.snapshot->requests.responses[c][b]);
      }
    }
  }
}

// --site: responses per configured site, summed over shards (one series per site: the
// configured names bound them, whatever hosts clients send). None without sites.
void SiteSamples(Writer& w, const char* name, const Shards& shards, const ProcessInfo&) {
  std::vector<std::pair<std::string, uint64_t>> sums;
  for (const ShardView& v : shards) {
    if (!v.up) continue;
    for (const ShardSnapshot::SiteRequests& s : v.snapshot->sites) {
      auto it =
          std::find_if(sums.begin(), sums.end(), [&](const auto& p) { return p.first == s.name; });
      if (it == sums.end()) {
        sums.emplace_back(s.name, s.requests);
      } else {
        it->second += s.requests;
      }
    }
  }
  for (const auto& [site, n] : sums) w.Sample(name, "site=\"" + site + "\"", n);
}

// The histogram is summed over shards: that is what is graphed (per-shard latency is in
// /debug/shards). No samples when no shard answered.
void DurationSamples(Writer& w, const char* name, const Shards& shards, const ProcessInfo&) {
  uint64_t buckets[kDurationBuckets] = {};
  uint64_t sum_us = 0;
  bool any = false;
  for (const ShardView& v : shards) {
    if (!v.up) continue;
    any = true;
    for (int b = 0; b < kDurationBuckets; ++b)
      buckets[b] += v.snapshot->requests.duration_buckets[b];
    sum_us += v.snapshot->requests.duration_sum_us;
  }
  if (!any) return;
  const std::string base = name;
  uint64_t cumulative = 0;
  for (int b = 0; b < kDurationBuckets; ++b) {
    cumulative += buckets[b];
    char le[32];
    if (b < kDurationBuckets - 1) {
      std::snprintf(le, sizeof le, "%g", static_cast<double>(kDurationBoundsUs[b]) / 1e6);
    } else {
      std::snprintf(le, sizeof le, "+Inf");
    }
    w.Sample((base + "_bucket").c_str(), std::string("le=\"") + le + "\"", cumulative);
  }
  w.SampleF((base + "_sum").c_str(), "", static_cast<double>(sum_us) / 1e6);
  w.Sample((base + "_count").c_str(), "", cumulative);
}

// Every family of /metrics, in the order they are written.
#define RINGD_SHARD(expr) [](const ShardSnapshot& s) -> uint64_t { return expr; }
#define RINGD_PROCESS(expr) \
  [](Writer& w, const char* name, const Shards&, const ProcessInfo& p) { w.Sample(name, "", expr); }
const Metric kMetrics[] = {
    {"ringd_info", "gauge", "Always 1: the version and the io backend serving (io_reason: why)",
     nullptr, InfoSamples},
    {"ringd_build_info", "gauge",
     "Always 1: the package version and the commit ringd was built from", nullptr,
     BuildInfoSamples},
    {"ringd_start_time_seconds", "gauge", "When the process started, in Unix time", nullptr,
     RINGD_PROCESS(static_cast<uint64_t>(p.start_time_sec))},
    {"ringd_reload_success", "gauge",
     "1 when the last SIGHUP reload took (and before any), 0 when it was refused and the "
     "configuration before it is kept",
     nullptr, RINGD_PROCESS(p.reload_success ? 1 : 0)},
    {"ringd_reload_timestamp_seconds", "gauge",
     "When the configuration in use was loaded (start-up or the last SIGHUP reload that took), "
     "in Unix time",
     nullptr, RINGD_PROCESS(static_cast<uint64_t>(p.reload_time_sec))},
    {"ringd_draining", "gauge", "1 from the moment a graceful stop begins (readyz is 503)", nullptr,
     RINGD_PROCESS(p.draining ? 1 : 0)},
    {"ringd_shard_up", "gauge",
     "1 if the shard answered this scrape within a second; 0 (stuck, or its drain is over) "
     "leaves its series out",
     nullptr, ShardUpSamples},

    // Requests.
    {"ringd_requests_total", "counter",
     "Responses finished or abandoned, by status class and where the body came from (none, "
     "cached: the small-file cache, file: sendfile or splice, inline: error pages)",
     nullptr, RequestSamples},
    {"ringd_site_requests_total", "counter",
     "Responses by --site (its first name; \"-\": the default site, and requests answered 421), "
     "summed over shards; none without sites",
     nullptr, SiteSamples},
    {"ringd_response_bytes_total", "counter", "Response bytes (head and body) handed to the kernel",
     RINGD_SHARD(s.requests.response_bytes)},
    {"ringd_request_duration_seconds", "histogram",
     "From the parsed request head to the response's last byte handed to the kernel (or the "
     "connection's end)",
     nullptr, DurationSamples},

    // Connections.
    {"ringd_connections_open", "gauge", "Connections open now",
     RINGD_SHARD(s.stats.accepted - s.stats.closed)},
    {"ringd_connections_idle", "gauge", "Keep-alive connections waiting for their next request",
     RINGD_SHARD(s.idle_connections)},
    {"ringd_connections_accepted_total", "counter", "Connections accepted",
     RINGD_SHARD(s.stats.accepted)},
    {"ringd_connections_closed_total", "counter", "Connections closed",
     RINGD_SHARD(s.stats.closed)},
    {"ringd_connections_refused_total", "counter",
     "Connections closed on accept: no connection slot left, or draining",
     RINGD_SHARD(s.stats.overloaded)},
    {"ringd_connections_idle_reclaimed_total", "counter",
     "Idle keep-alive connections closed to make room for newcomers at --max-connections",
     RINGD_SHARD(s.stats.idle_reclaimed)},
    {"ringd_connections_silent_reclaimed_total", "counter",
     "Connections closed for newcomers at --max-connections that had sent no byte of a request "
     "in 500 ms (a TLS handshake that did not finish, a client that said nothing)",
     RINGD_SHARD(s.stats.silent_reclaimed)},
    {"ringd_connections_gave_way_closed_total", "counter",
     "Of those, closed before their lingering close ended, for newcomers waiting for a slot",
     RINGD_SHARD(s.stats.gave_way_closed)},
    {"ringd_connections_parked_total", "counter",
     "Newcomers accepted while every connection slot was taken, that waited for one",
     RINGD_SHARD(s.stats.parked)},
    {"ringd_accept_paused_total", "counter",
     "Times accepting paused at the connection limit with no idle connection to reclaim",
     RINGD_SHARD(s.stats.accept_paused)},
    {"ringd_timeouts_total", "counter",
     "Connections ended by a timeout, by kind (header: --header-timeout-ms, idle: "
     "--keepalive-timeout-ms, send: --send-timeout-ms, discard: --discard-body-timeout-ms)",
     nullptr,
     [](Writer& w, const char* name, const Shards& shards, const ProcessInfo&) {
       KindSamples<4>(w, name, shards, [](const ShardStats& s) {
         return std::array<std::pair<const char*, uint64_t>, 4>{{{"header", s.header_timeouts},
                                                                 {"idle", s.idle_timeouts},
                                                                 {"send", s.send_timeouts},
                                                                 {"discard", s.discard_timeouts}}};
       });
     }},
    {"ringd_connection_errors_total", "counter",
     "Connections ended by an error, by kind (recv, send: a socket error such as a reset; "
     "truncated: a file shrank while being sent)",
     nullptr,
     [](Writer& w, const char* name, const Shards& shards, const ProcessInfo&) {
       KindSamples<3>(w, name, shards, [](const ShardStats& s) {
         return std::array<std::pair<const char*, uint64_t>, 3>{
             {{"recv", s.recv_errors}, {"send", s.send_errors}, {"truncated", s.truncated}}};
       });
     }},
    {"ringd_clients_denied_total", "counter",
     "Connections closed because --allow/--deny refused their client (at accept, or when a PROXY "
     "protocol header named it)",
     RINGD_SHARD(s.stats.clients_denied + s.loop.clients_denied)},
    {"ringd_site_clients_denied_total", "counter",
     "Requests answered 403 because their site's --allow/--deny refused their client (the "
     "connection stays)",
     RINGD_SHARD(s.stats.site_clients_denied)},
    {"ringd_limit_conn_refused_total", "counter",
     "Connections closed because their client held --limit-conn connections already (this "
     "shard's count)",
     RINGD_SHARD(s.stats.limit_conn_refused)},
    {"ringd_limit_conn_clients", "gauge",
     "Clients --limit-conn's tables count connections of (each holds at least one)",
     RINGD_SHARD(s.stats.limit_conn_clients)},
    {"ringd_limit_req_refused_total", "counter",
     "Requests answered --limit-req-status (with Retry-After) because their client asked faster "
     "than --limit-req allows (this shard's bucket)",
     RINGD_SHARD(s.stats.limit_req_refused)},
    {"ringd_limit_req_evicted_total", "counter",
     "Clients --limit-req's table forgot to make room for others while their buckets still held "
     "requests (the table holds --limit-table clients per shard)",
     RINGD_SHARD(s.stats.limit_req_evicted)},
    {"ringd_limit_req_clients", "gauge",
     "Clients --limit-req's tables hold (at most --limit-table per shard)",
     RINGD_SHARD(s.stats.limit_req_clients)},
    {"ringd_proxy_refused_total", "counter",
     "Connections of ,proxy listeners closed for the PROXY protocol, by kind (untrusted: the peer "
     "is not in --proxy-from; missing: the first bytes were no header; malformed: a header that "
     "breaks the spec)",
     nullptr,
     [](Writer& w, const char* name, const Shards& shards, const ProcessInfo&) {
       for (const ShardView& v : shards) {
         if (!v.up) continue;
         const ShardStats& st = v.snapshot->stats;
         const io::LoopStats& lo = v.snapshot->loop;
         const std::pair<const char*, uint64_t> kinds[] = {
             {"untrusted", st.proxy_untrusted},
             {"missing", st.proxy_missing + lo.proxy_missing},
             {"malformed", st.proxy_malformed + lo.proxy_malformed}};
         for (const auto& [kind, n] : kinds) {
           w.Sample(name, ShardLabel(v.shard) + ",kind=\"" + kind + "\"", n);
         }
       }
     }},
    {"ringd_lookup_refused_total", "counter",
     "Requests answered 503 because the open-file cache was full, the request needed too many "
     "lookups, or every directory listing buffer was taken",
     RINGD_SHARD(s.stats.lookup_refused)},
    {"ringd_http2_connections_total", "counter",
     "Connections that spoke HTTP/2 (h2 by ALPN, or h2c with prior knowledge)",
     RINGD_SHARD(s.stats.h2_connections)},
    {"ringd_http2_streams_total", "counter", "HTTP/2 requests (streams) answered",
     RINGD_SHARD(s.stats.h2_streams)},
    {"ringd_http2_streams_refused_total", "counter",
     "HTTP/2 streams refused (REFUSED_STREAM) because the shard had no exchange left",
     RINGD_SHARD(s.stats.h2_streams_refused)},
    {"ringd_http2_malformed_total", "counter",
     "HTTP/2 requests refused as malformed (RST_STREAM PROTOCOL_ERROR, RFC 9113 8.1.1)",
     RINGD_SHARD(s.stats.h2_malformed)},
    {"ringd_http2_connection_errors_total", "counter",
     "HTTP/2 connections ended by a connection error (GOAWAY: a protocol error or a flood)",
     RINGD_SHARD(s.stats.h2_connection_errors)},
    {"ringd_http2_frames_total", "counter", "HTTP/2 RST_STREAM and GOAWAY frames by direction",
     nullptr,
     [](Writer& w, const char* name, const Shards& shards, const ProcessInfo&) {
       KindSamples<4>(w, name, shards, [](const ShardStats& s) {
         return std::array<std::pair<const char*, uint64_t>, 4>{
             {{"rst_stream_received", s.h2_resets_received},
              {"rst_stream_sent", s.h2_resets_sent},
              {"goaway_received", s.h2_goaways_received},
              {"goaway_sent", s.h2_goaways_sent}}};
       });
     }},
    {"ringd_http2_flow_control_stalls_total", "counter",
     "Times an HTTP/2 connection had response bytes ready and the client's window shut, by the "
     "window that held them (connection or stream)",
     nullptr,
     [](Writer& w, const char* name, const Shards& shards, const ProcessInfo&) {
       KindSamples<2>(w, name, shards, [](const ShardStats& s) {
         return std::array<std::pair<const char*, uint64_t>, 2>{
             {{"connection", s.h2_stalls_connection_window},
              {"stream", s.h2_stalls_stream_window}}};
       });
     }},
    {"ringd_pool_released_total", "counter",
     "Pool entries whose pages went back to the kernel after a second unused (a burst's "
     "requests held them while they waited), by pool (input_buffers, exchanges)",
     nullptr,
     [](Writer& w, const char* name, const Shards& shards, const ProcessInfo&) {
       KindSamples<2>(w, name, shards, [](const ShardStats& s) {
         return std::array<std::pair<const char*, uint64_t>, 2>{
             {{"input_buffers", s.input_buffers_released}, {"exchanges", s.exchanges_released}}};
       });
     }},
    {"ringd_http2_library_bytes", "gauge",
     "Bytes nghttp2 holds for the shard's HTTP/2 sessions (its session, stream and HPACK state, "
     "and each session's frame buffer)",
     RINGD_SHARD(s.stats.h2_library_bytes)},
    {"ringd_http2_frame_buffers_released_total", "counter",
     "Times an HTTP/2 connection with no stream for a second handed its frame buffer's pages "
     "back to the kernel",
     RINGD_SHARD(s.stats.h2_frame_buffers_released)},
    {"ringd_sends_queued_total", "counter",
     "File body chunks that waited for a send slot (--send-order=srpt)",
     RINGD_SHARD(s.stats.sends_queued)},
    {"ringd_sends_aged_total", "counter",
     "Queued body chunks started over the slot budget after --send-max-wait-ms",
     RINGD_SHARD(s.stats.sends_aged)},

    // Compression on the fly (--compress).
    {"ringd_compress_hits_total", "counter",
     "Responses served a cached compressed variant (--compress)", RINGD_SHARD(s.compress.hits)},
    {"ringd_compress_misses_total", "counter",
     "Responses that wanted a compressed variant and found none ready: sent as the file is",
     RINGD_SHARD(s.compress.misses)},
    {"ringd_compress_made_total", "counter",
     "Compressions done on the shards' compressor threads (each variant once)",
     RINGD_SHARD(s.compress.made)},
    {"ringd_compress_useless_total", "counter",
     "Of those, no smaller than the file: kept as such, never served",
     RINGD_SHARD(s.compress.useless)},
    {"ringd_compress_dropped_total", "counter",
     "Compressed variants dropped, by kind (changed: their file changed; evicted: for room or "
     "too large for --compress-cache-bytes; refused: misses that started nothing, the "
     "compressor being busy; failed: a read or the library failed)",
     nullptr,
     [](Writer& w, const char* name, const Shards& shards, const ProcessInfo&) {
       for (const ShardView& v : shards) {
         if (!v.up) continue;
         const CompressorStats& c = v.snapshot->compress;
         const std::pair<const char*, uint64_t> kinds[] = {{"changed", c.changed},
                                                           {"evicted", c.evictions},
                                                           {"refused", c.refused},
                                                           {"failed", c.failed}};
         for (const auto& [kind, n] : kinds) {
           w.Sample(name, ShardLabel(v.shard) + ",kind=\"" + kind + "\"", n);
         }
       }
     }},
    {"ringd_compress_bytes_saved_total", "counter",
     "File bytes not sent because a compressed variant was sent instead",
     RINGD_SHARD(s.compress.bytes_saved)},
    {"ringd_compress_cache_bytes", "gauge",
     "Bytes the compressed variants take, per shard (bounded by --compress-cache-bytes)",
     RINGD_SHARD(s.compress.cache_bytes)},
    {"ringd_compress_cache_entries", "gauge", "Compressed variants kept, per shard",
     RINGD_SHARD(s.compress.entries)},

    // File cache.
    {"ringd_file_cache_hits_total", "counter", "Metadata lookups answered from the open-file cache",
     RINGD_SHARD(s.cache.hits)},
    {"ringd_file_cache_misses_total", "counter",
     "Metadata lookups the cache could not answer (not cached, or due for revalidation)",
     RINGD_SHARD(s.cache.misses)},
    {"ringd_file_cache_opens_total", "counter",
     "Files opened and stat-ed by the cache (misses and revalidations)",
     RINGD_SHARD(s.cache.opens)},
    {"ringd_file_cache_evictions_total", "counter",
     "Entries evicted to make room (least recently used first)", RINGD_SHARD(s.cache.evictions)},
    {"ringd_file_cache_content_reads_total", "counter", "Small files read into the content cache",
     RINGD_SHARD(s.cache.content_reads)},
    {"ringd_file_cache_content_dropped_total", "counter",
     "Small-file contents given back to make room for newer ones (their entries stay and serve "
     "from the file)",
     RINGD_SHARD(s.cache.content_dropped)},
    {"ringd_file_cache_entries", "gauge", "Entries in the open-file cache",
     RINGD_SHARD(s.cache.entries)},
    {"ringd_file_cache_missing_paths", "gauge",
     "Paths known missing (absent .br and .gz siblings, 404s), kept beside the entries",
     RINGD_SHARD(s.cache.missing_known)},
    {"ringd_file_cache_content_bytes", "gauge",
     "Memory holding small-file contents (buffers in use times their size)",
     RINGD_SHARD(s.cache.content_buffers* s.cache_content_buffer_bytes)},
    {"ringd_file_cache_content_capacity_bytes", "gauge",
     "--small-file-cache-bytes as carved into buffers",
     RINGD_SHARD(uint64_t{s.content_buffer_capacity} * s.cache_content_buffer_bytes)},

    // io.
    {"ringd_recv_buffers_exhausted_total", "counter",
     "Times the shard's receive buffers ran out (uring ENOBUFS: a receive was delayed)",
     RINGD_SHARD(s.loop.recv_nobufs)},
    {"ringd_recv_pool_bytes", "gauge",
     "Receive memory the kernel has been given (uring: the pool's buffers handed out so far, "
     "more each time it ran dry, up to --recv-pool-kib; epoll: its one read buffer)",
     RINGD_SHARD(s.loop.recv_pool_bytes)},
    {"ringd_io_operations_total", "counter",
     "Operations the shard's loop started (submitted to the ring, or begun on epoll)",
     RINGD_SHARD(s.loop.submitted)},
    {"ringd_io_completions_total", "counter", "Completion callbacks run",
     RINGD_SHARD(s.loop.completed)},
    {"ringd_body_sendfile_bytes_total", "counter",
     "File body bytes sent with sendfile(2): pages already in the page cache (uring, epoll)",
     RINGD_SHARD(s.loop.sendfile_bytes)},
    {"ringd_body_splice_bytes_total", "counter",
     "File body bytes spliced file -> pipe -> socket through the ring (bypass, uring)",
     RINGD_SHARD(s.loop.splice_bytes)},
    {"ringd_page_cache_asks_total", "counter",
     "Times a body's inline send asked the page cache whether its pages were there (an answer is "
     "trusted for --page-cache-trust-ms)",
     RINGD_SHARD(s.loop.page_cache_asks)},
    {"ringd_body_read_send_bytes_total", "counter",
     "File body bytes read into registered body buffers and sent from there (bypass)",
     RINGD_SHARD(s.loop.read_send_bytes)},
    {"ringd_send_zc_total", "counter", "Zero-copy sends issued (--send-zc, uring tiers)",
     RINGD_SHARD(s.loop.send_zc)},
    {"ringd_send_zc_fixed_total", "counter",
     "Zero-copy sends from registered buffers (the small-file cache), of ringd_send_zc_total",
     RINGD_SHARD(s.loop.send_zc_fixed)},
    {"ringd_fixed_buffers_registered", "gauge",
     "Buffers registered with the ring and so pinned, each on its first use (uring tiers)",
     RINGD_SHARD(s.loop.fixed_buffers_registered)},
    {"ringd_recv_held_total", "counter",
     "Receives copied aside because their connection had paused reading (uring)",
     RINGD_SHARD(s.loop.recv_held)},
    {"ringd_splice_pipes_in_use", "gauge", "Splice pipes lent to transfers now (uring)",
     RINGD_SHARD(s.loop.pipes_in_use)},

    // HTTPS (--listen-tls).
    {"ringd_tls_connections", "gauge", "TLS connections open now (or sending their close_notify)",
     RINGD_SHARD(s.loop.tls_connections)},
    {"ringd_tls_handshakes_total", "counter", "TLS handshakes completed, full and resumed",
     RINGD_SHARD(s.loop.tls_handshakes)},
    {"ringd_tls_resumed_handshakes_total", "counter",
     "TLS handshakes that resumed a session (a ticket), of ringd_tls_handshakes_total",
     RINGD_SHARD(s.loop.tls_resumed)},
    {"ringd_tls_handshake_failures_total", "counter",
     "TLS connections whose handshake failed on bad input (an alert, then the close)",
     RINGD_SHARD(s.loop.tls_handshake_failures)},
    {"ringd_tls_bad_records_total", "counter",
     "TLS connections closed on a record refused after the handshake",
     RINGD_SHARD(s.loop.tls_bad_records)},
    {"ringd_tls_handshakes_refused_total", "counter",
     "TLS connections closed at accept because --tls-max-handshakes were under way",
     RINGD_SHARD(s.loop.tls_handshakes_refused)},
    {"ringd_tls_hellos_deferred_total", "counter",
     "ClientHellos left for a later turn of the loop: a turn answers at most 8, so that a flood of "
     "them cannot hold up established connections",
     RINGD_SHARD(s.loop.tls_hellos_deferred)},
    {"ringd_tls_plain_http_total", "counter",
     "Plain HTTP requests sent to a TLS port (answered 400, as nginx does)",
     RINGD_SHARD(s.loop.tls_plain_http)},
    {"ringd_tls_certificate_expiry_seconds", "gauge",
     "When each certificate in use expires (notAfter), in Unix time", nullptr, CertificateSamples},
    {"ringd_tls_ocsp_next_update_seconds", "gauge",
     "When each stapled OCSP response goes stale (nextUpdate), in Unix time; a stale one is no "
     "longer stapled",
     nullptr, OcspSamples},
    {"ringd_tls_certificate_expired", "gauge",
     "1 for each certificate in use past its notAfter (served under --tls-expired=serve; clients "
     "refuse it), 0 for the others",
     nullptr, ExpiredSamples},
    {"ringd_tls_ocsp_dropped", "gauge",
     "1 for each --tls-ocsp response left out of the certificates in use: it answers for no "
     "certificate in use (one fetched before a renewal) or is out of date; handshakes go without "
     "a staple",
     nullptr, OcspDroppedSamples},

    // Access log.
    {"ringd_access_log_enabled", "gauge", "1 if --access-log names a file", nullptr,
     RINGD_PROCESS(p.access_log ? 1 : 0)},
    {"ringd_access_log_lines_total", "counter", "Access log lines the shard queued for the writer",
     RINGD_SHARD(s.log_lines)},
    {"ringd_access_log_dropped_lines_total", "counter",
     "Access log lines dropped because the shard's backlog was full (the disk did not keep up)",
     RINGD_SHARD(s.log_dropped)},
    {"ringd_access_log_lost_lines_total", "counter",
     "Access log lines lost to failed writes (a full disk, an I/O error)", nullptr,
     RINGD_PROCESS(p.access_log_lost_lines)},
};
#undef RINGD_SHARD
#undef RINGD_PROCESS

}  // namespace

std::string FormatPrometheus(const std::vector<ShardView>& shards, const ProcessInfo& p) {
  std::string out;
  out.reserve(16384);
  Writer w(&out);
  for (const Metric& m : kMetrics) {
    w.Family(m.name, m.type, m.help);
    if (m.per_shard != nullptr) {
      for (const ShardView& v : shards) {
        if (v.up) w.Sample(m.name, ShardLabel(v.shard), m.per_shard(*v.snapshot));
      }
    } else {
      m.samples(w, m.name, shards, p);
    }
  }
  return out;
}

std::string FormatDebugShards(const std::vector<ShardView>& shards, const ProcessInfo& p) {
  std::string out = "{\"backend\":\"" + Escape(p.backend) +
                    "\",\"draining\":" + (p.draining ? "true" : "false") + ",\"shards\":[";
  bool first = true;
  for (const ShardView& v : shards) {
    if (!first) out += ',';
    first = false;
    out += "{\"shard\":" + std::to_string(v.shard) + ",\"up\":" + (v.up ? "true" : "false");
    if (v.stopped) out += ",\"stopped\":true";
    if (!v.up) {
      out += '}';
      continue;
    }
    const ShardSnapshot& s = *v.snapshot;
    auto num = [&](const char* key, uint64_t value) {
      out += ",\"";
      out += key;
      out += "\":" + std::to_string(value);
    };
    auto pool = [&](const char* key, uint64_t in_use, uint64_t capacity) {
      if (out.back() != '{') out += ',';
      out += "\"";
      out += key;
      out += "\":{\"in_use\":" + std::to_string(in_use) +
             ",\"capacity\":" + std::to_string(capacity) + "}";
    };
    out += std::string(",\"backend\":\"") + s.backend + "\"";
    out += std::string(",\"draining\":") + (s.draining ? "true" : "false");
    out += std::string(",\"accept_paused\":") + (s.accept_paused ? "true" : "false");
    out += ",\"connections\":{";
    uint64_t open = 0;
    for (int i = 0; i < kConnStates; ++i) {
      out += std::string(i == 0 ? "" : ",") + "\"" + kConnStateNames[i] +
             "\":" + std::to_string(s.connection_states[i]);
      open += s.connection_states[i];
    }
    out += ",\"idle\":" + std::to_string(s.idle_connections);
    out += ",\"open\":" + std::to_string(open) + "}";
    out += ",\"pools\":{";
    pool("connections", open, s.connection_capacity);
    pool("exchanges", s.exchanges, s.exchange_capacity);
    pool("input_buffers", s.input_buffers, s.input_buffer_capacity);
    pool("content_buffers", s.content_buffers, s.content_buffer_capacity);
    pool("pipes", s.pipes_in_use, s.pipe_capacity);
    pool("listings", s.listings, s.listing_capacity);
    out += '}';
    num("cache_entries", s.cache.entries);
    num("cache_pinned", s.cache.pinned);
    num("io_operations_in_flight", s.loop.in_flight);
    uint64_t requests = 0;
    for (const auto& row : s.requests.responses)
      for (uint64_t n : row) requests += n;
    num("requests", requests);
    num("log_dropped", s.log_dropped);
    out += '}';
  }
  out += "]}\n";
  return out;
}

std::string UnusableCertificates(const ProcessInfo& process, int64_t now_sec) {
  std::string out;
  for (const ProcessInfo::Certificate& c : process.tls_certificates) {
    if (c.not_after_sec > now_sec) continue;
    out += "TLS certificate '" + c.file + "' expired " + std::to_string(now_sec - c.not_after_sec) +
           " s ago; replace it and send SIGHUP\n";
  }
  return out;
}

}  // namespace ringd
