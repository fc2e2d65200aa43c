// Fuzzes content negotiation for --compress and the precompressed siblings: ParseAcceptEncoding
// on any header value, ChooseCoding on what it read, and --compress-types' parser.
// - every q-value read is within 0..1000, and identity's too;
// - the coding chosen has the highest q-value above 0, preferring br, then zstd, then gzip on a
//   tie; none above 0 chooses identity;
// - case does not matter (codings, "q", the whole value upper-cased reads the same);
// - an identity element in front changes nothing about the other codings;
// - a media type list that parses matches each of its exact types, between the size bounds.
//
// Input: any bytes, the Accept-Encoding value (and the --compress-types value).
#include <cstdint>
#include <string>
#include <string_view>

#include "server/http/accept_encoding.h"
#include "server/http/compression.h"
#include "tests/fuzz/fuzz_text.h"

namespace ringd::http {
namespace {

bool Same(const AcceptedCodings& a, const AcceptedCodings& b) {
  return a.gzip == b.gzip && a.br == b.br && a.zstd == b.zstd && a.identity == b.identity;
}

int QOf(const AcceptedCodings& a, Coding c) {
  switch (c) {
    case Coding::kGzip:
      return a.gzip;
    case Coding::kBr:
      return a.br;
    case Coding::kZstd:
      return a.zstd;
    case Coding::kIdentity:
      break;
  }
  return 0;
}

int FuzzOne(const uint8_t* data, size_t size) {
  const std::string_view header(reinterpret_cast<const char*>(data), size);
  const AcceptedCodings a = ParseAcceptEncoding(header);
  for (int q : {a.gzip, a.br, a.zstd, a.identity}) FUZZ_CHECK(q >= 0 && q <= 1000);

  const Coding chosen = ChooseCoding(a);
  const Coding order[] = {Coding::kBr, Coding::kZstd, Coding::kGzip};
  if (chosen == Coding::kIdentity) {
    for (Coding c : order) FUZZ_CHECK(QOf(a, c) == 0);
  } else {
    const int q = QOf(a, chosen);
    FUZZ_CHECK(q > 0);
    bool before = true;  // codings preferred to the chosen one
    for (Coding c : order) {
      if (c == chosen) {
        before = false;
        continue;
      }
      FUZZ_CHECK(before ? QOf(a, c) < q : QOf(a, c) <= q);
    }
    FUZZ_CHECK(!CodingName(chosen).empty());
  }

  std::string upper(header);
  for (char& ch : upper) {
    if (ch >= 'a' && ch <= 'z') ch = static_cast<char>(ch - 32);
  }
  FUZZ_CHECK(Same(ParseAcceptEncoding(upper), a));

  const AcceptedCodings with_identity =
      ParseAcceptEncoding("identity;q=0.5, " + std::string(header));
  FUZZ_CHECK(with_identity.gzip == a.gzip && with_identity.br == a.br &&
             with_identity.zstd == a.zstd);

  CompressPolicy policy;
  std::string error;
  if (policy.ParseTypes(header, &error)) {
    FUZZ_CHECK(!policy.types.empty());
    policy.min_bytes = 10;
    policy.max_bytes = 20;
    for (const std::string& t : policy.types) {
      FUZZ_CHECK(t.find('/') != std::string::npos);
      if (t.ends_with("/*")) continue;
      FUZZ_CHECK(policy.Compressible(t, 10) && policy.Compressible(t + "; charset=utf-8", 20));
      FUZZ_CHECK(!policy.Compressible(t, 9) && !policy.Compressible(t, 21));
    }
  } else {
    FUZZ_CHECK(!error.empty());
  }
  return 0;
}

}  // namespace
}  // namespace ringd::http

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  return ringd::http::FuzzOne(data, size);
}
