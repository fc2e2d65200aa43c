// The floor nghttp2 sets under an HTTP/2 server's CPU per request: a server session and a client
// session in one process, no sockets, the client asking for what h2load asks in h2c-small
// (GET /index.html, 10 streams at once) and the server answering with the fields ringd sends
// and a 612-byte DATA frame; timed is the server session's share alone (nghttp2_session_mem_recv
// of the client's bytes, the response submitted, nghttp2_session_send), as ringd drives it.
// What ringd adds beside it (the planner, the file cache, the loop and the kernel) comes on top.
//   nghttp2_floor [--requests N] [--streams N]
#include <nghttp2/nghttp2.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>

#include "absl/flags/flag.h"
#include "perf/tool_flags.h"

ABSL_FLAG(int, requests, 1000000, "requests timed (after as many again to warm up)");
ABSL_FLAG(int, streams, 10, "streams in flight on the connection, as h2load -m");

namespace {

constexpr char kUsage[] = "usage: nghttp2_floor [--requests N] [--streams N]";
constexpr size_t kBodyBytes = 612;
char body[kBodyBytes];

std::string to_client, to_server;

ssize_t ServerSend(nghttp2_session*, const uint8_t* data, size_t len, int, void*) {
  to_client.append(reinterpret_cast<const char*>(data), len);
  return static_cast<ssize_t>(len);
}
ssize_t ClientSend(nghttp2_session*, const uint8_t* data, size_t len, int, void*) {
  to_server.append(reinterpret_cast<const char*>(data), len);
  return static_cast<ssize_t>(len);
}

ssize_t ReadBody(nghttp2_session*, int32_t, uint8_t* buf, size_t length, uint32_t* flags,
                 nghttp2_data_source*, void*) {
  const size_t n = std::min(length, kBodyBytes);
  std::memcpy(buf, body, n);
  *flags |= NGHTTP2_DATA_FLAG_EOF;
  return static_cast<ssize_t>(n);
}

nghttp2_nv Field(const char* name, const char* value) {
  return nghttp2_nv{reinterpret_cast<uint8_t*>(const_cast<char*>(name)),
                    reinterpret_cast<uint8_t*>(const_cast<char*>(value)), std::strlen(name),
                    std::strlen(value), NGHTTP2_NV_FLAG_NONE};
}

// The server answers each request once its HEADERS end the stream, with ringd's fields.
int OnFrameRecv(nghttp2_session* s, const nghttp2_frame* f, void*) {
  if (f->hd.type != NGHTTP2_HEADERS || (f->hd.flags & NGHTTP2_FLAG_END_STREAM) == 0) return 0;
  const nghttp2_nv nv[] = {
      Field(":status", "200"),
      Field("server", "ringd"),
      Field("date", "Mon, 07 Dec 2026 18:31:08 GMT"),
      Field("content-type", "text/html; charset=utf-8"),
      Field("content-length", "612"),
      Field("last-modified", "Mon, 07 Dec 2026 12:02:54 GMT"),
      Field("etag", "\"6b16a06e-264\""),
      Field("accept-ranges", "bytes"),
  };
  nghttp2_data_provider provider{};
  provider.read_callback = &ReadBody;
  return nghttp2_submit_response(s, f->hd.stream_id, nv, sizeof nv / sizeof nv[0], &provider);
}

}  // namespace

int main(int argc, char** argv) {
  if (ringd::ParseToolFlags(argc, argv, kUsage).size() > 1) {
    std::fprintf(stderr, "%s\n", kUsage);
    return 2;
  }
  const int requests = absl::GetFlag(FLAGS_requests);
  const int streams = absl::GetFlag(FLAGS_streams);
  if (requests <= 0 || streams <= 0 || streams > 100) {
    std::fprintf(stderr, "%s\n", kUsage);
    return 2;
  }
  std::memset(body, 'x', sizeof body);

  nghttp2_session_callbacks* scb;
  nghttp2_session_callbacks_new(&scb);
  nghttp2_session_callbacks_set_send_callback(scb, &ServerSend);
  nghttp2_session_callbacks_set_on_frame_recv_callback(scb, &OnFrameRecv);
  nghttp2_option* opt;
  nghttp2_option_new(&opt);
  nghttp2_option_set_server_fallback_rfc7540_priorities(opt, 0);
  nghttp2_session* server;
  nghttp2_session_server_new2(&server, scb, nullptr, opt);
  const nghttp2_settings_entry settings[] = {{NGHTTP2_SETTINGS_MAX_CONCURRENT_STREAMS, 100},
                                             {NGHTTP2_SETTINGS_NO_RFC7540_PRIORITIES, 1}};
  nghttp2_submit_settings(server, NGHTTP2_FLAG_NONE, settings, 2);

  nghttp2_session_callbacks* ccb;
  nghttp2_session_callbacks_new(&ccb);
  nghttp2_session_callbacks_set_send_callback(ccb, &ClientSend);
  nghttp2_session* client;
  nghttp2_session_client_new(&client, ccb, nullptr);
  // h2load's window: 2^30 - 1 for the stream and the connection, so none ever stalls.
  const nghttp2_settings_entry client_settings[] = {
      {NGHTTP2_SETTINGS_INITIAL_WINDOW_SIZE, (1u << 30) - 1}};
  nghttp2_submit_settings(client, NGHTTP2_FLAG_NONE, client_settings, 1);
  nghttp2_session_set_local_window_size(client, NGHTTP2_FLAG_NONE, 0, (1 << 30) - 1);

  const nghttp2_nv request[] = {
      Field(":method", "GET"), Field(":scheme", "http"), Field(":authority", "127.0.0.1:8080"),
      Field(":path", "/index.html"), Field("user-agent", "h2load nghttp2/1.52.0")};
  double server_ns = 0;
  int done = 0;
  const int rounds = 2 * requests / streams;
  for (int round = 0; round < rounds; ++round) {
    for (int i = 0; i < streams; ++i) {
      nghttp2_submit_request(client, nullptr, request, sizeof request / sizeof request[0], nullptr,
                             nullptr);
    }
    nghttp2_session_send(client);
    const auto t0 = std::chrono::steady_clock::now();
    const ssize_t rv = nghttp2_session_mem_recv(
        server, reinterpret_cast<const uint8_t*>(to_server.data()), to_server.size());
    const int sent = nghttp2_session_send(server);
    const auto t1 = std::chrono::steady_clock::now();
    if (rv != static_cast<ssize_t>(to_server.size()) || sent != 0) {
      std::fprintf(stderr, "nghttp2_floor: the server session failed\n");
      return 1;
    }
    to_server.clear();
    if (round >= rounds / 2) {
      server_ns += std::chrono::duration<double, std::nano>(t1 - t0).count();
      done += streams;
    }
    nghttp2_session_mem_recv(client, reinterpret_cast<const uint8_t*>(to_client.data()),
                             to_client.size());
    to_client.clear();
    nghttp2_session_send(client);
  }
  std::printf("nghttp2 %s, %d streams at once: server session %.0f ns per request (%d requests)\n",
              nghttp2_version(0)->version_str, streams, server_ns / done, done);
  nghttp2_session_del(client);
  nghttp2_session_del(server);
  nghttp2_session_callbacks_del(scb);
  nghttp2_session_callbacks_del(ccb);
  nghttp2_option_del(opt);
  return 0;
}
