// Pieces both io backends share: starting an operation on a Completion, advancing iovecs after
// a partial send, and asking whether a file range is in the page cache.
#pragma once

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <sys/statfs.h>
#include <sys/uio.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>

#include "io/assert.h"
#include "io/loop.h"

namespace ringd::io::internal {

// Resets the backend's view of `c` for a new operation.
inline void BeginOp(Completion* c, Op op, int fd) {
  RINGD_ASSERT(!c->in_flight);  // one operation per Completion at a time
  // Every SendFile uncorks its socket when it ends, but one asked to leave it corked for the
  // same response's next piece (SendFile's `more`), which is that piece or the socket's close.
  RINGD_ASSERT(!c->corked || (op == Op::kSendFile && fd == c->fd));
  c->op = op;
  c->fd = fd;
  c->in_flight = true;
  c->cancelled = false;
  c->paused = false;
  c->result = 0;
  c->done = 0;
  c->more = false;
  c->data = nullptr;
}

// SendFile's file bytes per turn of a loop (a Poll call), per connection. Every byte a turn sends
// delays what else the turn serves (a page waits behind the downloads), so each connection has a
// budget per turn, `per_connection` (--send-turn-bytes); but every sendfile call costs a fixed
// part, and a 4 MiB body sent 256 KiB a turn takes 16 calls and 16 polls where 1 MiB a turn takes
// 4, for 12-20% more CPU per body (docs/PERFORMANCE.md, decisions). So the turn's first
// `share` bytes are shared among the connections that sent in the turn before, up to kMaxBytes
// each: a few downloads get large sends, and many get `per_connection` each, as before. Once a
// turn has sent `share` bytes every connection is held to `per_connection`. A turn then sends
// about max(share, senders x per_connection) while the senders stay as many, and at most
// share + kMaxBytes + senders x per_connection when many more send than in the turn before.
// The share raises only a `per_connection` below kMaxBytes (the default is 1 MiB): "the
// connections that sent" include every page and asset, so in a site's mix the share came to
// less than 256 KiB a download (docs/PERFORMANCE.md, "Downloads in a mix").
//
//   SendTurns turns;                     // one per loop
//   const uint64_t budget = turns.Budget(c, turn, per_connection, share);
//   n = sendfile(sock, file, &off, std::min(budget, left));
//   turns.Sent(c, n);
class SendTurns {
 public:
  static constexpr uint64_t kMaxBytes = 1 << 20;  // the most one connection gets in a turn

  // How many more file bytes `c` may send in Poll call `turn`.
  uint64_t Budget(Completion* c, uint64_t turn, uint64_t per_connection, uint64_t share) {
    if (turn != turn_) {  // the first sender of a new turn
      turn_ = turn;
      last_senders_ = senders_;
      senders_ = 0;
      bytes_ = 0;
    }
    if (c->turn != turn) {  // this connection's first send in the turn
      c->turn = turn;
      c->turn_bytes = 0;
      ++senders_;
    }
    uint64_t allowance = per_connection;
    if (bytes_ < share) {
      const uint64_t fair = share / std::max<uint64_t>(last_senders_, 1);
      allowance = std::max(per_connection, std::min(fair, kMaxBytes));
    }
    return c->turn_bytes < allowance ? allowance - c->turn_bytes : 0;
  }
  void Sent(Completion* c, uint64_t n) {
    c->turn_bytes += n;
    bytes_ += n;
  }

 private:
  uint64_t turn_ = 0;
  uint64_t senders_ = 0;       // connections that have sent in turn_,
  uint64_t last_senders_ = 0;  // in the turn before it (with file sends)
  uint64_t bytes_ = 0;         // and the file bytes sent in turn_
};

// TCP_CORK around a body's inline sendfiles (nginx's tcp_nopush). A sendfile that stops short on
// a full socket, or whose length ends inside a segment, pushes out a partial segment when it
// returns; corked, the socket sends only whole segments until the body's last byte is queued,
// and uncorking pushes the rest at once: fewer, fuller packets per body, and more throughput for
// large bodies (docs/PERFORMANCE.md, "Whole segments"). A body that fits in one segment gains
// nothing, so it skips the two setsockopt calls; a socket that is not TCP (tests' socket pairs)
// refuses the option and stays as it is.
constexpr uint64_t kCorkMinBytes = 64 << 10;

inline void CorkBody(Completion* c, int sock) {
  if (c->corked || c->done + c->remaining < kCorkMinBytes) return;
  const int on = 1;
  c->corked = ::setsockopt(sock, IPPROTO_TCP, TCP_CORK, &on, sizeof on) == 0;
}

// Before a SendFile ends, or leaves the inline path for a splice (which does not cork).
inline void UncorkBody(Completion* c, int sock) {
  if (!c->corked) return;
  const int off = 0;
  ::setsockopt(sock, IPPROTO_TCP, TCP_CORK, &off, sizeof off);
  c->corked = false;
}

// When a SendFile ends with `result`: the cork stays on only for a piece that asked for it (its
// `more`: the response's next SendFile follows) and sent every byte, so that the piece's last
// partial segment leaves filled by the next piece's first bytes; the body's last piece, an error
// and a truncated file uncork. A body sent in pieces then leaves in as few data segments as one
// sent whole (docs/PERFORMANCE.md, "One cork per body").
inline void EndCork(Completion* c, int sock, int64_t result) {
  if (!c->corked) return;
  const bool next_piece_follows =
      c->op == Op::kSendFile && (c->send_flags & MSG_MORE) != 0 && result >= 0 && c->remaining == 0;
  if (!next_piece_follows) UncorkBody(c, sock);
}

// Moves c->iov / c->iovcnt past `sent` bytes that went out.
inline void AdvanceIov(Completion* c, size_t sent) {
  while (sent > 0 && c->iovcnt > 0) {
    if (sent >= c->iov->iov_len) {
      sent -= c->iov->iov_len;
      ++c->iov;
      --c->iovcnt;
    } else {
      c->iov->iov_base = static_cast<char*>(c->iov->iov_base) + sent;
      c->iov->iov_len -= sent;
      sent = 0;
    }
  }
}

// A FIFO of completions linked through Completion::next_ready: no allocation, and a completion is
// on at most one such queue at a time (ready, waiting for a pipe, waiting for a worker).
struct CompletionQueue {
  Completion* head = nullptr;
  Completion* tail = nullptr;

  bool empty() const { return head == nullptr; }
  void Push(Completion* c) {
    RINGD_ASSERT(c->next_ready == nullptr && c != tail);  // on one queue, once
    c->next_ready = nullptr;
    if (tail != nullptr)
      tail->next_ready = c;
    else
      head = c;
    tail = c;
  }
  void PushFront(Completion* c) {  // back to the head of the line it was taken from
    RINGD_ASSERT(c->next_ready == nullptr && c != tail);
    c->next_ready = head;
    head = c;
    if (tail == nullptr) tail = c;
  }
  Completion* Pop() {
    Completion* c = head;
    if (c != nullptr) {
      head = c->next_ready;
      if (head == nullptr) tail = nullptr;
      c->next_ready = nullptr;
    }
    return c;
  }
  // Whether `c` is on this queue, for a completion that can be on no other.
  bool Holds(const Completion* c) const { return c->next_ready != nullptr || tail == c; }
  // Takes `c` off wherever it is in the queue (a walk: for the rare case of an operation that
  // ends while it waits here).
  void Remove(Completion* c) {
    Completion* prev = nullptr;
    for (Completion* it = head; it != nullptr; prev = it, it = it->next_ready) {
      if (it != c) continue;
      (prev != nullptr ? prev->next_ready : head) = c->next_ready;
      if (tail == c) tail = prev;
      c->next_ready = nullptr;
      return;
    }
  }
};

// Whether [offset, offset+length) is in the page cache and readable without waiting: cachestat(2)
// where the kernel has it and lets us ask (6.5; it also answers on FUSE, which refuses
// RWF_NOWAIT), then one-byte RWF_NOWAIT reads every 256 KiB and at the end (a page can be in the
// cache with its read still in flight); else a preadv2 with RWF_NOWAIT of the range's start (up
// to 64 KiB) and its last byte. Any failure counts as "not cached": reading inline a file that is
// not could block the loop on a slow disk. `verified` is false for a yes from cachestat alone,
// where the file system refuses RWF_NOWAIT (FUSE), and for the fallback's, which reads only the
// range's ends: such a yes may not outlive the moment.
struct PageCacheAnswer {
  bool cached;
  bool verified;
};
PageCacheAnswer AskPageCache(int fd, uint64_t offset, uint64_t length);
bool PagesCached(int fd, uint64_t offset, uint64_t length);
// The fallback alone (where cachestat is refused), for tests.
bool PagesCachedByReading(int fd, uint64_t offset, uint64_t length);

// PagesCached with a short memory (--page-cache-trust-ms): a verified yes for a range of a file is
// trusted for trust_ms, so a hot file's next chunks and next requests send inline without asking
// again (two to four system calls per 256 KiB chunk otherwise). The price: a page reclaimed within
// the window is read by sendfile on the shard's thread. A yes is not kept from a file system that
// cannot say a page is still being read (FUSE drops a file's pages whenever it is opened again),
// and the owner forgets an fd when it closes it, since the number may name another file next.
// One range per slot, fds mapped to slots directly (a shard's fds are small and dense), so no
// allocation: a slot taken by another fd only means the next chunk asks again. trust_ms 0: ask
// every time.
//
//   ResidentFiles resident(100);
//   if (resident.Cached(file_fd, offset, chunk, loop_now_ms)) sendfile(...);
//   resident.Forget(file_fd);            // before the fd is closed
class ResidentFiles {
 public:
  // A site of a few thousand files keeps a few thousand fds open, each in a slot of its own
  // (fds that share a slot evict each other's answers, and every eviction is another cachestat
  // call on the shard's thread): 128 KiB.
  static constexpr uint32_t kSlots = 4096;
  using Ask = PageCacheAnswer (*)(int fd, uint64_t offset, uint64_t length);
  explicit ResidentFiles(int64_t trust_ms, Ask ask = &AskPageCache)
      : trust_ms_(trust_ms), ask_(ask) {}
  void set_trust_ms(int64_t trust_ms) { trust_ms_ = trust_ms; }
  bool Cached(int fd, uint64_t offset, uint64_t length, int64_t now_ms);
  void Forget(int fd);
  uint64_t asks() const { return asks_; }  // answers that were not trusted, but asked for

 private:
  struct Entry {
    int fd = -1;
    uint64_t begin = 0;  // [begin, end) was found cached,
    uint64_t end = 0;
    int64_t until_ms = 0;  // and is trusted until then
  };
  int64_t trust_ms_;
  Ask ask_;
  uint64_t asks_ = 0;
  Entry slots_[kSlots];
};

// File transfers that needed the disk, by (file fd, the offset their next chunk starts at): such
// a transfer's next chunks go the cold way too (uring: splice on io-wq; epoll: read ahead on a
// worker) instead of asking PagesCached and sending inline. The read-ahead the cold chunk started
// leaves pages ahead of it that the probes find readable while their folio is still partly to be
// read, and a sendfile that meets one reads the rest on the shard's thread, holding the shard's
// hot requests for as long as the disk takes.
// Lossy and fixed-size (a colliding note overwrites the older one), so no allocation: a note
// lost only means the next chunk asks PagesCached.
//
//   cold.Note(fd, next_offset);          // a chunk went the cold way
//   if (cold.Take(fd, offset)) ...       // the next chunk of that transfer: go cold at once
class ColdTransfers {
 public:
  void Note(int fd, uint64_t next_offset) {
    slots_[Slot(Key(fd, next_offset))] = Key(fd, next_offset);
  }
  bool Take(int fd, uint64_t offset) {
    uint64_t& slot = slots_[Slot(Key(fd, offset))];
    if (slot != Key(fd, offset)) return false;
    slot = 0;
    return true;
  }

 private:
  static constexpr size_t kSlots = 1024;
  static uint64_t Key(int fd, uint64_t offset) {
    return (static_cast<uint64_t>(static_cast<uint32_t>(fd)) << 44 ^ offset) | 1ull << 63;
  }
  static size_t Slot(uint64_t key) { return (key * 0x9e3779b97f4a7c15ull) >> 54; }  // 10 bits
  uint64_t slots_[kSlots] = {};
};
static_assert(uint64_t{1} << 10 == 1024);

// Whether `fd` lives on a local file system (ext2-4, XFS, btrfs, F2FS, ZFS, tmpfs, ramfs,
// overlayfs), where an open whose path resolves from the kernel's caches, and the fstat after
// it, do not wait: FUSE, NFS and the like may send a request to a daemon or a server for either.
inline bool LocalFileSystem(int fd) {
  struct statfs sf;
  if (::fstatfs(fd, &sf) != 0) return false;
  switch (static_cast<uint64_t>(sf.f_type)) {
    case 0xEF53:      // ext2, ext3, ext4
    case 0x58465342:  // XFS
    case 0x9123683E:  // btrfs
    case 0xF2F52010:  // F2FS
    case 0x2FC12FC1:  // ZFS
    case 0x01021994:  // tmpfs
    case 0x858458F6:  // ramfs
    case 0x794C7630:  // overlayfs
      return true;
    default:
      return false;
  }
}

// LocalFileSystem, asked once per directory fd (a shard opens beneath one root).
class LocalDirs {
 public:
  bool IsLocal(int dir_fd) {
    if (dir_fd != fd_) {
      fd_ = dir_fd;
      local_ = LocalFileSystem(dir_fd);
    }
    return local_;
  }

 private:
  int fd_ = -1;
  bool local_ = false;
};

}  // namespace ringd::io::internal
