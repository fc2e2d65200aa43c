#include "server/http/dir_listing.h"

#include <cstring>

#include "server/http/http_date.h"
#include "server/http/text.h"

namespace ringd::http {
namespace {

constexpr std::string_view kReplacement = "\xEF\xBF\xBD";  // U+FFFD in UTF-8

// The length of the well-formed UTF-8 sequence at s[i] (RFC 3629: no overlong forms, no
// surrogates, nothing above U+10FFFF), or 0 when the byte there starts none.
size_t Utf8Length(std::string_view s, size_t i) {
  const auto b = [&](size_t k) { return static_cast<unsigned char>(s[i + k]); };
  const unsigned char c = b(0);
  if (c < 0x80) return 1;
  size_t n;
  unsigned char lo = 0x80, hi = 0xBF;  // the second byte's range
  if (c >= 0xC2 && c <= 0xDF) {
    n = 2;
  } else if (c >= 0xE0 && c <= 0xEF) {
    n = 3;
    if (c == 0xE0) lo = 0xA0;  // no overlong
    if (c == 0xED) hi = 0x9F;  // no surrogates
  } else if (c >= 0xF0 && c <= 0xF4) {
    n = 4;
    if (c == 0xF0) lo = 0x90;
    if (c == 0xF4) hi = 0x8F;  // at most U+10FFFF
  } else {
    return 0;
  }
  if (i + n > s.size()) return 0;
  if (b(1) < lo || b(1) > hi) return 0;
  for (size_t k = 2; k < n; ++k) {
    if (b(k) < 0x80 || b(k) > 0xBF) return 0;
  }
  return n;
}

struct Out {
  char* p;
  size_t cap;
  size_t n = 0;
  bool ok = true;
  void Put(std::string_view s) {
    if (!ok || n + s.size() > cap) {
      ok = false;
      return;
    }
    if (!s.empty()) std::memcpy(p + n, s.data(), s.size());
    n += s.size();
  }
  void Put(char c) { Put(std::string_view(&c, 1)); }
  size_t Result() const { return ok ? n : SIZE_MAX; }
};

constexpr char kHex[] = "0123456789ABCDEF";

// `name` with each well-formed UTF-8 sequence given to `plain` and each other byte to `bad`.
template <typename Plain, typename Bad>
void WalkUtf8(std::string_view name, Plain&& plain, Bad&& bad) {
  for (size_t i = 0; i < name.size();) {
    const size_t len = Utf8Length(name, i);
    if (len == 0) {
      bad(static_cast<unsigned char>(name[i]));
      ++i;
    } else {
      plain(name.substr(i, len));
      i += len;
    }
  }
}

// Appends an escaped (or encoded) piece of text through one of the functions below.
void PutEscaped(size_t (*escape)(std::string_view, char*, size_t), std::string_view text,
                Out* out) {
  if (!out->ok) return;
  const size_t n = escape(text, out->p + out->n, out->cap - out->n);
  if (n == SIZE_MAX) {
    out->ok = false;
    return;
  }
  out->n += n;
}

void PutUint(uint64_t v, Out* out) {
  char digits[20];
  size_t n = 0;
  do {
    digits[n++] = static_cast<char>('0' + v % 10);
    v /= 10;
  } while (v != 0);
  while (n > 0) out->Put(digits[--n]);
}

void PutDate(int64_t sec, Out* out) {
  char date[kHttpDateLen];
  FormatHttpDate(sec, date);
  out->Put(std::string_view(date, kHttpDateLen));
}

}  // namespace

std::string_view ListingContentType(ListingFormat format) {
  return format == ListingFormat::kJson ? "application/json" : "text/html; charset=utf-8";
}

size_t EscapeHtml(std::string_view name, char* buf, size_t cap) {
  Out out{buf, cap};
  WalkUtf8(
      name,
      [&](std::string_view ch) {
        switch (ch[0]) {
          case '&':
            return out.Put("&amp;");
          case '<':
            return out.Put("&lt;");
          case '>':
            return out.Put("&gt;");
          case '"':
            return out.Put("&quot;");
          case '\'':
            return out.Put("&#39;");
          default:
            if (static_cast<unsigned char>(ch[0]) < 0x20 || ch[0] == 0x7F)
              return out.Put(kReplacement);
            return out.Put(ch);
        }
      },
      [&](unsigned char) { out.Put(kReplacement); });
  return out.Result();
}

size_t EscapeJson(std::string_view name, char* buf, size_t cap) {
  Out out{buf, cap};
  WalkUtf8(
      name,
      [&](std::string_view ch) {
        const unsigned char c = static_cast<unsigned char>(ch[0]);
        if (c == '"') return out.Put("\\\"");
        if (c == '\\') return out.Put("\\\\");
        if (c < 0x20 || c == 0x7F) {
          const char esc[6] = {'\\', 'u', '0', '0', kHex[c >> 4], kHex[c & 15]};
          return out.Put(std::string_view(esc, 6));
        }
        out.Put(ch);
      },
      [&](unsigned char) { out.Put("\\ufffd"); });
  return out.Result();
}

size_t EncodeSegment(std::string_view name, char* buf, size_t cap) {
  static constexpr std::array<bool, 256> kUnreserved = AlnumPlus("-._~");
  Out out{buf, cap};
  for (char ch : name) {
    const unsigned char c = static_cast<unsigned char>(ch);
    if (kUnreserved[c]) {
      out.Put(ch);
    } else {
      const char enc[3] = {'%', kHex[c >> 4], kHex[c & 15]};
      out.Put(std::string_view(enc, 3));
    }
  }
  return out.Result();
}

ListingWriter::ListingWriter(ListingFormat format) : format_(format) {}

size_t ListingWriter::Begin(std::string_view url_path, char* buf, size_t cap) const {
  Out out{buf, cap};
  if (format_ == ListingFormat::kJson) {
    out.Put("[");
  } else {
    out.Put("<!doctype html>\r\n<html>\r\n<head><meta charset=\"utf-8\"><title>Index of ");
    PutEscaped(&EscapeHtml, url_path, &out);
    out.Put("</title></head>\r\n<body>\r\n<h1>Index of ");
    PutEscaped(&EscapeHtml, url_path, &out);
    out.Put("</h1><hr>\r\n<table>\r\n");
    if (url_path != "/") out.Put("<tr><td><a href=\"../\">../</a></td><td></td><td></td></tr>\r\n");
  }
  return out.ok ? out.n : 0;
}

size_t ListingWriter::Add(const ListingEntry& e, char* buf, size_t cap) {
  Out out{buf, cap};
  if (format_ == ListingFormat::kJson) {
    out.Put(added_ == 0 ? "\r\n{\"name\":\"" : ",\r\n{\"name\":\"");
    PutEscaped(&EscapeJson, e.name, &out);
    out.Put("\",\"url\":\"");
    PutEscaped(&EncodeSegment, e.name, &out);
    if (e.directory) {
      out.Put("/\",\"type\":\"directory\",\"mtime\":\"");
      PutDate(e.mtime_sec, &out);
      out.Put("\"}");
    } else {
      out.Put("\",\"type\":\"file\",\"mtime\":\"");
      PutDate(e.mtime_sec, &out);
      out.Put("\",\"size\":");
      PutUint(e.size, &out);
      out.Put("}");
    }
  } else {
    out.Put("<tr><td><a href=\"");
    PutEscaped(&EncodeSegment, e.name, &out);
    if (e.directory) out.Put('/');
    out.Put("\">");
    PutEscaped(&EscapeHtml, e.name, &out);
    if (e.directory) out.Put('/');
    out.Put("</a></td><td>");
    PutDate(e.mtime_sec, &out);
    out.Put("</td><td>");
    if (e.directory) {
      out.Put("-");
    } else {
      PutUint(e.size, &out);
    }
    out.Put("</td></tr>\r\n");
  }
  if (!out.ok) return 0;
  ++added_;
  return out.n;
}

size_t ListingWriter::End(uint64_t total, char* buf, size_t cap) const {
  Out out{buf, cap};
  const bool cut = added_ < total;
  if (format_ == ListingFormat::kJson) {
    if (cut) {
      out.Put(added_ == 0 ? "\r\n" : ",\r\n");
      out.Put("{\"type\":\"truncated\",\"shown\":");
      PutUint(added_, &out);
      out.Put(",\"entries\":");
      PutUint(total, &out);
      out.Put("}");
    }
    out.Put("\r\n]\r\n");
  } else {
    out.Put("</table>\r\n");
    if (cut) {
      out.Put("<p>Listing cut: the first ");
      PutUint(added_, &out);
      out.Put(" of ");
      PutUint(total, &out);
      out.Put(" entries, by name.</p>\r\n");
    }
    out.Put("<hr>\r\n</body>\r\n</html>\r\n");
  }
  return out.ok ? out.n : 0;
}

}  // namespace ringd::http
