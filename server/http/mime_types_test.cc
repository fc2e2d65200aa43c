#include "server/http/mime_types.h"

#include <cstdio>
#include <fstream>

#include "gtest/gtest.h"

namespace ringd::http {
namespace {

TEST(MimeTypes, BuiltInDefaults) {
  MimeTypes t;
  EXPECT_EQ(t.ForPath("/index.html"), "text/html; charset=utf-8");
  EXPECT_EQ(t.ForPath("/a/site.CSS"), "text/css; charset=utf-8");
  EXPECT_EQ(t.ForPath("app.wasm"), "application/wasm");
  EXPECT_EQ(t.ForPath("logo.png"), "image/png");
  EXPECT_EQ(t.ForPath("data.json"), "application/json; charset=utf-8");
  EXPECT_EQ(t.ForPath("noext"), "application/octet-stream");
  EXPECT_EQ(t.ForPath("/dir.d/noext"), "application/octet-stream");
  EXPECT_EQ(t.ForPath("trailingdot."), "application/octet-stream");
  EXPECT_EQ(t.ForPath("x.unknownextension"), "application/octet-stream");
}

TEST(MimeTypes, ReadsMimeTypesFormat) {
  MimeTypes t;
  t.AddFromText(
      "# comment line\n"
      "application/x-foo\tfoo  fooo # trailing comment\n"
      "text/x-bar bar\r\n"
      "image/png\n"  // a type with no extensions
      "not-a-type baz\n");
  EXPECT_EQ(t.ForPath("a.foo"), "application/x-foo");
  EXPECT_EQ(t.ForPath("a.FOOO"), "application/x-foo");
  EXPECT_EQ(t.ForPath("a.bar"), "text/x-bar; charset=utf-8");
  EXPECT_EQ(t.ForPath("a.baz"), "application/octet-stream");
}

TEST(MimeTypes, LoadsAFileAndPinsWasm) {
  const std::string path = ::testing::TempDir() + "/mime.types";
  {
    std::ofstream f(path);
    f << "application/x-wasm-wrong wasm\nvideo/x-custom cst\n";
  }
  MimeTypes t = MimeTypes::Load(path);
  EXPECT_EQ(t.ForPath("m.cst"), "video/x-custom");
  EXPECT_EQ(t.ForPath("m.wasm"), "application/wasm");
  EXPECT_EQ(t.ForPath("m.html"), "text/html; charset=utf-8");  // defaults stay
  std::remove(path.c_str());
  MimeTypes missing = MimeTypes::Load("/nonexistent/mime.types");
  EXPECT_EQ(missing.ForPath("a.css"), "text/css; charset=utf-8");
  // Built-in defaults either way; the caller hears why the file was not read.
  std::string error;
  missing = MimeTypes::Load("/nonexistent/mime.types", &error);
  EXPECT_EQ(error, "cannot read '/nonexistent/mime.types': No such file or directory");
  EXPECT_EQ(missing.ForPath("a.css"), "text/css; charset=utf-8");
  error.clear();
  MimeTypes::Load(::testing::TempDir(), &error);
  EXPECT_EQ(error, "cannot read '" + ::testing::TempDir() + "': Is a directory");
}

// --charset: another name, or none (nginx's `charset off`); a type the file gives parameters of
// its own keeps them alone (one charset, never two: RFC 6838 section 4.3).
TEST(MimeTypes, TheCharsetIsChosenAndNeverAddedTwice) {
  MimeTypes t;
  t.AddFromText("text/plain;charset=iso-8859-1 latin\n");
  EXPECT_EQ(t.ForPath("a.latin"), "text/plain;charset=iso-8859-1");
  t.SetCharset("");
  EXPECT_EQ(t.ForPath("a.css"), "text/css");
  EXPECT_EQ(t.ForPath("a.json"), "application/json");
  EXPECT_EQ(t.ForPath("a.png"), "image/png");
  EXPECT_EQ(t.ForPath("a.latin"), "text/plain;charset=iso-8859-1");
  t.SetCharset("iso-8859-1");
  EXPECT_EQ(t.ForPath("a.html"), "text/html; charset=iso-8859-1");
  EXPECT_EQ(t.ForPath("a.svg"), "image/svg+xml; charset=iso-8859-1");
  t.AddFromText("text/x-later later\n");
  EXPECT_EQ(t.ForPath("a.later"), "text/x-later; charset=iso-8859-1");
  EXPECT_EQ(t.ForPath("a.latin"), "text/plain;charset=iso-8859-1");
}

}  // namespace
}  // namespace ringd::http
