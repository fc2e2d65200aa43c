// Content negotiation for precompressed siblings (RFC 9110 section 12.5.3): which of gzip and
// br a client accepts, with their q-values.
//
//   AcceptedCodings a = ParseAcceptEncoding("gzip, br;q=0.5");   // a.gzip == 1000, a.br == 500
#pragma once

#include <string_view>

namespace ringd::http {

// q-values in thousandths; 0 means not acceptable.
struct AcceptedCodings {
  int gzip = 0;
  int br = 0;
};

AcceptedCodings ParseAcceptEncoding(std::string_view header);

}  // namespace ringd::http
