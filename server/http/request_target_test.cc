#include "server/http/request_target.h"

#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace ringd::http {
namespace {

struct Case {
  const char* target;
  int status;
  const char* path;  // expected when status == 0
};

TargetResult Normalize(std::string_view target, std::string& scratch, TargetOptions o = {}) {
  scratch.assign(target.size() + 1, '\0');
  return NormalizeTarget(target, o, scratch.data(), scratch.size());
}

// RFC 3986 section 5.2.4 (dot segments), section 2.1 (percent-encoding), RFC 9112 section 3.2
// (origin-form and absolute-form).
TEST(RequestTarget, NormalizesPaths) {
  const std::vector<Case> cases = {
      {"/", 0, "/"},
      {"/index.html", 0, "/index.html"},
      {"/a/b/", 0, "/a/b/"},
      {"/a/./b", 0, "/a/b"},
      {"/a/b/../c", 0, "/a/c"},
      {"/a/b/..", 0, "/a/"},
      {"/a/b/.", 0, "/a/b/"},
      {"/a/b/../../", 0, "/"},
      {"/a//b///c", 0, "/a/b/c"},
      {"/a%20b", 0, "/a b"},
      {"/%7Euser/x", 0, "/~user/x"},
      {"/caf%C3%A9", 0, "/caf\xc3\xa9"},
      {"/a/%2e%2e/b", 0, "/b"},  // encoded dot-segments are dot-segments
      {"/a/%2E/b", 0, "/a/b"},
      {"/a?b=/../../etc/passwd", 0, "/a"},
      {"/a#frag", 0, "/a"},
      {"http://example.com/x/y", 0, "/x/y"},
      {"HTTPS://example.com:8443/x", 0, "/x"},
      {"http://example.com", 0, "/"},
      {"http://example.com?q", 0, "/"},
      {"/.well-known/acme-challenge/t", 0, "/.well-known/acme-challenge/t"},
      {"/x/../.well-known/t", 0, "/.well-known/t"},
      {"/.hidden/../ok", 0, "/ok"},
  };
  for (const Case& c : cases) {
    std::string scratch;
    TargetResult r = Normalize(c.target, scratch);
    EXPECT_EQ(r.status, c.status) << c.target << ": " << r.reason;
    if (r.status == 0) {
      EXPECT_EQ(r.path, c.path) << c.target;
    }
  }
}

// The result can never name anything outside the document root.
TEST(RequestTarget, RejectsEscapesAndBadEncodings) {
  const std::vector<Case> cases = {
      {"/..", 400, ""},
      {"/../etc/passwd", 400, ""},
      {"/a/../../etc/passwd", 400, ""},
      {"/%2e%2e/etc/passwd", 400, ""},
      {"/a/%2E%2E/%2e%2e/x", 400, ""},
      {"/a%2fb", 400, ""},  // encoded '/' inside a segment
      {"/a%2F..%2F..%2Fetc", 400, ""},
      {"/a%00.html", 400, ""},  // encoded NUL
      {"/a%", 400, ""},
      {"/a%4", 400, ""},
      {"/a%zz", 400, ""},
      {"a/b", 400, ""},  // neither origin-form nor absolute-form
      {"", 400, ""},
      {"ftp://example.com/x", 400, ""},
      {"/.git/config", 404, ""},  // hidden segments answer 404 by default
      {"/a/.env", 404, ""},
      {"/.well-known/.secret", 404, ""},
      {"/a/.well-known/x", 404, ""},  // only the top-level /.well-known/ is allowed
      {"/%2egit/config", 404, ""},
  };
  for (const Case& c : cases) {
    std::string scratch;
    TargetResult r = Normalize(c.target, scratch);
    EXPECT_EQ(r.status, c.status) << c.target << " gave " << r.path;
  }
}

TEST(RequestTarget, DotFilesCanBeServedOnRequest) {
  std::string scratch;
  TargetOptions o;
  o.serve_dot_files = true;
  TargetResult r = Normalize("/.config/x", scratch, o);
  EXPECT_EQ(r.status, 0);
  EXPECT_EQ(r.path, "/.config/x");
  EXPECT_EQ(Normalize("/../x", scratch, o).status, 400);
}

TEST(RequestTarget, SplitsQueryAndRelativePath) {
  std::string scratch;
  TargetResult r = Normalize("/dir/file.txt?v=3&x#top", scratch);
  ASSERT_EQ(r.status, 0);
  EXPECT_EQ(r.query, "v=3&x");
  EXPECT_EQ(r.Relative(), "dir/file.txt");
  EXPECT_FALSE(r.HasTrailingSlash());
  r = Normalize("/", scratch);
  EXPECT_EQ(r.Relative(), "");
  EXPECT_TRUE(r.HasTrailingSlash());
  r = Normalize("*", scratch);
  EXPECT_TRUE(r.is_asterisk);
}

TEST(RequestTarget, RefusesAScratchBufferTooSmall) {
  char small[4];
  EXPECT_NE(NormalizeTarget("/abcdef", TargetOptions{}, small, sizeof small).status, 0);
}

TEST(RequestTarget, EncodesPathsForLocation) {
  char out[64];
  size_t n = EncodePath("/a b/caf\xc3\xa9/", out, sizeof out);
  EXPECT_EQ(std::string(out, n), "/a%20b/caf%C3%A9/");
  n = EncodePath("/q?x#y%", out, sizeof out);
  EXPECT_EQ(std::string(out, n), "/q%3Fx%23y%25");
  EXPECT_EQ(EncodePath("/abc", out, 2), 0u);
}

// Fuzz-style property: whatever the input, an accepted path starts with '/', has no "." or ".."
// segment and no empty segment (except a trailing slash).
TEST(RequestTarget, AcceptedPathsAreAlwaysClean) {
  const char alphabet[] = {'/', '.', '%', '2', 'e', 'E', 'f', 'a', '0'};
  std::string target;
  for (int n = 0; n < 200000; ++n) {
    target = "/";
    unsigned x = static_cast<unsigned>(n) * 2654435761u;
    for (int i = 0; i < 8; ++i) {
      target += alphabet[x % sizeof alphabet];
      x = x * 1103515245u + 12345u;
    }
    std::string scratch;
    TargetOptions o;
    o.serve_dot_files = true;
    TargetResult r = Normalize(target, scratch, o);
    if (r.status != 0) continue;
    ASSERT_EQ(r.path.front(), '/') << target;
    const std::string p(r.path);
    ASSERT_EQ(p.find("/./"), std::string::npos) << target << " -> " << p;
    ASSERT_EQ(p.find("/../"), std::string::npos) << target << " -> " << p;
    ASSERT_EQ(p.find("//"), std::string::npos) << target << " -> " << p;
    ASSERT_FALSE(p.ends_with("/.") || p.ends_with("/..")) << target << " -> " << p;
  }
}

}  // namespace
}  // namespace ringd::http
