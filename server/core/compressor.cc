#include "server/core/compressor.h"

#include <brotli/encode.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>
#include <zstd.h>

#include <cerrno>

#include "io/assert.h"

namespace ringd {
namespace {

bool EncodeGzip(int level, std::string_view in, std::string* out) {
  z_stream z{};
  // 15 + 16: the largest window, with the gzip header and trailer (RFC 1952).
  if (deflateInit2(&z, level, Z_DEFLATED, 15 + 16, 8, Z_DEFAULT_STRATEGY) != Z_OK) return false;
  out->resize(deflateBound(&z, in.size()));
  z.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(in.data()));
  z.avail_in = static_cast<uInt>(in.size());
  z.next_out = reinterpret_cast<Bytef*>(out->data());
  z.avail_out = static_cast<uInt>(out->size());
  const int rc = deflate(&z, Z_FINISH);
  out->resize(z.total_out);
  deflateEnd(&z);
  return rc == Z_STREAM_END;
}

bool EncodeBrotli(int level, std::string_view in, std::string* out) {
  size_t n = BrotliEncoderMaxCompressedSize(in.size());
  if (n == 0) return false;
  out->resize(n);
  if (!BrotliEncoderCompress(level, BROTLI_DEFAULT_WINDOW, BROTLI_MODE_TEXT, in.size(),
                             reinterpret_cast<const uint8_t*>(in.data()), &n,
                             reinterpret_cast<uint8_t*>(out->data()))) {
    return false;
  }
  out->resize(n);
  return true;
}

bool EncodeZstd(int level, std::string_view in, std::string* out) {
  out->resize(ZSTD_compressBound(in.size()));
  const size_t n = ZSTD_compress(out->data(), out->size(), in.data(), in.size(), level);
  if (ZSTD_isError(n)) return false;
  out->resize(n);
  return true;
}

}  // namespace

bool Compressor::Encode(http::Coding coding, int level, std::string_view in, std::string* out) {
  switch (coding) {
    case http::Coding::kGzip:
      return EncodeGzip(level, in, out);
    case http::Coding::kBr:
      return EncodeBrotli(level, in, out);
    case http::Coding::kZstd:
      return EncodeZstd(level, in, out);
    case http::Coding::kIdentity:
      break;
  }
  return false;
}

void Compressor::Make(Variant* v) {
  std::string in(v->size, '\0');
  uint64_t got = 0;
  while (got < v->size) {
    const ssize_t n = ::pread(v->fd, in.data() + got, v->size - got, static_cast<off_t>(got));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;  // an error, or the file shrank: the check below says which
    got += static_cast<uint64_t>(n);
  }
  struct stat st;
  if (::fstat(v->fd, &st) != 0) {
    v->failed = true;
  } else if (got != v->size || static_cast<uint64_t>(st.st_size) != v->size ||
             st.st_mtim.tv_sec != v->mtime_sec || st.st_mtim.tv_nsec != v->mtime_nsec ||
             st.st_ino != v->inode) {
    // Written to since the shard looked it up (or while it was read): that version's variant
    // would be wrong for both.
    v->changed = true;
  } else if (!Encode(v->coding, v->level, in, &v->bytes)) {
    v->failed = true;
  }
  ::close(v->fd);
  v->fd = -1;
  if (v->failed || v->changed) {
    v->bytes.clear();
  } else if (v->bytes.size() >= v->size) {
    v->bytes.clear();
    v->useless = true;
    return;
  }
  v->bytes.shrink_to_fit();
}

Compressor::Compressor(io::Loop* loop, const CompressorOptions& options)
    : loop_(loop), options_(options), thread_([this] { Run(); }) {}

Compressor::~Compressor() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  work_.notify_one();
  thread_.join();
  while (Variant* v = queued_.PopFront()) {
    ::close(v->fd);
    delete v;
  }
  while (Variant* v = done_.PopFront()) delete v;
  // The kept variants go with the cache (the ones being made were freed above). The machine
  // is torn down with its exchanges abandoned, never to run again, so a pin they hold is not
  // waited for; a variant dropped while pinned (out of the map) is left to the process's exit.
  lru_.Abandon();
  for (auto& [key, v] : map_) {
    if (v->state != Variant::State::kMaking) delete v;
  }
}

Variant* Compressor::Find(const http::FileMeta& meta, http::Coding coding) {
  const auto it = map_.find(Key{meta.dev, meta.inode, static_cast<uint8_t>(coding)});
  if (it == map_.end()) return nullptr;
  Variant* v = it->second;
  if (v->state == Variant::State::kMaking) return nullptr;
  if (v->size != meta.size || v->mtime_sec != meta.mtime_sec || v->mtime_nsec != meta.mtime_nsec) {
    ++stats_.changed;  // made from another version of the file: never served again
    Drop(v);
    return nullptr;
  }
  if (v->state != Variant::State::kReady) return nullptr;
  lru_.Remove(v);
  lru_.PushFront(v);
  ++stats_.hits;
  return v;
}

void Compressor::Pin(Variant* v) {
  RINGD_ASSERT(v->state == Variant::State::kReady);
  ++v->pins;
}

void Compressor::Unpin(Variant* v) {
  RINGD_ASSERT(v->pins > 0);
  if (--v->pins == 0 && !v->in_map) Free(v);
}

void Compressor::Start(int fd, const http::FileMeta& meta, http::Coding coding) {
  RINGD_ASSERT(coding != http::Coding::kIdentity);
  ++stats_.misses;
  const Key key{meta.dev, meta.inode, static_cast<uint8_t>(coding)};
  if (const auto it = map_.find(key); it != map_.end()) {
    Variant* old = it->second;
    if (old->state == Variant::State::kMaking) return;  // made once: this request waits not
    if (old->size == meta.size && old->mtime_sec == meta.mtime_sec &&
        old->mtime_nsec == meta.mtime_nsec) {
      return;  // kUseless, or ready since this request planned
    }
    ++stats_.changed;
    Drop(old);
  }
  if (making_ >= kMaxMaking) {
    ++stats_.refused;
    return;
  }
  const int dup = ::fcntl(fd, F_DUPFD_CLOEXEC, 0);
  if (dup < 0) {  // out of descriptors: a later request tries again
    ++stats_.failed;
    return;
  }
  Variant* v = new Variant;
  v->dev = meta.dev;
  v->inode = meta.inode;
  v->size = meta.size;
  v->mtime_sec = meta.mtime_sec;
  v->mtime_nsec = meta.mtime_nsec;
  v->coding = coding;
  v->fd = dup;
  v->level = coding == http::Coding::kGzip ? options_.gzip_level
             : coding == http::Coding::kBr ? options_.br_level
                                           : options_.zstd_level;
  v->in_map = true;
  map_.emplace(key, v);
  ++making_;
  {
    std::lock_guard<std::mutex> lock(mu_);
    queued_.PushBack(v);
  }
  work_.notify_one();
}

void Compressor::RunCompletions() {
  mem::IntrusiveList<Variant, &Variant::link> done;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (done_.empty()) return;
    while (Variant* v = done_.PopFront()) done.PushBack(v);
  }
  while (Variant* v = done.PopFront()) {
    RINGD_ASSERT(v->in_map && v->pins == 0);
    --making_;
    ++stats_.made;
    if (v->failed || v->changed) {
      ++(v->failed ? stats_.failed : stats_.changed);
      map_.erase(KeyOf(*v));
      v->in_map = false;
      delete v;
      continue;
    }
    if (v->useless) {
      ++stats_.useless;
      v->state = Variant::State::kUseless;
    } else {
      v->state = Variant::State::kReady;
    }
    if (!MakeRoom(Cost(*v))) {
      ++stats_.evictions;  // larger than the room the pinned variants leave: not kept
      map_.erase(KeyOf(*v));
      v->in_map = false;
      delete v;
      continue;
    }
    bytes_ += Cost(*v);
    lru_.PushFront(v);
  }
}

bool Compressor::MakeRoom(uint64_t need) {
  if (need > options_.cache_bytes) return false;
  Variant* v = lru_.back();
  while (bytes_ + need > options_.cache_bytes && v != nullptr) {
    Variant* prev = lru_.Prev(v);
    if (v->pins == 0) {
      ++stats_.evictions;
      Drop(v);
    }
    v = prev;
  }
  return bytes_ + need <= options_.cache_bytes;
}

void Compressor::Drop(Variant* v) {
  RINGD_ASSERT(v->in_map && v->state != Variant::State::kMaking);
  map_.erase(KeyOf(*v));
  lru_.Remove(v);
  v->in_map = false;
  if (v->pins == 0) Free(v);
}

void Compressor::Free(Variant* v) {
  RINGD_ASSERT(!v->in_map && v->pins == 0 && bytes_ >= Cost(*v));
  bytes_ -= Cost(*v);
  delete v;
}

CompressorStats Compressor::Stats() const {
  CompressorStats s = stats_;
  s.cache_bytes = bytes_;
  s.entries = lru_.size();
  s.making = making_;
  return s;
}

void Compressor::Run() {
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    work_.wait(lock, [this] { return stopping_ || !queued_.empty(); });
    if (stopping_) return;
    Variant* v = queued_.PopFront();
    lock.unlock();
    Make(v);
    lock.lock();
    done_.PushBack(v);
    loop_->Wake();
  }
}

}  // namespace ringd
