// ringd-load's command line: what to load, how hard, for how long.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace ringd::perf {

struct Options {
  std::string host = "127.0.0.1";
  int port = 8080;
  int connections = 10;
  int threads = 1;
  double duration_s = 5;
  uint64_t max_requests = 0;  // 0: run for duration_s
  std::vector<std::string> paths;
  bool close = false;
  int pipeline = 1;
  double rate = 0;  // requests per second over all connections; 0: closed loop
  bool bulk = false;
  int idle = 0;
  int idle_setup = 100;      // idle connections being set up at once (0: all of them at once)
  double idle_settle_s = 0;  // seconds the idle connections are held before IDLE_READY
  double idle_hold_s = 0;    // with no active connections: hold the idle ones this long
  uint64_t timeout_us = 10000000;
  std::vector<std::string> headers;  // a "Host: ..." among them replaces the one from `host`
  double zipf = 0;  // > 0: each request picks a path at random, Zipf with this exponent over
                    // the paths in the order given (the first the most popular); 0: round robin
  // Each request picks a path uniformly at random: clients that do not walk the same list in
  // step (round robin has connection i read path k right after connection i + 1 did).
  bool uniform = false;
  uint64_t seed = 1;                   // of the random picks
  std::vector<uint64_t> size_classes;  // ascending body-size bounds: latency per size class
  // HTTPS (perf/loadgen_tls.h): every connection a TLS session; bodies are read and decrypted.
  bool tls = false;
  bool tls_resume = false;  // each connection offers the session its slot's last one ended with
  std::string tls_groups = "X25519";
  std::string tls_ciphersuites = "TLS_AES_128_GCM_SHA256";  // TLS 1.3
  std::string tls_sni = "localhost";
  int tls_max_version = 13;  // 12: TLS 1.2 only
};

// The request's Host line: "Host: <host>\r\n", or none when `headers` gives one.
std::string HostLine(const Options& o);

void Usage();
// Fills `o` from the arguments; false (after a line on stderr) if they do not make a run.
bool ParseArgs(int argc, char** argv, Options* o);

}  // namespace ringd::perf
