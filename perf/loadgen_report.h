// ringd-load's result: what each worker thread counts, merged into one, and the one JSON line the
// harness parses (perf/harness/result.py reads every field).
//
//   Result total;  for (w : workers) total.Merge(w.result);
//   PrintReport(total, seconds, idle_held, size_classes);
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "perf/histogram.h"

namespace ringd::perf {

struct Errors {
  uint64_t connect = 0, reset = 0, timeout = 0, parse = 0, eof = 0;
  uint64_t tls = 0;  // handshakes that failed (--tls)
};

// --tls: handshakes completed within the run, how many resumed a session, and what the first one
// negotiated (every connection asks for the same).
struct TlsCounts {
  uint64_t handshakes = 0, resumed = 0;
  std::string version, cipher, group;
};

// Responses with bodies below this also go into Result::latency_small, the others into
// latency_large: in a size mix, the percentiles of all requests are set by the few multi-MiB
// downloads, the small ones' by pages and assets (and a send scheduler trades one for the other).
constexpr uint64_t kSmallBody = 1 << 20;

struct Result {
  LatencyHistogram latency;
  LatencyHistogram latency_small;
  std::vector<LatencyHistogram> by_size;  // one per --size-classes class, and one above the last
  LatencyHistogram latency_large;
  uint64_t requests = 0, bytes = 0;
  Errors errors;
  std::map<int, uint64_t> status;
  bool tls = false;  // print the TLS counts and the tls error kind
  TlsCounts tls_counts;

  void Merge(const Result& other);
};

// Prints the result as one JSON object on stdout; `size_classes` are the --size-classes bounds.
void PrintReport(const Result& total, double seconds, int idle_held,
                 const std::vector<uint64_t>& size_classes);

}  // namespace ringd::perf
