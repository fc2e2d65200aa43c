// The access log: one line per response, in nginx's `combined` format (byte for byte, so
// GoAccess, AWStats and log shippers read it) or as one JSON object per line.
//
// Each shard formats its lines into a preallocated scratch buffer and pushes them into its own
// single-producer ring (AccessLogShard); one writer thread per process drains every ring into
// the file with writev, in batches, off the request path. The file is opened O_APPEND, so other
// writers of the same file (a second ringd during an upgrade, copytruncate) never split a line.
// A ring that is full drops the line and counts it: a slow disk never stalls serving. Reopen()
// (SIGUSR1) makes the writer finish the old file and open the path again (logrotate).
//
//   absl::StatusOr<std::unique_ptr<AccessLog>> log =
//       AccessLog::Open(path, AccessLogFormat::kCombined, shards, 1 << 20);   // or an error
//   (*log)->Start();                               // the writer thread
//   (*log)->shard(i)->Write(line, now_sec);        // on shard i's thread
//   (*log)->Reopen();  (*log)->Stop();             // from the main thread
//
// The error log (--error-log) is a second AccessLog on its own path (stderr when none is named),
// written through ErrorLogShard: why a response was an error (a 403, a 404, a 5xx), one line per
// cause in nginx's error_log style, e.g.
//   2026/12/07 13:23:28 [error] shard 0: "secret.txt" failed (13: Permission denied):
//   permission denied, status 403, client: 127.0.0.1, request: "GET /secret.txt HTTP/1.1"
// (one line). Each shard writes at most ErrorLogShard::kLinesPerCause lines per cause per second;
// the rest are counted and said in one line with the cause's next line.
//
//   ErrorLogShard e(error_log->shard(i), i, ErrorLevel::kError);   // on shard i's thread
//   if (e.Wants(ErrorLevelOf(status))) e.Write(event, now_sec);
#pragma once

#include <netinet/in.h>
#include <sys/uio.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "server/http/client_address.h"

namespace ringd {

enum class AccessLogFormat : uint8_t { kCombined, kJson };

// The request's own words, kept in its exchange from parse to the end of the response (the
// receive buffer they came in is gone by then). Fields longer than their share are truncated.
struct RequestCapture {
  static constexpr uint32_t kRequestMax = 2048, kRefererMax = 1024, kAgentMax = 1024;
  // Not initialised: valid once Set has run (an exchange's capture is set only when it is
  // logged, and left untouched otherwise).
  uint16_t request_len, referer_len, agent_len;
  char text[kRequestMax + kRefererMax + kAgentMax];

  void Set(std::string_view request, std::string_view referer, std::string_view agent);
  void Clear() { request_len = referer_len = agent_len = 0; }
  std::string_view request() const { return {text, request_len}; }
  std::string_view referer() const { return {text + kRequestMax, referer_len}; }
  std::string_view agent() const { return {text + kRequestMax + kRefererMax, agent_len}; }
};

// A client's address, taken once per connection (getpeername, or the PROXY protocol header)
// while the log is on.
using PeerAddress = http::ClientAddress;

// Everything one line says. Views are valid for the call only.
struct LogLine {
  std::string_view remote_addr;
  std::string_view request;  // the raw request line; empty if none was parsed
  int status = 0;
  uint64_t body_bytes = 0;  // $body_bytes_sent
  uint64_t bytes_sent = 0;  // head and body
  std::string_view referer, user_agent;
  uint64_t request_time_us = 0;
  int shard = 0;
  std::string_view io;  // the io backend serving it
  // HTTPS (empty for plain HTTP), as nginx's $ssl_protocol, $ssl_cipher, $ssl_server_name and
  // $ssl_session_reused: written by the JSON format (combined stays nginx's, byte for byte).
  std::string_view tls_protocol, tls_cipher, tls_server_name;
  bool tls_resumed = false;
  // With --site: the site that answered ($server_name: its first name, "-" for the default
  // site), at the end of a combined line and as "server_name" in JSON; empty without sites
  // (the combined line stays nginx's own).
  std::string_view server_name;
};

// The local time as the two formats write it, recomputed once per second.
class LogTime {
 public:
  void Update(int64_t sec);
  std::string_view local() const { return {local_, local_len_}; }  // 10/Oct/2000:13:55:36 -0700
  std::string_view iso8601() const { return {iso_, iso_len_}; }    // 2000-10-10T13:55:36-07:00
  std::string_view error_log() const { return {err_, 19}; }        // 2000/10/10 13:55:36

 private:
  int64_t sec_ = INT64_MIN;
  char local_[128];
  char iso_[128];
  char err_[64];
  size_t local_len_ = 0, iso_len_ = 0;
};

// The longest server name written (RFC 6066's bound on a host name; OpenSSL refuses longer).
constexpr size_t kMaxLoggedServerName = 255;

// The longest line the formatters write: every field at its cap, each byte escaped to 6.
constexpr size_t kMaxLogLine = 6 * (RequestCapture::kRequestMax + RequestCapture::kRefererMax +
                                    RequestCapture::kAgentMax + 2 * kMaxLoggedServerName) +
                               768;

// Pure formatters: write one line (with its '\n') into out[0..cap), return its length, or 0
// when cap is too small.
size_t FormatCombined(const LogLine& line, const LogTime& time, char* out, size_t cap);
size_t FormatJson(const LogLine& line, const LogTime& time, char* out, size_t cap);

// A byte ring with one producer (a shard) and one consumer (the writer thread). Only whole
// lines go in; a line that does not fit is dropped and counted.
class LogRing {
 public:
  explicit LogRing(size_t capacity);  // a power of two
  ~LogRing();
  LogRing(const LogRing&) = delete;
  LogRing& operator=(const LogRing&) = delete;
  bool ok() const { return buf_ != nullptr; }

  // Producer.
  bool Push(const char* line, size_t n);
  uint64_t lines() const { return lines_.load(std::memory_order_relaxed); }
  uint64_t dropped() const { return dropped_.load(std::memory_order_relaxed); }
  uint64_t produced() const { return head_.load(std::memory_order_relaxed); }

  // Consumer: the queued bytes as at most two pieces (the ring wraps), then Consume them.
  size_t Peek(iovec iov[2]) const;
  void Consume(size_t n);
  size_t capacity() const { return cap_; }

 private:
  char* buf_ = nullptr;
  size_t cap_ = 0;
  alignas(64) std::atomic<uint64_t> head_{0};  // written by the producer
  uint64_t tail_seen_ = 0;                     // the producer's last look at tail_
  std::atomic<uint64_t> lines_{0}, dropped_{0};
  alignas(64) std::atomic<uint64_t> tail_{0};  // written by the consumer
};

class AccessLog;

// A shard's side of the log: formats into its own scratch buffer and pushes into its ring.
// Used on the shard's thread only; allocates nothing after construction.
class AccessLogShard {
 public:
  AccessLogShard(AccessLog* log, int shard, size_t ring_bytes);
  bool ok() const { return ring_.ok(); }
  // Formats `line` (time from `now_sec`, the realtime second) and queues it.
  void Write(LogLine& line, int64_t now_sec);
  // Queues a line formatted elsewhere (the error log's), with its '\n'.
  void Push(const char* line, size_t n);
  void set_io(std::string_view io) { io_ = io; }
  LogRing& ring() { return ring_; }
  const LogRing& ring() const { return ring_; }

 private:
  AccessLog* log_;
  int shard_;
  std::string_view io_;
  LogRing ring_;
  LogTime time_;
  uint64_t next_kick_;
  std::unique_ptr<char[]> scratch_;
};

class AccessLog {
 public:
  // Opens (creates) `path` for appending; an error of one line, naming `flag`, when it cannot.
  // An empty path writes to stderr (the error log's default), which Reopen leaves alone.
  static absl::StatusOr<std::unique_ptr<AccessLog>> Open(const std::string& path,
                                                         AccessLogFormat format, uint32_t shards,
                                                         size_t ring_bytes,
                                                         const char* flag = "--access-log");
  ~AccessLog();

  AccessLogFormat format() const { return format_; }
  AccessLogShard* shard(int i) { return shards_[i].get(); }

  void Start();   // the writer thread
  void Reopen();  // any thread: the writer reopens the path after what is queued
  void Stop();    // writes out everything queued, then joins the writer
  // Wakes the writer early (a ring is filling up). Any thread.
  void Kick();

  // How often the writer flushes when nobody kicks it.
  static constexpr int kFlushMs = 100;
  // Lines lost by failed writes (not counted by any ring). Any thread.
  uint64_t write_failed_lines() const { return write_failed_.load(std::memory_order_relaxed); }
  // Says on stderr how many lines were dropped since it last did, at most once a minute (the
  // first time at once). Called by one thread (ringd's main thread, every second), never by the
  // writer: a writer stuck in write(2) is exactly when this must still be said.
  void ReportDrops(int64_t now_ms);

 private:
  AccessLog(std::string path, AccessLogFormat format, int fd, int kick_fd, const char* flag);
  void Run();
  bool Drain();  // true if anything was written

  std::string path_;
  AccessLogFormat format_;
  int fd_;
  int kick_fd_;       // eventfd
  const char* what_;  // "access log" or "error log", for its stderr lines
  std::vector<std::unique_ptr<AccessLogShard>> shards_;
  std::thread writer_;
  std::atomic<bool> reopen_{false}, stop_{false};
  std::atomic<uint64_t> write_failed_{0};
  uint64_t reported_drops_ = 0;              // ReportDrops's caller only
  int64_t last_report_ms_ = INT64_MIN;       // ReportDrops's caller only
  int64_t last_write_error_ms_ = INT64_MIN;  // the writer only
  // A write stopped inside a line (a full disk): the next write starts with a newline, so that
  // the torn line ends and no line is glued to it. The writer only.
  bool torn_ = false;
};

// More verbose levels are larger: a line is written when its level <= the configured one.
enum class ErrorLevel : uint8_t { kError = 0, kWarn = 1, kInfo = 2 };

const char* ErrorLevelName(ErrorLevel level);
// "error", "warn" or "info"; false for anything else.
bool ParseErrorLevel(std::string_view text, ErrorLevel* out);

// The level of an error response, as nginx logs them: a refusal the operator can fix (403) and a
// server failure (5xx) are errors; a missing file (404) and a bad request (other 4xx) are info.
inline ErrorLevel ErrorLevelOf(int status) {
  return status == 403 || status >= 500 ? ErrorLevel::kError : ErrorLevel::kInfo;
}

// One line's content. Views are valid for the call only.
struct ErrorEvent {
  ErrorLevel level = ErrorLevel::kError;
  const char* cause = "";    // a static text (the planner's reason): also the rate limit's key
  int status = 0;            // the response's status; 0: none
  std::string_view path;     // the path looked up, relative to the root; empty: none
  int error = 0;             // its errno; 0: none known
  std::string_view client;   // the peer's address; empty: unknown
  std::string_view request;  // the request line; empty: none
};

// The longest line FormatErrorLine writes: the request and the path escaped to 4 bytes a byte.
constexpr size_t kMaxErrorLine = 4 * (RequestCapture::kRequestMax + 4096) + 1024;

// Writes one line (with its '\n') into out[0..cap); returns its length, or 0 when cap is too
// small. `time` is LogTime::error_log().
size_t FormatErrorLine(const ErrorEvent& e, int shard, std::string_view time, char* out,
                       size_t cap);

// A shard's side of the error log. Used on the shard's thread only; allocates nothing after
// construction.
class ErrorLogShard {
 public:
  static constexpr uint32_t kLinesPerCause = 10;  // per shard, per cause, per second
  static constexpr int kCauses = 32;              // causes tracked at once, per shard

  ErrorLogShard(AccessLogShard* out, int shard, ErrorLevel level);
  bool Wants(ErrorLevel level) const { return level <= level_; }
  void Write(const ErrorEvent& e, int64_t now_sec);
  uint64_t suppressed() const { return suppressed_total_; }

 private:
  struct Cause {
    const char* cause = nullptr;
    int error = 0;
    int64_t sec = INT64_MIN;
    uint32_t lines = 0;       // written in `sec`
    uint64_t suppressed = 0;  // not written since the cause's last line
  };
  Cause* Find(const char* cause, int error, int64_t now_sec);

  AccessLogShard* out_;
  int shard_;
  ErrorLevel level_;
  LogTime time_;
  Cause causes_[kCauses];
  uint64_t suppressed_total_ = 0;
  std::unique_ptr<char[]> scratch_;
};

}  // namespace ringd
