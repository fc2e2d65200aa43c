// Small text helpers shared by the HTTP core: case-insensitive comparison, OWS trimming and
// comma-separated list walking (RFC 9110 section 5.6). Header-only; nothing here allocates.
//
//   ForEachListElement("gzip, br;q=0.5", [](std::string_view e) { ... });  // "gzip", "br;q=0.5"
#pragma once

#include <array>
#include <string_view>

namespace ringd::http {

inline char AsciiLower(char c) { return c >= 'A' && c <= 'Z' ? static_cast<char>(c + 32) : c; }

inline bool EqualsIgnoreCase(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    if (AsciiLower(a[i]) != AsciiLower(b[i])) return false;
  }
  return true;
}

// A byte-class table: ASCII letters and digits, plus the bytes of `extra`. For the character
// classes of RFC 9110 and RFC 3986 (tchar, reg-name, pchar), built at compile time.
constexpr std::array<bool, 256> AlnumPlus(std::string_view extra) {
  std::array<bool, 256> t{};
  for (int c = '0'; c <= '9'; ++c) t[c] = true;
  for (int c = 'a'; c <= 'z'; ++c) t[c] = true;
  for (int c = 'A'; c <= 'Z'; ++c) t[c] = true;
  for (char c : extra) t[static_cast<unsigned char>(c)] = true;
  return t;
}

// Characters a host may hold, with its port: reg-name, IP-literal and port (RFC 3986 section
// 3.2). The Host field's, and an absolute-form target's authority's.
inline constexpr std::array<bool, 256> kHostChar = AlnumPlus("-._~%!$&'()*+,;=:[]");

// Whether every byte of `s` is one of kHostChar.
inline bool AllHostChars(std::string_view s) {
  for (char c : s) {
    if (!kHostChar[static_cast<unsigned char>(c)]) return false;
  }
  return true;
}

// Removes optional whitespace (SP and HTAB) from both ends.
inline std::string_view TrimOws(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

// Calls fn(element) for each non-empty, trimmed element of a comma-separated list.
template <typename Fn>
void ForEachListElement(std::string_view list, Fn&& fn) {
  while (!list.empty()) {
    const size_t comma = list.find(',');
    const std::string_view elem = TrimOws(list.substr(0, comma));
    if (!elem.empty()) fn(elem);
    if (comma == std::string_view::npos) break;
    list.remove_prefix(comma + 1);
  }
}

}  // namespace ringd::http
