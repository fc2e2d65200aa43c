// Fuzzes the request parser: any bytes, fed whole and split in two at a point the input picks,
// must give the same outcome, and every parsed view must lie inside the input.
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "server/http/request_parser.h"

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
