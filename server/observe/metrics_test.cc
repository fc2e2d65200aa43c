#include "server/observe/metrics.h"

#include <chrono>
#include <thread>

#include "gtest/gtest.h"

namespace ringd {
namespace {

bool Has(const std::string& text, const std::string& line) {
  return text.find(line + "\n") != std::string::npos;
}

TEST(RequestMetrics, BucketsByUpperBoundInclusive) {
  RequestMetrics m;
  m.Observe(100);       // le 0.0001
  m.Observe(101);       // le 0.00025
  m.Observe(99999999);  // +Inf
  EXPECT_EQ(m.duration_buckets[0], 1u);
  EXPECT_EQ(m.duration_buckets[1], 1u);
  EXPECT_EQ(m.duration_buckets[kDurationBuckets - 1], 1u);
  EXPECT_EQ(m.duration_sum_us, 100u + 101u + 99999999u);
  m.Record(204, BodyPath::kNone, 100);
  m.Record(404, BodyPath::kInline, 200);
  m.Record(999, BodyPath::kFile, 1);  // out of range: counted as 5xx
  EXPECT_EQ(m.responses[1][0], 1u);
  EXPECT_EQ(m.responses[3][3], 1u);
  EXPECT_EQ(m.responses[4][2], 1u);
  EXPECT_EQ(m.response_bytes, 301u);
}

// --site: one series per configured site, summed over the shards that answered.
TEST(FormatPrometheus, SiteRequestsSummedOverShards) {
  ShardSnapshot a, b, down;
  a.sites = {{"-", 1}, {"example.org", 5}, {"*.example.net", 0}};
  b.shard = 1;
  b.sites = {{"-", 2}, {"example.org", 7}, {"*.example.net", 3}};
  down.sites = {{"-", 100}, {"example.org", 100}, {"*.example.net", 100}};
  std::vector<ShardView> views = {
      {0, true, false, &a}, {1, true, false, &b}, {2, false, false, &down}};
  const std::string text = FormatPrometheus(views, ProcessInfo{});
  EXPECT_TRUE(Has(text, "ringd_site_requests_total{site=\"-\"} 3")) << text;
  EXPECT_TRUE(Has(text, "ringd_site_requests_total{site=\"example.org\"} 12"));
  EXPECT_TRUE(Has(text, "ringd_site_requests_total{site=\"*.example.net\"} 3"));
  // Without sites, no series.
  ShardSnapshot plain;
  std::vector<ShardView> none = {{0, true, false, &plain}};
  EXPECT_EQ(FormatPrometheus(none, ProcessInfo{}).find("ringd_site_requests_total{"),
            std::string::npos);
}

TEST(FormatPrometheus, PerShardCountersSummedHistogramAndDownShards) {
  ShardSnapshot a, b;
  a.shard = 0;
  a.stats.accepted = 10;
  a.stats.closed = 7;
  a.stats.idle_timeouts = 2;
  a.requests.Record(200, BodyPath::kCached, 1000);
  a.requests.Record(200, BodyPath::kCached, 1000);
  a.requests.Observe(50);
  a.requests.Observe(3000);
  b.shard = 1;
  b.requests.Observe(60);
  b.log_dropped = 5;
  std::vector<ShardView> views = {
      {0, true, false, &a}, {1, true, false, &b}, {2, false, false, nullptr}};
  ProcessInfo p;
  p.version = "0.1.0+git12.abc1234";
  p.commit = "abc1234";
  p.backend = "uring";
  p.io_reason = "a \"quoted\" reason";
  const std::string text = FormatPrometheus(views, p);
  EXPECT_TRUE(Has(text, "ringd_build_info{version=\"0.1.0+git12.abc1234\",commit=\"abc1234\"} 1"));
  EXPECT_TRUE(Has(text, "ringd_requests_total{shard=\"0\",code=\"2xx\",body=\"cached\"} 2"));
  EXPECT_TRUE(Has(text, "ringd_requests_total{shard=\"1\",code=\"2xx\",body=\"cached\"} 0"));
  EXPECT_TRUE(Has(text, "ringd_connections_open{shard=\"0\"} 3"));
  EXPECT_TRUE(Has(text, "ringd_timeouts_total{shard=\"0\",kind=\"idle\"} 2"));
  EXPECT_TRUE(Has(text, "ringd_access_log_dropped_lines_total{shard=\"1\"} 5"));
  EXPECT_TRUE(Has(text, "ringd_response_bytes_total{shard=\"0\"} 2000"));
  // Summed over shards, cumulative.
  EXPECT_TRUE(Has(text, "ringd_request_duration_seconds_bucket{le=\"0.0001\"} 2"));
  EXPECT_TRUE(Has(text, "ringd_request_duration_seconds_bucket{le=\"0.0025\"} 2"));
  EXPECT_TRUE(Has(text, "ringd_request_duration_seconds_bucket{le=\"0.005\"} 3"));
  EXPECT_TRUE(Has(text, "ringd_request_duration_seconds_bucket{le=\"+Inf\"} 3"));
  EXPECT_TRUE(Has(text, "ringd_request_duration_seconds_count 3"));
  EXPECT_TRUE(Has(text, "ringd_request_duration_seconds_sum 0.003110"));
  // A shard that did not answer: up 0 and no stale series.
  EXPECT_TRUE(Has(text, "ringd_shard_up{shard=\"2\"} 0"));
  EXPECT_EQ(text.find("shard=\"2\",code"), std::string::npos);
  EXPECT_NE(text.find("io_reason=\"a \\\"quoted\\\" reason\""), std::string::npos);
  // Every family is announced once with HELP and TYPE.
  size_t pos = 0;
  int types = 0;
  while ((pos = text.find("# TYPE ", pos)) != std::string::npos) {
    ++types;
    ++pos;
  }
  size_t helps = 0;
  pos = 0;
  while ((pos = text.find("# HELP ", pos)) != std::string::npos) {
    ++helps;
    ++pos;
  }
  EXPECT_EQ(static_cast<size_t>(types), helps);
  EXPECT_GT(types, 25);
}

TEST(FormatPrometheus, CertificatesTheirExpiryAndTheirOcspStaples) {
  ProcessInfo p;
  p.tls_certificates = {{"/etc/ringd/a.crt", 2000000000, "/etc/ringd/a.ocsp", 1900000000},
                        {"/etc/ringd/b.crt", 2100000000, "", 0}};
  const std::string text = FormatPrometheus({}, p);
  EXPECT_TRUE(Has(text,
                  "ringd_tls_certificate_expiry_seconds{file=\"/etc/ringd/a.crt\"} "
                  "2000000000"));
  EXPECT_TRUE(Has(text,
                  "ringd_tls_certificate_expiry_seconds{file=\"/etc/ringd/b.crt\"} "
                  "2100000000"));
  EXPECT_TRUE(Has(text,
                  "ringd_tls_ocsp_next_update_seconds{file=\"/etc/ringd/a.crt\","
                  "ocsp=\"/etc/ringd/a.ocsp\"} 1900000000"));
  EXPECT_EQ(text.find("ringd_tls_ocsp_next_update_seconds{file=\"/etc/ringd/b.crt\""),
            std::string::npos);
}

TEST(FormatPrometheus, ExpiredCertificatesDroppedStaplesAndReloads) {
  ProcessInfo p;
  p.now_sec = 2000;
  p.tls_certificates = {{"a.crt", 3000, "", 0}, {"b.crt", 1500, "", 0}};
  p.tls_ocsp_dropped = {"old.ocsp"};
  p.reload_success = false;
  p.reload_time_sec = 1700000000;
  const std::string text = FormatPrometheus({}, p);
  EXPECT_TRUE(Has(text, "ringd_tls_certificate_expired{file=\"a.crt\"} 0"));
  EXPECT_TRUE(Has(text, "ringd_tls_certificate_expired{file=\"b.crt\"} 1"));
  EXPECT_TRUE(Has(text, "ringd_tls_ocsp_dropped{ocsp=\"old.ocsp\"} 1"));
  EXPECT_TRUE(Has(text, "ringd_reload_success 0"));
  EXPECT_TRUE(Has(text, "ringd_reload_timestamp_seconds 1700000000"));
}

TEST(UnusableCertificates, NamesEachExpiredCertificate) {
  ProcessInfo p;
  EXPECT_EQ(UnusableCertificates(p, 1000), "");  // no HTTPS: nothing to be unusable
  p.tls_certificates = {{"a.crt", 2000, "", 0}, {"b.crt", 900, "", 0}};
  EXPECT_EQ(UnusableCertificates(p, 1000),
            "TLS certificate 'b.crt' expired 100 s ago; replace it and send SIGHUP\n");
  EXPECT_EQ(UnusableCertificates(p, 1999),
            "TLS certificate 'b.crt' expired 1099 s ago; replace it and send SIGHUP\n");
  EXPECT_NE(UnusableCertificates(p, 2000).find("'a.crt' expired 0 s ago"), std::string::npos);
}

TEST(FormatDebugShards, ConnectionsByStateAndPools) {
  ShardSnapshot a;
  a.backend = "epoll";
  a.connection_states[0] = 3;  // reading
  a.connection_states[2] = 2;  // sending
  a.idle_connections = 2;
  a.connection_capacity = 100;
  a.exchanges = 2;
  a.exchange_capacity = 100;
  a.cache.entries = 7;
  a.cache.pinned = 1;
  std::vector<ShardView> views = {{0, true, false, &a}, {1, false, true, nullptr}};
  const std::string json = FormatDebugShards(views, ProcessInfo{});
  EXPECT_NE(
      json.find("\"connections\":{\"reading\":3,\"waiting_file\":0,\"sending\":2,"
                "\"ending_recv\":0,\"lingering\":0,\"closing\":0,\"h2\":0,\"idle\":2,\"open\":5}"),
      std::string::npos)
      << json;
  EXPECT_NE(json.find("\"pools\":{\"connections\":{\"in_use\":5,\"capacity\":100},"
                      "\"exchanges\":{\"in_use\":2,\"capacity\":100}"),
            std::string::npos)
      << json;
  EXPECT_NE(json.find("\"cache_entries\":7,\"cache_pinned\":1"), std::string::npos) << json;
  EXPECT_NE(json.find("{\"shard\":1,\"up\":false,\"stopped\":true}"), std::string::npos) << json;
}

// The handshake between the admin thread and a shard thread.
TEST(SnapshotSlot, PublishesOnRequestAndTimesOutWithoutAShard) {
  SnapshotSlot slot;
  EXPECT_FALSE(slot.Pending());
  std::atomic<bool> stop{false};
  uint64_t value = 0;
  std::thread shard([&] {
    while (!stop.load()) {
      if (slot.Pending()) {
        slot.data().stats.requests = ++value;
        slot.Publish();
      }
      std::this_thread::yield();
    }
  });
  for (uint64_t i = 1; i <= 100; ++i) {
    slot.Request();
    ASSERT_TRUE(slot.WaitFor(std::chrono::steady_clock::now() + std::chrono::seconds(10)));
    EXPECT_EQ(slot.data().stats.requests, i);
  }
  stop = true;
  shard.join();
  slot.Request();  // nobody answers now
  EXPECT_FALSE(slot.WaitFor(std::chrono::steady_clock::now() + std::chrono::milliseconds(20)));
  EXPECT_TRUE(slot.Pending());
}

}  // namespace
}  // namespace ringd
