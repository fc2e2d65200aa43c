#include "perf/loadgen_options.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <fstream>

namespace ringd::perf {

void Usage() {
  std::fprintf(stderr,
               "usage: ringd-load --port P [--host 127.0.0.1] [--connections N] [--threads T]\n"
               "  [--duration-s S | --requests R] --path /x [--path /y ...] [--paths-file F]\n"
               "  [--close] [--pipeline K] [--rate RPS] [--bulk] [--idle K] [--idle-hold-s S]\n"
               "  [--header 'Name: value'] [--timeout-ms MS]\n"
               "  [--zipf S | --uniform] [--seed N] [--size-classes BYTES,BYTES,...]\n");
}

bool ParseArgs(int argc, char** argv, Options* o) {
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "ringd-load: %s needs a value\n", a.c_str());
        std::exit(2);
      }
      return argv[++i];
    };
    if (a == "--host")
      o->host = value();
    else if (a == "--port")
      o->port = std::atoi(value().c_str());
    else if (a == "--connections")
      o->connections = std::atoi(value().c_str());
    else if (a == "--threads")
      o->threads = std::atoi(value().c_str());
    else if (a == "--duration-s")
      o->duration_s = std::atof(value().c_str());
    else if (a == "--requests")
      o->max_requests = std::strtoull(value().c_str(), nullptr, 10);
    else if (a == "--path")
      o->paths.push_back(value());
    else if (a == "--paths-file") {
      std::ifstream f(value());
      for (std::string line; std::getline(f, line);) {
        if (!line.empty() && line[0] == '/') o->paths.push_back(line);
      }
    } else if (a == "--close")
      o->close = true;
    else if (a == "--pipeline")
      o->pipeline = std::atoi(value().c_str());
    else if (a == "--rate")
      o->rate = std::atof(value().c_str());
    else if (a == "--bulk")
      o->bulk = true;
    else if (a == "--idle")
      o->idle = std::atoi(value().c_str());
    else if (a == "--idle-hold-s")
      o->idle_hold_s = std::atof(value().c_str());
    else if (a == "--header")
      o->headers.push_back(value());
    else if (a == "--zipf")
      o->zipf = std::atof(value().c_str());
    else if (a == "--uniform")
      o->uniform = true;
    else if (a == "--seed")
      o->seed = std::strtoull(value().c_str(), nullptr, 10);
    else if (a == "--size-classes") {
      const std::string v = value();
      for (size_t pos = 0; pos < v.size();) {
        const size_t comma = std::min(v.find(',', pos), v.size());
        o->size_classes.push_back(std::strtoull(v.substr(pos, comma - pos).c_str(), nullptr, 10));
        pos = comma + 1;
      }
      if (!std::is_sorted(o->size_classes.begin(), o->size_classes.end())) {
        std::fprintf(stderr, "ringd-load: --size-classes must be ascending\n");
        return false;
      }
    } else if (a == "--timeout-ms")
      o->timeout_us = std::strtoull(value().c_str(), nullptr, 10) * 1000;
    else {
      std::fprintf(stderr, "ringd-load: unknown argument %s\n", a.c_str());
      return false;
    }
  }
  if (o->paths.empty() || o->port <= 0 || o->connections < 0 || o->threads < 1 || o->pipeline < 1 ||
      o->pipeline > 64 || o->zipf < 0 || (o->uniform && o->zipf > 0) ||
      o->connections < o->threads * (o->connections > 0)) {
    return false;
  }
  return true;
}

}  // namespace ringd::perf
