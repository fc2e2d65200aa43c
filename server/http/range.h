// Byte ranges (RFC 9110 section 14): parsing a Range header against a representation's length,
// coalescing, amplification limits, and the exact layout of a multipart/byteranges body.
//
//   RangeSet set;
//   switch (ParseRange("bytes=0-99,-50", file_size, /*max_ranges=*/16, &set)) { ... }
//   MultipartLayout m(set, "text/plain", file_size, boundary);   // m.ContentLength() ...
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

namespace ringd::http {

// Plain (no initialisers): a RangeSet's unused slots are never touched, so a response plan is
// cheap to construct.
struct ByteRange {
  uint64_t first;
  uint64_t last;  // inclusive
  uint64_t Length() const { return last - first + 1; }
};

// The ranges ringd will send: sorted, non-overlapping, non-adjacent, each within the file.
struct RangeSet {
  static constexpr size_t kCapacity = 64;  // hard ceiling on --max-ranges
  ByteRange ranges[kCapacity];
  size_t count = 0;
};

enum class RangeOutcome : uint8_t {
  kIgnore,         // serve the whole representation with 200 (absent, invalid, or refused)
  kSatisfiable,    // serve `out` with 206
  kUnsatisfiable,  // answer 416 with Content-Range: bytes */length
};

// RFC 9110 section 14.2. A header that is not valid `bytes=` syntax is ignored (200). To refuse
// amplification, more than `max_ranges` ranges, or ranges whose lengths add up to more than the
// representation, are ignored too (200 with the whole file, as nginx does), and so is every
// range of an empty representation.
RangeOutcome ParseRange(std::string_view header, uint64_t length, size_t max_ranges, RangeSet* out);

// The bytes of a multipart/byteranges body (RFC 9110 section 14.6) around the file slices:
//   for each part: PartHead(i) then the slice;   then Tail().
// `boundary` must outlive the layout; it is at most kMaxBoundary bytes.
class MultipartLayout {
 public:
  static constexpr size_t kMaxBoundary = 70;
  static constexpr size_t kMaxPartType = 128;  // a longer content type is cut in part heads
  // "\r\n--" boundary "\r\nContent-Type: " type "\r\nContent-Range: bytes " first "-" last "/"
  // length "\r\n\r\n", each number at most 20 digits (tied to the text in range.cc).
  static constexpr size_t kMaxPartHead = 4 + kMaxBoundary + 16 + kMaxPartType + 23 + 3 * 20 + 2 + 4;

  MultipartLayout(const RangeSet& set, std::string_view content_type, uint64_t length,
                  std::string_view boundary)
      : set_(set), content_type_(content_type), length_(length), boundary_(boundary) {}

  // Writes part i's delimiter and headers into `out` (kMaxPartHead bytes); returns bytes written.
  size_t PartHead(size_t i, char* out) const;
  // The closing delimiter, "\r\n--boundary--\r\n", written into `out` (kMaxBoundary + 8 bytes).
  size_t Tail(char* out) const;
  // The whole body's length: every part head, slice and the tail.
  uint64_t ContentLength() const;

 private:
  const RangeSet& set_;
  std::string_view content_type_;
  uint64_t length_;
  std::string_view boundary_;
};

// Appends the decimal form of v at out; returns the digits written (at most 20).
size_t FormatUint(uint64_t v, char* out);

}  // namespace ringd::http
