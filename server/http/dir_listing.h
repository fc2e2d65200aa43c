// A directory listing's body (--autoindex), as HTML or as JSON (nginx's autoindex_format json),
// written into a bounded buffer the caller owns. Sans-IO: the caller reads the directory, sorts
// its entries and hands them over one by one; names are bytes, escaped here for HTML, JSON and
// URLs (a name that is not UTF-8 shows U+FFFD for each bad byte, and its link keeps every byte,
// percent-encoded).
//
//   ListingWriter w(ListingFormat::kHtml, buf, sizeof buf);
//   w.Begin("/pub/");
//   for (const ListingEntry& e : sorted) if (!w.Add(e)) break;   // full: the listing is cut
//   std::string_view body = w.End(entries_in_directory);
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

namespace ringd::http {

enum class ListingFormat : uint8_t { kHtml, kJson };

// The Content-Type of a listing in `format`.
std::string_view ListingContentType(ListingFormat format);

struct ListingEntry {
  std::string_view name;  // one path segment: no '/', not "." or ".."
  bool directory = false;
  uint64_t size = 0;  // files only
  int64_t mtime_sec = 0;
};

class ListingWriter {
 public:
  // Room End always keeps for itself: the closing text and the line that says the listing was
  // cut. A buffer smaller than twice this writes nothing (End returns an empty view).
  static constexpr size_t kEndReserve = 512;

  ListingWriter(ListingFormat format, char* buf, size_t cap);
  // The opening, titled with the directory's decoded URL path ("/pub/"), escaped as names are.
  void Begin(std::string_view url_path);
  // Appends one entry; false when it does not fit (nothing of it is written): the caller stops.
  bool Add(const ListingEntry& entry);
  // The closing; when fewer entries were added than `total` (the directory's entries, those a
  // listing hides not counted), a last line (HTML) or element (JSON, "type": "truncated") says
  // how many are shown of how many. Returns the whole body.
  std::string_view End(uint64_t total);

  uint64_t added() const { return added_; }

 private:
  ListingFormat format_;
  char* buf_;
  size_t cap_;
  size_t len_ = 0;
  uint64_t added_ = 0;
  bool ok_ = true;  // cap_ holds the opening and the reserve
};

// Writes `name` escaped for HTML text (&, <, >, ", ' as references; bytes that are not UTF-8,
// and control bytes, as U+FFFD) into `out`; returns the length, or SIZE_MAX if `cap` is too small.
size_t EscapeHtml(std::string_view name, char* out, size_t cap);
// The same for the inside of a JSON string (RFC 8259: \", \\, control bytes as \u00XX; bytes
// that are not UTF-8 as \ufffd).
size_t EscapeJson(std::string_view name, char* out, size_t cap);
// Percent-encodes every byte but RFC 3986's unreserved ones (a URL path segment that no parser
// takes for a scheme, a query or markup).
size_t EncodeSegment(std::string_view name, char* out, size_t cap);

}  // namespace ringd::http
