// Fuzzes Range parsing (RFC 9110 section 14) against a representation of any length: ParseRange
// must agree with a reference written from the RFC's grammar and range.h's policy, and every set
// it accepts must be sorted, disjoint, non-adjacent, within the representation and within the
// range limit.
//
// Input: a first line "<length> [<max_ranges>]" (max_ranges 16 when absent), then the Range
// header value, as the request parser would hand it over (any bytes).
#include <algorithm>
#include <cstdint>
#include <string_view>
#include <vector>

#include "server/http/range.h"
#include "tests/fuzz/fuzz_text.h"

using ringd::fuzz::FuzzText;
using ringd::fuzz::TakeNumber;
using ringd::http::ByteRange;
using ringd::http::ParseRange;
using ringd::http::RangeOutcome;
using ringd::http::RangeSet;

namespace {

struct Expected {
  RangeOutcome outcome = RangeOutcome::kIgnore;
  std::vector<ByteRange> ranges;  // kSatisfiable: the union of the satisfiable specs
};

std::string_view TrimOws(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

// 1*DIGIT that fits a uint64_t, digit by digit with overflow checks (not std::from_chars, which
// the code under test uses).
bool Digits(std::string_view s, uint64_t* out) {
  if (s.empty()) return false;
  uint64_t v = 0;
  for (char c : s) {
    if (c < '0' || c > '9') return false;
    if (__builtin_mul_overflow(v, 10, &v) || __builtin_add_overflow(v, c - '0', &v)) return false;
  }
  *out = v;
  return true;
}

bool IsBytesUnit(std::string_view s) {
  if (s.size() < 6 || s[5] != '=') return false;
  for (size_t i = 0; i < 5; ++i) {
    if ((s[i] | 0x20) != "bytes"[i]) return false;
  }
  return true;
}

// RFC 9110 section 14.1.1's ranges-specifier, with the recipient's leniency of section 5.6.1
// (empty list elements and OWS around commas), and range.h's policy: a header that is not the
// syntax, more than `limit` range-specs, or satisfiable ranges adding up to more than the
// representation are ignored (200). A range-spec is satisfiable per section 14.1.1 (an int-range
// that starts inside the representation, a suffix-range of non-zero length); a zero-length
// representation has no byte to select (no Content-Range could name one), and ringd, as nginx,
// ignores every range of it (200).
Expected Reference(std::string_view header, uint64_t length, size_t limit) {
  Expected ignore;
  if (length == 0) return ignore;
  header = TrimOws(header);
  if (!IsBytesUnit(header)) return ignore;
  std::string_view list = header.substr(6);
  size_t specs = 0;
  unsigned __int128 requested = 0;  // cannot overflow: at most 64 lengths below 2^64
  std::vector<ByteRange> wanted;
  for (;;) {
    const size_t comma = list.find(',');
    const std::string_view spec = TrimOws(list.substr(0, comma));
    list = comma == std::string_view::npos ? std::string_view() : list.substr(comma + 1);
    if (!spec.empty()) {
      if (++specs > limit) return ignore;
      if (spec[0] == '-') {  // suffix-range
        uint64_t n;
        if (!Digits(spec.substr(1), &n)) return ignore;
        if (n > 0 && length > 0) wanted.push_back({n >= length ? 0 : length - n, length - 1});
      } else {  // int-range: first-pos "-" [ last-pos ]
        const size_t dash = spec.find('-');
        if (dash == std::string_view::npos) return ignore;
        uint64_t first, last = UINT64_MAX;
        if (!Digits(spec.substr(0, dash), &first)) return ignore;
        const std::string_view tail = spec.substr(dash + 1);
        if (!tail.empty() && (!Digits(tail, &last) || last < first)) return ignore;
        if (first < length) wanted.push_back({first, std::min(last, length - 1)});
      }
    }
    if (comma == std::string_view::npos) break;
  }
  if (specs == 0) return ignore;
  if (wanted.empty()) return Expected{RangeOutcome::kUnsatisfiable, {}};
  for (const ByteRange& r : wanted) requested += r.last - r.first + 1;
  if (requested > length) return ignore;
  // The union, as sorted, disjoint, non-adjacent ranges.
  std::sort(wanted.begin(), wanted.end(),
            [](const ByteRange& a, const ByteRange& b) { return a.first < b.first; });
  Expected ok{RangeOutcome::kSatisfiable, {}};
  for (const ByteRange& r : wanted) {
    if (!ok.ranges.empty() && r.first <= ok.ranges.back().last + 1) {
      ok.ranges.back().last = std::max(ok.ranges.back().last, r.last);
    } else {
      ok.ranges.push_back(r);
    }
  }
  return ok;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  FuzzText in(data, size);
  std::string_view setup = in.Line();
  const uint64_t length = TakeNumber(&setup, 0);
  const uint64_t max_ranges = TakeNumber(&setup, 16);
  const std::string_view header = in.Rest();

  RangeSet set;
  const RangeOutcome got = ParseRange(header, length, max_ranges, &set);
  const size_t limit = std::min<uint64_t>(max_ranges, RangeSet::kCapacity);
  const Expected want = Reference(header, length, limit);
  FUZZ_CHECK(got == want.outcome);
  if (got == RangeOutcome::kUnsatisfiable) FUZZ_CHECK(set.count == 0);
  if (got != RangeOutcome::kSatisfiable) return 0;

  // What range.h promises of a set it accepts, whatever the reference says.
  FUZZ_CHECK(set.count >= 1 && set.count <= limit);
  uint64_t total = 0;
  for (size_t i = 0; i < set.count; ++i) {
    const ByteRange& r = set.ranges[i];
    FUZZ_CHECK(r.first <= r.last && r.last < length);
    if (i > 0) FUZZ_CHECK(set.ranges[i - 1].last + 1 < r.first);  // sorted, apart
    total += r.Length();
  }
  FUZZ_CHECK(total <= length);  // never more bytes than the representation has
  FUZZ_CHECK(set.count == want.ranges.size());
  for (size_t i = 0; i < set.count; ++i) {
    FUZZ_CHECK(set.ranges[i].first == want.ranges[i].first);
    FUZZ_CHECK(set.ranges[i].last == want.ranges[i].last);
  }
  return 0;
}
