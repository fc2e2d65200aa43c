#include "server/metrics.h"

#include <cstdio>
#include <functional>

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

// A counter or gauge with one sample per shard that answered.
void PerShard(Writer& w, const std::vector<ShardView>& shards, const char* name, const char* type,
              const char* help, const std::function<uint64_t(const ShardSnapshot&)>& get) {
  w.Family(name, type, help);
  for (const ShardView& v : shards) {
    if (v.up) w.Sample(name, ShardLabel(v.shard), get(*v.snapshot));
  }
}

}  // namespace

std::string FormatPrometheus(const std::vector<ShardView>& shards, const ProcessInfo& p) {
  std::string out;
  out.reserve(16384);
  Writer w(&out);

  w.Family("ringd_info", "gauge",
           "Always 1: the version and the io backend serving (io_reason: why)");
  w.Sample("ringd_info",
           "version=\"" + Escape(p.version) + "\",backend=\"" + Escape(p.backend) +
               "\",io_reason=\"" + Escape(p.io_reason) + "\"",
           1);
  w.Family("ringd_start_time_seconds", "gauge", "When the process started, in Unix time");
  w.Sample("ringd_start_time_seconds", "", static_cast<uint64_t>(p.start_time_sec));
  w.Family("ringd_draining", "gauge", "1 from the moment a graceful stop begins (readyz is 503)");
  w.Sample("ringd_draining", "", p.draining ? 1 : 0);
  w.Family("ringd_shard_up", "gauge",
           "1 if the shard answered this scrape within a second; 0 (stuck, or its drain is "
           "over) leaves its series out");
  for (const ShardView& v : shards) w.Sample("ringd_shard_up", ShardLabel(v.shard), v.up ? 1 : 0);

  // Requests.
  w.Family("ringd_requests_total", "counter",
           "Responses finished or abandoned, by status class and where the body came from "
           "(none, cached: the small-file cache, file: sendfile or splice, inline: error pages)");
  for (const ShardView& v : shards) {
    if (!v.up) continue;
    for (int c = 0; c < kStatusClasses; ++c) {
      for (int b = 0; b < kBodyPaths; ++b) {
        w.Sample("ringd_requests_total",
                 ShardLabel(v.shard) + ",code=\"" + kStatusClassNames[c] + "\",body=\"" +
                     kBodyPathNames[b] + "\"",
                 v.snapshot->requests.responses[c][b]);
      }
    }
  }
  PerShard(w, shards, "ringd_response_bytes_total", "counter",
           "Response bytes (head and body) handed to the kernel",
           [](const ShardSnapshot& s) { return s.requests.response_bytes; });

  // The histogram is summed over shards: that is what is graphed (per-shard latency is in
  // /debug/shards).
  w.Family("ringd_request_duration_seconds", "histogram",
           "From the parsed request head to the response's last byte handed to the kernel (or "
           "the connection's end)");
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
  if (any) {
    uint64_t cumulative = 0;
    for (int b = 0; b < kDurationBuckets; ++b) {
      cumulative += buckets[b];
      char le[32];
      if (b < kDurationBuckets - 1) {
        std::snprintf(le, sizeof le, "%g", static_cast<double>(kDurationBoundsUs[b]) / 1e6);
      } else {
        std::snprintf(le, sizeof le, "+Inf");
      }
      w.Sample("ringd_request_duration_seconds_bucket", std::string("le=\"") + le + "\"",
               cumulative);
    }
    w.SampleF("ringd_request_duration_seconds_sum", "", static_cast<double>(sum_us) / 1e6);
    w.Sample("ringd_request_duration_seconds_count", "", cumulative);
  }

  // Connections.
  PerShard(w, shards, "ringd_connections_open", "gauge", "Connections open now",
           [](const ShardSnapshot& s) { return uint64_t{s.stats.accepted - s.stats.closed}; });
  PerShard(w, shards, "ringd_connections_idle", "gauge",
           "Keep-alive connections waiting for their next request",
           [](const ShardSnapshot& s) { return uint64_t{s.idle_connections}; });
  PerShard(w, shards, "ringd_connections_accepted_total", "counter", "Connections accepted",
           [](const ShardSnapshot& s) { return s.stats.accepted; });
  PerShard(w, shards, "ringd_connections_closed_total", "counter", "Connections closed",
           [](const ShardSnapshot& s) { return s.stats.closed; });
  PerShard(w, shards, "ringd_connections_refused_total", "counter",
           "Connections closed on accept: no connection slot left, or draining",
           [](const ShardSnapshot& s) { return s.stats.overloaded; });
  PerShard(w, shards, "ringd_connections_idle_reclaimed_total", "counter",
           "Idle keep-alive connections closed to make room for newcomers at --max-connections",
           [](const ShardSnapshot& s) { return s.stats.idle_reclaimed; });
  PerShard(w, shards, "ringd_connections_gave_way_closed_total", "counter",
           "Of those, closed before their lingering close ended, for newcomers waiting for a slot",
           [](const ShardSnapshot& s) { return s.stats.gave_way_closed; });
  PerShard(w, shards, "ringd_connections_parked_total", "counter",
           "Newcomers accepted while every connection slot was taken, that waited for one",
           [](const ShardSnapshot& s) { return s.stats.parked; });
  PerShard(w, shards, "ringd_accept_paused_total", "counter",
           "Times accepting paused at the connection limit with no idle connection to reclaim",
           [](const ShardSnapshot& s) { return s.stats.accept_paused; });
  w.Family("ringd_timeouts_total", "counter",
           "Connections ended by a timeout, by kind (header: --header-timeout-ms, idle: "
           "--keepalive-timeout-ms, send: --send-timeout-ms, discard: --discard-body-timeout-ms)");
  for (const ShardView& v : shards) {
    if (!v.up) continue;
    const ShardStats& s = v.snapshot->stats;
    const std::pair<const char*, uint64_t> kinds[] = {{"header", s.header_timeouts},
                                                      {"idle", s.idle_timeouts},
                                                      {"send", s.send_timeouts},
                                                      {"discard", s.discard_timeouts}};
    for (const auto& [kind, n] : kinds) {
      w.Sample("ringd_timeouts_total", ShardLabel(v.shard) + ",kind=\"" + kind + "\"", n);
    }
  }
  w.Family("ringd_connection_errors_total", "counter",
           "Connections ended by an error, by kind (recv, send: a socket error such as a reset; "
           "truncated: a file shrank while being sent)");
  for (const ShardView& v : shards) {
    if (!v.up) continue;
    const ShardStats& s = v.snapshot->stats;
    const std::pair<const char*, uint64_t> kinds[] = {
        {"recv", s.recv_errors}, {"send", s.send_errors}, {"truncated", s.truncated}};
    for (const auto& [kind, n] : kinds) {
      w.Sample("ringd_connection_errors_total", ShardLabel(v.shard) + ",kind=\"" + kind + "\"", n);
    }
  }
  PerShard(w, shards, "ringd_lookup_refused_total", "counter",
           "Requests answered 503 because the open-file cache was full or the request needed too "
           "many lookups",
           [](const ShardSnapshot& s) { return s.stats.lookup_refused; });
  PerShard(w, shards, "ringd_sends_queued_total", "counter",
           "File body chunks that waited for a send slot (--send-order=srpt)",
           [](const ShardSnapshot& s) { return s.stats.sends_queued; });
  PerShard(w, shards, "ringd_sends_aged_total", "counter",
           "Queued body chunks started over the slot budget after --send-max-wait-ms",
           [](const ShardSnapshot& s) { return s.stats.sends_aged; });

  // File cache.
  PerShard(w, shards, "ringd_file_cache_hits_total", "counter",
           "Metadata lookups answered from the open-file cache",
           [](const ShardSnapshot& s) { return s.cache.hits; });
  PerShard(w, shards, "ringd_file_cache_misses_total", "counter",
           "Metadata lookups the cache could not answer (not cached, or due for revalidation)",
           [](const ShardSnapshot& s) { return s.cache.misses; });
  PerShard(w, shards, "ringd_file_cache_opens_total", "counter",
           "Files opened and stat-ed by the cache (misses and revalidations)",
           [](const ShardSnapshot& s) { return s.cache.opens; });
  PerShard(w, shards, "ringd_file_cache_evictions_total", "counter",
           "Entries evicted to make room (least recently used first)",
           [](const ShardSnapshot& s) { return s.cache.evictions; });
  PerShard(w, shards, "ringd_file_cache_content_reads_total", "counter",
           "Small files read into the content cache",
           [](const ShardSnapshot& s) { return s.cache.content_reads; });
  PerShard(w, shards, "ringd_file_cache_content_dropped_total", "counter",
           "Small-file contents given back to make room for newer ones (their entries stay and "
           "serve from the file)",
           [](const ShardSnapshot& s) { return s.cache.content_dropped; });
  PerShard(w, shards, "ringd_file_cache_entries", "gauge", "Entries in the open-file cache",
           [](const ShardSnapshot& s) { return s.cache.entries; });
  PerShard(w, shards, "ringd_file_cache_missing_paths", "gauge",
           "Paths known missing (absent .br and .gz siblings, 404s), kept beside the entries",
           [](const ShardSnapshot& s) { return s.cache.missing_known; });
  PerShard(w, shards, "ringd_file_cache_content_bytes", "gauge",
           "Memory holding small-file contents (buffers in use times their size)",
           [](const ShardSnapshot& s) {
             return s.cache.content_buffers * s.cache_content_buffer_bytes;
           });
  PerShard(w, shards, "ringd_file_cache_content_capacity_bytes", "gauge",
           "--small-file-cache-bytes as carved into buffers", [](const ShardSnapshot& s) {
             return uint64_t{s.content_buffer_capacity} * s.cache_content_buffer_bytes;
           });

  // io.
  PerShard(w, shards, "ringd_recv_buffers_exhausted_total", "counter",
           "Times the shard's receive buffers ran out (uring ENOBUFS: a receive was delayed)",
           [](const ShardSnapshot& s) { return s.loop.recv_nobufs; });
  PerShard(w, shards, "ringd_io_operations_total", "counter",
           "Operations the shard's loop started (submitted to the ring, or begun on epoll)",
           [](const ShardSnapshot& s) { return s.loop.submitted; });
  PerShard(w, shards, "ringd_io_completions_total", "counter", "Completion callbacks run",
           [](const ShardSnapshot& s) { return s.loop.completed; });
  PerShard(w, shards, "ringd_body_sendfile_bytes_total", "counter",
           "File body bytes sent with sendfile(2): pages already in the page cache (uring, epoll)",
           [](const ShardSnapshot& s) { return s.loop.sendfile_bytes; });
  PerShard(w, shards, "ringd_body_splice_bytes_total", "counter",
           "File body bytes spliced file -> pipe -> socket through the ring (bypass, uring)",
           [](const ShardSnapshot& s) { return s.loop.splice_bytes; });
  PerShard(w, shards, "ringd_body_read_send_bytes_total", "counter",
           "File body bytes read into registered body buffers and sent from there (bypass)",
           [](const ShardSnapshot& s) { return s.loop.read_send_bytes; });
  PerShard(w, shards, "ringd_send_zc_total", "counter",
           "Zero-copy sends issued (--send-zc, uring tiers)",
           [](const ShardSnapshot& s) { return s.loop.send_zc; });
  PerShard(w, shards, "ringd_send_zc_fixed_total", "counter",
           "Zero-copy sends from registered buffers (the small-file cache), of ringd_send_zc_total",
           [](const ShardSnapshot& s) { return s.loop.send_zc_fixed; });
  PerShard(w, shards, "ringd_recv_held_total", "counter",
           "Receives copied aside because their connection had paused reading (uring)",
           [](const ShardSnapshot& s) { return s.loop.recv_held; });
  PerShard(w, shards, "ringd_splice_pipes_in_use", "gauge",
           "Splice pipes lent to transfers now (uring)",
           [](const ShardSnapshot& s) { return s.loop.pipes_in_use; });

  // Access log.
  w.Family("ringd_access_log_enabled", "gauge", "1 if --access-log names a file");
  w.Sample("ringd_access_log_enabled", "", p.access_log ? 1 : 0);
  PerShard(w, shards, "ringd_access_log_lines_total", "counter",
           "Access log lines the shard queued for the writer",
           [](const ShardSnapshot& s) { return s.log_lines; });
  PerShard(w, shards, "ringd_access_log_dropped_lines_total", "counter",
           "Access log lines dropped because the shard's backlog was full (the disk did not keep "
           "up)",
           [](const ShardSnapshot& s) { return s.log_dropped; });
  w.Family("ringd_access_log_lost_lines_total", "counter",
           "Access log lines lost to failed writes (a full disk, an I/O error)");
  w.Sample("ringd_access_log_lost_lines_total", "", p.access_log_lost_lines);
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
    out += '}';
    num("cache_entries", s.cache.entries);
    num("io_operations_in_flight", s.loop.submitted - s.loop.completed);
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

}  // namespace ringd
