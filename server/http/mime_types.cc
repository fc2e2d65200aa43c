#include "server/http/mime_types.h"

#include <sys/stat.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>

namespace ringd::http {
namespace {

constexpr std::string_view kDefault = "application/octet-stream";
constexpr size_t kMaxExtension = 32;

// The defaults when no mime.types is installed: what a static origin serves most.
constexpr std::pair<std::string_view, std::string_view> kBuiltIn[] = {
    {"html", "text/html"},
    {"htm", "text/html"},
    {"css", "text/css"},
    {"js", "text/javascript"},
    {"mjs", "text/javascript"},
    {"json", "application/json"},
    {"map", "application/json"},
    {"txt", "text/plain"},
    {"md", "text/markdown"},
    {"csv", "text/csv"},
    {"xml", "application/xml"},
    {"svg", "image/svg+xml"},
    {"png", "image/png"},
    {"jpg", "image/jpeg"},
    {"jpeg", "image/jpeg"},
    {"gif", "image/gif"},
    {"webp", "image/webp"},
    {"avif", "image/avif"},
    {"ico", "image/x-icon"},
    {"bmp", "image/bmp"},
    {"woff", "font/woff"},
    {"woff2", "font/woff2"},
    {"ttf", "font/ttf"},
    {"otf", "font/otf"},
    {"pdf", "application/pdf"},
    {"zip", "application/zip"},
    {"gz", "application/gzip"},
    {"tar", "application/x-tar"},
    {"mp4", "video/mp4"},
    {"webm", "video/webm"},
    {"mp3", "audio/mpeg"},
    {"ogg", "audio/ogg"},
    {"wav", "audio/wav"},
    {"wasm", "application/wasm"},
    {"webmanifest", "application/manifest+json"},
    {"bin", "application/octet-stream"},
};

// Types that are text, though not under text/: they get a charset too.
bool IsTextual(std::string_view type) {
  return type.starts_with("text/") || type == "application/javascript" ||
         type == "application/json" || type == "application/xml" ||
         type == "application/manifest+json" || type == "image/svg+xml";
}

}  // namespace

MimeTypes::MimeTypes() {
  for (const auto& [ext, type] : kBuiltIn) Add(ext, type);
}

MimeTypes MimeTypes::Load(const std::string& path, std::string* error) {
  MimeTypes types;
  struct stat st;
  std::ifstream in;
  if (::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode)) {
    errno = EISDIR;  // opens, and reads as empty
  } else {
    in.open(path);
  }
  if (in.is_open()) {
    std::stringstream ss;
    ss << in.rdbuf();
    types.AddFromText(ss.str());
  } else if (error != nullptr) {
    *error = "cannot read '" + path + "': " + std::strerror(errno);
  }
  types.Pin();
  return types;
}

void MimeTypes::Pin() {
  Add("wasm", "application/wasm");
  Add("mjs", "text/javascript");
}

void MimeTypes::AddFromText(std::string_view text) {
  while (!text.empty()) {
    size_t nl = text.find('\n');
    std::string_view line = text.substr(0, nl);
    text.remove_prefix(nl == std::string_view::npos ? text.size() : nl + 1);
    if (size_t hash = line.find('#'); hash != std::string_view::npos) line = line.substr(0, hash);
    std::string_view type;
    while (!line.empty()) {
      size_t s = line.find_first_not_of(" \t\r");
      if (s == std::string_view::npos) break;
      line.remove_prefix(s);
      size_t e = line.find_first_of(" \t\r");
      std::string_view word = line.substr(0, e);
      line.remove_prefix(e == std::string_view::npos ? line.size() : e);
      if (type.empty()) {
        if (word.find('/') == std::string_view::npos) break;  // not a type line
        type = word;
      } else {
        Add(word, type);
      }
    }
  }
}

void MimeTypes::Add(std::string_view ext, std::string_view type) {
  if (ext.empty() || ext.size() > kMaxExtension) return;
  std::string key(ext);
  for (char& c : key) c = static_cast<char>(c >= 'A' && c <= 'Z' ? c + 32 : c);
  by_extension_[key] = WithCharset(type);
  types_[std::move(key)] = std::string(type);
}

std::string MimeTypes::WithCharset(std::string_view type) const {
  std::string value(type);
  if (!charset_.empty() && IsTextual(type) && type.find(';') == std::string_view::npos)
    value += "; charset=" + charset_;
  return value;
}

void MimeTypes::SetCharset(std::string_view charset) {
  charset_ = std::string(charset);
  for (const auto& [ext, type] : types_) by_extension_[ext] = WithCharset(type);
}

std::string_view MimeTypes::ForPath(std::string_view path) const {
  const size_t dot = path.rfind('.');
  const size_t slash = path.rfind('/');
  if (dot == std::string_view::npos || (slash != std::string_view::npos && dot < slash)) {
    return kDefault;
  }
  const std::string_view ext = path.substr(dot + 1);
  if (ext.empty() || ext.size() > kMaxExtension) return kDefault;
  char lower[kMaxExtension];
  for (size_t i = 0; i < ext.size(); ++i) {
    const char c = ext[i];
    lower[i] = static_cast<char>(c >= 'A' && c <= 'Z' ? c + 32 : c);
  }
  // Debian's abseil has its own string_view type (it was built before C++17 was assumed).
  auto it = by_extension_.find(absl::string_view(lower, ext.size()));
  return it == by_extension_.end() ? kDefault : std::string_view(it->second);
}

}  // namespace ringd::http
