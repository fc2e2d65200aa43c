// Content negotiation (RFC 9110 section 12.5.3): which of gzip, br and zstd a client accepts,
// with their q-values, for precompressed siblings and for --compress's variants.
//
//   AcceptedCodings a = ParseAcceptEncoding("gzip, br;q=0.5");   // a.gzip == 1000, a.br == 500
#pragma once

#include <string_view>

namespace ringd::http {

// q-values in thousandths; 0 means not acceptable.
struct AcceptedCodings {
  int gzip = 0;
  int br = 0;
  int zstd = 0;
  // identity (no coding): acceptable unless named with q=0, or "*;q=0" covers it unnamed.
  int identity = 1000;
};

AcceptedCodings ParseAcceptEncoding(std::string_view header);

}  // namespace ringd::http
