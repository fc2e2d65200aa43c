// Fuzzes the multipart/byteranges layout (RFC 9110 section 14.6) that a 206 with several ranges
// is sent in: the body is built as body_send.cc sends it (each part's head and file slice, then
// the tail) and read back by a parser written here from the RFC. Its length must be what
// ContentLength() announced; each part must carry the content type and a Content-Range naming
// its own range of the file, in order; the delimiter must appear only where a part or the tail
// begins; no part head or tail may be longer than the buffers range.h sizes for them.
//
// Input: four lines, then nothing else read:
//   <length>         the file's size (an off_t: taken modulo 2^63)
//   <boundary>       its RFC 2046 bchars that are also token characters (the boundary is sent
//                    unquoted), at most 70; "ringd-0123456789abcdef" when none is left
//   <content type>   the file's Content-Type, as MimeTypes gives it (no control bytes)
//   <Range value>    parsed as the planner does (at most 64 ranges); only a satisfiable one is
//                    laid out
#include <cstdint>
#include <string>
#include <string_view>

#include "server/http/range.h"
#include "tests/fuzz/fuzz_text.h"

namespace ringd::http {
namespace {

using fuzz::FuzzText;
using fuzz::TakeNumber;

// Bodies up to this long are built byte for byte and parsed back; longer ones are checked part
// head by part head.
constexpr uint64_t kMaxBuiltFile = 1 << 16;

bool IsBoundaryChar(char c) {
  return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '\'' ||
         c == '+' || c == '_' || c == '-' || c == '.';
}

// The file's byte at `offset`: letters only, so that no CR (and so no delimiter) is in a slice,
// and a slice from the wrong offset differs.
char FileByte(uint64_t offset) { return static_cast<char>('a' + (offset * 7 + offset / 26) % 26); }

// Reads a part head as a recipient would: "\r\n--" boundary "\r\n", then header lines up to the
// blank line. Returns the bytes it took, 0 when it is not a part head for `range`.
size_t ReadPartHead(std::string_view body, std::string_view boundary, std::string_view type,
                    uint64_t length, const ByteRange& range) {
  const std::string delimiter = "\r\n--" + std::string(boundary) + "\r\n";
  if (!body.starts_with(delimiter)) return 0;
  const size_t end = body.find("\r\n\r\n", delimiter.size() - 2);
  if (end == std::string_view::npos) return 0;
  std::string_view fields = body.substr(delimiter.size(), end + 2 - delimiter.size());
  bool saw_type = false, saw_range = false;
  while (!fields.empty()) {
    const size_t eol = fields.find("\r\n");
    const std::string_view line = fields.substr(0, eol);
    fields.remove_prefix(eol + 2);
    if (line.starts_with("Content-Type: ")) {
      if (saw_type || line.substr(14) != type.substr(0, 128)) return 0;
      saw_type = true;
    } else if (line.starts_with("Content-Range: bytes ")) {
      std::string_view v = line.substr(21);
      const std::string want = std::to_string(range.first) + "-" + std::to_string(range.last) +
                               "/" + std::to_string(length);
      if (saw_range || v != want) return 0;
      saw_range = true;
    } else {
      return 0;
    }
  }
  return saw_type && saw_range ? end + 4 : 0;
}

int FuzzOne(const uint8_t* data, size_t size) {
  FuzzText in(data, size);
  std::string_view line = in.Line();
  const uint64_t length = TakeNumber(&line, 0) & INT64_MAX;
  std::string boundary;
  for (char c : in.Line()) {
    if (IsBoundaryChar(c) && boundary.size() < MultipartLayout::kMaxBoundary) boundary += c;
  }
  if (boundary.empty()) boundary = "ringd-0123456789abcdef";
  std::string type;
  for (char c : in.Line()) {
    if (static_cast<unsigned char>(c) >= 0x20 && c != 0x7f) type += c;
  }
  RangeSet set;
  if (ParseRange(in.Line(), length, RangeSet::kCapacity, &set) != RangeOutcome::kSatisfiable) {
    return 0;
  }

  const MultipartLayout layout(set, type, length, boundary);
  const std::string delimiter = "\r\n--" + boundary;
  // Each piece alone: within its buffer's size, and the delimiter only at its start.
  char buf[1024];
  uint64_t total = 0;
  for (size_t i = 0; i < set.count; ++i) {
    const size_t n = layout.PartHead(i, buf);
    FUZZ_CHECK(n <= MultipartLayout::kMaxPartHead);
    const std::string_view head(buf, n);
    FUZZ_CHECK(head.find(delimiter, 1) == std::string_view::npos);
    FUZZ_CHECK(ReadPartHead(head, boundary, type, length, set.ranges[i]) == n);
    if (i > 0) FUZZ_CHECK(set.ranges[i - 1].last < set.ranges[i].first);  // in order
    FUZZ_CHECK(set.ranges[i].last < length);
    total += n + set.ranges[i].Length();
  }
  const size_t tail_len = layout.Tail(buf);
  FUZZ_CHECK(tail_len <= MultipartLayout::kMaxBoundary + 8);
  FUZZ_CHECK(std::string_view(buf, tail_len) == delimiter + "--\r\n");
  total += tail_len;
  FUZZ_CHECK(layout.ContentLength() == total);
  if (length > kMaxBuiltFile) return 0;

  // The whole body, as body_send.cc sends it, then read back.
  std::string body;
  for (size_t i = 0; i < set.count; ++i) {
    body.append(buf, layout.PartHead(i, buf));
    for (uint64_t o = set.ranges[i].first; o <= set.ranges[i].last; ++o) body += FileByte(o);
  }
  body.append(buf, layout.Tail(buf));
  FUZZ_CHECK(body.size() == layout.ContentLength());
  std::string_view rest = body;
  size_t delimiters = 0;
  for (size_t at = body.find(delimiter); at != std::string::npos;
       at = body.find(delimiter, at + 1)) {
    ++delimiters;
  }
  FUZZ_CHECK(delimiters == set.count + 1);  // one per part, one for the tail
  for (size_t i = 0; i < set.count; ++i) {
    const size_t n = ReadPartHead(rest, boundary, type, length, set.ranges[i]);
    FUZZ_CHECK(n > 0);
    rest.remove_prefix(n);
    for (uint64_t o = set.ranges[i].first; o <= set.ranges[i].last; ++o) {
      FUZZ_CHECK(!rest.empty() && rest.front() == FileByte(o));
      rest.remove_prefix(1);
    }
  }
  FUZZ_CHECK(rest == delimiter + "--\r\n");
  return 0;
}

}  // namespace
}  // namespace ringd::http

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  return ringd::http::FuzzOne(data, size);
}
