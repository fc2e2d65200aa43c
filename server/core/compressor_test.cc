#include "server/core/compressor.h"

#include <brotli/decode.h>
#include <fcntl.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>
#include <zstd.h>

#include <chrono>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "gtest/gtest.h"
#include "server/core/scripted_loop.h"

namespace ringd {
namespace {

using http::Coding;

std::string Text(size_t n, unsigned seed) {
  std::mt19937 rng(seed);
  std::vector<std::string> words;
  for (int i = 0; i < 300; ++i) {
    std::string w;
    for (int j = 0, len = 2 + static_cast<int>(rng() % 8); j < len; ++j) w += 'a' + rng() % 26;
    words.push_back(w);
  }
  std::string out;
  while (out.size() < n) out += words[rng() % words.size()] + (rng() % 10 == 0 ? "\n" : " ");
  out.resize(n);
  return out;
}

std::string Decode(Coding coding, const std::string& in, size_t size) {
  std::string out(size + 1, '\0');
  switch (coding) {
    case Coding::kGzip: {
      z_stream z{};
      EXPECT_EQ(inflateInit2(&z, 15 + 16), Z_OK);
      z.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(in.data()));
      z.avail_in = static_cast<uInt>(in.size());
      z.next_out = reinterpret_cast<Bytef*>(out.data());
      z.avail_out = static_cast<uInt>(out.size());
      EXPECT_EQ(inflate(&z, Z_FINISH), Z_STREAM_END);
      out.resize(z.total_out);
      inflateEnd(&z);
      return out;
    }
    case Coding::kBr: {
      size_t n = out.size();
      EXPECT_EQ(BrotliDecoderDecompress(in.size(), reinterpret_cast<const uint8_t*>(in.data()), &n,
                                        reinterpret_cast<uint8_t*>(out.data())),
                BROTLI_DECODER_RESULT_SUCCESS);
      out.resize(n);
      return out;
    }
    case Coding::kZstd: {
      const size_t n = ZSTD_decompress(out.data(), out.size(), in.data(), in.size());
      EXPECT_FALSE(ZSTD_isError(n));
      out.resize(ZSTD_isError(n) ? 0 : n);
      return out;
    }
    case Coding::kIdentity:
      break;
  }
  return {};
}

TEST(CompressorEncode, EachCodingDecodesToItsInput) {
  const std::string in = Text(100000, 1);
  for (Coding c : {Coding::kGzip, Coding::kBr, Coding::kZstd}) {
    for (int level : {1, 6, 9}) {
      std::string out;
      ASSERT_TRUE(Compressor::Encode(c, level, in, &out)) << static_cast<int>(c);
      EXPECT_LT(out.size(), in.size() / 2);
      EXPECT_EQ(Decode(c, out, in.size()), in) << static_cast<int>(c) << " level " << level;
    }
    std::string empty;
    ASSERT_TRUE(Compressor::Encode(c, 6, "", &empty));
    EXPECT_EQ(Decode(c, empty, 0), "");
  }
  std::string out;
  EXPECT_FALSE(Compressor::Encode(Coding::kIdentity, 1, in, &out));
}

class CompressorTest : public ::testing::Test {
 protected:
  CompressorTest() {
    char tmpl[] = "/tmp/ringd-compressor-XXXXXX";
    root_ = mkdtemp(tmpl);
  }
  ~CompressorTest() override {
    for (int fd : fds_) ::close(fd);
    std::string cmd = "rm -rf '" + root_ + "'";
    EXPECT_EQ(std::system(cmd.c_str()), 0);
  }
  // Writes `data` to `name` and opens it: (fd, its metadata as the file cache has it).
  std::pair<int, http::FileMeta> File(const std::string& name, const std::string& data) {
    const std::string path = root_ + "/" + name;
    const int w = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    EXPECT_EQ(::write(w, data.data(), data.size()), static_cast<ssize_t>(data.size()));
    ::close(w);
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    fds_.push_back(fd);
    return {fd, MetaOf(fd)};
  }
  static http::FileMeta MetaOf(int fd) {
    struct stat st;
    EXPECT_EQ(::fstat(fd, &st), 0);
    http::FileMeta m;
    m.kind = http::FileMeta::Kind::kRegular;
    m.size = static_cast<uint64_t>(st.st_size);
    m.mtime_sec = st.st_mtim.tv_sec;
    m.mtime_nsec = st.st_mtim.tv_nsec;
    m.inode = st.st_ino;
    m.dev = st.st_dev;
    return m;
  }
  // Runs completions until nothing is being made.
  static void Settle(Compressor& c) {
    for (int i = 0; i < 1000 && c.Stats().making > 0; ++i) {
      c.RunCompletions();
      if (c.Stats().making > 0) std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    ASSERT_EQ(c.Stats().making, 0u);
  }

  int64_t now_ms_ = 0;
  ScriptedLoop loop_{&now_ms_};
  std::string root_;
  std::vector<int> fds_;
};

// A variant is made once however many requests miss it while it is made, then found; another
// coding of the same file is its own variant.
TEST_F(CompressorTest, MakesEachVariantOnceThenFindsIt) {
  Compressor c(&loop_, {});
  const std::string data = Text(40000, 2);
  auto [fd, meta] = File("a.txt", data);
  EXPECT_EQ(c.Find(meta, Coding::kGzip), nullptr);
  for (int i = 0; i < 5; ++i) c.Start(fd, meta, Coding::kGzip);
  EXPECT_EQ(c.Stats().making, 1u);
  EXPECT_EQ(c.Find(meta, Coding::kGzip), nullptr);  // being made: not ready
  Settle(c);
  Variant* v = c.Find(meta, Coding::kGzip);
  ASSERT_NE(v, nullptr);
  EXPECT_EQ(Decode(Coding::kGzip, v->bytes, data.size()), data);
  EXPECT_EQ(c.Find(meta, Coding::kBr), nullptr);
  c.Start(fd, meta, Coding::kBr);
  Settle(c);
  ASSERT_NE(c.Find(meta, Coding::kBr), nullptr);
  const CompressorStats s = c.Stats();
  EXPECT_EQ(s.made, 2u);
  EXPECT_EQ(s.misses, 6u);
  EXPECT_EQ(s.hits, 2u);
  EXPECT_EQ(s.entries, 2u);
  EXPECT_EQ(s.cache_bytes, v->bytes.size() + c.Find(meta, Coding::kBr)->bytes.size() +
                               2 * Compressor::kEntryBytes);
}

// Another version of the file (its size or modification time) never gets the old variant: it
// is dropped when found, or when it comes back from the thread made from a file that changed.
TEST_F(CompressorTest, DropsTheVariantOfAChangedFile) {
  Compressor c(&loop_, {});
  const std::string data = Text(40000, 3);
  auto [fd, meta] = File("a.txt", data);
  c.Start(fd, meta, Coding::kZstd);
  Settle(c);
  ASSERT_NE(c.Find(meta, Coding::kZstd), nullptr);
  http::FileMeta newer = meta;
  newer.mtime_nsec += 1;
  EXPECT_EQ(c.Find(newer, Coding::kZstd), nullptr);
  EXPECT_EQ(c.Stats().changed, 1u);
  EXPECT_EQ(c.Stats().entries, 0u);
  EXPECT_EQ(c.Stats().cache_bytes, 0u);
  EXPECT_EQ(c.Find(meta, Coding::kZstd), nullptr);  // gone for the old version too
  // Asked for a version the file is not (it changed after the lookup): made from nothing.
  c.Start(fd, newer, Coding::kZstd);
  Settle(c);
  EXPECT_EQ(c.Find(newer, Coding::kZstd), nullptr);
  EXPECT_EQ(c.Stats().changed, 2u);
  EXPECT_EQ(c.Stats().entries, 0u);
}

// A variant no smaller than its file is kept as such (not tried again) and never served.
TEST_F(CompressorTest, KeepsAUselessVariantWithoutServingIt) {
  Compressor c(&loop_, {});
  std::string noise(20000, '\0');
  std::mt19937 rng(4);
  for (char& ch : noise) ch = static_cast<char>(rng());
  auto [fd, meta] = File("noise.txt", noise);
  c.Start(fd, meta, Coding::kGzip);
  Settle(c);
  EXPECT_EQ(c.Find(meta, Coding::kGzip), nullptr);
  c.Start(fd, meta, Coding::kGzip);
  EXPECT_EQ(c.Stats().making, 0u);
  EXPECT_EQ(c.Stats().made, 1u);
  EXPECT_EQ(c.Stats().useless, 1u);
}

// The byte bound holds: the least recently served go first, a pinned variant never, and one
// too large for the bound is not kept. A dropped variant a response pins lives until Unpin.
TEST_F(CompressorTest, HoldsItsByteBound) {
  CompressorOptions o;
  o.cache_bytes = 20000;
  Compressor c(&loop_, o);
  std::vector<std::pair<int, http::FileMeta>> files;
  for (int i = 0; i < 30; ++i) files.push_back(File("f" + std::to_string(i), Text(8000, 10 + i)));
  c.Start(files[0].first, files[0].second, Coding::kGzip);
  Settle(c);
  Variant* pinned = c.Find(files[0].second, Coding::kGzip);
  ASSERT_NE(pinned, nullptr);
  c.Pin(pinned);
  for (size_t i = 1; i < files.size(); ++i) {
    c.Start(files[i].first, files[i].second, Coding::kGzip);
    Settle(c);
    EXPECT_LE(c.Stats().cache_bytes, o.cache_bytes);
  }
  EXPECT_GT(c.Stats().evictions, 0u);
  EXPECT_LT(c.Stats().entries, files.size());
  // The pinned one stayed, however cold; the newest is there.
  EXPECT_EQ(c.Find(files[0].second, Coding::kGzip), pinned);
  EXPECT_NE(c.Find(files.back().second, Coding::kGzip), nullptr);
  // Dropped (its file changed) while pinned: out of the cache, its bytes counted until Unpin.
  http::FileMeta newer = files[0].second;
  newer.size += 1;
  EXPECT_EQ(c.Find(newer, Coding::kGzip), nullptr);
  const uint64_t before = c.Stats().cache_bytes;
  const uint64_t cost = pinned->bytes.size() + Compressor::kEntryBytes;
  c.Unpin(pinned);  // freed now
  EXPECT_EQ(c.Stats().cache_bytes, before - cost);
  // Larger than the whole bound: made, not kept.
  auto [big_fd, big_meta] = File("big", Text(200000, 99));
  c.Start(big_fd, big_meta, Coding::kGzip);
  Settle(c);
  EXPECT_EQ(c.Find(big_meta, Coding::kGzip), nullptr);
  EXPECT_LE(c.Stats().cache_bytes, o.cache_bytes);
}

// At most kMaxMaking at once: the rest are refused (served as they are, started later).
TEST_F(CompressorTest, RefusesBeyondItsQueue) {
  Compressor c(&loop_, {});
  std::vector<std::pair<int, http::FileMeta>> files;
  for (uint32_t i = 0; i < Compressor::kMaxMaking + 4; ++i)
    files.push_back(File("q" + std::to_string(i), Text(300000, 50 + i)));
  for (auto& [fd, meta] : files) c.Start(fd, meta, Coding::kBr);
  EXPECT_LE(c.Stats().making, Compressor::kMaxMaking);
  EXPECT_GE(c.Stats().refused, 4u);
  Settle(c);
  EXPECT_EQ(c.Stats().made + c.Stats().refused, files.size());
}

}  // namespace
}  // namespace ringd
