// The simulator's HTTP/2 client: nghttp2's client session, driven sans-IO as the server's is.
// The client's requests become bytes for its socket (Output), the socket's bytes become
// responses by stream (Feed), so the sim's oracle checks HTTP/2 answers as it checks HTTP/1.1's.
//
//   SimH2Client h2;  c.outbox += h2.Output();          // the preface and SETTINGS
//   int32_t id = h2.Submit({{":method", "GET"}, ...}, /*body=*/0);
//   c.outbox += h2.Output();
//   h2.Feed(bytes, &why);  for (auto& done : h2.TakeDone()) ...
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

struct nghttp2_session;

namespace ringd::sim {

class SimH2Client {
 public:
  struct Done {
    int32_t stream_id = 0;
    int status = 0;                              // 0: reset before a response head
    std::map<std::string, std::string> headers;  // lower-case names, :status left out
    std::string body;
    uint32_t reset = 0;  // the RST_STREAM error code, when the stream was reset
    bool ended = false;  // the response ended (END_STREAM)
  };

  // `window`: the client's initial stream window (the server's DATA waits on it).
  explicit SimH2Client(uint32_t window);
  ~SimH2Client();
  SimH2Client(const SimH2Client&) = delete;
  SimH2Client& operator=(const SimH2Client&) = delete;

  // A request; `body` bytes of request body follow its HEADERS. Returns its stream id.
  int32_t Submit(const std::vector<std::pair<std::string, std::string>>& fields, uint64_t body);
  // Cancels a stream (RST_STREAM CANCEL), as a browser does for a request it no longer needs.
  void Cancel(int32_t id);
  // Bytes nghttp2 wants to send now (requests, acknowledgements, window updates).
  std::string Output();
  // Bytes from the server; false (with *why) when they break the protocol.
  bool Feed(std::string_view bytes, std::string* why);
  // Streams closed since the last call, in the order they closed.
  std::vector<Done> TakeDone();
  // The GOAWAY the server sent: its last stream id (-1: none yet) and error code.
  int32_t goaway_last_stream() const { return goaway_last_; }
  uint32_t goaway_error() const { return goaway_error_; }
  // Whether a stream id the server may still answer (below or at its GOAWAY's last stream).
  bool MayBeAnswered(int32_t id) const { return goaway_last_ < 0 || id <= goaway_last_; }

 private:
  friend struct SimH2Callbacks;
  nghttp2_session* session_ = nullptr;
  std::map<int32_t, Done> open_;
  std::map<int32_t, uint64_t> body_left_;
  std::vector<Done> done_;
  int32_t goaway_last_ = -1;
  uint32_t goaway_error_ = 0;
};

}  // namespace ringd::sim
