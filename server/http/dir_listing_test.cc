#include "server/http/dir_listing.h"

#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace ringd::http {
namespace {

constexpr int64_t kMtime = 1445412480;  // Wed, 21 Oct 2015 07:28:00 GMT

std::string Html(std::string_view name) {
  char buf[256];
  const size_t n = EscapeHtml(name, buf, sizeof buf);
  EXPECT_NE(n, SIZE_MAX);
  return std::string(buf, n);
}
std::string Json(std::string_view name) {
  char buf[256];
  const size_t n = EscapeJson(name, buf, sizeof buf);
  EXPECT_NE(n, SIZE_MAX);
  return std::string(buf, n);
}
std::string Url(std::string_view name) {
  char buf[256];
  const size_t n = EncodeSegment(name, buf, sizeof buf);
  EXPECT_NE(n, SIZE_MAX);
  return std::string(buf, n);
}

TEST(DirListing, EscapesNamesForHtml) {
  EXPECT_EQ(Html("plain-name_1.txt"), "plain-name_1.txt");
  EXPECT_EQ(Html("<script>\"a\" & 'b'"), "&lt;script&gt;&quot;a&quot; &amp; &#39;b&#39;");
  EXPECT_EQ(Html("two words"), "two words");
  EXPECT_EQ(Html("caf\xC3\xA9 \xE2\x82\xAC \xF0\x9F\x98\x80"),
            "caf\xC3\xA9 \xE2\x82\xAC \xF0\x9F\x98\x80");
  // Not UTF-8: a stray continuation byte, a Latin-1 byte, an overlong '/', a surrogate, a
  // sequence cut short: U+FFFD for each byte.
  EXPECT_EQ(Html("a\x80z"), "a\xEF\xBF\xBDz");
  EXPECT_EQ(Html("caf\xE9"), "caf\xEF\xBF\xBD");
  EXPECT_EQ(Html("\xC0\xAF"), "\xEF\xBF\xBD\xEF\xBF\xBD");
  EXPECT_EQ(Html("\xED\xA0\x80"), "\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD");
  EXPECT_EQ(Html("x\xE2\x82"), "x\xEF\xBF\xBD\xEF\xBF\xBD");
  EXPECT_EQ(Html("tab\there\x7F"), "tab\xEF\xBF\xBDhere\xEF\xBF\xBD");
  char small[4];
  EXPECT_EQ(EscapeHtml("<<", small, sizeof small), SIZE_MAX);
}

TEST(DirListing, EscapesNamesForJson) {
  EXPECT_EQ(Json("a \"quoted\" \\ name"), "a \\\"quoted\\\" \\\\ name");
  EXPECT_EQ(Json("new\nline\x01"), "new\\u000Aline\\u0001");
  EXPECT_EQ(Json("<b>&</b>"), "<b>&</b>");
  EXPECT_EQ(Json("caf\xC3\xA9"), "caf\xC3\xA9");
  EXPECT_EQ(Json("caf\xE9"), "caf\\ufffd");
}

TEST(DirListing, EncodesNamesForUrls) {
  EXPECT_EQ(Url("a-b_c.d~e"), "a-b_c.d~e");
  EXPECT_EQ(Url("two words"), "two%20words");
  EXPECT_EQ(Url("\"<x>\"?#&%"), "%22%3Cx%3E%22%3F%23%26%25");
  EXPECT_EQ(Url("javascript:alert(1)"), "javascript%3Aalert%281%29");
  EXPECT_EQ(Url("caf\xE9"), "caf%E9");  // every byte kept, encoded
  EXPECT_EQ(Url("caf\xC3\xA9"), "caf%C3%A9");
}

TEST(DirListing, WritesHtml) {
  char buf[4096];
  ListingWriter w(ListingFormat::kHtml, buf, sizeof buf);
  w.Begin("/pub/<x>/");
  ASSERT_TRUE(w.Add({"a b.txt", false, 1234, kMtime}));
  ASSERT_TRUE(w.Add({"sub", true, 4096, kMtime}));
  const std::string body(w.End(2));
  EXPECT_NE(body.find("<title>Index of /pub/&lt;x&gt;/</title>"), std::string::npos) << body;
  EXPECT_NE(body.find("<a href=\"../\">../</a>"), std::string::npos) << body;
  EXPECT_NE(body.find("<tr><td><a href=\"a%20b.txt\">a b.txt</a></td><td>Wed, 21 Oct 2015 "
                      "07:28:00 GMT</td><td>1234</td></tr>"),
            std::string::npos)
      << body;
  EXPECT_NE(body.find("<a href=\"sub/\">sub/</a></td><td>Wed, 21 Oct 2015 07:28:00 GMT</td>"
                      "<td>-</td>"),
            std::string::npos)
      << body;
  EXPECT_EQ(body.find("Listing cut"), std::string::npos);
  EXPECT_TRUE(body.ends_with("</html>\r\n"));
  // The root has no parent.
  ListingWriter root(ListingFormat::kHtml, buf, sizeof buf);
  root.Begin("/");
  EXPECT_EQ(std::string(root.End(0)).find("../"), std::string::npos);
}

TEST(DirListing, WritesJson) {
  char buf[4096];
  ListingWriter w(ListingFormat::kJson, buf, sizeof buf);
  w.Begin("/pub/");
  ASSERT_TRUE(w.Add({"a\"b", false, 7, kMtime}));
  ASSERT_TRUE(w.Add({"d", true, 0, kMtime}));
  EXPECT_EQ(w.End(2),
            "[\r\n{\"name\":\"a\\\"b\",\"url\":\"a%22b\",\"type\":\"file\",\"mtime\":\"Wed, 21 Oct "
            "2015 07:28:00 GMT\",\"size\":7},\r\n{\"name\":\"d\",\"url\":\"d/\",\"type\":"
            "\"directory\",\"mtime\":\"Wed, 21 Oct 2015 07:28:00 GMT\"}\r\n]\r\n");
  ListingWriter empty(ListingFormat::kJson, buf, sizeof buf);
  empty.Begin("/");
  EXPECT_EQ(empty.End(0), "[\r\n]\r\n");
}

// A buffer that fills up: the entries that fit, then the line that says it was cut (always room
// for it), in both formats.
TEST(DirListing, CutsWhatDoesNotFitAndSaysSo) {
  for (ListingFormat format : {ListingFormat::kHtml, ListingFormat::kJson}) {
    std::vector<char> buf(4 * ListingWriter::kEndReserve);
    ListingWriter w(format, buf.data(), buf.size());
    w.Begin("/big/");
    uint64_t added = 0;
    while (w.Add({"file-with-a-longish-name-" + std::to_string(added), false, added, kMtime}))
      ++added;
    EXPECT_GT(added, 0u);
    EXPECT_EQ(w.added(), added);
    const std::string body(w.End(100000));
    EXPECT_LE(body.size(), buf.size());
    if (format == ListingFormat::kHtml) {
      EXPECT_NE(body.find("<p>Listing cut: the first " + std::to_string(added) +
                          " of 100000 entries, by name.</p>"),
                std::string::npos)
          << body;
      EXPECT_TRUE(body.ends_with("</html>\r\n"));
    } else {
      EXPECT_NE(body.find("{\"type\":\"truncated\",\"shown\":" + std::to_string(added) +
                          ",\"entries\":100000}\r\n]\r\n"),
                std::string::npos)
          << body;
    }
  }
  // Too small for the opening and the reserve: nothing.
  char tiny[ListingWriter::kEndReserve];
  ListingWriter w(ListingFormat::kHtml, tiny, sizeof tiny);
  w.Begin("/");
  EXPECT_FALSE(w.Add({"a", false, 1, kMtime}));
  EXPECT_TRUE(w.End(1).empty());
}

}  // namespace
}  // namespace ringd::http
