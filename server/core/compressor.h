// A shard's compressed variants (--compress): files compressed on the fly once, off the shard,
// and kept in a cache bounded in bytes. The shard asks for a ready variant while it plans
// (Find); a request that finds none is served the file as it is and has the variant made
// (Start): the compressor's one thread reads the file through a duplicate of the open-file
// cache's descriptor, compresses it, queues it back and wakes the shard's loop, and the shard
// takes it into the cache after its Poll (RunCompletions), never from the thread. Requests for a
// variant being made find it there and start nothing: each variant is made once.
//
//   Compressor c(loop, options);                        // with --compress only
//   if (Variant* v = c.Find(meta, Coding::kGzip)) { c.Pin(v); send v->bytes; c.Unpin(v); }
//   else c.Start(entry->fd, meta, Coding::kGzip);       // next requests get it
//   c.RunCompletions();                                 // after each Poll
//
// Keyed by the file's identity (device, inode) and coding; a variant also records the size and
// modification time (to the nanosecond) it was made from, and one found for another version of
// its file is dropped there and then. Bounded: the variants kept (their bytes and kEntryBytes
// each) stay within cache_bytes, the least recently served going first (a variant a response is
// sending is never evicted); a variant that cannot fit is not kept. At most kMaxMaking variants
// are being made at once; a request beyond that is served as it is and starts nothing.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <string>
#include <string_view>
#include <thread>
#include <tuple>

#include "absl/container/flat_hash_map.h"
#include "io/loop.h"
#include "mem/intrusive_list.h"
#include "server/http/compression.h"
#include "server/http/response_plan.h"

namespace ringd {

struct Variant {
  // The file version it is made from, and the coding.
  uint64_t dev = 0, inode = 0, size = 0;
  int64_t mtime_sec = 0, mtime_nsec = 0;
  http::Coding coding = http::Coding::kIdentity;
  // kMaking: on the thread's queues. kReady: `bytes` are the variant. kUseless: the coding did
  // not make the file smaller; kept (without bytes) so that it is not tried again.
  enum class State : uint8_t { kMaking, kReady, kUseless } state = State::kMaking;
  std::string bytes;
  uint32_t pins = 0;    // responses sending `bytes` now
  bool in_map = false;  // false once dropped (freed when its last pin goes)
  // Set on the shard before the thread has it; the thread's results after.
  int fd = -1;  // the thread's duplicate of the file's descriptor (closed by the thread)
  int level = 0;
  bool changed = false;         // the file was not the version asked for when it was read
  bool failed = false;          // a read or the library failed
  bool useless = false;         // no smaller than the file
  mem::ListLink<Variant> link;  // on the LRU (kReady, kUseless), or a queue to or from the thread
};

struct CompressorOptions {
  uint64_t cache_bytes = 64 << 20;
  // Levels, measured in docs/OPERATIONS.md ("Compression"): past these, each byte saved costs
  // several times the CPU.
  int gzip_level = 6;
  int br_level = 5;
  int zstd_level = 9;
};

struct CompressorStats {
  uint64_t hits = 0;         // requests served a ready variant
  uint64_t misses = 0;       // requests that wanted one and found none ready (served as they are)
  uint64_t made = 0;         // variants the thread made (compressions)
  uint64_t useless = 0;      // of those, no smaller than the file: not served
  uint64_t changed = 0;      // dropped: the file changed (while made, or since)
  uint64_t failed = 0;       // a read or the library failed
  uint64_t refused = 0;      // misses that started nothing: kMaxMaking at work
  uint64_t evictions = 0;    // variants dropped for room, or too large to keep
  uint64_t bytes_saved = 0;  // file bytes minus variant bytes, over the bodies sent
  uint64_t cache_bytes = 0, entries = 0, making = 0;  // now
};

class Compressor {
 public:
  static constexpr uint32_t kMaxMaking = 16;
  // What a kept variant costs beside its bytes (the Variant and its map slot).
  static constexpr uint64_t kEntryBytes = 256;

  Compressor(io::Loop* loop, const CompressorOptions& options);
  ~Compressor();  // waits for the variant the thread is making, if any
  Compressor(const Compressor&) = delete;
  Compressor& operator=(const Compressor&) = delete;

  // The ready variant of `meta`'s file in `coding`, or null (a miss; nothing is started).
  Variant* Find(const http::FileMeta& meta, http::Coding coding);
  // A response sends `v->bytes`: kept until Unpin, evicted or not.
  void Pin(Variant* v);
  void Unpin(Variant* v);
  // A request wanted `coding` of `meta`'s file and found none ready: the variant is made from
  // `fd` (the open-file cache's, duplicated here), unless it is being made already, is known
  // not to help, or kMaxMaking are being made. Counts the miss.
  void Start(int fd, const http::FileMeta& meta, http::Coding coding);
  // Takes the variants the thread has made since the last call into the cache.
  void RunCompletions();
  void NoteSaved(uint64_t bytes) { stats_.bytes_saved += bytes; }
  CompressorStats Stats() const;

  // Compresses `in` with `coding` at `level` into `out` (blocking): the thread's work, public
  // for the tests and the level measurement.
  static bool Encode(http::Coding coding, int level, std::string_view in, std::string* out);
  // Reads and compresses `v`'s file (blocking).
  static void Make(Variant* v);

 private:
  using Key = std::tuple<uint64_t, uint64_t, uint8_t>;  // dev, inode, coding
  static Key KeyOf(const Variant& v) { return {v.dev, v.inode, static_cast<uint8_t>(v.coding)}; }
  void Run();
  void Drop(Variant* v);  // out of the map (and the LRU); freed now or at its last Unpin
  void Free(Variant* v);
  bool MakeRoom(uint64_t need);
  uint64_t Cost(const Variant& v) const { return v.bytes.size() + kEntryBytes; }

  io::Loop* loop_;
  CompressorOptions options_;
  absl::flat_hash_map<Key, Variant*> map_;
  mem::IntrusiveList<Variant, &Variant::link> lru_;  // kept variants, most recently served first
  uint64_t bytes_ = 0;   // Cost of the variants kept, and of dropped ones still pinned
  uint32_t making_ = 0;  // variants queued to the thread or being made
  CompressorStats stats_;

  std::mutex mu_;
  std::condition_variable work_;
  mem::IntrusiveList<Variant, &Variant::link> queued_;  // to the thread, under mu_
  mem::IntrusiveList<Variant, &Variant::link> done_;    // back to the shard, under mu_
  bool stopping_ = false;                               // under mu_
  std::thread thread_;
};

}  // namespace ringd
