#include "server/http/http_date.h"

#include <cstring>

#include "server/http/decimal.h"

namespace ringd::http {
namespace {

constexpr char kDays[7][4] = {"Thu", "Fri", "Sat", "Sun", "Mon", "Tue", "Wed"};  // 1970-01-01
constexpr char kMonths[12][4] = {"Jan", "Feb", "Mar", "Apr", "May", "Jun",
                                 "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"};

// Days since 1970-01-01 for a proleptic Gregorian date (Howard Hinnant's algorithm).
int64_t DaysFromCivil(int64_t y, unsigned m, unsigned d) {
  y -= m <= 2;
  const int64_t era = (y >= 0 ? y : y - 399) / 400;
  const unsigned yoe = static_cast<unsigned>(y - era * 400);
  const unsigned doy = (153 * (m + (m > 2 ? -3 : 9)) + 2) / 5 + d - 1;
  const unsigned doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
  return era * 146097 + static_cast<int64_t>(doe) - 719468;
}

void CivilFromDays(int64_t z, int64_t& y, unsigned& m, unsigned& d) {
  z += 719468;
  const int64_t era = (z >= 0 ? z : z - 146096) / 146097;
  const unsigned doe = static_cast<unsigned>(z - era * 146097);
  const unsigned yoe = (doe - doe / 1460 + doe / 36524 - doe / 146096) / 365;
  const unsigned doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
  const unsigned mp = (5 * doy + 2) / 153;
  d = doy - (153 * mp + 2) / 5 + 1;
  m = mp < 10 ? mp + 3 : mp - 9;
  y = static_cast<int64_t>(yoe) + era * 400 + (m <= 2);
}

void Put2(char* p, unsigned v) {
  p[0] = static_cast<char>('0' + v / 10);
  p[1] = static_cast<char>('0' + v % 10);
}

// A tiny cursor over the date text; every reader fails (returns false) on a mismatch.
struct Cursor {
  std::string_view s;
  size_t i = 0;
  bool Lit(std::string_view lit) {
    if (s.substr(i, lit.size()) != lit) return false;
    i += lit.size();
    return true;
  }
  bool Digits(size_t n, unsigned& out) {
    uint64_t v;
    if (i + n > s.size() || !ParseDecimal(s.substr(i, n), &v)) return false;
    out = static_cast<unsigned>(v);  // at most 4 digits
    i += n;
    return true;
  }
  bool Month(unsigned& out) {
    for (unsigned k = 0; k < 12; ++k) {
      if (Lit(kMonths[k])) {
        out = k + 1;
        return true;
      }
    }
    return false;
  }
  bool Time(unsigned& hh, unsigned& mm, unsigned& ss) {
    return Digits(2, hh) && Lit(":") && Digits(2, mm) && Lit(":") && Digits(2, ss);
  }
  bool AtEnd() const { return i == s.size(); }
};

bool SkipDayName(Cursor& c, bool long_form) {
  static constexpr std::string_view kLong[7] = {"Monday", "Tuesday",  "Wednesday", "Thursday",
                                                "Friday", "Saturday", "Sunday"};
  static constexpr std::string_view kShort[7] = {"Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun"};
  for (int k = 0; k < 7; ++k) {
    if (c.Lit(long_form ? kLong[k] : kShort[k])) return true;
  }
  return false;
}

std::optional<int64_t> Combine(int64_t year, unsigned mon, unsigned day, unsigned hh, unsigned mm,
                               unsigned ss) {
  static constexpr unsigned kMonthDays[12] = {31, 29, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};
  if (mon < 1 || mon > 12 || day < 1 || day > kMonthDays[mon - 1]) return std::nullopt;
  if (mon == 2 && day == 29) {
    const bool leap = (year % 4 == 0 && year % 100 != 0) || year % 400 == 0;
    if (!leap) return std::nullopt;
  }
  if (hh > 23 || mm > 59 || ss > 60) return std::nullopt;  // 60: a leap second is allowed
  return DaysFromCivil(year, mon, day) * 86400 + hh * 3600 + mm * 60 + ss;
}

}  // namespace

void FormatHttpDate(int64_t unix_seconds, char* out) {
  // Floor division by a day, in a form that cannot overflow at the far ends of int64_t.
  int64_t days = unix_seconds / 86400;
  int64_t secs = unix_seconds % 86400;
  if (secs < 0) {
    secs += 86400;
    --days;
  }
  int64_t y;
  unsigned m, d;
  CivilFromDays(days, y, m, d);
  const int64_t wd = ((days % 7) + 7) % 7;
  std::memcpy(out, kDays[wd], 3);
  out[3] = ',';
  out[4] = ' ';
  Put2(out + 5, d);
  out[7] = ' ';
  std::memcpy(out + 8, kMonths[m - 1], 3);
  out[11] = ' ';
  const unsigned yy = static_cast<unsigned>(y < 0 ? 0 : (y > 9999 ? 9999 : y));
  Put2(out + 12, yy / 100);
  Put2(out + 14, yy % 100);
  out[16] = ' ';
  Put2(out + 17, static_cast<unsigned>(secs / 3600));
  out[19] = ':';
  Put2(out + 20, static_cast<unsigned>(secs / 60 % 60));
  out[22] = ':';
  Put2(out + 23, static_cast<unsigned>(secs % 60));
  std::memcpy(out + 25, " GMT", 4);
}

std::optional<int64_t> ParseHttpDate(std::string_view text) {
  unsigned day, mon, year, hh, mm, ss;
  {  // IMF-fixdate: "Sun, 06 Nov 1994 08:49:37 GMT"
    Cursor c{text};
    if (SkipDayName(c, false) && c.Lit(", ") && c.Digits(2, day) && c.Lit(" ") && c.Month(mon) &&
        c.Lit(" ") && c.Digits(4, year) && c.Lit(" ") && c.Time(hh, mm, ss) && c.Lit(" GMT") &&
        c.AtEnd()) {
      return Combine(year, mon, day, hh, mm, ss);
    }
  }
  {  // RFC 850: "Sunday, 06-Nov-94 08:49:37 GMT"; a two-digit year of 70 or more is 19xx.
    Cursor c{text};
    if (SkipDayName(c, true) && c.Lit(", ") && c.Digits(2, day) && c.Lit("-") && c.Month(mon) &&
        c.Lit("-") && c.Digits(2, year) && c.Lit(" ") && c.Time(hh, mm, ss) && c.Lit(" GMT") &&
        c.AtEnd()) {
      return Combine(year + (year >= 70 ? 1900 : 2000), mon, day, hh, mm, ss);
    }
  }
  {  // asctime: "Sun Nov  6 08:49:37 1994"
    Cursor c{text};
    if (SkipDayName(c, false) && c.Lit(" ") && c.Month(mon) && c.Lit(" ")) {
      bool ok = c.Lit(" ") ? c.Digits(1, day) : c.Digits(2, day);
      if (ok && c.Lit(" ") && c.Time(hh, mm, ss) && c.Lit(" ") && c.Digits(4, year) && c.AtEnd()) {
        return Combine(year, mon, day, hh, mm, ss);
      }
    }
  }
  return std::nullopt;
}

}  // namespace ringd::http
