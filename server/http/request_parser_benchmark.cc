// Parsing cost of typical requests: a 400-byte browser GET, and a minimal wrk-style GET.
#include <string>

#include "benchmark/benchmark.h"
#include "server/http/request_parser.h"

namespace ringd::http {
namespace {

const std::string kBrowser =
    "GET /assets/css/site.min.css?v=3 HTTP/1.1\r\n"
    "Host: www.example.com\r\n"
    "User-Agent: Mozilla/5.0 (X11; Linux x86_64; rv:120.0) Gecko/20100101 Firefox/120.0\r\n"
    "Accept: text/css,*/*;q=0.1\r\n"
    "Accept-Language: en-US,en;q=0.5\r\n"
    "Accept-Encoding: gzip, deflate, br\r\n"
    "Referer: https://www.example.com/\r\n"
    "Connection: keep-alive\r\n"
    "If-None-Match: \"5f3e1a2b-264\"\r\n"
    "Sec-Fetch-Dest: style\r\n"
    "Cookie: session=7f3a9c1e5b2d4f60; theme=dark\r\n"
    "\r\n";
const std::string kMinimal = "GET /index.html HTTP/1.1\r\nHost: 127.0.0.1:8080\r\n\r\n";

void Parse(benchmark::State& state, const std::string& text) {
  Header headers[64];
  Request req;
  for (auto _ : state) {
    ParseResult r = ParseRequest(text, 0, ParserLimits{}, headers, 64, &req);
    benchmark::DoNotOptimize(r);
    benchmark::DoNotOptimize(req);
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * text.size()));
  state.counters["request_bytes"] = static_cast<double>(text.size());
}

void BM_ParseBrowserRequest(benchmark::State& state) { Parse(state, kBrowser); }
void BM_ParseMinimalRequest(benchmark::State& state) { Parse(state, kMinimal); }
BENCHMARK(BM_ParseBrowserRequest);
BENCHMARK(BM_ParseMinimalRequest);

}  // namespace
}  // namespace ringd::http
