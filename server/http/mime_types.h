// Maps file extensions to Content-Type values. Built once at start-up (from /etc/mime.types when
// present, over built-in defaults); lookups allocate nothing.
//
//   MimeTypes types = MimeTypes::Load("/etc/mime.types");
//   std::string_view ct = types.ForPath("/css/site.css");   // "text/css; charset=utf-8"
#pragma once

#include <string>
#include <string_view>

#include "absl/container/flat_hash_map.h"

namespace ringd::http {

class MimeTypes {
 public:
  // Built-in defaults only.
  MimeTypes();

  // The charset parameter text types carry unless SetCharset says otherwise.
  static constexpr const char* kDefaultCharset = "utf-8";

  // The file read when --mime-types names none (when it exists).
  static constexpr const char* kSystemFile = "/etc/mime.types";

  // Built-in defaults, then every entry of a mime.types file in `path` (when it can be read;
  // otherwise *error, if given, says why), then the types ringd pins whatever the file says
  // (.wasm = application/wasm).
  static MimeTypes Load(const std::string& path, std::string* error = nullptr);

  // Adds the entries of mime.types-format text ("type ext1 ext2", '#' comments).
  void AddFromText(std::string_view text);

  // The charset parameter of text types (text/*, JavaScript, JSON, XML, SVG, manifests; --charset):
  // "" for none, as nginx's `charset off`. A type that names parameters of its own in the
  // mime.types file keeps them and gets none added.
  void SetCharset(std::string_view charset);

  // The Content-Type for the file's extension (case-insensitive); text types carry
  // "; charset=utf-8" (SetCharset). Unknown: application/octet-stream.
  std::string_view ForPath(std::string_view path) const;

  size_t size() const { return by_extension_.size(); }

 private:
  void Add(std::string_view ext, std::string_view type);
  std::string WithCharset(std::string_view type) const;
  void Pin();

  std::string charset_ = kDefaultCharset;
  absl::flat_hash_map<std::string, std::string> types_;         // as given
  absl::flat_hash_map<std::string, std::string> by_extension_;  // with the charset
};

}  // namespace ringd::http
