// A directory listing's body (--autoindex), as HTML or as JSON (nginx's autoindex_format json),
// written piece by piece into bounded buffers the caller owns, so that a listing of any length
// is streamed through a buffer of a few pieces. Sans-IO: the caller reads the directory, sorts
// its entries and hands them over one by one; names are bytes, escaped here for HTML, JSON and
// URLs (a name that is not UTF-8 shows U+FFFD for each bad byte, and its link keeps every byte,
// percent-encoded).
//
//   ListingWriter w(ListingFormat::kHtml);
//   n = w.Begin("/pub/", piece, cap);              // 0: does not fit, hand it an emptier piece
//   for (const ListingEntry& e : sorted) n = w.Add(e, piece + used, cap - used);  // likewise
//   n = w.End(entries_in_directory, piece + used, cap - used);
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
  // The most one entry writes: a name of NAME_MAX (255) bytes, each escaped at its longest (six
  // bytes in HTML and JSON text, three in its link), and the markup around it.
  static constexpr size_t kMaxEntryBytes = 4096;
  // The most End writes.
  static constexpr size_t kMaxEndBytes = 256;
  // The most Begin writes for a title of `url_path_bytes` (the title is written twice, HTML
  // escaped: at most six bytes per byte).
  static constexpr size_t MaxBeginBytes(size_t url_path_bytes) { return 12 * url_path_bytes + 256; }

  explicit ListingWriter(ListingFormat format);
  // Each writes its text into [buf, buf + cap) and returns its length, or 0 when it does not fit
  // (then nothing of it counts: the caller calls again with more room).
  // The opening, titled with the directory's decoded URL path ("/pub/"), escaped as names are.
  size_t Begin(std::string_view url_path, char* buf, size_t cap) const;
  // One entry, in the order given.
  size_t Add(const ListingEntry& entry, char* buf, size_t cap);
  // The closing; when fewer entries were added than `total` (the directory's entries, those a
  // listing hides not counted), a last line (HTML) or element (JSON, "type": "truncated") says
  // how many are shown of how many.
  size_t End(uint64_t total, char* buf, size_t cap) const;

  uint64_t added() const { return added_; }

 private:
  ListingFormat format_;
  uint64_t added_ = 0;
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
