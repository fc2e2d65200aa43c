#include "perf/loadgen_options.h"

#include <unistd.h>

#include <cstdio>
#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace ringd::perf {
namespace {

bool Parse(std::vector<std::string> args, Options* o) {
  args.insert(args.begin(), "ringd-load");
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  return ParseArgs(static_cast<int>(args.size()), argv.data(), o);
}

// Flags keep their values for the life of the process: each parse runs in a child of its own.
void ExpectRefused(std::vector<std::string> args, const char* message) {
  EXPECT_EXIT(
      {
        Options o;
        std::exit(Parse(args, &o) ? 0 : 2);
      },
      testing::ExitedWithCode(1), message);
}

// The flags perf/harness/scenarios.py passes, each kind of value, repeated flags in order.
int ParseTheHarnessCommandLine() {
  const std::string file = testing::TempDir() + "/paths";
  FILE* f = std::fopen(file.c_str(), "w");
  std::fputs("/from-file\nnot-a-path\n/second\n", f);
  std::fclose(f);
  Options o;
  const bool ok = Parse({"--port",
                         "8081",
                         "--connections",
                         "40",
                         "--duration-s",
                         "2.5",
                         "--threads",
                         "2",
                         "--close",
                         "--bulk",
                         "--rate",
                         "1000",
                         "--idle",
                         "7",
                         "--path",
                         "/a",
                         "--paths-file",
                         file,
                         "--path=/b",
                         "--zipf",
                         "1.1",
                         "--size-classes",
                         "1024,65536",
                         "--header",
                         "X-A: 1",
                         "--header",
                         "X-B: 2, 3",
                         "--timeout-ms=250",
                         "--idle-hold-s",
                         "3",
                         "--idle-setup",
                         "0",
                         "--idle-settle-s",
                         "1.5",
                         "--seed=9",
                         "--requests",
                         "100",
                         "--pipeline",
                         "4"},
                        &o);
  const bool same = ok && o.port == 8081 && o.connections == 40 && o.duration_s == 2.5 &&
                    o.threads == 2 && o.close && o.bulk && o.rate == 1000 && o.idle == 7 &&
                    o.paths == std::vector<std::string>{"/a", "/from-file", "/second", "/b"} &&
                    o.zipf == 1.1 && o.size_classes == std::vector<uint64_t>{1024, 65536} &&
                    o.headers == std::vector<std::string>{"X-A: 1", "X-B: 2, 3"} &&
                    o.timeout_us == 250000 && o.idle_hold_s == 3 && o.seed == 9 &&
                    o.idle_setup == 0 && o.idle_settle_s == 1.5 && o.max_requests == 100 &&
                    o.pipeline == 4 && o.host == "127.0.0.1" && !o.uniform;
  return same ? 0 : 3;
}

int ParseOnlyAPath() {
  Options o;
  const bool ok = Parse({"--path", "/x"}, &o);
  const Options d;
  const bool same = ok && o.port == d.port && o.connections == d.connections &&
                    o.threads == d.threads && o.duration_s == d.duration_s &&
                    o.max_requests == d.max_requests && o.pipeline == d.pipeline &&
                    o.timeout_us == d.timeout_us && o.seed == d.seed && o.host == d.host &&
                    !o.close && !o.bulk && o.idle == 0 && o.idle_setup == 100 && o.rate == 0 &&
                    !o.tls && !o.tls_resume && o.paths == std::vector<std::string>{"/x"};
  return same ? 0 : 3;
}

// The TLS scenarios' flags (perf/harness/scenarios.py, tls-*).
int ParseTheTlsCommandLine() {
  Options o;
  const bool ok =
      Parse({"--port", "8443", "--connections", "100", "--close", "--tls", "--tls-resume",
             "--tls-groups", "P-256", "--tls-ciphersuites", "TLS_AES_256_GCM_SHA384",
             "--tls-sni=example.org", "--tls-max-version", "1.2", "--path", "/index.html"},
            &o);
  const bool same = ok && o.tls && o.tls_resume && o.close && !o.bulk && o.tls_groups == "P-256" &&
                    o.tls_ciphersuites == "TLS_AES_256_GCM_SHA384" && o.tls_sni == "example.org" &&
                    o.tls_max_version == 12;
  return same ? 0 : 3;
}

int ParseTlsDefaults() {
  Options o;
  const bool ok = Parse({"--tls", "--path", "/x"}, &o);
  const bool same = ok && o.tls && !o.tls_resume && o.tls_groups == "X25519" &&
                    o.tls_ciphersuites == "TLS_AES_128_GCM_SHA256" && o.tls_sni == "localhost" &&
                    o.tls_max_version == 13;
  return same ? 0 : 3;
}

TEST(LoadgenOptions, TheTlsCommandLine) {
  EXPECT_EXIT(std::exit(ParseTheTlsCommandLine()), testing::ExitedWithCode(0), "");
  EXPECT_EXIT(std::exit(ParseTlsDefaults()), testing::ExitedWithCode(0), "");
}

TEST(LoadgenOptions, RefusesTlsThatMakesNoSense) {
  Options o;
  EXPECT_EXIT(std::exit(Parse({"--tls", "--bulk", "--path", "/x"}, &o) ? 0 : 2),
              testing::ExitedWithCode(2), "--bulk .* plaintext only");
  EXPECT_EXIT(std::exit(Parse({"--tls-resume", "--path", "/x"}, &o) ? 0 : 2),
              testing::ExitedWithCode(2), "--tls-resume needs --tls");
  EXPECT_EXIT(std::exit(Parse({"--tls", "--tls-max-version", "1.1", "--path", "/x"}, &o) ? 0 : 2),
              testing::ExitedWithCode(2), "--tls-max-version is 1.2 or 1.3, not '1.1'");
}

TEST(LoadgenOptions, TheHarnessCommandLine) {
  EXPECT_EXIT(std::exit(ParseTheHarnessCommandLine()), testing::ExitedWithCode(0), "");
}

TEST(LoadgenOptions, Defaults) {
  EXPECT_EXIT(std::exit(ParseOnlyAPath()), testing::ExitedWithCode(0), "");
}

TEST(LoadgenOptions, RefusesWhatIsNotANumber) {
  ExpectRefused({"--connections=1O", "--path", "/x"}, "Illegal value '1O'.*connections");
  ExpectRefused({"--port", "80x", "--path", "/x"}, "Illegal value '80x'.*port");
  ExpectRefused({"--duration-s", "five", "--path", "/x"}, "Illegal value 'five'.*duration_s");
  ExpectRefused({"--requests=-1", "--path", "/x"}, "Illegal value '-1'.*requests");
  ExpectRefused({"--bogus", "--path", "/x"}, "Unknown command line flag 'bogus'");
  ExpectRefused({"--path"}, "Missing the value");
}

TEST(LoadgenOptions, RefusesARunThatMakesNoSense) {
  Options o;  // these return false without exiting; parse once per child all the same
  EXPECT_EXIT(std::exit(Parse({"--size-classes", "1,x", "--path", "/x"}, &o) ? 0 : 2),
              testing::ExitedWithCode(2), "'x' is not a byte count");
  EXPECT_EXIT(std::exit(Parse({"--size-classes", "2,1", "--path", "/x"}, &o) ? 0 : 2),
              testing::ExitedWithCode(2), "must be ascending");
  EXPECT_EXIT(std::exit(Parse({"--path", "/x", "stray"}, &o) ? 0 : 2), testing::ExitedWithCode(2),
              "unknown argument stray");
  EXPECT_EXIT(std::exit(Parse({"--port", "1"}, &o) ? 0 : 2), testing::ExitedWithCode(2), "");
  EXPECT_EXIT(std::exit(Parse({"--path", "/x", "--pipeline", "65"}, &o) ? 0 : 2),
              testing::ExitedWithCode(2), "");
}

TEST(LoadgenOptions, AHostHeaderReplacesTheHostLine) {
  Options o;
  o.host = "127.0.0.1";
  EXPECT_EQ(HostLine(o), "Host: 127.0.0.1\r\n");
  o.headers = {"Accept-Encoding: gzip"};
  EXPECT_EQ(HostLine(o), "Host: 127.0.0.1\r\n");
  o.headers = {"Accept-Encoding: gzip", "host: site50.example.org"};
  EXPECT_EQ(HostLine(o), "");
}

}  // namespace
}  // namespace ringd::perf
