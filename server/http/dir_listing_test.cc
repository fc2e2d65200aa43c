#include "server/http/dir_listing.h"

#include <cstdint>
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

// Writes a listing through pieces of at most `piece` bytes, as the lister does: each call that
// does not fit starts the next piece. Returns the pieces.
std::vector<std::string> Pieces(ListingFormat format, std::string_view url_path,
                                const std::vector<ListingEntry>& entries, uint64_t total,
                                size_t piece) {
  std::vector<std::string> out(1);
  std::vector<char> buf(piece);
  ListingWriter w(format);
  auto put = [&](auto&& write) {
    std::string& last = out.back();
    size_t n = write(buf.data(), piece - last.size());
    if (n == 0) {  // full: the next piece, which it must fit
      out.emplace_back();
      n = write(buf.data(), piece);
      EXPECT_GT(n, 0u);
    }
    out.back().append(buf.data(), n);
  };
  put([&](char* b, size_t cap) { return w.Begin(url_path, b, cap); });
  for (const ListingEntry& e : entries) put([&](char* b, size_t cap) { return w.Add(e, b, cap); });
  put([&](char* b, size_t cap) { return w.End(total, b, cap); });
  EXPECT_EQ(w.added(), entries.size());
  return out;
}

std::string Whole(ListingFormat format, std::string_view url_path,
                  const std::vector<ListingEntry>& entries, uint64_t total) {
  std::string body;
  for (const std::string& p : Pieces(format, url_path, entries, total, 1 << 20)) body += p;
  return body;
}

TEST(DirListing, WritesHtml) {
  const std::string body =
      Whole(ListingFormat::kHtml, "/pub/<x>/",
            {{"a b.txt", false, 1234, kMtime}, {"sub", true, 4096, kMtime}}, 2);
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
  EXPECT_EQ(Whole(ListingFormat::kHtml, "/", {}, 0).find("../"), std::string::npos);
}

TEST(DirListing, WritesJson) {
  EXPECT_EQ(
      Whole(ListingFormat::kJson, "/pub/", {{"a\"b", false, 7, kMtime}, {"d", true, 0, kMtime}}, 2),
      "[\r\n{\"name\":\"a\\\"b\",\"url\":\"a%22b\",\"type\":\"file\",\"mtime\":\"Wed, 21 Oct "
      "2015 07:28:00 GMT\",\"size\":7},\r\n{\"name\":\"d\",\"url\":\"d/\",\"type\":"
      "\"directory\",\"mtime\":\"Wed, 21 Oct 2015 07:28:00 GMT\"}\r\n]\r\n");
  EXPECT_EQ(Whole(ListingFormat::kJson, "/", {}, 0), "[\r\n]\r\n");
}

// Fewer entries than the directory has (the lister keeps at most --autoindex-max-entries): a
// last line or element says how many of how many, in both formats.
TEST(DirListing, SaysWhenCut) {
  const std::vector<ListingEntry> shown = {{"a", false, 1, kMtime}, {"b", false, 2, kMtime}};
  const std::string html = Whole(ListingFormat::kHtml, "/big/", shown, 100000);
  EXPECT_NE(html.find("<p>Listing cut: the first 2 of 100000 entries, by name.</p>"),
            std::string::npos)
      << html;
  EXPECT_TRUE(html.ends_with("</html>\r\n"));
  EXPECT_TRUE(
      Whole(ListingFormat::kJson, "/big/", shown, 100000)
          .ends_with(",\r\n{\"type\":\"truncated\",\"shown\":2,\"entries\":100000}\r\n]\r\n"));
  EXPECT_EQ(Whole(ListingFormat::kJson, "/big/", {}, 3),
            "[\r\n{\"type\":\"truncated\",\"shown\":0,\"entries\":3}\r\n]\r\n");
}

// However small the pieces, the listing is the same text cut at entry boundaries: every piece
// within its bound, nothing lost or repeated, an entry that does not fit written whole into the
// next piece.
TEST(DirListing, WritesTheSameTextInPiecesOfAnySize) {
  std::vector<std::string> names;
  std::vector<ListingEntry> entries;
  for (int i = 0; i < 500; ++i) names.push_back("entry <" + std::to_string(i) + "> caf\xE9");
  for (int i = 0; i < 500; ++i) entries.push_back({names[i], i % 7 == 0, uint64_t(i), kMtime});
  for (ListingFormat format : {ListingFormat::kHtml, ListingFormat::kJson}) {
    const std::string whole = Whole(format, "/pub/", entries, 600);
    for (size_t piece : {size_t{400}, size_t{1000}, size_t{4096}, size_t{65536}}) {
      const std::vector<std::string> pieces = Pieces(format, "/pub/", entries, 600, piece);
      std::string joined;
      for (const std::string& p : pieces) {
        EXPECT_LE(p.size(), piece);
        EXPECT_FALSE(p.empty());
        joined += p;
      }
      EXPECT_EQ(joined, whole) << piece;
      EXPECT_GE(pieces.size(), whole.size() / piece);
    }
  }
}

// An entry at its longest (a name of NAME_MAX bytes, each escaped at its longest) fits
// kMaxEntryBytes; a title fits MaxBeginBytes; the closing fits kMaxEndBytes.
TEST(DirListing, BoundsWhatOneCallWrites) {
  const std::string quotes(255, '"');
  const std::string bad(255, '\xFF');
  for (ListingFormat format : {ListingFormat::kHtml, ListingFormat::kJson}) {
    std::vector<char> buf(1 << 20);
    ListingWriter w(format);
    for (const std::string& name : {quotes, bad}) {
      for (bool dir : {false, true}) {
        const ListingEntry longest{name, dir, UINT64_MAX, kMtime};
        const size_t n = w.Add(longest, buf.data(), buf.size());
        EXPECT_GT(n, 0u);
        EXPECT_LE(n, ListingWriter::kMaxEntryBytes);
        EXPECT_EQ(w.Add(longest, buf.data(), n - 1), 0u);  // does not fit: nothing counts
      }
    }
    const std::string title = "/" + std::string(4096, '"') + "/";
    const size_t begun = w.Begin(title, buf.data(), buf.size());
    EXPECT_GT(begun, 0u);
    EXPECT_LE(begun, ListingWriter::MaxBeginBytes(title.size()));
    EXPECT_EQ(w.Begin(title, buf.data(), begun - 1), 0u);
    const size_t ended = w.End(UINT64_MAX, buf.data(), buf.size());
    EXPECT_GT(ended, 0u);
    EXPECT_LE(ended, ListingWriter::kMaxEndBytes);
  }
}

}  // namespace
}  // namespace ringd::http
