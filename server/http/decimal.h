// The one decimal parser: flags, Content-Length, Range and every other count read from text go
// through it, so that all of them accept and refuse the same strings. RFC 9110's 1*DIGIT: ASCII
// digits only, the whole string, at least one; no sign, no space, no "0x", nothing that does not
// fit a uint64_t. Header-only; nothing here allocates.
//
//   uint64_t n;
//   ParseDecimal("1024", &n);  // true, n == 1024
//   ParseDecimal("+1", &n);    // false, n untouched (also " 1", "1O", "", a 21-digit number)
#pragma once

#include <charconv>
#include <cstdint>
#include <string_view>
#include <system_error>

namespace ringd::http {

// Parses `text` as 1*DIGIT into *out. False, with *out untouched, for anything else.
inline bool ParseDecimal(std::string_view text, uint64_t* out) {
  // std::from_chars takes no sign or space for an unsigned type and reports overflow, but it
  // stops at the first non-digit: the end pointer must be the end of the text.
  uint64_t value = 0;
  const char* end = text.data() + text.size();
  const auto [ptr, ec] = std::from_chars(text.data(), end, value);
  if (ec != std::errc() || ptr != end) return false;
  *out = value;
  return true;
}

// ParseDecimal, and the value is at most `max`.
inline bool ParseDecimal(std::string_view text, uint64_t max, uint64_t* out) {
  uint64_t value;
  if (!ParseDecimal(text, &value) || value > max) return false;
  *out = value;
  return true;
}

}  // namespace ringd::http
