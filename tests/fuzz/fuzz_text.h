// Reading the fuzz targets' inputs: a few lines of numbers and words that set up the case (a file
// size, a configuration), then the bytes under test. Text keeps the seed corpora readable and
// lets libFuzzer's mutations reach any value; every reader accepts anything and falls back to a
// default, so no input is wasted. Also Check(), the fuzz targets' assertion.
//
//   FuzzText in(data, size);
//   std::string_view line = in.Line();            // "1000 16"
//   uint64_t length = TakeNumber(&line, 0);       // 1000
//   std::string_view header = in.Rest();          // "bytes=0-99"
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string_view>

namespace ringd::fuzz {

// Aborts when an invariant does not hold: libFuzzer reports the crash and keeps the input, and
// the replay test fails. Checked in every build.
#define FUZZ_CHECK(condition)                                                                   \
  do {                                                                                          \
    if (!(condition)) {                                                                         \
      std::fprintf(stderr, "fuzz check failed: %s at %s:%d\n", #condition, __FILE__, __LINE__); \
      std::abort();                                                                             \
    }                                                                                           \
  } while (0)

class FuzzText {
 public:
  FuzzText(const uint8_t* data, size_t size) : rest_(reinterpret_cast<const char*>(data), size) {}

  // The next line without its '\n'; the whole rest when no '\n' is left.
  std::string_view Line() {
    const size_t nl = rest_.find('\n');
    const std::string_view line = rest_.substr(0, nl);
    rest_.remove_prefix(nl == std::string_view::npos ? rest_.size() : nl + 1);
    return line;
  }
  // Whether the rest starts with an empty line (then consumed): the end of a setup section.
  bool EndOfSection() {
    if (rest_.empty() || rest_.front() != '\n') return false;
    rest_.remove_prefix(1);
    return true;
  }
  std::string_view Rest() const { return rest_; }
  bool empty() const { return rest_.empty(); }

 private:
  std::string_view rest_;
};

// The next run of decimal digits in *text (skipping anything before it), modulo 2^64 so that a
// mutation reaches every value; `fallback` when *text holds no digit. Consumes what it read.
inline uint64_t TakeNumber(std::string_view* text, uint64_t fallback) {
  size_t i = text->find_first_of("0123456789");
  if (i == std::string_view::npos) {
    text->remove_prefix(text->size());
    return fallback;
  }
  uint64_t v = 0;
  for (; i < text->size() && (*text)[i] >= '0' && (*text)[i] <= '9'; ++i) {
    v = v * 10 + static_cast<uint64_t>((*text)[i] - '0');
  }
  text->remove_prefix(i);
  return v;
}

// TakeNumber with a sign: a '-' just before the digits makes it negative (two's complement).
inline int64_t TakeSigned(std::string_view* text, int64_t fallback) {
  const size_t digit = text->find_first_of("0123456789");
  if (digit == std::string_view::npos) {
    text->remove_prefix(text->size());
    return fallback;
  }
  const bool negative = digit > 0 && (*text)[digit - 1] == '-';
  const uint64_t v = TakeNumber(text, 0);
  return static_cast<int64_t>(negative ? 0 - v : v);
}

// The next whitespace-separated word of *text, consumed; empty when there is none.
inline std::string_view TakeWord(std::string_view* text) {
  size_t i = 0;
  while (i < text->size() && ((*text)[i] == ' ' || (*text)[i] == '\t')) ++i;
  size_t j = i;
  while (j < text->size() && (*text)[j] != ' ' && (*text)[j] != '\t') ++j;
  const std::string_view word = text->substr(i, j - i);
  text->remove_prefix(j);
  return word;
}

}  // namespace ringd::fuzz
