// Validators and conditional requests (RFC 9110 sections 8.8 and 13): entity-tag formatting and
// comparison, the precedence of If-Match, If-Unmodified-Since, If-None-Match, If-Modified-Since,
// and If-Range. Pure functions over header values.
//
//   char etag[kMaxETag]; size_t n = FormatETag(mtime, size, etag);   // "\"5f3e1a2b-264\""
//   Precondition p = EvaluatePreconditions(req, {std::string_view(etag, n), mtime});
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

#include "server/http/request_parser.h"

namespace ringd::http {

inline constexpr size_t kMaxETag = 2 + 16 + 1 + 16;

// A strong ETag from the modification time and size, as nginx makes them: "<hex mtime>-<hex size>".
size_t FormatETag(int64_t mtime_sec, uint64_t size, char* out);

struct Validators {
  std::string_view etag;  // strong, with its quotes
  int64_t last_modified_sec = 0;
};

enum class Precondition : uint8_t { kProceed, kNotModified, kFailed };

// RFC 9110 section 13.2.2, steps 1-4, for a GET or HEAD of an existing representation.
Precondition EvaluatePreconditions(const Request& req, const Validators& v);

// RFC 9110 section 13.1.5: whether a Range request may be honoured given its If-Range value.
// An empty value allows it; an entity-tag must match strongly; a date must equal Last-Modified.
bool IfRangeAllows(std::string_view if_range, const Validators& v);

// Whether `etag` appears in an If-Match / If-None-Match list (or the list is "*").
// `weak` selects weak comparison (RFC 9110 section 8.8.3.2).
bool ETagListMatches(std::string_view list, std::string_view etag, bool weak);

}  // namespace ringd::http
