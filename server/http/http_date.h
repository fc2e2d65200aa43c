// HTTP dates (RFC 9110 section 5.6.7): formatting IMF-fixdate and parsing all three forms.
//
//   char buf[kHttpDateLen];
//   FormatHttpDate(1445412480, buf);                 // "Wed, 21 Oct 2015 07:28:00 GMT"
//   std::optional<int64_t> t = ParseHttpDate("Wed, 21 Oct 2015 07:28:00 GMT");
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>

namespace ringd::http {

// Length of an IMF-fixdate, without a terminator.
inline constexpr int kHttpDateLen = 29;

// Writes the IMF-fixdate for `unix_seconds` into `out` (exactly kHttpDateLen bytes, no NUL).
void FormatHttpDate(int64_t unix_seconds, char* out);

// Parses IMF-fixdate, the obsolete RFC 850 form and asctime() form (RFC 9110 section 5.6.7).
// Returns seconds since the epoch, or nullopt for anything that is not a valid date.
std::optional<int64_t> ParseHttpDate(std::string_view text);

}  // namespace ringd::http
