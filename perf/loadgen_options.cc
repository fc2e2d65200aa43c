#include "perf/loadgen_options.h"

#include <strings.h>

#include <algorithm>
#include <cstdio>
#include <fstream>

#include "absl/flags/flag.h"
#include "perf/tool_flags.h"
#include "server/http/decimal.h"

namespace {

// --path, --paths-file and --header may be given many times: abseil keeps a flag's last value,
// so each one's OnUpdate appends the value it was just given, in command-line order. (OnUpdate
// also runs once at registration, with the empty default, which adds nothing.)
std::vector<std::string>& GivenPaths() {
  static std::vector<std::string> paths;
  return paths;
}
std::vector<std::string>& GivenHeaders() {
  static std::vector<std::string> headers;
  return headers;
}

}  // namespace

ABSL_FLAG(std::string, host, "127.0.0.1", "the server's IPv4 address");
ABSL_FLAG(int, port, 8080, "the server's port");
ABSL_FLAG(int, connections, 10, "connections over all threads (0: only --idle ones)");
ABSL_FLAG(int, threads, 1, "client threads, each with its own share of the connections");
ABSL_FLAG(double, duration_s, 5, "seconds to run (--duration-s)");
ABSL_FLAG(uint64_t, requests, 0, "stop after this many requests (0: run for --duration-s)");
ABSL_FLAG(std::string, path, "", "a path to request; repeat for more").OnUpdate([] {
  std::string p = absl::GetFlag(FLAGS_path);
  if (!p.empty()) GivenPaths().push_back(std::move(p));
});
ABSL_FLAG(std::string, paths_file, "",
          "a file of paths, one per line (lines not starting with / are skipped; --paths-file)")
    .OnUpdate([] {
      const std::string file = absl::GetFlag(FLAGS_paths_file);
      if (file.empty()) return;
      std::ifstream f(file);
      for (std::string line; std::getline(f, line);) {
        if (!line.empty() && line[0] == '/') GivenPaths().push_back(line);
      }
    });
ABSL_FLAG(bool, close, false, "one request per connection (Connection: close)");
ABSL_FLAG(int, pipeline, 1, "requests in flight per connection, 1 to 64");
ABSL_FLAG(double, rate, 0, "requests per second over all connections (0: closed loop)");
ABSL_FLAG(bool, bulk, false, "discard response bodies in the kernel (MSG_TRUNC)");
ABSL_FLAG(int, idle, 0, "idle keep-alive connections held during the run");
ABSL_FLAG(int, idle_setup, 100,
          "idle connections being set up at once, as clients arriving over time (0: all --idle at "
          "once, a burst)");
ABSL_FLAG(double, idle_settle_s, 0,
          "hold the idle connections this long, idle, before IDLE_READY (the harness reads the "
          "server's memory then)");
ABSL_FLAG(double, idle_hold_s, 0,
          "with no active connections: hold the idle ones this long (--idle-hold-s)");
ABSL_FLAG(std::string, header, "",
          "a request header line 'Name: value'; repeat for more ('Host: NAME' replaces the Host "
          "field --host gives)")
    .OnUpdate([] {
      std::string h = absl::GetFlag(FLAGS_header);
      if (!h.empty()) GivenHeaders().push_back(std::move(h));
    });
ABSL_FLAG(double, zipf, 0, "> 0: paths drawn Zipf-distributed with this exponent");
ABSL_FLAG(bool, uniform, false, "paths drawn uniformly at random");
ABSL_FLAG(uint64_t, seed, 1, "seed of the random picks");
ABSL_FLAG(std::vector<std::string>, size_classes, {},
          "ascending body-size bounds in bytes, comma-separated: latency per size class "
          "(--size-classes)");
ABSL_FLAG(bool, tls, false,
          "HTTPS: every connection a TLS session (bodies are decrypted, never discarded)");
ABSL_FLAG(bool, tls_resume, false,
          "each connection offers the newest ticket its slot's earlier connections were sent, "
          "a TLS 1.3 ticket once as browsers do (--tls-resume)");
ABSL_FLAG(std::string, tls_groups, "X25519", "key exchange groups, OpenSSL's list (--tls-groups)");
ABSL_FLAG(std::string, tls_ciphersuites, "TLS_AES_128_GCM_SHA256",
          "TLS 1.3 ciphersuites, OpenSSL's list (--tls-ciphersuites)");
ABSL_FLAG(std::string, tls_sni, "localhost", "server name sent (--tls-sni; empty: none)");
ABSL_FLAG(std::string, tls_max_version, "1.3", "1.3, or 1.2 for TLS 1.2 only (--tls-max-version)");
ABSL_FLAG(uint64_t, timeout_ms, 10000, "a response that takes longer is an error (--timeout-ms)");

namespace ringd::perf {

std::string HostLine(const Options& o) {
  for (const std::string& h : o.headers) {
    if (strncasecmp(h.c_str(), "host:", 5) == 0) return "";
  }
  return "Host: " + o.host + "\r\n";
}

namespace {
constexpr char kUsage[] =
    "usage: ringd-load --port P [--host 127.0.0.1] [--connections N] [--threads T]\n"
    "  [--duration-s S | --requests R] --path /x [--path /y ...] [--paths-file F]\n"
    "  [--close] [--pipeline K] [--rate RPS] [--bulk] [--idle K] [--idle-setup N] [--idle-settle-s "
    "S] [--idle-hold-s S]\n"
    "  [--header 'Name: value'] [--timeout-ms MS]\n"
    "  [--zipf S | --uniform] [--seed N] [--size-classes BYTES,BYTES,...]\n"
    "  [--tls [--tls-resume] [--tls-groups G] [--tls-ciphersuites S] [--tls-sni NAME]\n"
    "   [--tls-max-version 1.2|1.3]]\n";
}  // namespace

void Usage() { std::fputs(kUsage, stderr); }

bool ParseArgs(int argc, char** argv, Options* o) {
  const std::vector<char*> positional = ParseToolFlags(argc, argv, kUsage);
  if (positional.size() > 1) {
    std::fprintf(stderr, "ringd-load: unknown argument %s\n", positional[1]);
    return false;
  }
  o->host = absl::GetFlag(FLAGS_host);
  o->port = absl::GetFlag(FLAGS_port);
  o->connections = absl::GetFlag(FLAGS_connections);
  o->threads = absl::GetFlag(FLAGS_threads);
  o->duration_s = absl::GetFlag(FLAGS_duration_s);
  o->max_requests = absl::GetFlag(FLAGS_requests);
  o->paths = GivenPaths();
  o->close = absl::GetFlag(FLAGS_close);
  o->pipeline = absl::GetFlag(FLAGS_pipeline);
  o->rate = absl::GetFlag(FLAGS_rate);
  o->bulk = absl::GetFlag(FLAGS_bulk);
  o->idle = absl::GetFlag(FLAGS_idle);
  o->idle_hold_s = absl::GetFlag(FLAGS_idle_hold_s);
  o->idle_setup = absl::GetFlag(FLAGS_idle_setup);
  o->idle_settle_s = absl::GetFlag(FLAGS_idle_settle_s);
  o->timeout_us = absl::GetFlag(FLAGS_timeout_ms) * 1000;
  o->headers = GivenHeaders();
  o->zipf = absl::GetFlag(FLAGS_zipf);
  o->uniform = absl::GetFlag(FLAGS_uniform);
  o->seed = absl::GetFlag(FLAGS_seed);
  o->size_classes.clear();
  for (const std::string& bound : absl::GetFlag(FLAGS_size_classes)) {
    uint64_t bytes;
    if (!http::ParseDecimal(bound, &bytes)) {
      std::fprintf(stderr, "ringd-load: --size-classes: '%s' is not a byte count\n", bound.c_str());
      return false;
    }
    o->size_classes.push_back(bytes);
  }
  o->tls = absl::GetFlag(FLAGS_tls);
  o->tls_resume = absl::GetFlag(FLAGS_tls_resume);
  o->tls_groups = absl::GetFlag(FLAGS_tls_groups);
  o->tls_ciphersuites = absl::GetFlag(FLAGS_tls_ciphersuites);
  o->tls_sni = absl::GetFlag(FLAGS_tls_sni);
  const std::string version = absl::GetFlag(FLAGS_tls_max_version);
  if (version != "1.2" && version != "1.3") {
    std::fprintf(stderr, "ringd-load: --tls-max-version is 1.2 or 1.3, not '%s'\n",
                 version.c_str());
    return false;
  }
  o->tls_max_version = version == "1.2" ? 12 : 13;
  if (o->tls_resume && !o->tls) {
    std::fprintf(stderr, "ringd-load: --tls-resume needs --tls\n");
    return false;
  }
  // A TLS client cannot leave bodies to the kernel: every record is decrypted to be checked.
  if (o->tls && o->bulk) {
    std::fprintf(stderr,
                 "ringd-load: --bulk (MSG_TRUNC) is plaintext only; --tls reads every body\n");
    return false;
  }
  if (!std::is_sorted(o->size_classes.begin(), o->size_classes.end())) {
    std::fprintf(stderr, "ringd-load: --size-classes must be ascending\n");
    return false;
  }
  if (o->paths.empty() || o->port <= 0 || o->connections < 0 || o->threads < 1 || o->pipeline < 1 ||
      o->pipeline > 64 || o->zipf < 0 || (o->uniform && o->zipf > 0) ||
      o->connections < o->threads * (o->connections > 0)) {
    return false;
  }
  return true;
}

}  // namespace ringd::perf
