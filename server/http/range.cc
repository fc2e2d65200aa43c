#include "server/http/range.h"

#include <algorithm>
#include <cstring>

#include "server/http/decimal.h"
#include "server/http/text.h"

namespace ringd::http {
namespace {

size_t Append(char* out, std::string_view s) {
  if (!s.empty()) std::memcpy(out, s.data(), s.size());
  return s.size();
}

// A part head's fixed text, around the boundary, the content type and three numbers.
constexpr std::string_view kDelimiter = "\r\n--";
constexpr std::string_view kPartType = "\r\nContent-Type: ";
constexpr std::string_view kPartRange = "\r\nContent-Range: bytes ";
constexpr std::string_view kPartEnd = "\r\n\r\n";
static_assert(MultipartLayout::kMaxPartHead ==
              kDelimiter.size() + MultipartLayout::kMaxBoundary + kPartType.size() +
                  MultipartLayout::kMaxPartType + kPartRange.size() + 3 * 20 + 2 + kPartEnd.size());

}  // namespace

size_t FormatUint(uint64_t v, char* out) {
  char tmp[20];
  size_t n = 0;
  do {
    tmp[n++] = static_cast<char>('0' + v % 10);
    v /= 10;
  } while (v != 0);
  for (size_t i = 0; i < n; ++i) out[i] = tmp[n - 1 - i];
  return n;
}

RangeOutcome ParseRange(std::string_view header, uint64_t length, size_t max_ranges,
                        RangeSet* out) {
  out->count = 0;
  // An empty representation has no byte to select: RFC 9110 section 14.1.1 counts a suffix range
  // as satisfiable there, yet no Content-Range can name it. The whole (empty) representation with
  // 200, as nginx answers; players and download managers probe with `bytes=0-` and take a 416 for
  // an error.
  if (length == 0) return RangeOutcome::kIgnore;
  header = TrimOws(header);
  if (header.size() < 6 || !EqualsIgnoreCase(header.substr(0, 6), "bytes=")) {
    return RangeOutcome::kIgnore;  // absent, or a unit we do not know (RFC 9110 section 14.2)
  }
  if (max_ranges > RangeSet::kCapacity) max_ranges = RangeSet::kCapacity;
  std::string_view list = header.substr(6);
  size_t specs = 0;
  uint64_t requested = 0;  // sum of satisfiable lengths, before coalescing: at most `length`
  // Adds a satisfiable range. False, with the set emptied, once the lengths add up to more than
  // the representation (overlapping ranges asking for more than the file: refused). Checked as
  // each range comes, so the sum never overflows, however long the representation.
  const auto add = [&](uint64_t first, uint64_t last) {
    if (last - first + 1 > length - requested) {
      out->count = 0;
      return false;
    }
    requested += last - first + 1;
    out->ranges[out->count++] = ByteRange{first, last};
    return true;
  };
  bool saw_any = false;
  while (true) {
    const size_t comma = list.find(',');
    const std::string_view spec = TrimOws(list.substr(0, comma));
    if (!spec.empty()) {
      saw_any = true;
      if (++specs > max_ranges) return RangeOutcome::kIgnore;
      const size_t dash = spec.find('-');
      if (dash == std::string_view::npos) return RangeOutcome::kIgnore;
      const std::string_view a = spec.substr(0, dash), b = spec.substr(dash + 1);
      uint64_t first, last;
      if (a.empty()) {  // suffix-range: "-N", the last N bytes
        uint64_t n;
        if (!ParseDecimal(b, &n)) return RangeOutcome::kIgnore;
        if (n > 0 && length > 0) {
          first = n >= length ? 0 : length - n;
          last = length - 1;
          if (!add(first, last)) return RangeOutcome::kIgnore;
        }
      } else {
        if (!ParseDecimal(a, &first)) return RangeOutcome::kIgnore;
        if (b.empty()) {
          last = UINT64_MAX;  // "N-": to the end
        } else if (!ParseDecimal(b, &last) || last < first) {
          return RangeOutcome::kIgnore;  // RFC 9110 14.1.1: last < first makes the header invalid
        }
        if (first < length) {
          if (last >= length) last = length - 1;
          if (!add(first, last)) return RangeOutcome::kIgnore;
        }
      }
    }
    if (comma == std::string_view::npos) break;
    list.remove_prefix(comma + 1);
  }
  if (!saw_any) return RangeOutcome::kIgnore;
  if (out->count == 0) return RangeOutcome::kUnsatisfiable;
  // Coalesce overlapping and adjacent ranges (RFC 9110 section 14.6 permits it).
  std::sort(out->ranges, out->ranges + out->count,
            [](const ByteRange& x, const ByteRange& y) { return x.first < y.first; });
  size_t w = 0;
  for (size_t r = 1; r < out->count; ++r) {
    ByteRange& cur = out->ranges[w];
    const ByteRange& next = out->ranges[r];
    if (next.first <= cur.last + 1) {
      cur.last = std::max(cur.last, next.last);
    } else {
      out->ranges[++w] = next;
    }
  }
  out->count = w + 1;
  return RangeOutcome::kSatisfiable;
}

size_t MultipartLayout::PartHead(size_t i, char* out) const {
  const ByteRange& r = set_.ranges[i];
  size_t n = 0;
  n += Append(out + n, kDelimiter);
  n += Append(out + n, boundary_);
  n += Append(out + n, kPartType);
  n += Append(out + n, content_type_.substr(0, kMaxPartType));
  n += Append(out + n, kPartRange);
  n += FormatUint(r.first, out + n);
  out[n++] = '-';
  n += FormatUint(r.last, out + n);
  out[n++] = '/';
  n += FormatUint(length_, out + n);
  n += Append(out + n, kPartEnd);
  return n;
}

size_t MultipartLayout::Tail(char* out) const {
  size_t n = Append(out, kDelimiter);
  n += Append(out + n, boundary_);
  n += Append(out + n, "--\r\n");
  return n;
}

uint64_t MultipartLayout::ContentLength() const {
  char buf[kMaxPartHead];
  uint64_t total = 0;
  for (size_t i = 0; i < set_.count; ++i) total += PartHead(i, buf) + set_.ranges[i].Length();
  return total + Tail(buf);
}

}  // namespace ringd::http
