// Fuzzes the request parser: any bytes, fed whole and split in two at a point the input picks,
// must give the same outcome, and every parsed view must lie inside the input. A parsed request's
// host then chooses a site (--site) from a fixed table, as the shard does: the normalised host is
// lowercase, within its bound, without a port, and names the site its uppercase spelling does.
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

#include "server/http/request_parser.h"
#include "server/http/site_table.h"

using ringd::http::Header;
using ringd::http::ParseRequest;
using ringd::http::ParseResult;
using ringd::http::ParserLimits;
using ringd::http::ParseStatus;
using ringd::http::Request;

namespace {

bool Inside(std::string_view buf, std::string_view part) {
  return part.empty() ||
         (part.data() >= buf.data() && part.data() + part.size() <= buf.data() + buf.size());
}

void Check(bool ok) {
  if (!ok) std::abort();
}

const ringd::http::SiteTable& Sites() {
  static const ringd::http::SiteTable table = [] {
    ringd::http::SiteTable t;
    std::string error;
    Check(t.Add({"example.org", "www.example.org"}, &error));
    Check(t.Add({"*.example.net", "[::1]"}, &error));
    Check(t.Add({"*.a.example.net", "127.0.0.1"}, &error));
    return t;
  }();
  return table;
}

void CheckSiteChoice(const Request& req) {
  using ringd::http::kMaxHostName;
  char buf[kMaxHostName + 1];
  const std::string_view host = ringd::http::RequestHost(req.host, req.target);
  const std::string_view normal = ringd::http::NormalizeHost(host, buf);
  Check(normal.size() <= kMaxHostName);
  const bool literal6 = !normal.empty() && normal.front() == '[';
  for (char c : normal) Check(!(c >= 'A' && c <= 'Z') && (literal6 || c != ':'));
  const int site = Sites().Match(normal);
  Check(site >= ringd::http::SiteTable::kNoSite && site < static_cast<int>(Sites().size()));
  std::string upper(host);
  for (char& c : upper) c = (c >= 'a' && c <= 'z') ? static_cast<char>(c - 'a' + 'A') : c;
  char buf2[kMaxHostName + 1];
  Check(Sites().Match(ringd::http::NormalizeHost(upper, buf2)) == site);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const size_t split = data[0] % (size);  // first byte chooses where a second read would start
  const std::string_view buf(reinterpret_cast<const char*>(data) + 1, size - 1);
  ParserLimits limits;
  limits.max_request_line = 512;
  limits.max_head_bytes = 2048;
  limits.max_headers = 16;

  Header headers[16];
  Request whole;
  const ParseResult a = ParseRequest(buf, 0, limits, headers, 16, &whole);
  if (a.status == ParseStatus::kDone) {
    Check(a.consumed > 0 && a.consumed <= buf.size());
    Check(Inside(buf, whole.target) && Inside(buf, whole.host) && Inside(buf, whole.range));
    for (size_t i = 0; i < whole.num_headers; ++i) {
      Check(Inside(buf, headers[i].name) && Inside(buf, headers[i].value));
      Check(!headers[i].name.empty());
    }
    CheckSiteChoice(whole);
  } else if (a.status == ParseStatus::kError) {
    Check(a.error_status >= 400 && a.error_status < 600);
  }

  // The same bytes arriving in two reads must end the same way.
  Header headers2[16];
  Request split_req;
  const size_t first = split < buf.size() ? split : buf.size();
  ParseResult b = ParseRequest(buf.substr(0, first), 0, limits, headers2, 16, &split_req);
  if (b.status == ParseStatus::kNeedMore) {
    b = ParseRequest(buf, first, limits, headers2, 16, &split_req);
  }
  if (b.status == ParseStatus::kDone || a.status == ParseStatus::kDone) {
    // A prefix can only be complete if the whole is, with the same length.
    Check(a.status == b.status && a.consumed == b.consumed);
  }
  return 0;
}
