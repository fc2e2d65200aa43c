#include "server/core/access_log.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

#include "io/assert.h"
#include "server/http/range.h"

namespace ringd {
namespace {

constexpr char kHex[] = "0123456789ABCDEF";
constexpr const char* kMonths[] = {"Jan", "Feb", "Mar", "Apr", "May", "Jun",
                                   "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"};

int64_t NowMs() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

// Appends into [p, end); every helper returns the new position, or nullptr once out of room.
class Out {
 public:
  Out(char* p, size_t cap) : p_(p), end_(p + cap) {}
  bool ok() const { return p_ != nullptr; }
  char* pos() const { return p_; }

  void Raw(std::string_view s) {
    if (p_ == nullptr) return;
    if (static_cast<size_t>(end_ - p_) < s.size()) {
      p_ = nullptr;
      return;
    }
    std::memcpy(p_, s.data(), s.size());
    p_ += s.size();
  }
  void Char(char c) {
    if (p_ == nullptr) return;
    if (p_ == end_) {
      p_ = nullptr;
      return;
    }
    *p_++ = c;
  }
  void Uint(uint64_t v) {
    char digits[20];
    const size_t n = http::FormatUint(v, digits);
    if (p_ == nullptr || static_cast<size_t>(end_ - p_) < n) {
      p_ = nullptr;
      return;
    }
    std::memcpy(p_, digits, n);
    p_ += n;
  }
  void Int(int64_t v) {
    if (v < 0) {
      Char('-');
      Uint(static_cast<uint64_t>(-(v + 1)) + 1);
    } else {
      Uint(static_cast<uint64_t>(v));
    }
  }
  // nginx's escape=default: '"', '\' and bytes outside 0x20..0x7e become \xHH; an empty value
  // is written "-" (as nginx writes an empty variable).
  void Nginx(std::string_view s) {
    if (s.empty()) return Char('-');
    for (unsigned char c : s) {
      if (c == '"' || c == '\\' || c < 0x20 || c >= 0x7f) {
        Char('\\');
        Char('x');
        Char(kHex[c >> 4]);
        Char(kHex[c & 15]);
      } else {
        Char(static_cast<char>(c));
      }
    }
  }
  // A JSON string body. Bytes from 0x80 are written as \u00XX (read as Latin-1): the output is
  // valid UTF-8 JSON whatever the client sent.
  void Json(std::string_view s) {
    for (unsigned char c : s) {
      if (c == '"' || c == '\\') {
        Char('\\');
        Char(static_cast<char>(c));
      } else if (c == '\n') {
        Raw("\\n");
      } else if (c == '\r') {
        Raw("\\r");
      } else if (c == '\t') {
        Raw("\\t");
      } else if (c < 0x20 || c >= 0x7f) {
        Raw("\\u00");
        Char(kHex[c >> 4]);
        Char(kHex[c & 15]);
      } else {
        Char(static_cast<char>(c));
      }
    }
  }

 private:
  char* p_;
  char* end_;
};

// Appends `s` cut to `max` bytes into dst; returns the length kept.
uint16_t Keep(char* dst, std::string_view s, uint32_t max) {
  const size_t n = s.size() < max ? s.size() : max;
  std::memcpy(dst, s.data(), n);
  return static_cast<uint16_t>(n);
}

}  // namespace

void RequestCapture::Set(std::string_view request, std::string_view referer,
                         std::string_view agent) {
  static_assert(kRequestMax + kRefererMax + kAgentMax <= 65535);
  request_len = Keep(text, request, kRequestMax);
  referer_len = Keep(text + kRequestMax, referer, kRefererMax);
  agent_len = Keep(text + kRequestMax + kRefererMax, agent, kAgentMax);
}

void LogTime::Update(int64_t sec) {
  if (sec == sec_) return;
  sec_ = sec;
  const time_t t = static_cast<time_t>(sec);
  tm lt;
  localtime_r(&t, &lt);
  long off = lt.tm_gmtoff / 60;  // minutes east of UTC
  const char sign = off < 0 ? '-' : '+';
  if (off < 0) off = -off;
  // Month names are always English (as nginx writes them), whatever the locale.
  local_len_ = static_cast<size_t>(
      std::snprintf(local_, sizeof local_, "%02d/%s/%04d:%02d:%02d:%02d %c%02ld%02ld", lt.tm_mday,
                    kMonths[lt.tm_mon], lt.tm_year + 1900, lt.tm_hour, lt.tm_min, lt.tm_sec, sign,
                    off / 60, off % 60));
  iso_len_ = static_cast<size_t>(std::snprintf(
      iso_, sizeof iso_, "%04d-%02d-%02dT%02d:%02d:%02d%c%02ld:%02ld", lt.tm_year + 1900,
      lt.tm_mon + 1, lt.tm_mday, lt.tm_hour, lt.tm_min, lt.tm_sec, sign, off / 60, off % 60));
  std::snprintf(err_, sizeof err_, "%04d/%02d/%02d %02d:%02d:%02d", lt.tm_year + 1900,
                lt.tm_mon + 1, lt.tm_mday, lt.tm_hour, lt.tm_min, lt.tm_sec);
}

size_t FormatCombined(const LogLine& l, const LogTime& time, char* out, size_t cap) {
  // $remote_addr - $remote_user [$time_local] "$request" $status $body_bytes_sent
  // "$http_referer" "$http_user_agent"
  Out o(out, cap);
  o.Raw(l.remote_addr.empty() ? std::string_view("-") : l.remote_addr);
  o.Raw(" - - [");
  o.Raw(time.local());
  o.Raw("] \"");
  o.Nginx(l.request);
  o.Raw("\" ");
  o.Uint(static_cast<uint64_t>(l.status));
  o.Char(' ');
  o.Uint(l.body_bytes);
  o.Raw(" \"");
  o.Nginx(l.referer);
  o.Raw("\" \"");
  o.Nginx(l.user_agent);
  if (!l.server_name.empty()) {
    o.Raw("\" \"");
    o.Nginx(l.server_name.substr(0, kMaxLoggedServerName));
  }
  o.Raw("\"\n");
  return o.ok() ? static_cast<size_t>(o.pos() - out) : 0;
}

size_t FormatJson(const LogLine& l, const LogTime& time, char* out, size_t cap) {
  Out o(out, cap);
  o.Raw("{\"time\":\"");
  o.Raw(time.iso8601());
  o.Raw("\",\"remote_addr\":\"");
  o.Json(l.remote_addr);
  o.Raw("\",\"request\":\"");
  o.Json(l.request);
  o.Raw("\",\"status\":");
  o.Uint(static_cast<uint64_t>(l.status));
  o.Raw(",\"body_bytes_sent\":");
  o.Uint(l.body_bytes);
  o.Raw(",\"bytes_sent\":");
  o.Uint(l.bytes_sent);
  o.Raw(",\"http_referer\":\"");
  o.Json(l.referer);
  o.Raw("\",\"http_user_agent\":\"");
  o.Json(l.user_agent);
  o.Raw("\",\"request_time_us\":");
  o.Uint(l.request_time_us);
  o.Raw(",\"shard\":");
  o.Int(l.shard);
  o.Raw(",\"io\":\"");
  o.Json(l.io);
  o.Raw("\",\"ssl_protocol\":\"");
  o.Json(l.tls_protocol);
  o.Raw("\",\"ssl_cipher\":\"");
  o.Json(l.tls_cipher);
  o.Raw("\",\"ssl_server_name\":\"");
  o.Json(l.tls_server_name.substr(0, kMaxLoggedServerName));
  if (!l.server_name.empty()) {
    o.Raw("\",\"server_name\":\"");
    o.Json(l.server_name.substr(0, kMaxLoggedServerName));
  }
  o.Raw(l.tls_resumed ? "\",\"ssl_session_reused\":true}\n" : "\",\"ssl_session_reused\":false}\n");
  return o.ok() ? static_cast<size_t>(o.pos() - out) : 0;
}

LogRing::LogRing(size_t capacity) : cap_(capacity) {
  RINGD_ASSERT(capacity >= 4096 && (capacity & (capacity - 1)) == 0);
  // Pages are touched as the ring first fills, not here.
  void* p = ::mmap(nullptr, capacity, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  buf_ = p == MAP_FAILED ? nullptr : static_cast<char*>(p);
}

LogRing::~LogRing() {
  if (buf_ != nullptr) ::munmap(buf_, cap_);
}

bool LogRing::Push(const char* line, size_t n) {
  const uint64_t head = head_.load(std::memory_order_relaxed);
  if (head - tail_seen_ + n > cap_) {
    tail_seen_ = tail_.load(std::memory_order_acquire);
    if (head - tail_seen_ + n > cap_) {
      dropped_.store(dropped_.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
      return false;
    }
  }
  const size_t at = static_cast<size_t>(head & (cap_ - 1));
  const size_t first = n < cap_ - at ? n : cap_ - at;
  std::memcpy(buf_ + at, line, first);
  std::memcpy(buf_, line + first, n - first);
  head_.store(head + n, std::memory_order_release);
  lines_.store(lines_.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
  return true;
}

size_t LogRing::Peek(iovec iov[2]) const {
  const uint64_t tail = tail_.load(std::memory_order_relaxed);
  const uint64_t n = head_.load(std::memory_order_acquire) - tail;
  const size_t at = static_cast<size_t>(tail & (cap_ - 1));
  const size_t first = n < cap_ - at ? static_cast<size_t>(n) : cap_ - at;
  iov[0] = iovec{buf_ + at, first};
  iov[1] = iovec{buf_, static_cast<size_t>(n) - first};
  return static_cast<size_t>(n);
}

void LogRing::Consume(size_t n) {
  tail_.store(tail_.load(std::memory_order_relaxed) + n, std::memory_order_release);
}

AccessLogShard::AccessLogShard(AccessLog* log, int shard, size_t ring_bytes)
    : log_(log),
      shard_(shard),
      ring_(ring_bytes),
      next_kick_(ring_bytes / 4),
      scratch_(new char[kMaxLogLine]) {
  // The first localtime_r reads the zone file (and allocates): do it now, not on a request.
  time_.Update(::time(nullptr));
}

void AccessLogShard::Write(LogLine& line, int64_t now_sec) {
  time_.Update(now_sec);
  line.shard = shard_;
  line.io = io_;
  const size_t n = log_->format() == AccessLogFormat::kJson
                       ? FormatJson(line, time_, scratch_.get(), kMaxLogLine)
                       : FormatCombined(line, time_, scratch_.get(), kMaxLogLine);
  RINGD_ASSERT(n > 0);  // kMaxLogLine bounds every field
  Push(scratch_.get(), n);
}

void AccessLogShard::Push(const char* line, size_t n) {
  ring_.Push(line, n);
  // A quarter of the ring written since the last kick: wake the writer rather than wait for its
  // next flush. One eventfd write per quarter ring, not per line.
  const uint64_t produced = ring_.produced();
  if (produced >= next_kick_) {
    next_kick_ = produced + ring_.capacity() / 4;
    log_->Kick();
  }
}

absl::StatusOr<std::unique_ptr<AccessLog>> AccessLog::Open(const std::string& path,
                                                           AccessLogFormat format, uint32_t shards,
                                                           size_t ring_bytes, const char* flag) {
  const int fd = path.empty()
                     ? ::fcntl(STDERR_FILENO, F_DUPFD_CLOEXEC, 0)
                     : ::open(path.c_str(), O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0) {
    return absl::FailedPreconditionError(std::string(flag) + ": cannot open '" + path +
                                         "' for appending: " + strerror(errno));
  }
  const int kick = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (kick < 0) {
    const std::string why = strerror(errno);
    ::close(fd);
    return absl::ResourceExhaustedError(std::string(flag) + ": eventfd: " + why);
  }
  std::unique_ptr<AccessLog> log(new AccessLog(path, format, fd, kick, flag));
  for (uint32_t i = 0; i < shards; ++i) {
    log->shards_.push_back(
        std::make_unique<AccessLogShard>(log.get(), static_cast<int>(i), ring_bytes));
    if (!log->shards_.back()->ok()) {
      return absl::ResourceExhaustedError(std::string(flag) + ": cannot map a " +
                                          std::to_string(ring_bytes) + "-byte buffer");
    }
  }
  return log;
}

AccessLog::AccessLog(std::string path, AccessLogFormat format, int fd, int kick_fd,
                     const char* flag)
    : path_(std::move(path)),
      format_(format),
      fd_(fd),
      kick_fd_(kick_fd),
      what_(std::string_view(flag) == "--error-log" ? "error log" : "access log") {}

AccessLog::~AccessLog() {
  Stop();
  if (fd_ >= 0) ::close(fd_);
  ::close(kick_fd_);
}

void AccessLog::Start() {
  RINGD_ASSERT(!writer_.joinable());
  writer_ = std::thread([this] { Run(); });
}

void AccessLog::Kick() {
  const uint64_t one = 1;
  // EAGAIN only when the counter is about to overflow: the writer is awake by then anyway.
  [[maybe_unused]] ssize_t n = ::write(kick_fd_, &one, sizeof one);
}

void AccessLog::Reopen() {
  reopen_.store(true, std::memory_order_release);
  Kick();
}

void AccessLog::Stop() {
  if (!writer_.joinable()) return;
  stop_.store(true, std::memory_order_release);
  Kick();
  writer_.join();
}

void AccessLog::Run() {
  for (;;) {
    pollfd p{kick_fd_, POLLIN, 0};
    if (::poll(&p, 1, kFlushMs) > 0) {
      uint64_t v;
      [[maybe_unused]] ssize_t n = ::read(kick_fd_, &v, sizeof v);
    }
    // Read the flags before draining: what was queued before a reopen or a stop was asked for
    // goes out first (into the old file, which logrotate has renamed).
    const bool reopen = reopen_.exchange(false, std::memory_order_acq_rel);
    const bool stop = stop_.load(std::memory_order_acquire);
    Drain();
    if (reopen && !path_.empty()) {
      const int fd = ::open(path_.c_str(), O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
      if (fd < 0) {
        std::fprintf(stderr, "ringd: %s: cannot reopen '%s': %s (still writing the old file)\n",
                     what_, path_.c_str(), strerror(errno));
      } else {
        ::close(fd_);
        fd_ = fd;
      }
    }
    if (stop) {
      Drain();  // lines the shards queued while the last drain ran
      return;
    }
  }
}

bool AccessLog::Drain() {
  bool wrote = false;
  for (auto& s : shards_) {
    LogRing& ring = s->ring();
    iovec iov[2];
    const size_t total = ring.Peek(iov);
    if (total == 0) continue;
    size_t done = 0;
    int first = 0;
    bool failed = false;
    int error = 0;  // the failed write's errno; 0: it wrote nothing
    // The line a write stopped inside ends first; while even that fails, batches are lost whole.
    while (torn_ && !failed) {
      const ssize_t n = ::write(fd_, "\n", 1);
      if (n < 0 && errno == EINTR) continue;
      torn_ = n != 1;
      failed = torn_;
      error = n < 0 ? errno : 0;
    }
    while (done < total && !failed) {
      const ssize_t n = ::writev(fd_, iov + first, 2 - first);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) {
        failed = true;
        error = n < 0 ? errno : 0;
        break;
      }
      done += static_cast<size_t>(n);
      size_t adv = static_cast<size_t>(n);
      while (first < 2 && adv >= iov[first].iov_len) {
        adv -= iov[first].iov_len;
        ++first;
      }
      if (first < 2) {
        iov[first].iov_base = static_cast<char*>(iov[first].iov_base) + adv;
        iov[first].iov_len -= adv;
      }
      wrote = true;
      // A write that stopped inside a line: the next byte to go is not a line's first.
      torn_ = done < total;
    }
    if (failed) {
      // A full disk, an I/O error: the rest of the batch is lost. Count its lines (whole lines,
      // bar the one a short write tore, whose end is among them).
      uint64_t lost = 0;
      for (int i = first; i < 2; ++i) {
        const char* b = static_cast<const char*>(iov[i].iov_base);
        for (size_t k = 0; k < iov[i].iov_len; ++k) lost += b[k] == '\n';
      }
      write_failed_.store(write_failed_.load(std::memory_order_relaxed) + lost,
                          std::memory_order_relaxed);
      const int64_t now = NowMs();
      if (last_write_error_ms_ == INT64_MIN || now - last_write_error_ms_ >= 60000) {
        last_write_error_ms_ = now;
        std::fprintf(stderr,
                     "ringd: %s: writing '%s': %s (%llu lines lost; "
                     "ringd_access_log_lost_lines_total)\n",
                     what_, path_.c_str(), error != 0 ? strerror(error) : "wrote nothing",
                     static_cast<unsigned long long>(lost));
      }
    }
    ring.Consume(total);
  }
  return wrote;
}

// Lines dropped for a full backlog (ringd_access_log_dropped_lines_total); lines lost to failed
// writes have their own counter and line (Drain).
void AccessLog::ReportDrops(int64_t now_ms) {
  uint64_t dropped = 0;
  for (auto& s : shards_) dropped += s->ring().dropped();
  if (dropped == reported_drops_) return;
  if (last_report_ms_ != INT64_MIN && now_ms - last_report_ms_ < 60000) return;
  const int64_t since = last_report_ms_ == INT64_MIN ? 0 : (now_ms - last_report_ms_) / 1000;
  if (since > 0) {
    std::fprintf(stderr,
                 "ringd: access log: %llu lines dropped in the last %llds: the log cannot keep up "
                 "(ringd_access_log_dropped_lines_total)\n",
                 static_cast<unsigned long long>(dropped - reported_drops_),
                 static_cast<long long>(since));
  } else {
    std::fprintf(stderr,
                 "ringd: access log: %llu lines dropped: the log cannot keep up "
                 "(ringd_access_log_dropped_lines_total)\n",
                 static_cast<unsigned long long>(dropped - reported_drops_));
  }
  reported_drops_ = dropped;
  last_report_ms_ = now_ms;
}

const char* ErrorLevelName(ErrorLevel level) {
  switch (level) {
    case ErrorLevel::kError:
      return "error";
    case ErrorLevel::kWarn:
      return "warn";
    case ErrorLevel::kInfo:
      return "info";
  }
  return "error";
}

bool ParseErrorLevel(std::string_view text, ErrorLevel* out) {
  for (ErrorLevel l : {ErrorLevel::kError, ErrorLevel::kWarn, ErrorLevel::kInfo}) {
    if (text == ErrorLevelName(l)) {
      *out = l;
      return true;
    }
  }
  return false;
}

// 2026/12/07 13:23:28 [error] shard 0: "secret.txt" failed (13: Permission denied): permission
// denied, status 403, client: 127.0.0.1, request: "GET /secret.txt HTTP/1.1"
size_t FormatErrorLine(const ErrorEvent& e, int shard, std::string_view time, char* out,
                       size_t cap) {
  Out o(out, cap);
  o.Raw(time);
  o.Raw(" [");
  o.Raw(ErrorLevelName(e.level));
  o.Raw("] shard ");
  o.Int(shard);
  o.Raw(": ");
  // "(13: Permission denied)"
  const auto errno_text = [&] {
    o.Char('(');
    o.Int(e.error);
    o.Raw(": ");
    o.Raw(strerrordesc_np(e.error) != nullptr ? strerrordesc_np(e.error) : "unknown error");
    // openat2's RESOLVE_BENEATH refuses a path that leaves the root with EXDEV.
    if (e.error == EXDEV && !e.path.empty()) o.Raw(", a symlink leaving the root");
    o.Char(')');
  };
  if (!e.path.empty()) {  // "path" failed (errno): cause
    o.Char('"');
    o.Nginx(e.path.substr(0, 4096));
    o.Char('"');
    if (e.error != 0) {
      o.Raw(" failed ");
      errno_text();
    }
    o.Raw(": ");
    o.Raw(e.cause);
  } else {  // cause (errno), as nginx's "send() failed (104: Connection reset by peer)"
    o.Raw(e.cause);
    if (e.error != 0) {
      o.Char(' ');
      errno_text();
    }
  }
  if (e.status != 0) {
    o.Raw(", status ");
    o.Uint(static_cast<uint64_t>(e.status));
  }
  o.Raw(", client: ");
  o.Raw(e.client.empty() ? std::string_view("-") : e.client);
  if (!e.request.empty()) {
    o.Raw(", request: \"");
    o.Nginx(e.request.substr(0, RequestCapture::kRequestMax));
    o.Char('"');
  }
  o.Char('\n');
  return o.ok() ? static_cast<size_t>(o.pos() - out) : 0;
}

ErrorLogShard::ErrorLogShard(AccessLogShard* out, int shard, ErrorLevel level)
    : out_(out), shard_(shard), level_(level), scratch_(new char[kMaxErrorLine]) {
  time_.Update(::time(nullptr));
}

// The cause's slot; a cause not tracked takes the slot idle longest (its suppressed count, if
// any, is said first).
ErrorLogShard::Cause* ErrorLogShard::Find(const char* cause, int error, int64_t now_sec) {
  Cause* oldest = &causes_[0];
  for (Cause& c : causes_) {
    if (c.cause == cause && c.error == error) return &c;
    if (c.sec < oldest->sec) oldest = &c;
  }
  if (oldest->suppressed > 0) {
    const int n = std::snprintf(scratch_.get(), kMaxErrorLine,
                                "%.*s [%s] shard %d: %s: %llu more lines suppressed\n",
                                static_cast<int>(time_.error_log().size()),
                                time_.error_log().data(), ErrorLevelName(level_), shard_,
                                oldest->cause, static_cast<unsigned long long>(oldest->suppressed));
    out_->Push(scratch_.get(), static_cast<size_t>(n));
  }
  *oldest = Cause{cause, error, now_sec, 0, 0};
  return oldest;
}

void ErrorLogShard::Write(const ErrorEvent& e, int64_t now_sec) {
  time_.Update(now_sec);
  Cause* c = Find(e.cause, e.error, now_sec);
  if (c->sec != now_sec) {
    c->sec = now_sec;
    c->lines = 0;
  }
  if (c->lines >= kLinesPerCause) {
    ++c->suppressed;
    ++suppressed_total_;
    return;
  }
  ++c->lines;
  if (c->suppressed > 0) {
    const int n = std::snprintf(scratch_.get(), kMaxErrorLine,
                                "%.*s [%s] shard %d: %s: %llu more lines suppressed (at most %u a "
                                "second per cause)\n",
                                static_cast<int>(time_.error_log().size()),
                                time_.error_log().data(), ErrorLevelName(e.level), shard_, e.cause,
                                static_cast<unsigned long long>(c->suppressed), kLinesPerCause);
    out_->Push(scratch_.get(), static_cast<size_t>(n));
    c->suppressed = 0;
  }
  const size_t n = FormatErrorLine(e, shard_, time_.error_log(), scratch_.get(), kMaxErrorLine);
  RINGD_ASSERT(n > 0);  // kMaxErrorLine bounds every field
  out_->Push(scratch_.get(), n);
}

}  // namespace ringd
