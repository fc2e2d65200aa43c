#include "server/http/compression.h"

#include "server/http/conditional.h"
#include "server/http/text.h"

namespace ringd::http {

std::string_view CodingName(Coding c) {
  switch (c) {
    case Coding::kGzip:
      return "gzip";
    case Coding::kBr:
      return "br";
    case Coding::kZstd:
      return "zstd";
    case Coding::kIdentity:
      break;
  }
  return "";
}

Coding ChooseCoding(const AcceptedCodings& accepted) {
  Coding best = Coding::kIdentity;
  int best_q = 0;
  // In order of preference: a later coding wins only with a higher q-value.
  const std::pair<Coding, int> candidates[] = {
      {Coding::kBr, accepted.br}, {Coding::kZstd, accepted.zstd}, {Coding::kGzip, accepted.gzip}};
  for (const auto& [coding, q] : candidates) {
    if (q > best_q) {
      best = coding;
      best_q = q;
    }
  }
  return best;
}

bool CompressPolicy::ParseTypes(std::string_view list, std::string* error) {
  types.clear();
  bool ok = true;
  ForEachListElement(list, [&](std::string_view t) {
    const size_t slash = t.find('/');
    if (t.empty() || slash == 0 || slash == std::string_view::npos || slash + 1 == t.size() ||
        t.find_first_of(" \t;") != std::string_view::npos) {
      if (ok) *error = "expected TYPE/SUBTYPE or TYPE/*, got '" + std::string(t) + "'";
      ok = false;
      return;
    }
    std::string lower(t);
    for (char& c : lower) c = AsciiLower(c);
    types.push_back(std::move(lower));
  });
  if (ok && types.empty()) {
    *error = "expected at least one media type";
    ok = false;
  }
  return ok;
}

bool CompressPolicy::Compressible(std::string_view content_type, uint64_t size) const {
  if (size < min_bytes || size > max_bytes) return false;
  const size_t semi = content_type.find(';');
  const std::string_view type = TrimOws(content_type.substr(0, semi));
  const size_t slash = type.find('/');
  if (slash == std::string_view::npos) return false;
  for (const std::string& t : types) {
    if (t.ends_with("/*")) {
      if (t.size() - 1 <= type.size() &&
          EqualsIgnoreCase(type.substr(0, t.size() - 1),
                           std::string_view(t).substr(0, t.size() - 1)))
        return true;
    } else if (EqualsIgnoreCase(type, t)) {
      return true;
    }
  }
  return false;
}

size_t FormatVariantETag(int64_t mtime_sec, uint64_t size, Coding coding, char* out) {
  out[0] = 'W';
  out[1] = '/';
  size_t n = 2 + FormatETag(mtime_sec, size, out + 2);
  --n;  // before the closing quote
  out[n++] = '-';
  for (char c : CodingName(coding)) out[n++] = c;
  out[n++] = '"';
  return n;
}

}  // namespace ringd::http
