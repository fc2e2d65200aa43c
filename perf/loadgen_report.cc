#include "perf/loadgen_report.h"

#include <cstdio>
#include <utility>

namespace ringd::perf {

void Result::Merge(const Result& other) {
  latency.Merge(other.latency);
  latency_small.Merge(other.latency_small);
  latency_large.Merge(other.latency_large);
  if (by_size.size() < other.by_size.size()) by_size.resize(other.by_size.size());
  for (size_t k = 0; k < other.by_size.size(); ++k) by_size[k].Merge(other.by_size[k]);
  requests += other.requests;
  bytes += other.bytes;
  errors.connect += other.errors.connect;
  errors.reset += other.errors.reset;
  errors.timeout += other.errors.timeout;
  errors.parse += other.errors.parse;
  errors.eof += other.errors.eof;
  errors.tls += other.errors.tls;
  tls = tls || other.tls;
  tls_counts.handshakes += other.tls_counts.handshakes;
  tls_counts.resumed += other.tls_counts.resumed;
  if (tls_counts.version.empty()) {
    tls_counts.version = other.tls_counts.version;
    tls_counts.cipher = other.tls_counts.cipher;
    tls_counts.group = other.tls_counts.group;
  }
  for (const auto& [code, n] : other.status) status[code] += n;
}

void PrintReport(const Result& total, double seconds, int idle_held,
                 const std::vector<uint64_t>& size_classes) {
  std::printf(
      "{\"requests\": %llu, \"seconds\": %.3f, \"rps\": %.1f, \"bytes\": %llu, "
      "\"bytes_per_s\": %.0f, \"idle_held\": %d, ",
      static_cast<unsigned long long>(total.requests), seconds,
      seconds > 0 ? static_cast<double>(total.requests) / seconds : 0.0,
      static_cast<unsigned long long>(total.bytes),
      seconds > 0 ? static_cast<double>(total.bytes) / seconds : 0.0, idle_held);
  const LatencyHistogram& h = total.latency;
  std::printf(
      "\"latency_us\": {\"mean\": %.1f, \"p50\": %llu, \"p90\": %llu, \"p99\": %llu, "
      "\"p999\": %llu, \"max\": %llu}, ",
      h.mean(), static_cast<unsigned long long>(h.Percentile(50)),
      static_cast<unsigned long long>(h.Percentile(90)),
      static_cast<unsigned long long>(h.Percentile(99)),
      static_cast<unsigned long long>(h.Percentile(99.9)),
      static_cast<unsigned long long>(h.max()));
  for (const auto& [name, s] : {std::pair{"latency_small_us", &total.latency_small},
                                std::pair{"latency_large_us", &total.latency_large}}) {
    std::printf(
        "\"%s\": {\"count\": %llu, \"mean\": %.1f, \"p50\": %llu, \"p99\": %llu, "
        "\"max\": %llu}, ",
        name, static_cast<unsigned long long>(s->count()), s->mean(),
        static_cast<unsigned long long>(s->Percentile(50)),
        static_cast<unsigned long long>(s->Percentile(99)),
        static_cast<unsigned long long>(s->max()));
  }
  if (!total.by_size.empty()) {
    // Class k holds bodies of at least bound k-1 and below bound k ("below": 0 for the last).
    std::printf("\"latency_by_size_us\": [");
    for (size_t k = 0; k < total.by_size.size(); ++k) {
      const LatencyHistogram& c = total.by_size[k];
      std::printf("%s{\"below\": %llu, \"count\": %llu, \"p50\": %llu, \"p99\": %llu}",
                  k ? ", " : "",
                  static_cast<unsigned long long>(k < size_classes.size() ? size_classes[k] : 0),
                  static_cast<unsigned long long>(c.count()),
                  static_cast<unsigned long long>(c.Percentile(50)),
                  static_cast<unsigned long long>(c.Percentile(99)));
    }
    std::printf("], ");
  }
  if (total.tls) {
    // Names from OpenSSL (TLSv1.3, TLS_AES_128_GCM_SHA256, X25519): no quoting needed.
    std::printf(
        "\"tls\": {\"handshakes\": %llu, \"resumed\": %llu, \"version\": \"%s\", "
        "\"cipher\": \"%s\", \"group\": \"%s\"}, ",
        static_cast<unsigned long long>(total.tls_counts.handshakes),
        static_cast<unsigned long long>(total.tls_counts.resumed), total.tls_counts.version.c_str(),
        total.tls_counts.cipher.c_str(), total.tls_counts.group.c_str());
  }
  std::printf(
      "\"errors\": {\"connect\": %llu, \"reset\": %llu, \"timeout\": %llu, \"parse\": %llu, "
      "\"eof\": %llu",
      static_cast<unsigned long long>(total.errors.connect),
      static_cast<unsigned long long>(total.errors.reset),
      static_cast<unsigned long long>(total.errors.timeout),
      static_cast<unsigned long long>(total.errors.parse),
      static_cast<unsigned long long>(total.errors.eof));
  if (total.tls) std::printf(", \"tls\": %llu", static_cast<unsigned long long>(total.errors.tls));
  std::printf("}, \"status\": {");
  bool first = true;
  for (auto& [code, n] : total.status) {
    std::printf("%s\"%d\": %llu", first ? "" : ", ", code, static_cast<unsigned long long>(n));
    first = false;
  }
  std::printf("}}\n");
}

}  // namespace ringd::perf
