// Compression on the fly (--compress), the sans-IO half: which responses may be compressed (their
// type and size, as nginx's gzip_types and gzip_min_length), which coding a client gets (its
// Accept-Encoding q-values), and the entity-tag of a compressed variant. The variants themselves
// are made off the shard and cached there (server/core/compressor.h).
//
//   CompressPolicy policy;  policy.ParseTypes("text/*,application/json", &error);
//   if (policy.Compressible(plan.content_type, meta.size))
//     Coding c = ChooseCoding(ParseAcceptEncoding(req.accept_encoding));  // kBr, ..., kIdentity
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "server/http/accept_encoding.h"

namespace ringd::http {

enum class Coding : uint8_t { kIdentity = 0, kGzip, kBr, kZstd };
inline constexpr size_t kCodings = 4;

// The coding's name in Content-Encoding ("gzip", "br", "zstd"; "" for identity).
std::string_view CodingName(Coding c);

// The best coding the client takes (highest q-value above 0), or kIdentity when it takes none.
// Ties go to the smaller output: br, then zstd, then gzip.
Coding ChooseCoding(const AcceptedCodings& accepted);

// The default of --compress-types: text, scripts, JSON, XML and SVG (nginx's gzip_types adds
// text/html alone; these are the types that shrink).
inline constexpr std::string_view kDefaultCompressTypes =
    "text/*,application/javascript,application/json,application/xml,application/wasm,"
    "application/manifest+json,image/svg+xml";

struct CompressPolicy {
  // Media types, "type/subtype" or "type/*", lowercase, without parameters.
  std::vector<std::string> types;
  uint64_t min_bytes = 256;
  uint64_t max_bytes = 8 << 20;

  // Sets `types` from a comma-separated list; false (and *error) for a malformed entry.
  bool ParseTypes(std::string_view list, std::string* error);
  // Whether a file of this Content-Type (parameters ignored) and size may be compressed.
  bool Compressible(std::string_view content_type, uint64_t size) const;
};

// A compressed variant's entity-tag: weak, as nginx makes its gzip's (the bytes depend on the
// library and its level, not only on the file), and distinct per coding, so that a 304 never
// confirms another coding's bytes: W/"<hex mtime>-<hex size>-<coding>". Computed from the
// file's validators alone, so a revalidation needs no variant in the cache.
inline constexpr size_t kMaxVariantETag = 2 + 2 + 16 + 1 + 16 + 1 + 4;
size_t FormatVariantETag(int64_t mtime_sec, uint64_t size, Coding coding, char* out);

}  // namespace ringd::http
