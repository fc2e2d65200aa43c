#include "server/http/accept_encoding.h"

#include "server/http/text.h"

namespace ringd::http {
namespace {

// qvalue = ( "0" [ "." 0*3DIGIT ] ) / ( "1" [ "." 0*3("0") ] ); malformed counts as 0.
int ParseQ(std::string_view params) {
  int q = 1000;
  while (!params.empty()) {
    const size_t semi = params.find(';');
    const std::string_view p = TrimOws(params.substr(0, semi));
    params.remove_prefix(semi == std::string_view::npos ? params.size() : semi + 1);
    if (p.size() < 2 || AsciiLower(p[0]) != 'q' || p[1] != '=') continue;
    const std::string_view v = p.substr(2);
    if (v.empty() || (v[0] != '0' && v[0] != '1')) return 0;
    int value = (v[0] - '0') * 1000;
    if (v.size() > 1) {
      if (v[1] != '.' || v.size() > 5) return 0;
      int scale = 100;
      for (size_t i = 2; i < v.size(); ++i, scale /= 10) {
        if (v[i] < '0' || v[i] > '9') return 0;
        value += (v[i] - '0') * scale;
      }
    }
    q = value > 1000 ? 0 : value;
  }
  return q;
}

}  // namespace

AcceptedCodings ParseAcceptEncoding(std::string_view header) {
  AcceptedCodings out;
  int star = -1, gzip = -1, br = -1, zstd = -1, identity = -1;
  ForEachListElement(header, [&](std::string_view elem) {
    const size_t semi = elem.find(';');
    const std::string_view coding = TrimOws(elem.substr(0, semi));
    const int q = semi == std::string_view::npos ? 1000 : ParseQ(elem.substr(semi + 1));
    if (EqualsIgnoreCase(coding, "gzip") || EqualsIgnoreCase(coding, "x-gzip")) {
      gzip = q > gzip ? q : gzip;
    } else if (EqualsIgnoreCase(coding, "br")) {
      br = q;
    } else if (EqualsIgnoreCase(coding, "zstd")) {
      zstd = q;
    } else if (EqualsIgnoreCase(coding, "identity")) {
      identity = q;
    } else if (coding == "*") {
      star = q;
    }
  });
  // "*" covers the codings the header does not name.
  out.gzip = gzip >= 0 ? gzip : (star > 0 ? star : 0);
  out.br = br >= 0 ? br : (star > 0 ? star : 0);
  out.zstd = zstd >= 0 ? zstd : (star > 0 ? star : 0);
  out.identity = identity >= 0 ? identity : (star == 0 ? 0 : 1000);
  return out;
}

}  // namespace ringd::http
