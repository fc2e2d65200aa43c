#include "server/http/response_plan.h"

#include <algorithm>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "server/http/http_date.h"

namespace ringd::http {
namespace {

constexpr int64_t kMtime = 1445412480;  // Wed, 21 Oct 2015 07:28:00 GMT

// Metadata for a pretend document root. Like the server's cache, it answers only paths it has
// been asked to fetch: the first Lookup of a path returns nullopt, so every test also walks the
// planner's kNeedLookup path.
class FakeTree : public FileMetaSource {
 public:
  void File(std::string path, uint64_t size, int64_t mtime = kMtime) {
    disk_[path] = FileMeta{FileMeta::Kind::kRegular, size, mtime, disk_.size() + 1};
  }
  void Dir(std::string path) {
    disk_[path] = FileMeta{FileMeta::Kind::kDirectory, 4096, kMtime, 0};
  }
  void Set(std::string path, FileMeta::Kind kind) { disk_[path] = FileMeta{kind, 0, kMtime, 0}; }

  std::optional<FileMeta> Lookup(std::string_view path) override {
    auto it = cache_.find(std::string(path));
    if (it == cache_.end()) return std::nullopt;
    return it->second;
  }
  void Fetch(std::string_view path) {
    fetched.emplace_back(path);
    auto it = disk_.find(std::string(path));
    cache_[std::string(path)] = it == disk_.end() ? FileMeta{} : it->second;
  }
  std::vector<std::string> fetched;

  // Listings: as the caller starts them, on a kNeedListing (`listed` names the directory and its
  // URL path), with the status `listing_status`.
  std::optional<ListingResult> Listing(std::string_view path) override {
    auto it = listings_.find(std::string(path));
    if (it == listings_.end()) return std::nullopt;
    return ListingResult{listing_status};
  }
  void MakeListing(std::string_view path, std::string_view url_path) {
    listed.emplace_back(std::string(path) + " at " + std::string(url_path));
    listings_[std::string(path)] = std::string(url_path);
  }
  std::vector<std::string> listed;
  int listing_status = 200;

  // --compress's variants, by the file's inode and the coding.
  std::optional<std::string_view> Variant(const FileMeta& meta, Coding coding) override {
    auto it = variants.find({meta.inode, coding});
    if (it == variants.end()) return std::nullopt;
    return std::string_view(it->second);
  }
  uint64_t InodeOf(const std::string& path) { return disk_.at(path).inode; }
  std::map<std::pair<uint64_t, Coding>, std::string> variants;

 private:
  std::map<std::string, std::string> listings_;
  std::map<std::string, FileMeta> disk_, cache_;
};

struct Planned {
  ResponsePlan plan;
  std::string head;
  std::unique_ptr<PlanScratch> scratch = std::make_unique<PlanScratch>();
  int waits = 0;  // times planning stopped for lookups
};

class ResponsePlanTest : public ::testing::Test {
 protected:
  ResponsePlanTest() {
    config_.mime = &mime_;
    config_.multipart_boundary = "BOUNDARY";
    tree_.File("index.html", 612);
    tree_.Dir(".");
    tree_.Dir("docs");
    tree_.File("docs/index.html", 100);
    tree_.Dir("empty");
    tree_.File("app.js", 5000);
    tree_.File("app.js.gz", 1200);
    tree_.File("app.js.br", 1000);
    tree_.File("style.css", 4000);
    tree_.File("style.css.gz", 900, kMtime - 10);  // older than the file: stale, never served
    tree_.File("data.bin", 10000);
    tree_.Set("secret.txt", FileMeta::Kind::kForbidden);
    tree_.Set("locked", FileMeta::Kind::kForbidden);  // a directory that cannot be searched
    tree_.Set("locked/.", FileMeta::Kind::kForbidden);
    tree_.Set("flaky", FileMeta::Kind::kForbidden);
    tree_.Set("flaky/.", FileMeta::Kind::kUnavailable);  // out of descriptors for that lookup
    tree_.Set("fifo", FileMeta::Kind::kOther);
    tree_.Set("busy", FileMeta::Kind::kUnavailable);
  }

  // Parses `request`, then plans, fetching metadata whenever the planner asks.
  // With `shared`, through that scratch (as a shard plans every request through its own).
  Planned Plan(const std::string& request, PlanScratch* shared = nullptr) {
    Header headers[64];
    Request req;
    ParseResult r = ParseRequest(request, 0, ParserLimits{}, headers, 64, &req);
    EXPECT_EQ(r.status, ParseStatus::kDone) << request;
    Planned p;
    PlanScratch& scratch = shared != nullptr ? *shared : *p.scratch;
    for (int i = 0; i < 10; ++i) {
      PlanStep step = PlanResponse(req, config_, tree_, scratch, &p.plan);
      if (step.status == PlanStatus::kReady) break;
      ++p.waits;
      if (step.status == PlanStatus::kNeedListing) {
        tree_.MakeListing(step.lookup_path, step.listing_url_path);
        continue;
      }
      tree_.Fetch(step.lookup_path);
      for (std::string_view also : step.prefetch) {  // as the cache's Prefetch: unless known
        if (!also.empty() && !tree_.Lookup(also)) tree_.Fetch(also);
      }
    }
    char date[kHttpDateLen];
    FormatHttpDate(kMtime + 100, date);
    char buf[4096];
    size_t n =
        WriteResponseHead(p.plan, std::string_view(date, kHttpDateLen), "ringd", buf, sizeof buf);
    EXPECT_GT(n, 0u);
    p.head.assign(buf, n);
    return p;
  }
  Planned Get(const std::string& target, const std::string& extra = "") {
    return Plan("GET " + target + " HTTP/1.1\r\nHost: t\r\n" + extra + "\r\n");
  }

  MimeTypes mime_;
  PlannerConfig config_;
  FakeTree tree_;
};

// A target's length is limited by the request line's limit alone (the parser's 414): the planner
// decodes any target whole. A path longer than any file's is 404 without a lookup; a long query
// is nothing special.
TEST_F(ResponsePlanTest, LongTargetsAreNeverRefusedForTheirLength) {
  Planned p = Get("/" + std::string(5000, 'a'));
  EXPECT_EQ(p.plan.status, 404);
  EXPECT_EQ(p.waits, 0);
  p = Get("/" + std::string(PlanScratch::kMaxPath - 1, 'a'));  // the longest path: looked up
  EXPECT_EQ(p.plan.status, 404);
  EXPECT_GT(p.waits, 0);
  std::string encoded = "/";
  for (int i = 0; i < 2000; ++i) encoded += "%61";  // 6,001 bytes that decode to 2,001
  p = Get(encoded);
  EXPECT_EQ(p.plan.status, 404);
  EXPECT_GT(p.waits, 0);
  p = Get("/index.html?" + std::string(7000, 'q'));
  EXPECT_EQ(p.plan.status, 200);
  EXPECT_EQ(p.plan.file_path, "index.html");
}

TEST_F(ResponsePlanTest, ServesAFileWithItsValidators) {
  Planned p = Get("/index.html");
  EXPECT_EQ(p.plan.status, 200);
  EXPECT_EQ(p.plan.file_path, "index.html");
  EXPECT_TRUE(p.plan.send_body);
  EXPECT_TRUE(p.plan.keep_alive);
  EXPECT_EQ(p.head,
            "HTTP/1.1 200 OK\r\n"
            "Server: ringd\r\n"
            "Date: Wed, 21 Oct 2015 07:29:40 GMT\r\n"
            "Content-Type: text/html; charset=utf-8\r\n"
            "Content-Length: 612\r\n"
            "Last-Modified: Wed, 21 Oct 2015 07:28:00 GMT\r\n"
            "ETag: \"56273e80-264\"\r\n"
            "Accept-Ranges: bytes\r\n"
            "\r\n");
}

// The scratch keeps the last file's ETag and Last-Modified text for the next plan: a file with
// another mtime or size gets its own.
TEST_F(ResponsePlanTest, OneScratchFormatsEachFilesValidatorsForIt) {
  tree_.File("old.txt", 612, kMtime - 86400);  // index.html's size, a day older
  tree_.File("big.txt", 613);                  // index.html's mtime, one byte more
  auto validators = [](const std::string& head) {
    const size_t at = head.find("Last-Modified: ");
    const size_t end = head.find("Accept-Ranges: ");
    return at == std::string::npos || end == std::string::npos ? std::string()
                                                               : head.substr(at, end - at);
  };
  PlanScratch* shared = new PlanScratch;
  for (const char* path : {"/index.html", "/old.txt", "/index.html", "/big.txt", "/big.txt"}) {
    const std::string alone = validators(Get(path).head);
    ASSERT_FALSE(alone.empty()) << path;
    EXPECT_EQ(
        validators(Plan(std::string("GET ") + path + " HTTP/1.1\r\nHost: t\r\n\r\n", shared).head),
        alone)
        << path;
  }
  EXPECT_EQ(validators(Get("/old.txt").head),
            "Last-Modified: Tue, 20 Oct 2015 07:28:00 GMT\r\nETag: \"5625ed00-264\"\r\n");
  EXPECT_EQ(validators(Get("/big.txt").head),
            "Last-Modified: Wed, 21 Oct 2015 07:28:00 GMT\r\nETag: \"56273e80-265\"\r\n");
  delete shared;
}

// RFC 9110 section 9.3.2: HEAD is GET without the content.
TEST_F(ResponsePlanTest, HeadSendsTheSameHeadersWithoutABody) {
  Planned get = Get("/index.html");
  Planned head = Plan("HEAD /index.html HTTP/1.1\r\nHost: t\r\n\r\n");
  EXPECT_EQ(head.head, get.head);
  EXPECT_FALSE(head.plan.send_body);
  Planned missing = Plan("HEAD /nope HTTP/1.1\r\nHost: t\r\n\r\n");
  EXPECT_EQ(missing.plan.status, 404);
  EXPECT_FALSE(missing.plan.send_body);
}

TEST_F(ResponsePlanTest, ResolvesDirectories) {
  Planned root = Get("/");
  EXPECT_EQ(root.plan.status, 200);
  EXPECT_EQ(root.plan.file_path, "index.html");
  Planned docs = Get("/docs/");
  EXPECT_EQ(docs.plan.status, 200);
  EXPECT_EQ(docs.plan.file_path, "docs/index.html");
  Planned redirect = Get("/docs?x=1");
  EXPECT_EQ(redirect.plan.status, 301);
  EXPECT_NE(redirect.head.find("\r\nLocation: /docs/?x=1\r\n"), std::string::npos) << redirect.head;
  EXPECT_EQ(Get("/empty/").plan.status, 403);  // no index, no autoindex: as nginx
  EXPECT_EQ(Get("/empty").plan.status, 301);
}

TEST_F(ResponsePlanTest, RedirectsToHttpsOnTheRequestsHost) {
  config_.redirect_to_https = true;
  config_.https_port_suffix = ":8443";
  auto location = [&](const std::string& request) {
    Planned p = Plan(request);
    EXPECT_EQ(p.plan.status, 301) << request;
    const size_t at = p.head.find("\r\nLocation: ");
    return at == std::string::npos ? std::string()
                                   : p.head.substr(at + 12, p.head.find("\r\n", at + 2) - at - 12);
  };
  EXPECT_EQ(location("GET /a/b.css?v=2 HTTP/1.1\r\nHost: example.org:8080\r\n\r\n"),
            "https://example.org:8443/a/b.css?v=2");
  EXPECT_EQ(location("HEAD / HTTP/1.1\r\nHost: [::1]:80\r\n\r\n"), "https://[::1]:8443/");
  EXPECT_EQ(location("GET http://example.org/x?y HTTP/1.1\r\nHost: example.org\r\n\r\n"),
            "https://example.org:8443/x?y");
  // In absolute-form the target's authority names the host and Host is ignored (RFC 9112
  // section 3.2.2), an empty one included; a path-less authority keeps its query.
  EXPECT_EQ(location("GET http://other.test:80/p?q HTTP/1.1\r\nHost: a.test\r\n\r\n"),
            "https://other.test:8443/p?q");
  EXPECT_EQ(location("GET HTTP://[::1]?q HTTP/1.1\r\nHost:\r\n\r\n"), "https://[::1]:8443/?q");
  EXPECT_EQ(Plan("GET http://u@other.test/ HTTP/1.1\r\nHost: a.test\r\n\r\n").plan.status, 400);
  // The authority holds only what a Host value may: never a Location a Host would not give.
  EXPECT_EQ(Plan("GET http://a.test\\evil/ HTTP/1.1\r\nHost: a.test\r\n\r\n").plan.status, 400);
  EXPECT_EQ(Plan("GET http://a.t\xe9st/ HTTP/1.1\r\nHost: a.test\r\n\r\n").plan.status, 400);
  EXPECT_EQ(Plan("GET http://a<b>/ HTTP/1.1\r\nHost: a.test\r\n\r\n").plan.status, 400);
  // Files are never looked up: the redirect needs none, whether the target exists or not.
  EXPECT_EQ(location("GET /nope HTTP/1.1\r\nHost: example.org\r\n\r\n"),
            "https://example.org:8443/nope");
  config_.https_port_suffix = "";
  EXPECT_EQ(location("GET /index.html HTTP/1.1\r\nHost: example.org\r\n\r\n"),
            "https://example.org/index.html");
  // Methods are checked first, as without the redirect.
  EXPECT_EQ(Plan("DELETE / HTTP/1.1\r\nHost: t\r\n\r\n").plan.status, 405);
}

TEST_F(ResponsePlanTest, AnswersErrorsWithTheRightStatus) {
  EXPECT_EQ(Get("/nope.html").plan.status, 404);
  EXPECT_EQ(Get("/index.html/").plan.status, 404);
  EXPECT_EQ(Get("/secret.txt").plan.status, 403);
  // An unreadable name asked as a directory, as nginx answers it: a file's is not one (404,
  // "secret.txt/." is not a directory's entry), a directory that cannot be searched is
  // forbidden.
  EXPECT_EQ(Get("/secret.txt/").plan.status, 404);
  EXPECT_EQ(Get("/locked/").plan.status, 403);
  EXPECT_EQ(Get("/locked").plan.status, 403);
  EXPECT_EQ(Get("/flaky/").plan.status, 503);
  EXPECT_EQ(Get("/fifo").plan.status, 404);
  EXPECT_EQ(Get("/busy").plan.status, 503);  // out of descriptors: try again later, not 404
  EXPECT_FALSE(Get("/busy").plan.keep_alive);
  EXPECT_EQ(Get("/.git/config").plan.status, 404);
  EXPECT_EQ(Get("/../etc/passwd").plan.status, 400);
  EXPECT_EQ(Get("%2e%2e/x").plan.status, 400);
  EXPECT_EQ(Get("*").plan.status, 400);
  Planned p = Get("/nope.html");
  EXPECT_EQ(p.plan.inline_body.substr(0, 6), "<html>");
  EXPECT_NE(p.head.find("Content-Length: " + std::to_string(p.plan.inline_body.size())),
            std::string::npos);
  EXPECT_TRUE(p.plan.keep_alive);  // a 404 does not end the connection
}

// RFC 9110 sections 9.3.7 (OPTIONS), 15.5.6 (405 with Allow), 15.6.2 (501).
TEST_F(ResponsePlanTest, AnswersMethods) {
  Planned options = Plan("OPTIONS * HTTP/1.1\r\nHost: t\r\n\r\n");
  EXPECT_EQ(options.plan.status, 200);
  EXPECT_NE(options.head.find("Allow: GET, HEAD, OPTIONS\r\n"), std::string::npos);
  EXPECT_NE(options.head.find("Content-Length: 0\r\n"), std::string::npos);
  Planned post = Plan("POST /index.html HTTP/1.1\r\nHost: t\r\nContent-Length: 3\r\n\r\n");
  EXPECT_EQ(post.plan.status, 405);
  EXPECT_NE(post.head.find("Allow: GET, HEAD, OPTIONS\r\n"), std::string::npos);
  EXPECT_EQ(post.plan.discard_body, 3u);
  EXPECT_TRUE(post.plan.keep_alive);
  EXPECT_EQ(Plan("DELETE / HTTP/1.1\r\nHost: t\r\n\r\n").plan.status, 405);
  EXPECT_EQ(Plan("BREW / HTTP/1.1\r\nHost: t\r\n\r\n").plan.status, 501);
  EXPECT_EQ(Plan("get / HTTP/1.1\r\nHost: t\r\n\r\n").plan.status, 501);
}

// RFC 9112 section 6.3 and 9.3: bodies and persistence.
TEST_F(ResponsePlanTest, HandlesBodiesAndPersistence) {
  Planned small = Plan("GET /index.html HTTP/1.1\r\nHost: t\r\nContent-Length: 10\r\n\r\n");
  EXPECT_EQ(small.plan.status, 200);
  EXPECT_EQ(small.plan.discard_body, 10u);
  Planned large = Plan("GET /index.html HTTP/1.1\r\nHost: t\r\nContent-Length: 10000000\r\n\r\n");
  EXPECT_EQ(large.plan.status, 413);
  EXPECT_FALSE(large.plan.keep_alive);
  EXPECT_NE(large.head.find("Connection: close\r\n"), std::string::npos);
  Planned chunked =
      Plan("GET /index.html HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n");
  EXPECT_EQ(chunked.plan.status, 200);
  EXPECT_FALSE(chunked.plan.keep_alive);
  Planned http10 = Plan("GET /index.html HTTP/1.0\r\n\r\n");
  EXPECT_NE(http10.head.find("Connection: close\r\n"), std::string::npos);
  Planned http10ka = Plan("GET /index.html HTTP/1.0\r\nConnection: keep-alive\r\n\r\n");
  EXPECT_NE(http10ka.head.find("Connection: keep-alive\r\n"), std::string::npos);
  Planned close = Get("/index.html", "Connection: close\r\n");
  EXPECT_NE(close.head.find("Connection: close\r\n"), std::string::npos);
  EXPECT_EQ(Get("/index.html").head.find("Connection:"), std::string::npos);
}

// RFC 9110 section 13.
TEST_F(ResponsePlanTest, AnswersConditionalRequests) {
  const std::string etag = "\"56273e80-264\"";
  Planned inm = Get("/index.html", "If-None-Match: " + etag + "\r\n");
  EXPECT_EQ(inm.plan.status, 304);
  EXPECT_FALSE(inm.plan.send_body);
  EXPECT_EQ(inm.head,
            "HTTP/1.1 304 Not Modified\r\n"
            "Server: ringd\r\n"
            "Date: Wed, 21 Oct 2015 07:29:40 GMT\r\n"
            "Last-Modified: Wed, 21 Oct 2015 07:28:00 GMT\r\n"
            "ETag: \"56273e80-264\"\r\n"
            "\r\n");
  EXPECT_EQ(Get("/index.html", "If-Modified-Since: Wed, 21 Oct 2015 07:28:00 GMT\r\n").plan.status,
            304);
  EXPECT_EQ(Get("/index.html", "If-Modified-Since: Wed, 21 Oct 2015 07:27:59 GMT\r\n").plan.status,
            200);
  Planned im = Get("/index.html", "If-Match: \"other\"\r\n");
  EXPECT_EQ(im.plan.status, 412);
  EXPECT_TRUE(im.plan.file_path.empty());
  EXPECT_EQ(im.head.find("ETag"), std::string::npos);
  EXPECT_EQ(Get("/index.html", "If-Match: " + etag + "\r\n").plan.status, 200);
  EXPECT_EQ(
      Get("/index.html", "If-Unmodified-Since: Wed, 21 Oct 2015 07:27:59 GMT\r\n").plan.status,
      412);
}

// RFC 9110 section 14.
TEST_F(ResponsePlanTest, AnswersRangeRequests) {
  Planned one = Get("/data.bin", "Range: bytes=100-199\r\n");
  EXPECT_EQ(one.plan.status, 206);
  EXPECT_EQ(one.plan.content_length, 100u);
  EXPECT_NE(one.head.find("Content-Range: bytes 100-199/10000\r\n"), std::string::npos);
  EXPECT_NE(one.head.find("Content-Length: 100\r\n"), std::string::npos);

  Planned multi = Get("/data.bin", "Range: bytes=0-9,-10\r\n");
  EXPECT_EQ(multi.plan.status, 206);
  EXPECT_TRUE(multi.plan.multipart);
  EXPECT_EQ(multi.plan.ranges.count, 2u);
  EXPECT_NE(multi.head.find("Content-Type: multipart/byteranges; boundary=BOUNDARY\r\n"),
            std::string::npos);
  MultipartLayout layout(multi.plan.ranges, multi.plan.content_type, 10000, "BOUNDARY");
  EXPECT_EQ(multi.plan.content_length, layout.ContentLength());

  Planned unsat = Get("/data.bin", "Range: bytes=10000-\r\n");
  EXPECT_EQ(unsat.plan.status, 416);
  EXPECT_NE(unsat.head.find("Content-Range: bytes */10000\r\n"), std::string::npos);
  EXPECT_TRUE(unsat.plan.file_path.empty());

  EXPECT_EQ(Get("/data.bin", "Range: bytes=abc\r\n").plan.status, 200);
  EXPECT_EQ(Plan("HEAD /data.bin HTTP/1.1\r\nHost: t\r\nRange: bytes=0-1\r\n\r\n").plan.status,
            200);
  EXPECT_EQ(Get("/data.bin", "Range: bytes=0-1\r\nIf-Range: \"nope\"\r\n").plan.status, 200);
  EXPECT_EQ(Get("/data.bin", "Range: bytes=0-1\r\nIf-Range: Wed, 21 Oct 2015 07:28:00 GMT\r\n")
                .plan.status,
            206);
  // Range after a 304 is not considered: the precondition answers first.
  EXPECT_EQ(Get("/data.bin", "Range: bytes=0-1\r\nIf-None-Match: *\r\n").plan.status, 304);
}

TEST_F(ResponsePlanTest, ServesPrecompressedSiblings) {
  Planned gz = Get("/app.js", "Accept-Encoding: gzip\r\n");
  EXPECT_EQ(gz.plan.status, 200);
  EXPECT_EQ(gz.plan.file_path, "app.js.gz");
  EXPECT_EQ(gz.plan.content_length, 1200u);
  EXPECT_NE(gz.head.find("Content-Type: text/javascript; charset=utf-8\r\n"), std::string::npos);
  EXPECT_NE(gz.head.find("Content-Encoding: gzip\r\n"), std::string::npos);
  EXPECT_NE(gz.head.find("Vary: Accept-Encoding\r\n"), std::string::npos);

  Planned br = Get("/app.js", "Accept-Encoding: gzip, deflate, br\r\n");
  EXPECT_EQ(br.plan.file_path, "app.js.br");
  EXPECT_EQ(br.plan.content_encoding, "br");
  Planned prefer_gzip = Get("/app.js", "Accept-Encoding: gzip, br;q=0.5\r\n");
  EXPECT_EQ(prefer_gzip.plan.file_path, "app.js.gz");

  Planned identity = Get("/app.js");
  EXPECT_EQ(identity.plan.file_path, "app.js");
  EXPECT_EQ(identity.head.find("Content-Encoding"), std::string::npos);
  EXPECT_NE(identity.head.find("Vary: Accept-Encoding\r\n"), std::string::npos);
  EXPECT_EQ(Get("/app.js", "Accept-Encoding: gzip;q=0\r\n").plan.file_path, "app.js");

  // The ETag and ranges belong to the encoded representation.
  EXPECT_NE(gz.plan.etag, identity.plan.etag);
  Planned gz_range = Get("/app.js", "Accept-Encoding: gzip\r\nRange: bytes=-100\r\n");
  EXPECT_NE(gz_range.head.find("Content-Range: bytes 1100-1199/1200\r\n"), std::string::npos);
  Planned gz_304 = Get(
      "/app.js", "Accept-Encoding: gzip\r\nIf-None-Match: " + std::string(gz.plan.etag) + "\r\n");
  EXPECT_EQ(gz_304.plan.status, 304);
  EXPECT_NE(gz_304.head.find("Vary: Accept-Encoding\r\n"), std::string::npos);

  // A sibling older than its file is stale: ignored, and no Vary.
  Planned stale = Get("/style.css", "Accept-Encoding: gzip\r\n");
  EXPECT_EQ(stale.plan.file_path, "style.css");
  EXPECT_EQ(stale.head.find("Vary"), std::string::npos);
  // A file without siblings does not vary.
  EXPECT_EQ(Get("/index.html", "Accept-Encoding: gzip\r\n").head.find("Vary"), std::string::npos);
  // A sibling that could not be opened (out of descriptors) is passed over, as nginx's
  // gzip_static does: the file itself, without its encoding.
  tree_.Set("style.css.gz", FileMeta::Kind::kUnavailable);
  Planned unavailable = Get("/style.css", "Accept-Encoding: gzip\r\n");
  EXPECT_EQ(unavailable.plan.status, 200);
  EXPECT_EQ(unavailable.plan.file_path, "style.css");
  EXPECT_EQ(unavailable.head.find("Content-Encoding"), std::string::npos);

  config_.precompressed = false;
  EXPECT_EQ(Get("/app.js", "Accept-Encoding: gzip\r\n").plan.file_path, "app.js");
}

// As nginx's gzip_static: a site may ship app.js.gz alone. The sibling stands in for the missing
// file, for a client that takes it; another client gets a 404 that varies on Accept-Encoding.
TEST_F(ResponsePlanTest, ServesASiblingWhoseFileIsMissing) {
  tree_.File("bundle.js.gz", 700, kMtime - 100);  // no bundle.js; its age does not matter
  Planned gz = Get("/bundle.js", "Accept-Encoding: gzip, br\r\n");
  EXPECT_EQ(gz.plan.status, 200);
  EXPECT_EQ(gz.plan.file_path, "bundle.js.gz");
  EXPECT_EQ(gz.plan.content_length, 700u);
  EXPECT_NE(gz.head.find("Content-Type: text/javascript; charset=utf-8\r\n"), std::string::npos);
  EXPECT_NE(gz.head.find("Content-Encoding: gzip\r\n"), std::string::npos);
  EXPECT_NE(gz.head.find("Vary: Accept-Encoding\r\n"), std::string::npos);
  Planned gz_range = Get("/bundle.js", "Accept-Encoding: gzip\r\nRange: bytes=0-99\r\n");
  EXPECT_EQ(gz_range.plan.status, 206);
  EXPECT_NE(gz_range.head.find("Content-Range: bytes 0-99/700\r\n"), std::string::npos);
  EXPECT_EQ(Get("/bundle.js",
                "Accept-Encoding: gzip\r\nIf-None-Match: " + std::string(gz.plan.etag) + "\r\n")
                .plan.status,
            304);

  for (const char* accept : {"", "Accept-Encoding: br\r\n", "Accept-Encoding: gzip;q=0\r\n"}) {
    Planned none = Get("/bundle.js", accept);
    EXPECT_EQ(none.plan.status, 404) << accept;
    EXPECT_TRUE(none.plan.file_path.empty());
    EXPECT_EQ(none.head.find("Content-Encoding"), std::string::npos);
    EXPECT_NE(none.head.find("Vary: Accept-Encoding\r\n"), std::string::npos) << accept;
  }
  // Nothing at all: a plain 404. A trailing slash, or --precompressed off: no sibling stands in.
  Planned missing = Get("/nothing.js", "Accept-Encoding: gzip\r\n");
  EXPECT_EQ(missing.plan.status, 404);
  EXPECT_EQ(missing.head.find("Vary"), std::string::npos);
  EXPECT_EQ(Get("/bundle.js/", "Accept-Encoding: gzip\r\n").plan.status, 404);
  EXPECT_EQ(Get("/bundle.js.gz").plan.file_path, "bundle.js.gz");  // asked by its own name
  config_.precompressed = false;
  EXPECT_EQ(Get("/bundle.js", "Accept-Encoding: gzip\r\n").plan.status, 404);
}

TEST_F(ResponsePlanTest, AsksForEachPathItNeeds) {
  tree_.fetched.clear();
  Get("/docs/");
  EXPECT_EQ(tree_.fetched, (std::vector<std::string>{"docs", "docs/index.html",
                                                     "docs/index.html.br", "docs/index.html.gz"}));
}

// A path not known yet is most often a file whose .br and .gz siblings are asked for next: the
// planner names them with the lookup, so the three are looked up in one wait, not three.
TEST_F(ResponsePlanTest, LooksUpAFilesSiblingsBesideIt) {
  tree_.fetched.clear();
  Planned p = Get("/app.js", "Accept-Encoding: gzip\r\n");
  EXPECT_EQ(p.plan.file_path, "app.js.gz");
  EXPECT_EQ(p.waits, 1);
  EXPECT_EQ(tree_.fetched, (std::vector<std::string>{"app.js", "app.js.br", "app.js.gz"}));

  // The file known, its siblings not: the .br is waited for, the .gz looked up beside it.
  tree_.Fetch("style.css");
  tree_.fetched.clear();
  p = Get("/style.css");
  EXPECT_EQ(p.plan.status, 200);
  EXPECT_EQ(p.waits, 1);
  EXPECT_EQ(tree_.fetched, (std::vector<std::string>{"style.css.br", "style.css.gz"}));

  // A directory's own path (a trailing slash) has no siblings to ask for; its index has.
  tree_.fetched.clear();
  EXPECT_EQ(Get("/docs/").waits, 2);
  EXPECT_EQ(tree_.fetched, (std::vector<std::string>{"docs", "docs/index.html",
                                                     "docs/index.html.br", "docs/index.html.gz"}));
  // Without --precompressed, nothing beside the file.
  config_.precompressed = false;
  tree_.fetched.clear();
  EXPECT_EQ(Get("/data.bin").waits, 1);
  EXPECT_EQ(tree_.fetched, std::vector<std::string>{"data.bin"});
}

TEST_F(ResponsePlanTest, ErrorPlansForParseErrors) {
  ResponsePlan plan;
  PlanError(400, false, &plan);
  char buf[1024];
  size_t n = WriteResponseHead(plan, "Thu, 01 Jan 1970 00:00:00 GMT", "ringd", buf, sizeof buf);
  const std::string head(buf, n);
  EXPECT_EQ(head.substr(0, 25), "HTTP/1.1 400 Bad Request\r");
  EXPECT_NE(head.find("Connection: close\r\n"), std::string::npos);
  EXPECT_EQ(WriteResponseHead(plan, "Thu, 01 Jan 1970 00:00:00 GMT", "ringd", buf, 40), 0u);
  EXPECT_EQ(ReasonPhrase(431), "Request Header Fields Too Large");
}

// A 503 answering a HEAD (the cache could not take the lookup) has no body: the client would
// read one as the start of the next response.
TEST_F(ResponsePlanTest, ErrorsAnsweringHeadHaveNoBody) {
  Request req;
  req.method = Method::kHead;
  ResponsePlan plan;
  PlanError(503, req, &plan);
  EXPECT_EQ(plan.status, 503);
  EXPECT_FALSE(plan.send_body);
  EXPECT_FALSE(plan.keep_alive);
  req.method = Method::kGet;
  PlanError(503, req, &plan);
  EXPECT_TRUE(plan.send_body);
}

// A rate limit's refusal: 429 or 503 with Retry-After; the head says so.
TEST_F(ResponsePlanTest, RetryAfterAndTooManyRequests) {
  Request req;
  req.method = Method::kGet;
  req.keep_alive = true;
  ResponsePlan plan;
  PlanError(429, req, &plan);
  EXPECT_EQ(plan.status, 429);
  EXPECT_TRUE(plan.keep_alive);
  plan.retry_after_s = 7;
  char head[1024];
  const size_t n =
      WriteResponseHead(plan, "Mon, 07 Dec 2026 15:00:00 GMT", "ringd", head, sizeof head);
  const std::string text(head, n);
  EXPECT_EQ(text.rfind("HTTP/1.1 429 Too Many Requests\r\n", 0), 0u) << text;
  EXPECT_NE(text.find("\r\nRetry-After: 7\r\n"), std::string::npos) << text;
  PlanError(503, req, &plan);
  const std::string plain(
      head, WriteResponseHead(plan, "Mon, 07 Dec 2026 15:00:00 GMT", "ringd", head, sizeof head));
  EXPECT_EQ(plain.find("Retry-After"), std::string::npos) << plain;
}

// --cache-control, --default-cache-control and --add-header: precomputed lines on 200, 206 and
// 304 (as nginx's add_header without `always`); never on errors or redirects.
class OriginPlanTest : public ResponsePlanTest {
 protected:
  OriginPlanTest() {
    std::string error;
    EXPECT_TRUE(origin_.AddCacheRule("*.css", "public, max-age=31536000, immutable", &error));
    EXPECT_TRUE(origin_.AddCacheRule("*.js", "public, max-age=3600", &error));
    EXPECT_TRUE(origin_.SetDefaultCacheControl("no-cache", &error));
    EXPECT_TRUE(origin_.AddHeader("X-Content-Type-Options", "nosniff", &error));
    EXPECT_TRUE(origin_.AddHeader("Access-Control-Allow-Origin", "*", &error));
    config_.origin = &origin_;
  }
  static bool Has(const Planned& p, const std::string& line) {
    return p.head.find("\r\n" + line + "\r\n") != std::string::npos;
  }
  OriginHeaders origin_;
};

TEST_F(OriginPlanTest, AddsCacheControlAndHeadersToAFile) {
  Planned css = Get("/style.css");
  EXPECT_EQ(css.plan.status, 200);
  EXPECT_TRUE(Has(css, "Cache-Control: public, max-age=31536000, immutable")) << css.head;
  EXPECT_TRUE(Has(css, "X-Content-Type-Options: nosniff")) << css.head;
  EXPECT_TRUE(Has(css, "Access-Control-Allow-Origin: *")) << css.head;
  Planned html = Get("/docs/");  // a directory's index: matched by the file it serves
  EXPECT_TRUE(Has(html, "Cache-Control: no-cache")) << html.head;
  Planned bin = Get("/data.bin");
  EXPECT_TRUE(Has(bin, "Cache-Control: no-cache")) << bin.head;
  EXPECT_EQ(bin.head.find("Cache-Control", bin.head.find("Cache-Control") + 1), std::string::npos);
}

TEST_F(OriginPlanTest, ChosenByThePathNotTheEncodingServed) {
  Planned gz = Get("/app.js", "Accept-Encoding: gzip\r\n");
  EXPECT_EQ(gz.plan.content_encoding, "gzip");
  EXPECT_TRUE(Has(gz, "Cache-Control: public, max-age=3600")) << gz.head;
}

TEST_F(OriginPlanTest, RangesAndNotModifiedCarryThemToo) {
  Planned range = Get("/data.bin", "Range: bytes=0-9\r\n");
  EXPECT_EQ(range.plan.status, 206);
  EXPECT_TRUE(Has(range, "Cache-Control: no-cache")) << range.head;
  EXPECT_TRUE(Has(range, "X-Content-Type-Options: nosniff")) << range.head;
  Planned multi = Get("/data.bin", "Range: bytes=0-9,20-29\r\n");
  EXPECT_TRUE(multi.plan.multipart);
  EXPECT_TRUE(Has(multi, "Cache-Control: no-cache")) << multi.head;
  const std::string etag(Get("/style.css").plan.etag);
  Planned not_modified = Get("/style.css", "If-None-Match: " + etag + "\r\n");
  EXPECT_EQ(not_modified.plan.status, 304);
  // RFC 9110 section 15.4.5: a 304 sends the Cache-Control a 200 would have.
  EXPECT_TRUE(Has(not_modified, "Cache-Control: public, max-age=31536000, immutable"))
      << not_modified.head;
  EXPECT_TRUE(Has(not_modified, "X-Content-Type-Options: nosniff")) << not_modified.head;
}

TEST_F(OriginPlanTest, ErrorsAndRedirectsCarryNeither) {
  for (const Planned& p : {Get("/nope.css"), Get("/docs"), Get("/secret.txt"),
                           Get("/style.css", "If-Match: \"other\"\r\n"),
                           Get("/data.bin", "Range: bytes=99999-\r\n")}) {
    EXPECT_GE(p.plan.status, 300);
    EXPECT_EQ(p.head.find("Cache-Control"), std::string::npos) << p.head;
    EXPECT_EQ(p.head.find("X-Content-Type-Options"), std::string::npos) << p.head;
  }
  // OPTIONS answers 200 with no file: the added headers (a CORS preflight), no Cache-Control.
  Planned options = Plan("OPTIONS * HTTP/1.1\r\nHost: t\r\n\r\n");
  EXPECT_EQ(options.plan.status, 200);
  EXPECT_TRUE(Has(options, "Access-Control-Allow-Origin: *")) << options.head;
  EXPECT_EQ(options.head.find("Cache-Control"), std::string::npos) << options.head;

  // A plaintext listener that redirects sends them over TLS alone: a resource's OPTIONS is
  // redirected as its GET is, and OPTIONS * answers without them.
  config_.redirect_to_https = true;
  Planned redirected = Plan("OPTIONS /style.css HTTP/1.1\r\nHost: t\r\n\r\n");
  EXPECT_EQ(redirected.plan.status, 301);
  EXPECT_TRUE(Has(redirected, "Location: https://t/style.css")) << redirected.head;
  EXPECT_EQ(redirected.head.find("Access-Control"), std::string::npos) << redirected.head;
  Planned asterisk = Plan("OPTIONS * HTTP/1.1\r\nHost: t\r\n\r\n");
  EXPECT_EQ(asterisk.plan.status, 200);
  EXPECT_EQ(asterisk.head.find("Access-Control"), std::string::npos) << asterisk.head;
}

// --error-page: the file beneath the root, whole, with the error status.
TEST_F(OriginPlanTest, ServesTheConfiguredErrorPage) {
  std::string error;
  ASSERT_TRUE(origin_.SetErrorPage(404, "errors/404.html", &error)) << error;
  ASSERT_TRUE(origin_.SetErrorPage(403, "missing-403.html", &error)) << error;
  tree_.File("errors/404.html", 321);
  Planned p = Get("/nope", "Range: bytes=0-9\r\n");
  EXPECT_EQ(p.plan.status, 404);
  EXPECT_EQ(p.plan.file_path, "errors/404.html");
  EXPECT_EQ(p.plan.content_length, 321u);
  EXPECT_TRUE(p.plan.inline_body.empty());
  EXPECT_TRUE(p.plan.send_body);
  EXPECT_EQ(p.plan.ranges.count, 0u);  // an error page is sent whole
  EXPECT_TRUE(Has(p, "Content-Type: text/html; charset=utf-8")) << p.head;
  EXPECT_TRUE(Has(p, "Content-Length: 321")) << p.head;
  EXPECT_EQ(p.head.find("ETag"), std::string::npos) << p.head;
  EXPECT_EQ(p.head.find("Last-Modified"), std::string::npos) << p.head;
  EXPECT_EQ(p.head.find("Accept-Ranges"), std::string::npos) << p.head;
  EXPECT_EQ(p.head.find("Cache-Control"), std::string::npos) << p.head;
  EXPECT_NE(std::find(tree_.fetched.begin(), tree_.fetched.end(), "errors/404.html"),
            tree_.fetched.end());
  Planned head = Plan("HEAD /nope HTTP/1.1\r\nHost: t\r\n\r\n");
  EXPECT_EQ(head.plan.status, 404);
  EXPECT_FALSE(head.plan.send_body);
  EXPECT_TRUE(Has(head, "Content-Length: 321")) << head.head;
  // A trailing slash on a file is a 404 too.
  EXPECT_EQ(Get("/style.css/").plan.file_path, "errors/404.html");
  // The page for 403 is missing: the built-in page.
  Planned forbidden = Get("/secret.txt");
  EXPECT_EQ(forbidden.plan.status, 403);
  EXPECT_TRUE(forbidden.plan.file_path.empty());
  EXPECT_FALSE(forbidden.plan.inline_body.empty());
  // A 404 page that is a directory is not served either.
  ASSERT_TRUE(origin_.SetErrorPage(404, "docs", &error)) << error;
  Planned dir = Get("/nope2");
  EXPECT_EQ(dir.plan.status, 404);
  EXPECT_TRUE(dir.plan.file_path.empty());
}

TEST_F(OriginPlanTest, ErrorPageAfterAFileWasSelected) {
  std::string error;
  ASSERT_TRUE(origin_.SetErrorPage(416, "416.html", &error)) << error;
  tree_.File("416.html", 50);
  Planned p = Get("/data.bin", "Range: bytes=99999-\r\n");
  EXPECT_EQ(p.plan.status, 416);
  EXPECT_EQ(p.plan.file_path, "416.html");
  EXPECT_TRUE(Has(p, "Content-Range: bytes */10000")) << p.head;
  EXPECT_TRUE(Has(p, "Content-Length: 50")) << p.head;
  EXPECT_EQ(p.head.find("ETag"), std::string::npos) << p.head;
  EXPECT_EQ(p.head.find("Cache-Control"), std::string::npos) << p.head;
}

// --fallback: a path that names nothing is answered with the fallback file, planned as if it had
// been asked for; everything that exists, and every other error, keeps its answer.
TEST_F(ResponsePlanTest, AMissingPathServesTheFallback) {
  config_.fallback = "index.html";
  for (const char* target : {"/app/route", "/app/route/", "/a/b/c?q=1", "/app.js/nested"}) {
    Planned p = Get(target);
    EXPECT_EQ(p.plan.status, 200) << target;
    EXPECT_EQ(p.plan.file_path, "index.html") << target;
    EXPECT_EQ(p.plan.content_length, 612u) << target;
    EXPECT_NE(p.head.find("Content-Type: text/html"), std::string::npos) << p.head;
    EXPECT_NE(p.head.find("\r\nETag: "), std::string::npos) << p.head;
    EXPECT_NE(p.head.find("\r\nAccept-Ranges: bytes\r\n"), std::string::npos) << p.head;
  }
  // Files and directories that exist are served as they are.
  EXPECT_EQ(Get("/app.js").plan.file_path, "app.js");
  EXPECT_EQ(Get("/docs/").plan.file_path, "docs/index.html");
  EXPECT_EQ(Get("/docs").plan.status, 301);
  EXPECT_EQ(Get("/empty/").plan.status, 403);  // a directory without an index: as before
  // Hidden segments, forbidden and odd files, a trailing slash on a file: as before.
  EXPECT_EQ(Get("/.git/config").plan.status, 404);
  EXPECT_EQ(Get("/secret.txt").plan.status, 403);
  EXPECT_EQ(Get("/fifo").plan.status, 404);
  EXPECT_EQ(Get("/style.css/").plan.status, 404);
  EXPECT_EQ(Get("/busy").plan.status, 503);
  // HEAD: the fallback's headers, no body.
  Planned head = Plan("HEAD /route HTTP/1.1\r\nHost: t\r\n\r\n");
  EXPECT_EQ(head.plan.status, 200);
  EXPECT_FALSE(head.plan.send_body);
  EXPECT_NE(head.head.find("Content-Length: 612\r\n"), std::string::npos) << head.head;
}

TEST_F(ResponsePlanTest, TheFallbackTakesConditionalsRangesAndSiblings) {
  config_.fallback = "app.js";
  const std::string etag(Get("/route").plan.etag);
  ASSERT_FALSE(etag.empty());
  Planned inm = Get("/route", "If-None-Match: " + etag + "\r\n");
  EXPECT_EQ(inm.plan.status, 304);
  EXPECT_FALSE(inm.plan.send_body);
  Planned range = Get("/other/route", "Range: bytes=10-19\r\n");
  EXPECT_EQ(range.plan.status, 206);
  EXPECT_NE(range.head.find("Content-Range: bytes 10-19/5000\r\n"), std::string::npos)
      << range.head;
  // Its precompressed siblings, by the client's Accept-Encoding.
  Planned br = Get("/route", "Accept-Encoding: br, gzip\r\n");
  EXPECT_EQ(br.plan.status, 200);
  EXPECT_EQ(br.plan.file_path, "app.js.br");
  EXPECT_EQ(br.plan.content_encoding, "br");
  EXPECT_NE(br.head.find("Content-Type: text/javascript"), std::string::npos) << br.head;
  EXPECT_TRUE(br.plan.vary_accept_encoding);
}

TEST_F(ResponsePlanTest, AMissingFallbackIsNotFound) {
  config_.fallback = "spa/index.html";
  Planned p = Get("/route");
  EXPECT_EQ(p.plan.status, 404);
  EXPECT_TRUE(p.plan.file_path.empty());
  EXPECT_STREQ(p.plan.reason, "no such file, nor the fallback");
  EXPECT_NE(std::find(tree_.fetched.begin(), tree_.fetched.end(), "spa/index.html"),
            tree_.fetched.end());
  config_.fallback = "docs";  // a directory is no fallback either
  EXPECT_EQ(Get("/route2").plan.status, 404);
  config_.fallback = "secret.txt";
  EXPECT_EQ(Get("/route3").plan.status, 403);
}

// The fallback's Cache-Control is the fallback file's (the bytes served), and a missing fallback
// answers with the --error-page for 404.
TEST_F(OriginPlanTest, TheFallbackTakesItsOwnHeadersAndTheErrorPage) {
  config_.fallback = "app.js";
  Planned p = Get("/route.css");
  EXPECT_EQ(p.plan.status, 200);
  EXPECT_TRUE(Has(p, "Cache-Control: public, max-age=3600")) << p.head;
  std::string error;
  ASSERT_TRUE(origin_.SetErrorPage(404, "errors/404.html", &error)) << error;
  tree_.File("errors/404.html", 321);
  config_.fallback = "gone.html";
  Planned missing = Get("/route");
  EXPECT_EQ(missing.plan.status, 404);
  EXPECT_EQ(missing.plan.file_path, "errors/404.html");
}

// --autoindex: a directory without an index is its listing, started by the caller on
// kNeedListing and streamed: chunked over HTTP/1.1, ended by the close over HTTP/1.0; a directory
// with an index is still served its index.
TEST_F(ResponsePlanTest, ListsADirectoryWithoutAnIndex) {
  config_.autoindex = true;
  Planned p = Get("/empty/");
  EXPECT_EQ(p.plan.status, 200);
  EXPECT_EQ(tree_.listed, std::vector<std::string>{"empty at /empty/"});
  EXPECT_TRUE(p.plan.streamed_body);
  EXPECT_TRUE(p.plan.inline_body.empty());
  EXPECT_TRUE(p.plan.file_path.empty());
  EXPECT_TRUE(p.plan.keep_alive);
  EXPECT_NE(p.head.find("Content-Type: text/html; charset=utf-8\r\n"), std::string::npos);
  EXPECT_NE(p.head.find("Transfer-Encoding: chunked\r\n"), std::string::npos) << p.head;
  EXPECT_EQ(p.head.find("Content-Length"), std::string::npos) << p.head;
  EXPECT_EQ(p.head.find("ETag"), std::string::npos) << p.head;
  EXPECT_EQ(p.head.find("Accept-Ranges"), std::string::npos) << p.head;
  // No validators and no ranges: a Range is ignored, a precondition too.
  Planned range = Get("/empty/", "Range: bytes=0-1\r\nIf-None-Match: *\r\n");
  EXPECT_EQ(range.plan.status, 200);
  EXPECT_TRUE(range.plan.streamed_body);
  // HEAD: the same head, no body.
  Planned head = Plan("HEAD /empty/ HTTP/1.1\r\nHost: t\r\n\r\n");
  EXPECT_EQ(head.plan.status, 200);
  EXPECT_FALSE(head.plan.send_body);
  EXPECT_NE(head.head.find("Transfer-Encoding: chunked\r\n"), std::string::npos) << head.head;
  // HTTP/1.0 has no chunked coding: the body ends with the connection.
  Planned old = Plan("GET /empty/ HTTP/1.0\r\nConnection: keep-alive\r\n\r\n");
  EXPECT_EQ(old.plan.status, 200);
  EXPECT_FALSE(old.plan.keep_alive);
  EXPECT_EQ(old.head.find("Transfer-Encoding"), std::string::npos) << old.head;
  EXPECT_EQ(old.head.find("Content-Length"), std::string::npos) << old.head;
  EXPECT_NE(old.head.find("Connection: close\r\n"), std::string::npos) << old.head;
  // The index still wins; the redirect still adds the slash.
  EXPECT_EQ(Get("/docs/").plan.file_path, "docs/index.html");
  EXPECT_EQ(Get("/empty").plan.status, 301);
  // The root, as ".".
  tree_.Set("index.html", FileMeta::Kind::kMissing);
  tree_.Fetch("index.html");
  EXPECT_TRUE(Get("/").plan.streamed_body);
  EXPECT_EQ(tree_.listed.back(), ". at /");
  config_.autoindex_format = ListingFormat::kJson;
  Planned json = Get("/empty/");
  EXPECT_NE(json.head.find("Content-Type: application/json\r\n"), std::string::npos);
}

TEST_F(ResponsePlanTest, AListingThatFailsIsItsError) {
  config_.autoindex = true;
  tree_.listing_status = 403;
  EXPECT_EQ(Get("/empty/").plan.status, 403);
  tree_.listing_status = 503;
  Planned busy = Get("/empty/");
  EXPECT_EQ(busy.plan.status, 503);
  EXPECT_FALSE(busy.plan.keep_alive);
}

}  // namespace
}  // namespace ringd::http

namespace ringd::http {
namespace {

// --compress: a file no sibling serves is planned as it is, varying, with the coding to make
// named (compress_wanted); once its variant is ready, the variant is the body, with its own weak
// ETag, Content-Encoding and length, whole (Range ignored), and 304 for its tag.
TEST_F(ResponsePlanTest, CompressesOnTheFlyOnceAVariantIsReady) {
  CompressPolicy policy;
  std::string error;
  ASSERT_TRUE(policy.ParseTypes("text/*,application/javascript", &error)) << error;
  policy.min_bytes = 1000;
  config_.compress = &policy;
  tree_.File("notes.txt", 5000);

  Planned miss = Get("/notes.txt", "Accept-Encoding: gzip, br\r\n");
  EXPECT_EQ(miss.plan.status, 200);
  EXPECT_EQ(miss.plan.file_path, "notes.txt");
  EXPECT_FALSE(miss.plan.variant);
  EXPECT_EQ(miss.plan.compress_wanted, Coding::kBr);
  EXPECT_EQ(miss.plan.content_length, 5000u);
  EXPECT_EQ(miss.head.find("Content-Encoding"), std::string::npos);
  EXPECT_NE(miss.head.find("Vary: Accept-Encoding\r\n"), std::string::npos);
  EXPECT_NE(miss.head.find("ETag: \"56273e80-1388\"\r\n"), std::string::npos);

  // Revalidating a variant not made (or no longer kept): 304 for its tag all the same.
  Planned revalidated =
      Get("/notes.txt", "Accept-Encoding: gzip\r\nIf-None-Match: W/\"56273e80-1388-gzip\"\r\n");
  EXPECT_EQ(revalidated.plan.status, 304);
  EXPECT_TRUE(revalidated.plan.variant);
  EXPECT_EQ(revalidated.plan.compress_wanted, Coding::kIdentity);
  EXPECT_NE(revalidated.head.find("ETag: W/\"56273e80-1388-gzip\"\r\n"), std::string::npos);
  EXPECT_NE(revalidated.head.find("Vary: Accept-Encoding\r\n"), std::string::npos);
  // Another coding's tag, or a tag that does not match: the file as it is, the coding wanted.
  Planned other_tag =
      Get("/notes.txt", "Accept-Encoding: gzip\r\nIf-None-Match: W/\"56273e80-1388-br\"\r\n");
  EXPECT_EQ(other_tag.plan.status, 200);
  EXPECT_FALSE(other_tag.plan.variant);
  EXPECT_EQ(other_tag.plan.compress_wanted, Coding::kGzip);

  tree_.variants[{tree_.InodeOf("notes.txt"), Coding::kBr}] = std::string(700, 'b');
  Planned hit = Get("/notes.txt", "Accept-Encoding: gzip, br\r\n");
  EXPECT_EQ(hit.plan.status, 200);
  EXPECT_TRUE(hit.plan.variant);
  EXPECT_EQ(hit.plan.compress_wanted, Coding::kIdentity);
  EXPECT_EQ(hit.plan.inline_body, std::string(700, 'b'));
  EXPECT_EQ(hit.plan.content_length, 700u);
  EXPECT_EQ(hit.plan.file.size, 5000u);
  EXPECT_EQ(hit.plan.file_path, "");  // nothing to pin: the body is the variant
  EXPECT_NE(hit.head.find("Content-Length: 700\r\n"), std::string::npos);
  EXPECT_NE(hit.head.find("Content-Encoding: br\r\n"), std::string::npos);
  EXPECT_NE(hit.head.find("ETag: W/\"56273e80-1388-br\"\r\n"), std::string::npos);
  EXPECT_NE(hit.head.find("Vary: Accept-Encoding\r\n"), std::string::npos);
  EXPECT_NE(hit.head.find("Last-Modified: "), std::string::npos);
  EXPECT_EQ(hit.head.find("Accept-Ranges"), std::string::npos);

  // gzip alone: no gzip variant yet, so that one is wanted.
  Planned gz = Get("/notes.txt", "Accept-Encoding: gzip\r\n");
  EXPECT_EQ(gz.plan.compress_wanted, Coding::kGzip);
  EXPECT_FALSE(gz.plan.variant);

  // Range: the whole variant. HEAD: its length, no body. If-None-Match: 304 for its own tag.
  Planned range = Get("/notes.txt", "Accept-Encoding: br\r\nRange: bytes=0-9\r\n");
  EXPECT_EQ(range.plan.status, 200);
  EXPECT_EQ(range.plan.content_length, 700u);
  EXPECT_EQ(range.head.find("Content-Range"), std::string::npos);
  Planned head = Plan("HEAD /notes.txt HTTP/1.1\r\nHost: t\r\nAccept-Encoding: br\r\n\r\n");
  EXPECT_FALSE(head.plan.send_body);
  EXPECT_NE(head.head.find("Content-Length: 700\r\n"), std::string::npos);
  Planned not_modified =
      Get("/notes.txt", "Accept-Encoding: br\r\nIf-None-Match: W/\"56273e80-1388-br\"\r\n");
  EXPECT_EQ(not_modified.plan.status, 304);
  EXPECT_NE(not_modified.head.find("ETag: W/\"56273e80-1388-br\"\r\n"), std::string::npos);
  EXPECT_NE(not_modified.head.find("Vary: Accept-Encoding\r\n"), std::string::npos);
  // The file's own tag is not the variant's, nor the variant's the file's.
  EXPECT_EQ(
      Get("/notes.txt", "Accept-Encoding: br\r\nIf-None-Match: \"56273e80-1388\"\r\n").plan.status,
      200);
  EXPECT_EQ(Get("/notes.txt", "If-None-Match: W/\"56273e80-1388-br\"\r\n").plan.status, 200);
  // If-Match compares strongly: a weak tag fails it.
  EXPECT_EQ(
      Get("/notes.txt", "Accept-Encoding: br\r\nIf-Match: W/\"56273e80-1388-br\"\r\n").plan.status,
      412);

  // No coding taken: the file, varying, nothing wanted.
  Planned none = Get("/notes.txt", "Accept-Encoding: identity, br;q=0\r\n");
  EXPECT_EQ(none.plan.compress_wanted, Coding::kIdentity);
  EXPECT_NE(none.head.find("Vary: Accept-Encoding\r\n"), std::string::npos);

  // Too small, or not a listed type: as without --compress (no Vary).
  tree_.File("small.txt", 999);
  Planned small = Get("/small.txt", "Accept-Encoding: br\r\n");
  EXPECT_EQ(small.plan.compress_wanted, Coding::kIdentity);
  EXPECT_EQ(small.head.find("Vary"), std::string::npos);
  Planned bin = Get("/data.bin", "Accept-Encoding: br\r\n");
  EXPECT_EQ(bin.plan.compress_wanted, Coding::kIdentity);
  EXPECT_EQ(bin.head.find("Vary"), std::string::npos);

  // A sibling the client takes wins; a coding no sibling has is compressed on the fly.
  EXPECT_EQ(Get("/app.js", "Accept-Encoding: gzip\r\n").plan.content_encoding, "gzip");
  EXPECT_EQ(Get("/app.js", "Accept-Encoding: gzip\r\n").plan.compress_wanted, Coding::kIdentity);
  EXPECT_EQ(Get("/app.js", "Accept-Encoding: zstd\r\n").plan.compress_wanted, Coding::kZstd);

  config_.compress = nullptr;
  Planned off = Get("/notes.txt", "Accept-Encoding: br\r\n");
  EXPECT_FALSE(off.plan.variant);
  EXPECT_EQ(off.plan.compress_wanted, Coding::kIdentity);
  EXPECT_EQ(off.head.find("Vary"), std::string::npos);
}

}  // namespace
}  // namespace ringd::http
