#include "server/core/config.h"

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "server/core/version.h"

namespace ringd {
namespace {

struct Parsed {
  bool ok;
  Config config;
  std::string error;
};

Parsed Parse(std::vector<std::string> args) {
  args.insert(args.begin(), "ringd");
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  Parsed p;
  bool exit_now = false;
  const absl::Status s =
      ParseFlags(static_cast<int>(argv.size()), argv.data(), &p.config, &exit_now);
  p.ok = s.ok();
  p.error = std::string(s.message());
  return p;
}

TEST(Config, Defaults) {
  Parsed p = Parse({"--root", "/tmp"});
  ASSERT_TRUE(p.ok) << p.error;
  EXPECT_EQ(p.config.root, "/tmp");
  ASSERT_EQ(p.config.listen.size(), 1u);
  EXPECT_EQ(p.config.listen[0].text, "127.0.0.1:8080");
  EXPECT_EQ(p.config.io, "auto");
  EXPECT_TRUE(p.config.pin);
}

TEST(Config, ParsesEveryForm) {
  Parsed p = Parse({"--root=/tmp", "--listen", "127.0.0.1:0", "--listen=[::1]:8081", "--shards=3",
                    "--io=epoll", "--nopin", "--precompressed=false", "--serve-dot-files",
                    "--header-timeout-ms", "2500"});
  ASSERT_TRUE(p.ok) << p.error;
  EXPECT_EQ(p.config.listen.size(), 2u);
  EXPECT_EQ(p.config.listen[1].addr.ss_family, AF_INET6);
  EXPECT_EQ(p.config.shards, 3u);
  EXPECT_EQ(p.config.io, "epoll");
  EXPECT_FALSE(p.config.pin);
  EXPECT_FALSE(p.config.precompressed);
  EXPECT_TRUE(p.config.serve_dot_files);
  EXPECT_EQ(p.config.header_timeout_ms, 2500u);
}

TEST(Config, ReadsAFlagfile) {
  const std::string path = ::testing::TempDir() + "/ringd.flags";
  {
    std::ofstream f(path);
    f << "# comment\n--root=/tmp\n\n  --shards=2  \n--io=uring\n";
  }
  Parsed p = Parse({"--flagfile=" + path, "--listen=127.0.0.1:0"});
  ASSERT_TRUE(p.ok) << p.error;
  EXPECT_EQ(p.config.shards, 2u);
  EXPECT_EQ(p.config.io, "uring");
  EXPECT_EQ(p.config.listen.size(), 1u);
  // The command line's form too: the value is the rest of the line.
  {
    std::ofstream f(path);
    f << "--root /tmp\n--add-header  X-Note: a b=c\n--serve-dot-files\n--shards 3\n";
  }
  p = Parse({"--flagfile=" + path});
  ASSERT_TRUE(p.ok) << p.error;
  EXPECT_EQ(p.config.root, "/tmp");
  EXPECT_EQ(p.config.shards, 3u);
  EXPECT_TRUE(p.config.serve_dot_files);
  std::remove(path.c_str());
}

// What a SIGHUP compares: every flag as given, in order, flagfiles read in place, booleans as
// their values.
TEST(Config, RemembersEveryFlagAsGiven) {
  const std::string path = ::testing::TempDir() + "/given.flags";
  {
    std::ofstream f(path);
    f << "--shards=2\n--add-header=X-A: 1\n";
  }
  Parsed p = Parse({"--root=/tmp", "--flagfile", path, "--nopin", "--add-header", "X-B: 2"});
  ASSERT_TRUE(p.ok) << p.error;
  const std::vector<std::pair<std::string, std::string>> given = {{"root", "/tmp"},
                                                                  {"shards", "2"},
                                                                  {"add-header", "X-A: 1"},
                                                                  {"pin", "false"},
                                                                  {"add-header", "X-B: 2"}};
  EXPECT_EQ(p.config.given, given);
  std::remove(path.c_str());
}

TEST(Config, TlsExpired) {
  EXPECT_FALSE(Parse({"--root=/tmp"}).config.tls_refuse_expired);
  EXPECT_TRUE(Parse({"--root=/tmp", "--tls-expired=refuse"}).config.tls_refuse_expired);
  EXPECT_FALSE(Parse({"--root=/tmp", "--tls-expired=serve"}).config.tls_refuse_expired);
  Parsed p = Parse({"--root=/tmp", "--tls-expired=maybe"});
  EXPECT_FALSE(p.ok);
  EXPECT_EQ(p.error, "--tls-expired: expected serve or refuse, got 'maybe'");
}

// --compress and its policy: off by default, the default types, bounds checked.
TEST(Config, Compress) {
  Parsed d = Parse({"--root=/tmp"});
  ASSERT_TRUE(d.ok) << d.error;
  EXPECT_FALSE(d.config.compress);
  EXPECT_TRUE(d.config.compress_policy.Compressible("text/css", 1000));
  EXPECT_TRUE(d.config.compress_policy.Compressible("application/json", 1000));
  EXPECT_FALSE(d.config.compress_policy.Compressible("image/png", 1000));
  EXPECT_FALSE(d.config.compress_policy.Compressible("text/css", 255));
  EXPECT_EQ(d.config.compress_cache_bytes, uint64_t{64} << 20);

  Parsed p = Parse({"--root=/tmp", "--compress", "--compress-types=text/css, image/*",
                    "--compress-min-bytes=10", "--compress-max-bytes=1000",
                    "--compress-cache-bytes=1048576"});
  ASSERT_TRUE(p.ok) << p.error;
  EXPECT_TRUE(p.config.compress);
  EXPECT_TRUE(p.config.compress_policy.Compressible("image/png", 10));
  EXPECT_FALSE(p.config.compress_policy.Compressible("text/html", 10));
  EXPECT_FALSE(p.config.compress_policy.Compressible("text/css", 1001));
  EXPECT_EQ(p.config.compress_cache_bytes, 1048576u);

  EXPECT_EQ(Parse({"--root=/tmp", "--compress-types=text"}).error,
            "--compress-types: expected TYPE/SUBTYPE or TYPE/*, got 'text'");
  EXPECT_EQ(Parse({"--root=/tmp", "--compress-types=,"}).error,
            "--compress-types: expected at least one media type");
  EXPECT_EQ(Parse({"--root=/tmp", "--compress-min-bytes=10", "--compress-max-bytes=9"}).error,
            "--compress-min-bytes must not exceed --compress-max-bytes");
  EXPECT_EQ(Parse({"--root=/tmp", "--compress-cache-bytes=100"}).error,
            "--compress-cache-bytes: expected an integer from 65536 to 1099511627776, got '100'");
  EXPECT_EQ(Parse({"--root=/tmp", "--compress=maybe"}).error,
            "--compress: expected true or false, got 'maybe'");
}

// A flagfile reads as a shell would read the same words: quotes are taken off, and a # after
// blank space begins a comment (docs/OPERATIONS.md shows these lines).
TEST(Config, FlagfileTakesShellQuotingAndComments) {
  const std::string path = ::testing::TempDir() + "/quoted.conf";
  {
    std::ofstream f(path);
    f << "--root='/tmp'   # the site\n"
         "--index=index.html   # comment\n"
         "--add-header='X-Quoted: yes'\n"
         "--add-header=\"X-Double: a \\\"b\\\" $c\"\n"
         "--add-header 'X-Spaced: one  two '\n"
         "--add-header X-Rest: a b=c\t# a comment after a tab\n"
         "--add-header=X-Hash:#1 a#b\n"
         "--cache-control=\"*.css=public, max-age=60\"\n"
         "--add-header=X-Esc:\\ \\'x\n"
         "  # an indented comment\n"
         "--charset=utf-8#\r\n";
  }
  Parsed p = Parse({"--flagfile=" + path});
  ASSERT_TRUE(p.ok) << p.error;
  EXPECT_EQ(p.config.root, "/tmp");
  EXPECT_EQ(p.config.index, "index.html");
  EXPECT_EQ(p.config.origin.added(),
            "X-Quoted: yes\r\nX-Double: a \"b\" $c\r\nX-Spaced: one  two\r\n"
            "X-Rest: a b=c\r\nX-Hash: #1 a#b\r\nX-Esc: 'x\r\n");
  EXPECT_EQ(p.config.origin.CacheControlFor("a/site.css"), "Cache-Control: public, max-age=60\r\n");
  EXPECT_EQ(p.config.charset, "utf-8#");
  std::remove(path.c_str());
}

// A quote left open is one line naming the file and the line, not a value with a quote in it.
TEST(Config, FlagfileRefusesAnOpenQuote) {
  const std::string path = ::testing::TempDir() + "/open-quote.conf";
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"--add-header='X-Quoted: yes\n", ":2: a ' quote is not closed on its line"},
      {"--add-header=\"X-Quoted: yes\n", ":2: a \" quote is not closed on its line"},
      {"--add-header=\"X: \\\"\n", ":2: a \" quote is not closed on its line"},
      {"--index=index.html \\\n", ":2: the line ends in a backslash"},
  };
  for (const auto& [line, want] : cases) {
    {
      std::ofstream f(path);
      f << "--root=/tmp\n" << line << "--shards=1\n";
    }
    Parsed p = Parse({"--flagfile=" + path});
    EXPECT_FALSE(p.ok) << line;
    EXPECT_EQ(p.error.rfind(path + want, 0), 0u) << p.error;
  }
  std::remove(path.c_str());
}

// A flag that takes one value, given twice, is refused wherever the two stand (nginx refuses a
// second root); lists repeat.
TEST(Config, RefusesASingleValuedFlagGivenTwice) {
  EXPECT_EQ(Parse({"--root=/tmp", "--root", "/var"}).error,
            "--root is given twice (first on the command line): it takes one value");
  EXPECT_EQ(Parse({"--root=/tmp", "--pin", "--nopin"}).error,
            "--pin is given twice (first on the command line): it takes one value");
  EXPECT_EQ(Parse({"--root=/tmp", "--access-log=/tmp/a.log", "--access-log=off"}).error,
            "--access-log is given twice (first on the command line): it takes one value");
  const std::string path = ::testing::TempDir() + "/twice.conf";
  {
    std::ofstream f(path);
    f << "--root=/tmp\n--shards=2\n# more\n--shards 3\n";
  }
  EXPECT_EQ(Parse({"--flagfile=" + path}).error,
            path + ":4: --shards is given twice (first at " + path + ":2): it takes one value");
  {
    std::ofstream f(path);
    f << "--root=/tmp\n--shards=2\n";
  }
  EXPECT_EQ(Parse({"--flagfile=" + path, "--shards=4"}).error,
            "--shards is given twice (first at " + path + ":2): it takes one value");
  EXPECT_EQ(Parse({"--root=/var", "--flagfile", path}).error,
            path + ":1: --root is given twice (first on the command line): it takes one value");
  std::remove(path.c_str());

  Parsed p = Parse({"--root=/tmp", "--listen=127.0.0.1:0", "--listen=127.0.0.2:0",
                    "--add-header=X-A: 1", "--add-header=X-B: 2", "--cache-control=*.css=no-cache",
                    "--cache-control=*.js=no-cache", "--error-page=404=/404.html",
                    "--error-page=503=/503.html", "--io-mask=sqpoll", "--io-mask=napi",
                    "--listen-tls=127.0.0.1:0", "--listen-tls=127.0.0.2:0", "--tls-cert=a",
                    "--tls-key=a", "--tls-cert=b", "--tls-key=b", "--tls-ocsp=a", "--tls-ocsp=b"});
  ASSERT_TRUE(p.ok) << p.error;
  EXPECT_EQ(p.config.listen.size(), 2u);
  EXPECT_EQ(p.config.io_mask.size(), 2u);
  EXPECT_EQ(p.config.tls_cert.size(), 2u);
}

// -t and --check-config are one flag; a flag the parser refuses still leaves it known.
TEST(Config, CheckConfig) {
  EXPECT_FALSE(Parse({"--root=/tmp"}).config.check_config);
  EXPECT_TRUE(Parse({"--root=/tmp", "-t"}).config.check_config);
  EXPECT_TRUE(Parse({"--check-config", "--root=/tmp"}).config.check_config);
  Parsed p = Parse({"--root=/tmp", "--shard=2", "-t"});
  EXPECT_FALSE(p.ok);
  EXPECT_TRUE(p.config.check_config);
}

// A flagfile's mistake names the file, the line and the flag: /etc/ringd/ringd.conf is one.
TEST(Config, FlagfileErrorsNameTheFileAndLine) {
  const std::string path = ::testing::TempDir() + "/ringd.conf";
  {
    std::ofstream f(path);
    f << "# ringd.conf\n--root=/tmp\n\n# the next line is misspelled\n--shard=2\n";
  }
  Parsed p = Parse({"--flagfile=" + path});
  EXPECT_FALSE(p.ok);
  EXPECT_EQ(p.error, path + ":5: unknown flag --shard (see --help)");
  {
    std::ofstream f(path);
    f << "--root=/tmp\n--shards=0\n";
  }
  p = Parse({"--flagfile=" + path});
  EXPECT_FALSE(p.ok);
  EXPECT_EQ(p.error, path + ":2: --shards: expected an integer from 1 to 1024, got '0'");
  {
    std::ofstream f(path);
    f << "--root=/tmp\n--header-timeout-ms\n";  // a value that never comes
  }
  p = Parse({"--flagfile=" + path});
  EXPECT_FALSE(p.ok);
  EXPECT_EQ(p.error, path + ":2: --header-timeout-ms: needs a value");
  {
    std::ofstream f(path);
    f << "--root=/tmp\n--serve-dot-files true\n";  // a bool takes no separate value
  }
  p = Parse({"--flagfile=" + path});
  EXPECT_FALSE(p.ok);
  EXPECT_EQ(p.error.rfind(path + ":2: unexpected argument 'true'", 0), 0u) << p.error;
  std::remove(path.c_str());
}

TEST(Config, Version) {
  const std::string line = VersionLine();
  EXPECT_EQ(line.rfind("ringd ", 0), 0u) << line;
  EXPECT_NE(line.find(" (commit "), std::string::npos) << line;
  // A plain build (no --stamp) says so; a stamped one names a commit.
  if (std::string(BuildVersion()) == "dev") {
    EXPECT_EQ(line, "ringd dev (commit unknown)");
  } else {
    EXPECT_NE(std::string(BuildCommit()), "unknown");
  }
}

// A bad flag or value is one clear line naming the flag.
TEST(Config, RejectsBadInputWithOneLine) {
  const std::vector<std::pair<std::vector<std::string>, std::string>> cases = {
      {{"--root=/tmp", "--bogus"}, "unknown flag --bogus"},
      {{"--root=/tmp", "--shards=0"}, "--shards: expected an integer from 1 to 1024, got '0'"},
      {{"--root=/tmp", "--shards=-1"}, "--shards"},
      {{"--root=/tmp", "--shards=+1"}, "--shards: expected an integer from 1 to 1024, got '+1'"},
      {{"--root=/tmp", "--shards= 1"}, "--shards: expected an integer from 1 to 1024, got ' 1'"},
      {{"--root=/tmp", "--shards=1O"}, "--shards: expected an integer from 1 to 1024, got '1O'"},
      {{"--root=/tmp", "--shards="}, "--shards"},
      {{"--root=/tmp", "--listen=localhost"}, "--listen: expected HOST:PORT"},
      {{"--root=/tmp", "--listen=127.0.0.1:99999"}, "--listen: bad port"},
      {{"--root=/tmp", "--pin=maybe"}, "--pin: expected true or false"},
      {{"--root=/tmp", "--recv-buffers=1000"}, "--recv-buffers: must be a power of two"},
      {{"--root=/tmp", "--header-timeout-ms"}, "--header-timeout-ms: needs a value"},
      {{"--root=/nonexistent-dir"}, "--root: cannot use '/nonexistent-dir'"},
      {{"--root=/etc/hostname"}, "is not a directory"},
      {{}, "--root is required"},
      {{"--root=/tmp", "stray"}, "unexpected argument 'stray'"},
      {{"--flagfile=/nonexistent.flags"}, "--flagfile: cannot read"},
      {{"--root=/tmp", "--discard-body-timeout-ms=0"}, "--discard-body-timeout-ms: expected"},
      {{"--root=/tmp", "--recv-pool-kib=200"}, "--recv-pool-kib: must be a power of two, got 200"},
      {{"--root=/tmp", "--recv-pool-kib=64"}, "--recv-pool-kib: expected an integer from 128"},
      {{"--root=/tmp", "--recv-pool-kib=256", "--recv-buffer-size=262144"},
       "--recv-pool-kib: must hold two receive buffers of 256 KiB"},
      {{"--root=/tmp", "--io=bypass", "--sqpoll-per-shard"}, "--sqpoll-per-shard needs --sqpoll"},
      {{"--root=/tmp", "--send-order=sjf"}, "--send-order: expected srpt or fair, got 'sjf'"},
      {{"--root=/tmp", "--send-slots=0"}, "--send-slots: expected an integer from 1"},
      {{"--root=/tmp", "--send-max-wait-ms=0"}, "--send-max-wait-ms: expected an integer from 1"},
      {{"--root=/tmp", "--page-cache-trust-ms=60001"},
       "--page-cache-trust-ms: expected an integer from 0 to 60000, got '60001'"},
      {{"--root=/tmp", "--tcp-nopush=sometimes"}, "--tcp-nopush: expected true or false"},
      {{"--root=/tmp", "--charset=utf-8; q=1"}, "--charset: 'utf-8; q=1' is not a charset name"},
      {{"--root=/tmp", "--charset="}, "--charset: '' is not a charset name"},
      {{"--root=/tmp", "--index=../x"}, "--index: '../x' is not a file name beneath the directory"},
      {{"--root=/tmp", "--index=/index.html"}, "--index: '/index.html' is not a file name"},
      {{"--root=/tmp", "--index=a/../../b"}, "--index: 'a/../../b' is not a file name"},
      {{"--root=/tmp", "--index="}, "--index: '' is not a file name"},
  };
  for (const auto& [args, message] : cases) {
    Parsed p = Parse(args);
    EXPECT_FALSE(p.ok) << message;
    EXPECT_NE(p.error.find(message), std::string::npos) << p.error;
    EXPECT_EQ(p.error.find('\n'), std::string::npos) << p.error;
  }
}

TEST(Config, Charset) {
  EXPECT_EQ(Parse({"--root=/tmp"}).config.charset, "utf-8");
  EXPECT_EQ(Parse({"--root=/tmp", "--charset=off"}).config.charset, "");
  Parsed p = Parse({"--root=/tmp", "--charset", "iso-8859-1"});
  ASSERT_TRUE(p.ok) << p.error;
  EXPECT_EQ(p.config.charset, "iso-8859-1");
}

TEST(Config, SendOrder) {
  Parsed p = Parse({"--root=/tmp"});
  ASSERT_TRUE(p.ok) << p.error;
  EXPECT_FALSE(p.config.send_srpt);
  p = Parse({"--root=/tmp", "--send-order=srpt", "--send-slots=2", "--send-short-bytes=0",
             "--send-max-wait-ms=50"});
  ASSERT_TRUE(p.ok) << p.error;
  EXPECT_TRUE(p.config.send_srpt);
  EXPECT_EQ(p.config.send_slots, 2u);
  EXPECT_EQ(p.config.send_short_bytes, 0u);
  EXPECT_EQ(p.config.send_max_wait_ms, 50u);
}

// The body path's two defaults (docs/PERFORMANCE.md, "Decisions"), and turning them off.
TEST(Config, PageCacheTrustAndTcpNopush) {
  Parsed p = Parse({"--root=/tmp"});
  ASSERT_TRUE(p.ok) << p.error;
  EXPECT_EQ(p.config.page_cache_trust_ms, 100u);
  EXPECT_TRUE(p.config.tcp_nopush);
  p = Parse({"--root=/tmp", "--page-cache-trust-ms=0", "--tcp-nopush=false"});
  ASSERT_TRUE(p.ok) << p.error;
  EXPECT_EQ(p.config.page_cache_trust_ms, 0u);
  EXPECT_FALSE(p.config.tcp_nopush);
}

// The h2c DATA path (docs/PERFORMANCE.md, "DATA path in plaintext"): its default, both values
// and a value that is no BOOL.
TEST(Config, Http2Sendfile) {
  Parsed p = Parse({"--root=/tmp"});
  ASSERT_TRUE(p.ok) << p.error;
  EXPECT_FALSE(p.config.http2_sendfile);
  p = Parse({"--root=/tmp", "--http2-sendfile"});
  ASSERT_TRUE(p.ok) << p.error;
  EXPECT_TRUE(p.config.http2_sendfile);
  p = Parse({"--root=/tmp", "--http2-sendfile=false"});
  ASSERT_TRUE(p.ok) << p.error;
  EXPECT_FALSE(p.config.http2_sendfile);
  p = Parse({"--root=/tmp", "--http2-sendfile=often"});
  EXPECT_FALSE(p.ok);
  EXPECT_EQ(p.error, "--http2-sendfile: expected true or false, got 'often'");
}

TEST(Config, UsageListsEveryFlag) {
  const std::string usage = Usage();
  for (const char* flag :
       {"--root=DIR", "--listen=HOST:PORT", "--shards=N", "--io=TIER", "--pin=BOOL",
        "--header-timeout-ms=MS", "--keepalive-timeout-ms=MS", "--send-timeout-ms=MS",
        "--max-connections=N", "--max-requests-per-connection=N", "--shutdown-timeout-ms=MS",
        "--flagfile=FILE", "--check-config", "-t is the same", "-v, -V"}) {
    EXPECT_NE(usage.find(flag), std::string::npos) << flag;
  }
}

// Grouped by topic, each flag with a placeholder for its value, wrapped at 100 columns: a list an
// operator can scan.
TEST(Config, UsageIsGroupedAndWrapped) {
  const std::string usage = Usage();
  std::vector<std::string> topics;
  size_t flags = 0;
  std::istringstream in(usage);
  for (std::string line; std::getline(in, line);) {
    EXPECT_LE(line.size(), 100u) << line;
    if (!line.empty() && line.back() == ':' && line[0] != ' ') topics.push_back(line);
    if (!line.starts_with("  --")) continue;
    ++flags;
    const std::string name = line.substr(2, line.find(' ', 2) - 2);
    const bool action =
        name == "--probe" || name == "--check-config" || name == "--help," || name == "--version,";
    EXPECT_TRUE(action || name.find('=') != std::string::npos) << "no placeholder: " << line;
  }
  EXPECT_EQ(topics, (std::vector<std::string>{
                        "Listening:", "Who may connect:", "Files and responses:",
                        "Sites (virtual hosts):", "HTTPS:", "HTTP/2:", "Limits and timeouts:",
                        "Logs and metrics:", "io tiers:", "Tuning:", "Process:"}))
      << "a flag with no topic is listed under Other:\n"
      << usage;
  EXPECT_GT(flags, 80u);
}

TEST(Config, VersionFlags) {
  for (const char* v : {"--version", "-v", "-V"}) {
    std::vector<std::string> args = {"ringd", v};
    std::vector<char*> argv;
    for (std::string& a : args) argv.push_back(a.data());
    Config config;
    bool exit_now = false;
    EXPECT_TRUE(ParseFlags(2, argv.data(), &config, &exit_now).ok()) << v;
    EXPECT_TRUE(exit_now) << v;
  }
}

TEST(Config, Observability) {
  Parsed p = Parse({"--root", "/tmp"});
  ASSERT_TRUE(p.ok) << p.error;
  EXPECT_EQ(p.config.access_log, "");  // off by default
  EXPECT_FALSE(p.config.has_admin_listen);
  p = Parse({"--root", "/tmp", "--access-log", "/tmp/a.log", "--access-log-format=json",
             "--admin-listen", "127.0.0.1:9100", "--access-log-buffer-bytes=65536"});
  ASSERT_TRUE(p.ok) << p.error;
  EXPECT_EQ(p.config.access_log, "/tmp/a.log");
  EXPECT_TRUE(p.config.access_log_json);
  EXPECT_TRUE(p.config.has_admin_listen);
  EXPECT_EQ(p.config.admin_listen.text, "127.0.0.1:9100");
  p = Parse({"--root", "/tmp", "--access-log=off"});
  ASSERT_TRUE(p.ok) << p.error;
  EXPECT_EQ(p.config.access_log, "");
}

TEST(Config, ObservabilityErrors) {
  EXPECT_EQ(Parse({"--root", "/tmp", "--access-log-format=common"}).error,
            "--access-log-format: expected combined or json, got 'common'");
  EXPECT_EQ(Parse({"--root", "/tmp", "--access-log-buffer-bytes=100000"}).error,
            "--access-log-buffer-bytes: must be a power of two, got 100000");
  EXPECT_EQ(Parse({"--root", "/tmp", "--admin-listen=9100"}).error,
            "--admin-listen: expected HOST:PORT, got '9100'");
  // Never the public port: the same address, or a wildcard that covers it.
  EXPECT_EQ(
      Parse({"--root", "/tmp", "--listen=127.0.0.1:8080", "--admin-listen=127.0.0.1:8080"}).error,
      "--admin-listen: 127.0.0.1:8080 overlaps --listen 127.0.0.1:8080; the admin listener needs "
      "an address of its own");
  EXPECT_EQ(Parse({"--root", "/tmp", "--listen=127.0.0.1:8080", "--listen-tls=127.0.0.1:8443",
                   "--tls-cert=c", "--tls-key=k", "--admin-listen=127.0.0.1:8443"})
                .error,
            "--admin-listen: 127.0.0.1:8443 overlaps --listen-tls 127.0.0.1:8443; the admin "
            "listener needs an address of its own");
  EXPECT_FALSE(
      Parse({"--root", "/tmp", "--listen=0.0.0.0:8080", "--admin-listen=127.0.0.1:8080"}).ok);
  EXPECT_FALSE(Parse({"--root", "/tmp", "--admin-listen=127.0.0.1:8080"}).ok);  // the default
  EXPECT_TRUE(
      Parse({"--root", "/tmp", "--listen=127.0.0.1:8080", "--admin-listen=127.0.0.1:9100"}).ok);
  EXPECT_TRUE(Parse({"--root", "/tmp", "--listen=127.0.0.1:0", "--admin-listen=127.0.0.1:0"}).ok);
}

// One port, one listener: the kernel would split a port's connections between two sockets of
// one SO_REUSEPORT group, half of them answered in the other protocol.
TEST(Config, ListenersNeedAddressesOfTheirOwn) {
  const std::vector<std::string> tls = {"--tls-cert=c", "--tls-key=k"};
  auto with_tls = [&](std::vector<std::string> args) {
    args.insert(args.begin(), {"--root", "/tmp"});
    args.insert(args.end(), tls.begin(), tls.end());
    return Parse(args);
  };
  EXPECT_EQ(with_tls({"--listen=127.0.0.1:19020", "--listen-tls=127.0.0.1:19020"}).error,
            "--listen-tls 127.0.0.1:19020 overlaps --listen 127.0.0.1:19020: one port, one "
            "listener");
  EXPECT_EQ(with_tls({"--listen=0.0.0.0:80", "--listen-tls=127.0.0.1:80"}).error,
            "--listen-tls 127.0.0.1:80 overlaps --listen 0.0.0.0:80: one port, one listener");
  EXPECT_EQ(Parse({"--root", "/tmp", "--listen=127.0.0.1:8080", "--listen=127.0.0.1:8080"}).error,
            "--listen 127.0.0.1:8080 is given twice: one port, one listener");
  EXPECT_EQ(with_tls({"--listen-tls=[::1]:443", "--listen-tls=[::]:443"}).error,
            "--listen-tls [::]:443 overlaps --listen-tls [::1]:443: one port, one listener");
  EXPECT_TRUE(with_tls({"--listen=127.0.0.1:80", "--listen-tls=127.0.0.1:443"}).ok);
  EXPECT_TRUE(with_tls({"--listen=127.0.0.1:80", "--listen=127.0.0.2:80"}).ok);
  EXPECT_TRUE(with_tls({"--listen=127.0.0.1:80", "--listen-tls=[::1]:80"}).ok);  // two families
  EXPECT_TRUE(with_tls({"--listen=127.0.0.1:0", "--listen-tls=127.0.0.1:0"}).ok);
}

TEST(Config, OriginHeaders) {
  Parsed p = Parse(
      {"--root", "/tmp", "--cache-control", "*.css=public, max-age=31536000, immutable",
       "--cache-control=/assets/*=public, max-age=60", "--default-cache-control", "no-cache",
       "--add-header", "X-Frame-Options:   DENY  ", "--add-header=Access-Control-Allow-Origin: *",
       "--error-page", "404=/404.html", "--error-page=503=/errors/busy.html"});
  ASSERT_TRUE(p.ok) << p.error;
  EXPECT_EQ(p.config.origin.CacheControlFor("a/site.css"),
            "Cache-Control: public, max-age=31536000, immutable\r\n");
  EXPECT_EQ(p.config.origin.CacheControlFor("assets/x.js"),
            "Cache-Control: public, max-age=60\r\n");
  EXPECT_EQ(p.config.origin.CacheControlFor("x.js"), "Cache-Control: no-cache\r\n");
  EXPECT_EQ(p.config.origin.added(), "X-Frame-Options: DENY\r\nAccess-Control-Allow-Origin: *\r\n");
  EXPECT_EQ(p.config.origin.ErrorPage(404), "404.html");
  EXPECT_EQ(p.config.origin.ErrorPage(503), "errors/busy.html");
}

TEST(Config, AutoindexIsOffAndHtmlByDefault) {
  const Parsed off = Parse({"--root", "/tmp"});
  EXPECT_FALSE(off.config.autoindex);
  EXPECT_EQ(off.config.autoindex_format, http::ListingFormat::kHtml);
  const Parsed on = Parse({"--root", "/tmp", "--autoindex", "--autoindex-format", "json"});
  ASSERT_TRUE(on.ok) << on.error;
  EXPECT_TRUE(on.config.autoindex);
  EXPECT_EQ(on.config.autoindex_format, http::ListingFormat::kJson);
  const Parsed bad = Parse({"--root", "/tmp", "--autoindex-format", "xml"});
  EXPECT_FALSE(bad.ok);
  EXPECT_EQ(bad.error, "--autoindex-format: expected html or json, got 'xml'");
  EXPECT_EQ(off.config.autoindex_max_entries, 100000u);
  const Parsed few = Parse({"--root", "/tmp", "--autoindex-max-entries", "50"});
  ASSERT_TRUE(few.ok) << few.error;
  EXPECT_EQ(few.config.autoindex_max_entries, 50u);
  for (const char* v : {"0", "1000001", "x"}) {
    const Parsed out = Parse({"--root", "/tmp", "--autoindex-max-entries", v});
    EXPECT_FALSE(out.ok) << v;
    EXPECT_EQ(out.error, std::string("--autoindex-max-entries: expected an integer from 1 to "
                                     "1000000, got '") +
                             v + "'");
  }
}

TEST(Config, FallbackIsAPathBeneathTheRoot) {
  EXPECT_EQ(Parse({"--root", "/tmp"}).config.fallback, "");
  const Parsed p = Parse({"--root", "/tmp", "--fallback", "/spa/index.html"});
  ASSERT_TRUE(p.ok) << p.error;
  EXPECT_EQ(p.config.fallback, "spa/index.html");
}

TEST(Config, OriginHeaderErrorsAreOneLine) {
  const std::vector<std::pair<std::vector<std::string>, std::string>> cases = {
      {{"--cache-control", "no-cache"}, "--cache-control: expected GLOB=VALUE, got 'no-cache'"},
      {{"--cache-control", "*.css="}, "--cache-control: '' is not a header value"},
      {{"--add-header", "X-Frame-Options DENY"}, "--add-header: expected 'Name: value'"},
      {{"--add-header", "X Frame: DENY"}, "--add-header: 'X Frame' is not a header name"},
      {{"--add-header", "X-A: b\r\nSet-Cookie: c"}, "--add-header: the value of X-A is not"},
      {{"--add-header", "Content-Length: 0"}, "--add-header: ringd writes Content-Length itself"},
      {{"--error-page", "404"}, "--error-page: expected STATUS=/PATH"},
      {{"--error-page", "404=404.html"}, "--error-page: expected STATUS=/PATH"},
      {{"--error-page", "200=/ok.html"}, "--error-page: ringd cannot serve a page"},
      {{"--error-page", "404=/../x.html"}, "--error-page: '/../x.html' is not a plain path"},
      {{"--default-cache-control", "a\nb"}, "--default-cache-control: 'a\nb' is not"},
      {{"--fallback", "index.html"}, "--fallback: 'index.html' is not a plain path"},
      {{"--fallback", "/"}, "--fallback: '/' is not a plain path"},
      {{"--fallback", "/a/../index.html"}, "--fallback: '/a/../index.html' is not a plain path"},
      {{"--fallback", "/spa//index.html"}, "--fallback: '/spa//index.html' is not a plain path"},
  };
  for (const auto& [flags, want] : cases) {
    std::vector<std::string> args = {"--root", "/tmp"};
    args.insert(args.end(), flags.begin(), flags.end());
    const Parsed p = Parse(args);
    EXPECT_FALSE(p.ok) << flags[1];
    EXPECT_EQ(p.error.rfind(want, 0), 0u) << p.error;
  }
}

TEST(Config, ProxyListenersAndClientRules) {
  Parsed p = Parse({"--root",       "/tmp",
                    "--listen",     "127.0.0.1:8080,proxy",
                    "--listen",     "[::1]:8081",
                    "--listen-tls", "[::1]:8443,proxy",
                    "--tls-cert",   "c",
                    "--tls-key",    "k",
                    "--deny",       "192.0.2.66",
                    "--allow",      "192.0.2.0/24",
                    "--allow",      "2001:db8::/32",
                    "--deny",       "all"});
  ASSERT_TRUE(p.ok) << p.error;
  ASSERT_EQ(p.config.listen.size(), 2u);
  EXPECT_TRUE(p.config.listen[0].proxy);
  EXPECT_EQ(p.config.listen[0].text, "127.0.0.1:8080");
  EXPECT_FALSE(p.config.listen[1].proxy);
  ASSERT_EQ(p.config.listen_tls.size(), 1u);
  EXPECT_TRUE(p.config.listen_tls[0].proxy);
  EXPECT_TRUE(p.config.any_proxy_listener());
  // The default --proxy-from: loopback.
  http::ClientAddress a;
  a.family = AF_INET;
  a.addr[0] = 127;
  a.addr[3] = 9;
  EXPECT_TRUE(p.config.proxy_from.Contains(a));
  EXPECT_FALSE(p.config.proxy_from_all);
  // In order, the first match deciding.
  a.addr[0] = 192;
  a.addr[2] = 2;
  a.addr[3] = 66;
  EXPECT_FALSE(p.config.client_rules.Allows(a));
  a.addr[3] = 67;
  EXPECT_TRUE(p.config.client_rules.Allows(a));
  a.addr[0] = 10;
  EXPECT_FALSE(p.config.client_rules.Allows(a));

  Parsed q = Parse({"--root", "/tmp", "--proxy-from", "10.0.0.1", "--proxy-from", "all"});
  ASSERT_TRUE(q.ok) << q.error;
  EXPECT_TRUE(q.config.proxy_from_all);
  EXPECT_FALSE(q.config.any_proxy_listener());
  EXPECT_TRUE(q.config.client_rules.empty());
}

TEST(Config, ProxyAndClientRuleErrorsAreOneLine) {
  EXPECT_EQ(Parse({"--root", "/tmp", "--listen", "127.0.0.1:8080,proxi"}).error,
            "--listen: unknown option 'proxi' in '127.0.0.1:8080,proxi' (options: proxy)");
  EXPECT_EQ(Parse({"--root", "/tmp", "--listen", "127.0.0.1:8080,"}).error,
            "--listen: unknown option '' in '127.0.0.1:8080,' (options: proxy)");
  EXPECT_EQ(Parse({"--root", "/tmp", "--admin-listen", "127.0.0.1:9090,proxy"}).error,
            "--admin-listen: bad port in '127.0.0.1:9090,proxy'");
  EXPECT_EQ(Parse({"--root", "/tmp", "--allow", "10.0.0.1/8"}).error,
            "--allow: expected ADDRESS, ADDRESS/BITS (no host bits set) or all, got '10.0.0.1/8'");
  EXPECT_EQ(Parse({"--root", "/tmp", "--deny", "example.org"}).error,
            "--deny: expected ADDRESS, ADDRESS/BITS (no host bits set) or all, got 'example.org'");
  EXPECT_EQ(
      Parse({"--root", "/tmp", "--proxy-from", "::1/129"}).error,
      "--proxy-from: expected ADDRESS, ADDRESS/BITS (no host bits set) or all, got '::1/129'");
}

TEST(Config, ClientLimitsAndRealIp) {
  Parsed d = Parse({"--root", "/tmp"});
  ASSERT_TRUE(d.ok) << d.error;
  EXPECT_FALSE(d.config.limits_clients());
  EXPECT_EQ(d.config.limit_req_status, 503u);
  EXPECT_EQ(d.config.limit_ipv6_prefix, 64u);
  EXPECT_TRUE(d.config.real_ip_from.empty());
  EXPECT_EQ(d.config.real_ip_header, "X-Forwarded-For");

  Parsed p = Parse({"--root", "/tmp", "--limit-conn", "4", "--limit-req", "10r/s,burst=20",
                    "--limit-req-status", "429", "--limit-table", "64", "--limit-ipv6-prefix", "56",
                    "--real-ip-from", "10.0.0.0/8", "--real-ip-from", "::1", "--real-ip-header",
                    "X-Real-IP", "--real-ip-recursive"});
  ASSERT_TRUE(p.ok) << p.error;
  EXPECT_TRUE(p.config.limits_clients());
  EXPECT_EQ(p.config.limit_conn, 4u);
  EXPECT_EQ(p.config.limit_req.microrequests_per_s, 10000000u);
  EXPECT_EQ(p.config.limit_req.burst, 20u);
  EXPECT_EQ(p.config.limit_req_status, 429u);
  EXPECT_EQ(p.config.limit_table, 64u);
  EXPECT_EQ(p.config.limit_ipv6_prefix, 56u);
  EXPECT_EQ(p.config.real_ip_header, "X-Real-IP");
  EXPECT_TRUE(p.config.real_ip_recursive);
  http::ClientAddress a;
  a.family = AF_INET;
  a.addr[0] = 10;
  EXPECT_TRUE(p.config.real_ip_from.Contains(a));

  EXPECT_EQ(Parse({"--root", "/tmp", "--limit-req", "10r/h"}).error,
            "--limit-req: expected RATE[,burst=N] such as 10r/s or 600r/m,burst=20 (from 1r/m to "
            "1000000r/s), got '10r/h'");
  EXPECT_EQ(Parse({"--root", "/tmp", "--limit-req-status", "500"}).error,
            "--limit-req-status: expected 429 or 503, got '500'");
  EXPECT_EQ(Parse({"--root", "/tmp", "--limit-table", "4"}).error,
            "--limit-table: expected an integer from 8 to 16777216, got '4'");
  EXPECT_EQ(Parse({"--root", "/tmp", "--limit-ipv6-prefix", "0"}).error,
            "--limit-ipv6-prefix: expected an integer from 1 to 128, got '0'");
  EXPECT_EQ(Parse({"--root", "/tmp", "--real-ip-from", "all,"}).error,
            "--real-ip-from: expected ADDRESS, ADDRESS/BITS (no host bits set) or all, got 'all,'");
}

TEST(Config, User) {
  Parsed p = Parse({"--root", "/tmp", "--user", "nobody"});
  ASSERT_TRUE(p.ok) << p.error;
  EXPECT_TRUE(p.config.has_user);
  EXPECT_EQ(p.config.user, "nobody");
  EXPECT_NE(p.config.uid, 0u);
  p = Parse({"--root", "/tmp", "--user=nobody:root"});  // any group, even root's
  ASSERT_TRUE(p.ok) << p.error;
  EXPECT_EQ(p.config.gid, 0u);
  EXPECT_EQ(Parse({"--root", "/tmp", "--user", "no-such-user-xyz"}).error,
            "--user: no such user 'no-such-user-xyz'");
  EXPECT_EQ(Parse({"--root", "/tmp", "--user", "nobody:no-such-group-xyz"}).error,
            "--user: no such group 'no-such-group-xyz'");
  EXPECT_EQ(Parse({"--root", "/tmp", "--user", "nobody:"}).error,
            "--user: expected NAME or NAME:GROUP, got 'nobody:'");
  EXPECT_EQ(Parse({"--root", "/tmp", "--user", "root"}).error,
            "--user: 'root' is root; name an unprivileged user");
  EXPECT_EQ(Parse({"--root", "/tmp", "--io=bypass", "--sqpoll", "--user", "nobody"}).error,
            "--user cannot be combined with --sqpoll: the SQ thread keeps root's credentials");
  EXPECT_TRUE(Parse({"--root", "/tmp", "--allow-root"}).config.allow_root);
}

}  // namespace
}  // namespace ringd

namespace ringd {
namespace {

std::string TempSubdir(const std::string& name) {
  const std::string dir = ::testing::TempDir() + "/" + name;
  std::filesystem::create_directories(dir);
  return dir;
}

TEST(Config, SitesOnTheCommandLine) {
  const std::string a = TempSubdir("site-a"), b = TempSubdir("site-b");
  Parsed p = Parse({"--root=/tmp", "--index=main.html", "--add-header=X-Top: 1",
                    "--site=example.org,WWW.example.org", "--root=" + a, "--index=a.html", "--site",
                    "*.example.net", "--root", b, "--add-header=X-B: b",
                    "--error-page=404=/missing.html"});
  ASSERT_TRUE(p.ok) << p.error;
  EXPECT_EQ(p.config.root, "/tmp");
  EXPECT_EQ(p.config.index, "main.html");
  ASSERT_EQ(p.config.sites.size(), 2u);
  const SiteConfig& s0 = p.config.sites[0];
  EXPECT_EQ(s0.names, (std::vector<std::string>{"example.org", "WWW.example.org"}));
  EXPECT_EQ(s0.name(), "example.org");
  EXPECT_EQ(s0.root, a);
  EXPECT_EQ(s0.index, "a.html");
  EXPECT_FALSE(s0.own_origin);  // the top level's --add-header
  const SiteConfig& s1 = p.config.sites[1];
  EXPECT_EQ(s1.root, b);
  EXPECT_EQ(s1.index, "");  // the top level's
  EXPECT_TRUE(s1.own_origin);
  EXPECT_EQ(s1.origin.added(), "X-B: b\r\n");
  EXPECT_EQ(s1.origin.ErrorPage(404), "missing.html");
  EXPECT_EQ(p.config.origin.added(), "X-Top: 1\r\n");
  EXPECT_EQ(p.config.unknown_site, UnknownSite::kDefault);
}

TEST(Config, SiteSectionsInAFlagfile) {
  const std::string a = TempSubdir("sec-a"), b = TempSubdir("sec-b");
  const std::string path = ::testing::TempDir() + "/sites.flags";
  {
    std::ofstream f(path);
    f << "--root=/tmp\n--unknown-site=421\n\n[site example.org www.example.org]\n--root=" << a
      << "\n--add-header=X-Frame-Options: DENY   # its own\n\n  [site\t*.example.net ]  # "
         "B\n--root "
      << b << "\n";
  }
  Parsed p = Parse({"--flagfile=" + path});
  ASSERT_TRUE(p.ok) << p.error;
  ASSERT_EQ(p.config.sites.size(), 2u);
  EXPECT_EQ(p.config.sites[0].names, (std::vector<std::string>{"example.org", "www.example.org"}));
  EXPECT_EQ(p.config.sites[0].origin.added(), "X-Frame-Options: DENY\r\n");
  EXPECT_EQ(p.config.sites[1].names, (std::vector<std::string>{"*.example.net"}));
  EXPECT_EQ(p.config.sites[1].root, b);
  EXPECT_EQ(p.config.unknown_site, UnknownSite::kMisdirected);
  // A site's scope ends with its file: the command line's flags after it are the process's.
  Parsed q = Parse({"--flagfile=" + path, "--shards=2"});
  ASSERT_TRUE(q.ok) << q.error;
  EXPECT_EQ(q.config.shards, 2u);
  // A site's single-valued flags are its own: a site's --root is not the top level's twice.
  for (const SiteConfig& s : q.config.sites) EXPECT_NE(s.root, "/tmp");
}

// One flagfile per site, each named by the main one (nginx's include sites-enabled/*): a site
// ends with its file, and the main file's flags after it are the process's.
TEST(Config, AFlagfilePerSite) {
  const std::string a = TempSubdir("inc-a"), b = TempSubdir("inc-b");
  const std::string dir = ::testing::TempDir();
  std::ofstream(dir + "/inc-a.conf") << "[site a.test]\n--root=" << a << "\n";
  std::ofstream(dir + "/inc-b.conf") << "[site b.test]\n--root=" << b << "\n";
  std::ofstream(dir + "/inc-main.conf") << "--root=/tmp\n--flagfile=" << dir << "/inc-a.conf\n"
                                        << "--flagfile=" << dir << "/inc-b.conf\n--shards=3\n";
  Parsed p = Parse({"--flagfile=" + dir + "/inc-main.conf"});
  ASSERT_TRUE(p.ok) << p.error;
  ASSERT_EQ(p.config.sites.size(), 2u);
  EXPECT_EQ(p.config.sites[0].root, a);
  EXPECT_EQ(p.config.sites[1].root, b);
  EXPECT_EQ(p.config.shards, 3u);
  EXPECT_EQ(p.config.root, "/tmp");
}

// --allow / --deny inside a site are the site's, in order (nginx's allow/deny in a server
// block); before the first site they are the process's.
TEST(Config, SiteAllowAndDeny) {
  const std::string a = TempSubdir("rules-a"), b = TempSubdir("rules-b");
  const std::string path = ::testing::TempDir() + "/site-rules.flags";
  std::ofstream(path) << "--root=/tmp\n--deny=192.0.2.9\n[site a.test]\n--root=" << a
                      << "\n--deny=127.0.0.3\n--allow=127.0.0.0/8\n--allow 2001:db8::/32\n"
                         "--deny=all\n[site b.test]\n--root="
                      << b << "\n";
  Parsed p = Parse({"--flagfile=" + path});
  ASSERT_TRUE(p.ok) << p.error;
  ASSERT_EQ(p.config.sites.size(), 2u);
  EXPECT_TRUE(p.config.any_site_rules());
  const http::ClientRules& rules = p.config.sites[0].client_rules;
  auto allows = [&rules](const char* address) {
    return rules.Allows(*http::ParseAddress(address));
  };
  EXPECT_TRUE(allows("127.0.0.2"));
  EXPECT_FALSE(allows("127.0.0.3"));  // the first match decides
  EXPECT_TRUE(allows("2001:db8::5"));
  EXPECT_FALSE(allows("::1"));
  EXPECT_FALSE(allows("192.0.2.1"));
  EXPECT_TRUE(p.config.sites[1].client_rules.empty());  // b.test has none: everyone
  // The top level's rule stays the process's alone.
  EXPECT_FALSE(p.config.client_rules.Allows(*http::ParseAddress("192.0.2.9")));
  EXPECT_TRUE(p.config.client_rules.Allows(*http::ParseAddress("127.0.0.3")));
  Parsed none = Parse({"--root=/tmp", "--site=a.test", "--root=" + a});
  ASSERT_TRUE(none.ok) << none.error;
  EXPECT_FALSE(none.config.any_site_rules());
}

TEST(Config, SiteAutoindex) {
  const std::string a = TempSubdir("index-a"), b = TempSubdir("index-b");
  Parsed p = Parse({"--root=/tmp", "--site=a.test", "--root=" + a, "--autoindex",
                    "--autoindex-format=json", "--site=b.test", "--root=" + b});
  ASSERT_TRUE(p.ok) << p.error;
  ASSERT_EQ(p.config.sites.size(), 2u);
  EXPECT_FALSE(p.config.autoindex);  // the top level lists nothing
  EXPECT_EQ(p.config.sites[0].autoindex, std::optional<bool>(true));
  EXPECT_EQ(p.config.sites[0].autoindex_format, std::optional(http::ListingFormat::kJson));
  EXPECT_FALSE(p.config.sites[1].autoindex.has_value());  // b.test: the top level's
  EXPECT_TRUE(p.config.any_autoindex());
  Parsed off =
      Parse({"--root=/tmp", "--autoindex", "--site=a.test", "--root=" + a, "--autoindex=false"});
  ASSERT_TRUE(off.ok) << off.error;
  EXPECT_EQ(off.config.sites[0].autoindex, std::optional<bool>(false));
  Parsed none = Parse({"--root=/tmp", "--site=a.test", "--root=" + a});
  EXPECT_FALSE(none.config.any_autoindex());
  Parsed bad = Parse({"--root=/tmp", "--site=a.test", "--root=" + a, "--autoindex-format=xml"});
  EXPECT_FALSE(bad.ok);
}

TEST(Config, SiteErrorsAreOneLine) {
  const std::string a = TempSubdir("err-a");
  const std::string path = ::testing::TempDir() + "/bad-section.flags";
  {
    std::ofstream f(path);
    f << "--root=/tmp\n[server example.org]\n--root=" << a << "\n";
  }
  const std::string late = ::testing::TempDir() + "/late-flag.flags";
  {
    std::ofstream f(late);
    f << "--root=/tmp\n[site example.org]\n--root=" << a << "\n--shards=2\n";
  }
  struct Case {
    std::vector<std::string> args;
    std::string says;
  } cases[] = {
      {{"--root=/tmp", "--site=example.org"}, "--site example.org: needs --root"},
      {{"--root=/tmp", "--site=exa mple.org", "--root=" + a}, "is not a site name"},
      {{"--root=/tmp", "--site=a.org,,b.org", "--root=" + a}, "expected NAME[,NAME...]"},
      {{"--root=/tmp", "--site=a.org", "--root=" + a, "--site=A.org", "--root=" + a},
       "given twice"},
      {{"--root=/tmp", "--site=a.org", "--root=/nonexistent-ringd-dir"},
       "--site a.org: --root: cannot use '/nonexistent-ringd-dir'"},
      {{"--root=/tmp", "--site=a.org", "--root=" + a, "--root=" + a}, "--root is given twice"},
      {{"--root=/tmp", "--site=a.org", "--root=" + a, "--shards=2"},
       "--shards cannot be given inside --site a.org"},
      {{"--root=/tmp", "--site=a.org", "--root=" + a, "--tls-cert=x.pem"},
       "--tls-cert and --tls-key come in pairs"},
      {{"--root=/tmp", "--unknown-site=421"}, "--unknown-site needs a --site"},
      {{"--root=/tmp", "--unknown-site=444"}, "expected default, 421 or close"},
      {{"--root=/tmp", "--site=a.org", "--root=" + a, "--index=../x"}, "--site a.org: --index"},
      {{"--flagfile=" + path}, "bad-section.flags:2: expected a section [site NAME ...]"},
      {{"--flagfile=" + late}, "late-flag.flags:4: --shards cannot be given inside"},
      {{"--root=/tmp", "--site=a.org", "--root=" + a, "--allow=10.0.0.1/8"},
       "--site a.org: --allow: expected ADDRESS, ADDRESS/BITS (no host bits set) or all, got "
       "'10.0.0.1/8'"},
      {{"--root=/tmp", "--site=a.org", "--root=" + a, "--deny=::1/129"},
       "--site a.org: --deny: expected ADDRESS"},
  };
  for (const Case& c : cases) {
    Parsed p = Parse(c.args);
    EXPECT_FALSE(p.ok) << c.says;
    EXPECT_NE(p.error.find(c.says), std::string::npos) << p.error;
    EXPECT_EQ(p.error.find('\n'), std::string::npos) << p.error;
  }
}

}  // namespace
}  // namespace ringd
