#include "server/core/access_log.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <sys/resource.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>

#include "gtest/gtest.h"
#include "server/http/decimal.h"

namespace ringd {
namespace {

constexpr int64_t kApacheExampleSec = 971211336;  // 10/Oct/2000:13:55:36 -0700

class AccessLogTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const char* tz = std::getenv("TZ");
    saved_tz_ = tz != nullptr ? tz : "";
    had_tz_ = tz != nullptr;
    SetZone("MST7");  // UTC-7, no daylight saving: the Apache documentation's example zone
  }
  void TearDown() override {
    if (had_tz_) {
      setenv("TZ", saved_tz_.c_str(), 1);
    } else {
      unsetenv("TZ");
    }
    tzset();
  }
  static void SetZone(const char* zone) {
    setenv("TZ", zone, 1);
    tzset();
  }
  static std::string Combined(const LogLine& l, int64_t sec) {
    LogTime t;
    t.Update(sec);
    char buf[kMaxLogLine];
    const size_t n = FormatCombined(l, t, buf, sizeof buf);
    return std::string(buf, n);
  }
  static std::string Json(const LogLine& l, int64_t sec) {
    LogTime t;
    t.Update(sec);
    char buf[kMaxLogLine];
    const size_t n = FormatJson(l, t, buf, sizeof buf);
    return std::string(buf, n);
  }
  std::string saved_tz_;
  bool had_tz_ = false;
};

LogLine ApacheExample() {
  LogLine l;
  l.remote_addr = "127.0.0.1";
  l.request = "GET /apache_pb.gif HTTP/1.0";
  l.status = 200;
  l.body_bytes = 2326;
  l.bytes_sent = 2600;
  l.referer = "http://www.example.com/start.html";
  l.user_agent = "Mozilla/4.08 [en] (Win98; I ;Nav)";
  l.request_time_us = 1234;
  l.shard = 3;
  l.io = "uring";
  return l;
}

// The example line of Apache's log documentation for the combined format, byte for byte (the
// "frank" user aside: ringd has no authenticated users, and writes "-" as nginx does).
TEST_F(AccessLogTest, CombinedIsApacheAndNginxCombined) {
  EXPECT_EQ(Combined(ApacheExample(), kApacheExampleSec),
            "127.0.0.1 - - [10/Oct/2000:13:55:36 -0700] \"GET /apache_pb.gif HTTP/1.0\" 200 2326 "
            "\"http://www.example.com/start.html\" \"Mozilla/4.08 [en] (Win98; I ;Nav)\"\n");
}

TEST_F(AccessLogTest, CombinedTimeFollowsTheLocalZone) {
  SetZone("UTC0");
  EXPECT_NE(Combined(ApacheExample(), kApacheExampleSec).find("[10/Oct/2000:20:55:36 +0000]"),
            std::string::npos);
  SetZone("IST-5:30");  // half-hour offsets east of UTC
  EXPECT_NE(Combined(ApacheExample(), kApacheExampleSec).find("[11/Oct/2000:02:25:36 +0530]"),
            std::string::npos);
}

// nginx's escape=default: '"', '\' and bytes outside printable ASCII as \xHH (upper case); an
// empty field is "-".
TEST_F(AccessLogTest, CombinedEscapesAsNginxDoes) {
  LogLine l = ApacheExample();
  l.request = std::string_view("GET /a\"b\\c\x01\x7f\xc3\xa9 HTTP/1.1");
  l.referer = "";
  l.user_agent = "";
  l.remote_addr = "::1";
  EXPECT_EQ(Combined(l, kApacheExampleSec),
            "::1 - - [10/Oct/2000:13:55:36 -0700] "
            "\"GET /a\\x22b\\x5Cc\\x01\\x7F\\xC3\\xA9 HTTP/1.1\" 200 2326 \"-\" \"-\"\n");
  l.request = "";
  EXPECT_NE(Combined(l, kApacheExampleSec).find("] \"-\" 200 "), std::string::npos);
}

TEST_F(AccessLogTest, JsonHasTheSameFieldsAndMore) {
  EXPECT_EQ(Json(ApacheExample(), kApacheExampleSec),
            "{\"time\":\"2000-10-10T13:55:36-07:00\",\"remote_addr\":\"127.0.0.1\","
            "\"request\":\"GET /apache_pb.gif HTTP/1.0\",\"status\":200,\"body_bytes_sent\":2326,"
            "\"bytes_sent\":2600,\"http_referer\":\"http://www.example.com/start.html\","
            "\"http_user_agent\":\"Mozilla/4.08 [en] (Win98; I ;Nav)\",\"request_time_us\":1234,"
            "\"shard\":3,\"io\":\"uring\",\"ssl_protocol\":\"\",\"ssl_cipher\":\"\","
            "\"ssl_server_name\":\"\",\"ssl_session_reused\":false}\n");
  // Over HTTPS, as nginx's $ssl_* variables; combined stays nginx's own.
  LogLine l = ApacheExample();
  l.tls_protocol = "TLSv1.3";
  l.tls_cipher = "TLS_AES_128_GCM_SHA256";
  l.tls_server_name = "www.example.com";
  l.tls_resumed = true;
  EXPECT_NE(Json(l, kApacheExampleSec)
                .find("\"io\":\"uring\",\"ssl_protocol\":\"TLSv1.3\",\"ssl_cipher\":"
                      "\"TLS_AES_128_GCM_SHA256\",\"ssl_server_name\":\"www.example.com\","
                      "\"ssl_session_reused\":true}\n"),
            std::string::npos);
  EXPECT_EQ(Combined(l, kApacheExampleSec), Combined(ApacheExample(), kApacheExampleSec));
}

// With --site, the site that answered ($server_name) ends a combined line and is a JSON field.
TEST_F(AccessLogTest, SitesAddTheServerName) {
  LogLine l = ApacheExample();
  l.server_name = "example.org";
  const std::string plain = Combined(ApacheExample(), kApacheExampleSec);
  EXPECT_EQ(Combined(l, kApacheExampleSec),
            plain.substr(0, plain.size() - 1) + " \"example.org\"\n");
  EXPECT_NE(Json(l, kApacheExampleSec)
                .find("\"ssl_server_name\":\"\",\"server_name\":\"example.org\","
                      "\"ssl_session_reused\":false}\n"),
            std::string::npos);
}

// Whatever bytes the client sent, the line is valid JSON in UTF-8: bytes from 0x80 are read as
// Latin-1 and written as \u00XX.
TEST_F(AccessLogTest, JsonEscapesEverythingToValidJson) {
  LogLine l = ApacheExample();
  l.request = std::string_view("GET /\"\\\n\t\x01\xff HTTP/1.1");
  l.referer = "";
  const std::string line = Json(l, kApacheExampleSec);
  EXPECT_NE(line.find("\"request\":\"GET /\\\"\\\\\\n\\t\\u0001\\u00FF HTTP/1.1\""),
            std::string::npos)
      << line;
  EXPECT_NE(line.find("\"http_referer\":\"\""), std::string::npos) << line;
}

TEST_F(AccessLogTest, FormattersReportTooSmallABuffer) {
  LogTime t;
  t.Update(kApacheExampleSec);
  char buf[40];
  EXPECT_EQ(FormatCombined(ApacheExample(), t, buf, sizeof buf), 0u);
  EXPECT_EQ(FormatJson(ApacheExample(), t, buf, sizeof buf), 0u);
}

// The longest line the caps allow fits kMaxLogLine, in both formats.
TEST_F(AccessLogTest, LongestLineFits) {
  const std::string ugly(RequestCapture::kRequestMax, '\x01');
  RequestCapture cap;
  cap.Set(ugly, ugly, ugly);
  EXPECT_EQ(cap.request().size(), RequestCapture::kRequestMax);
  EXPECT_EQ(cap.referer().size(), RequestCapture::kRefererMax);
  EXPECT_EQ(cap.agent().size(), RequestCapture::kAgentMax);
  LogLine l = ApacheExample();
  l.request = cap.request();
  l.referer = cap.referer();
  l.user_agent = cap.agent();
  l.remote_addr = "ffff:ffff:ffff:ffff:ffff:ffff:255.255.255.255";
  const std::string long_name(kMaxLoggedServerName + 100, '\x01');
  l.tls_server_name = long_name;
  l.tls_protocol = "TLSv1.3";
  l.tls_cipher = "TLS_CHACHA20_POLY1305_SHA256";
  l.body_bytes = l.bytes_sent = l.request_time_us = UINT64_MAX;
  l.status = 999;
  l.shard = -1;
  LogTime t;
  t.Update(kApacheExampleSec);
  static char buf[kMaxLogLine];
  EXPECT_GT(FormatCombined(l, t, buf, sizeof buf), 0u);
  EXPECT_GT(FormatJson(l, t, buf, sizeof buf), 0u);
}

TEST(PeerAddress, FormatsAsRemoteAddr) {
  sockaddr_storage ss{};
  auto* v4 = reinterpret_cast<sockaddr_in*>(&ss);
  v4->sin_family = AF_INET;
  inet_pton(AF_INET, "192.0.2.7", &v4->sin_addr);
  PeerAddress p;
  p.Set(ss);
  char out[64];
  EXPECT_EQ(std::string(out, p.Format(out, sizeof out)), "192.0.2.7");
  auto* v6 = reinterpret_cast<sockaddr_in6*>(&ss);
  v6->sin6_family = AF_INET6;
  inet_pton(AF_INET6, "2001:db8::1", &v6->sin6_addr);
  p.Set(ss);
  EXPECT_EQ(std::string(out, p.Format(out, sizeof out)), "2001:db8::1");
  PeerAddress unknown;
  EXPECT_EQ(std::string(out, unknown.Format(out, sizeof out)), "-");
}

TEST(LogRing, DropsWhatDoesNotFitAndKeepsOrderAcrossTheWrap) {
  LogRing ring(4096);
  ASSERT_TRUE(ring.ok());
  std::string line(1000, 'a');
  line.back() = '\n';
  std::string read;
  auto drain = [&](size_t keep_last) {
    iovec iov[2];
    const size_t n = ring.Peek(iov);
    for (const iovec& v : iov) read.append(static_cast<char*>(v.iov_base), v.iov_len);
    ring.Consume(n - keep_last);
    read.resize(read.size() - keep_last);
    return n;
  };
  int pushed = 0;
  for (int i = 0; i < 4; ++i) pushed += ring.Push(line.data(), line.size());
  EXPECT_EQ(pushed, 4);
  EXPECT_FALSE(ring.Push(line.data(), line.size()));  // 5000 > 4096
  EXPECT_EQ(ring.dropped(), 1u);
  EXPECT_EQ(ring.lines(), 4u);
  EXPECT_EQ(drain(0), 4000u);
  // Now the next lines wrap around the end of the buffer.
  for (char c : std::string("bcd")) {
    line.assign(999, c);
    line += '\n';
    EXPECT_TRUE(ring.Push(line.data(), line.size()));
  }
  EXPECT_EQ(drain(0), 3000u);
  EXPECT_EQ(read.substr(4000), std::string(999, 'b') + "\n" + std::string(999, 'c') + "\n" +
                                   std::string(999, 'd') + "\n");
  EXPECT_EQ(ring.dropped(), 1u);
}

// One producer thread, one consumer thread: every byte arrives once, in order.
TEST(LogRing, ProducerAndConsumerThreads) {
  LogRing ring(4096);
  constexpr int kLines = 200000;
  std::thread producer([&] {
    char line[32];
    for (int i = 0; i < kLines; ++i) {
      const int n = std::snprintf(line, sizeof line, "%d\n", i);
      while (!ring.Push(line, static_cast<size_t>(n))) {
      }
    }
  });
  std::string got;
  int next = 0;
  while (next < kLines) {
    iovec iov[2];
    const size_t n = ring.Peek(iov);
    for (const iovec& v : iov) got.append(static_cast<char*>(v.iov_base), v.iov_len);
    ring.Consume(n);
    size_t nl;
    while ((nl = got.find('\n')) != std::string::npos) {
      uint64_t seq;
      ASSERT_TRUE(http::ParseDecimal(std::string_view(got).substr(0, nl), &seq));
      ASSERT_EQ(seq, static_cast<uint64_t>(next));
      ++next;
      got.erase(0, nl + 1);
    }
  }
  producer.join();
  EXPECT_EQ(ring.lines(), static_cast<uint64_t>(kLines));
}

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

int CountLines(const std::string& s) {
  int n = 0;
  for (char c : s) n += c == '\n';
  return n;
}

std::string TempDir() {
  char tmpl[] = "/tmp/ringd-access-log-XXXXXX";
  return mkdtemp(tmpl);
}

TEST(AccessLog, WritesEveryLineAndReopensOnRequest) {
  const std::string dir = TempDir();
  const std::string path = dir + "/access.log";
  absl::StatusOr<std::unique_ptr<AccessLog>> opened =
      AccessLog::Open(path, AccessLogFormat::kCombined, 2, 65536);
  ASSERT_TRUE(opened.ok()) << opened.status();
  std::unique_ptr<AccessLog> log = *std::move(opened);
  log->Start();
  LogLine l = ApacheExample();
  for (int i = 0; i < 1000; ++i) log->shard(i % 2)->Write(l, kApacheExampleSec);
  // logrotate: rename, then SIGUSR1. Lines queued before the reopen land in the renamed file.
  ASSERT_EQ(::rename(path.c_str(), (path + ".1").c_str()), 0);
  log->Reopen();
  for (int i = 0; i < 200; ++i) {
    log->shard(i % 2)->Write(l, kApacheExampleSec);
    if (i == 100) std::this_thread::sleep_for(std::chrono::milliseconds(300));
  }
  log->Stop();
  const uint64_t dropped = log->shard(0)->ring().dropped() + log->shard(1)->ring().dropped();
  const std::string old_file = ReadFile(path + ".1");
  const std::string new_file = ReadFile(path);
  EXPECT_EQ(CountLines(old_file) + CountLines(new_file) + static_cast<int>(dropped), 1200);
  EXPECT_GE(CountLines(new_file), 99);  // written after the reopen had happened
  // Whole lines only, each the formatted line.
  std::istringstream lines(old_file + new_file);
  std::string one;
  while (std::getline(lines, one))
    ASSERT_EQ(one + "\n", [&] {
      LogTime t;
      t.Update(kApacheExampleSec);
      char buf[1024];
      LogLine x = ApacheExample();
      return std::string(buf, FormatCombined(x, t, buf, sizeof buf));
    }());
  std::remove((path + ".1").c_str());
  std::remove(path.c_str());
  ::rmdir(dir.c_str());
}

// A writer that cannot keep up (here: a pipe nobody reads) never blocks the shard: lines
// beyond the backlog are dropped and counted, and everything not counted arrives.
TEST(AccessLog, AStuckWriterDropsAndCountsInsteadOfBlocking) {
  const std::string dir = TempDir();
  const std::string fifo = dir + "/fifo";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  const int reader = ::open(fifo.c_str(), O_RDONLY | O_NONBLOCK);
  ASSERT_GE(reader, 0);
  absl::StatusOr<std::unique_ptr<AccessLog>> opened =
      AccessLog::Open(fifo, AccessLogFormat::kCombined, 1, 65536);
  ASSERT_TRUE(opened.ok()) << opened.status();
  std::unique_ptr<AccessLog> log = *std::move(opened);
  log->Start();
  LogLine l = ApacheExample();
  constexpr int kLines = 20000;  // ~2.5 MB: far beyond the pipe (64 KiB) and the ring (64 KiB)
  const auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < kLines; ++i) log->shard(0)->Write(l, kApacheExampleSec);
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(5));
  const uint64_t dropped = log->shard(0)->ring().dropped();
  EXPECT_GT(dropped, 0u);
  // Now read everything; Stop flushes what is queued.
  ::fcntl(reader, F_SETFL, 0);
  std::string got;
  std::thread stopper([&] {
    log->Stop();
    log.reset();
  });
  char buf[65536];
  ssize_t n;
  while ((n = ::read(reader, buf, sizeof buf)) > 0) got.append(buf, static_cast<size_t>(n));
  stopper.join();
  ::close(reader);
  EXPECT_EQ(CountLines(got) + static_cast<int>(dropped), kLines);
  std::remove(fifo.c_str());
  ::rmdir(dir.c_str());
}

// A write that stops part-way (a full disk; here RLIMIT_FSIZE) loses the rest of its batch,
// counted as lost, and the line it tore is ended before anything else is written: no line is
// glued to it, and every line after it is whole.
TEST(AccessLog, AShortWriteEndsItsLineBeforeTheNext) {
  const std::string dir = TempDir();
  const std::string path = dir + "/access.log";
  absl::StatusOr<std::unique_ptr<AccessLog>> opened =
      AccessLog::Open(path, AccessLogFormat::kCombined, 1, 65536);
  ASSERT_TRUE(opened.ok()) << opened.status();
  std::unique_ptr<AccessLog> log = *std::move(opened);
  LogLine l = ApacheExample();
  const std::string whole = [&] {
    LogTime t;
    t.Update(kApacheExampleSec);
    char buf[1024];
    return std::string(buf, FormatCombined(l, t, buf, sizeof buf));
  }();
  ASSERT_NE(1000 % whole.size(), 0u);  // the limit falls inside a line
  ::signal(SIGXFSZ, SIG_IGN);          // a write past the limit fails with EFBIG instead
  rlimit saved;
  ASSERT_EQ(::getrlimit(RLIMIT_FSIZE, &saved), 0);
  rlimit small = saved;
  small.rlim_cur = 1000;
  ASSERT_EQ(::setrlimit(RLIMIT_FSIZE, &small), 0);
  log->Start();
  for (int i = 0; i < 20; ++i) log->shard(0)->Write(l, kApacheExampleSec);
  log->Kick();
  for (int i = 0; i < 500 && log->write_failed_lines() == 0; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  ASSERT_GT(log->write_failed_lines(), 0u);
  ASSERT_EQ(::setrlimit(RLIMIT_FSIZE, &saved), 0);  // the disk has room again
  for (int i = 0; i < 5; ++i) log->shard(0)->Write(l, kApacheExampleSec);
  log->Stop();
  const std::string got = ReadFile(path);
  ASSERT_FALSE(got.empty());
  EXPECT_EQ(got.back(), '\n');
  std::istringstream lines(got);
  std::string one;
  int complete = 0, torn = 0;
  while (std::getline(lines, one)) {
    if (one + "\n" == whole) {
      ++complete;
    } else {
      ++torn;
      EXPECT_EQ(whole.compare(0, one.size(), one), 0) << "not the start of a line: " << one;
    }
  }
  EXPECT_EQ(torn, 1);
  EXPECT_EQ(got.substr(got.size() - 5 * whole.size()), whole + whole + whole + whole + whole);
  EXPECT_EQ(
      complete + static_cast<int>(log->write_failed_lines() + log->shard(0)->ring().dropped()), 25);
  std::remove(path.c_str());
  ::rmdir(dir.c_str());
}

TEST(AccessLog, ABadPathIsOneClearError) {
  const absl::StatusOr<std::unique_ptr<AccessLog>> log =
      AccessLog::Open("/nonexistent-dir/access.log", AccessLogFormat::kCombined, 1, 65536);
  ASSERT_FALSE(log.ok());
  EXPECT_EQ(log.status().message(),
            "--access-log: cannot open '/nonexistent-dir/access.log' for appending: No such file "
            "or directory");
}

// nginx's error_log shape: time, [level], where, the path and errno text, the cause, the client
// and the request.
TEST_F(AccessLogTest, ErrorLineSaysThePathTheErrnoAndTheRequest) {
  LogTime t;
  t.Update(kApacheExampleSec);
  EXPECT_EQ(t.error_log(), "2000/10/10 13:55:36");
  ErrorEvent e;
  e.level = ErrorLevel::kError;
  e.cause = "permission denied";
  e.status = 403;
  e.path = "secret.txt";
  e.error = EACCES;
  e.client = "127.0.0.1";
  e.request = "GET /secret.txt HTTP/1.1";
  char buf[kMaxErrorLine];
  size_t n = FormatErrorLine(e, 2, t.error_log(), buf, sizeof buf);
  EXPECT_EQ(std::string(buf, n),
            "2000/10/10 13:55:36 [error] shard 2: \"secret.txt\" failed (13: Permission denied): "
            "permission denied, status 403, client: 127.0.0.1, request: \"GET /secret.txt "
            "HTTP/1.1\"\n");
  // A symlink leaving the root says so; a line with no path, client or request still reads.
  e.error = EXDEV;
  n = FormatErrorLine(e, 0, t.error_log(), buf, sizeof buf);
  EXPECT_NE(std::string(buf, n).find("(18: Invalid cross-device link, a symlink leaving the root)"),
            std::string::npos);
  ErrorEvent bare;
  bare.cause = "file lookup failed for now";
  bare.status = 503;
  n = FormatErrorLine(bare, 0, t.error_log(), buf, sizeof buf);
  EXPECT_EQ(std::string(buf, n),
            "2000/10/10 13:55:36 [error] shard 0: file lookup failed for now, status 503, "
            "client: -\n");
  // A connection's error has no path: the errno follows the cause, as nginx's "send() failed".
  ErrorEvent reset;
  reset.level = ErrorLevel::kInfo;
  reset.cause = "recv() failed";
  reset.error = ECONNRESET;
  reset.client = "::1";
  n = FormatErrorLine(reset, 1, t.error_log(), buf, sizeof buf);
  EXPECT_EQ(std::string(buf, n),
            "2000/10/10 13:55:36 [info] shard 1: recv() failed (104: Connection reset by peer), "
            "client: ::1\n");
  // Bytes a client sent are escaped as the access log's; too small a buffer says so.
  e.request = "GET /\x01\" HTTP/1.1";
  n = FormatErrorLine(e, 0, t.error_log(), buf, sizeof buf);
  EXPECT_NE(std::string(buf, n).find("request: \"GET /\\x01\\x22 HTTP/1.1\"\n"), std::string::npos);
  EXPECT_EQ(FormatErrorLine(e, 0, t.error_log(), buf, 20), 0u);
}

TEST(ErrorLevel, ParsesNamesAndOrdersByVerbosity) {
  ErrorLevel l;
  ASSERT_TRUE(ParseErrorLevel("info", &l));
  EXPECT_EQ(l, ErrorLevel::kInfo);
  EXPECT_FALSE(ParseErrorLevel("debug", &l));
  EXPECT_EQ(ErrorLevelOf(403), ErrorLevel::kError);
  EXPECT_EQ(ErrorLevelOf(503), ErrorLevel::kError);
  EXPECT_EQ(ErrorLevelOf(404), ErrorLevel::kInfo);
  EXPECT_EQ(ErrorLevelOf(400), ErrorLevel::kInfo);
}

// A burst of one cause writes kLinesPerCause lines a second; the cause's next line, a second
// later, is preceded by how many were suppressed. Other causes keep their own budget.
TEST(ErrorLogShard, RateLimitsEachCauseAndSaysWhatItSuppressed) {
  const std::string dir = TempDir();
  const std::string path = dir + "/error.log";
  absl::StatusOr<std::unique_ptr<AccessLog>> opened =
      AccessLog::Open(path, AccessLogFormat::kCombined, 1, 65536, "--error-log");
  ASSERT_TRUE(opened.ok()) << opened.status();
  std::unique_ptr<AccessLog> log = *std::move(opened);
  log->Start();
  ErrorLogShard shard(log->shard(0), 0, ErrorLevel::kInfo);
  EXPECT_TRUE(shard.Wants(ErrorLevel::kInfo));
  ErrorEvent missing;
  missing.level = ErrorLevel::kInfo;
  missing.cause = "no such file";
  missing.status = 404;
  ErrorEvent forbidden = missing;
  forbidden.cause = "permission denied";
  forbidden.status = 403;
  for (int i = 0; i < 1000; ++i) shard.Write(missing, kApacheExampleSec);
  shard.Write(forbidden, kApacheExampleSec);
  shard.Write(missing, kApacheExampleSec + 1);
  log->Stop();
  const std::string text = ReadFile(path);
  EXPECT_EQ(CountLines(text), static_cast<int>(ErrorLogShard::kLinesPerCause) + 3) << text;
  EXPECT_NE(text.find("no such file: 990 more lines suppressed"), std::string::npos) << text;
  EXPECT_NE(text.find("permission denied, status 403"), std::string::npos) << text;
  EXPECT_EQ(shard.suppressed(), 990u);
  ErrorLogShard quiet(log->shard(0), 0, ErrorLevel::kError);
  EXPECT_FALSE(quiet.Wants(ErrorLevel::kInfo));
  std::remove(path.c_str());
  ::rmdir(dir.c_str());
}

}  // namespace
}  // namespace ringd
