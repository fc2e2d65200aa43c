// HTTP/2 frames into the real connection state machine: the input is what a client sends after
// the connection preface, delivered in pieces, to a ConnectionMachine over a loop that completes
// everything at once from a small in-memory tree; the planner, the file cache and the writer run
// behind nghttp2 as they do in ringd. The machine's own assertions are the oracle (a stream that
// outlives its exchange, a read into a freed buffer, a state change that cannot happen), with
// AddressSanitizer under --config=fuzz.
//
// Input: byte 0 sets the delivery sizes (1 to 256 bytes, by a small generator), byte 1 which
// sends and reads fail or come up short; the rest is the client's bytes after the preface.
#include <sys/socket.h>

#include <cstdint>
#include <cstring>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <string>

#include "io/loop.h"
#include "mem/buffer_pool.h"
#include "server/core/connection.h"

namespace ringd {
namespace {

// The tree: a page, a file of several frames, and one of many reads.
const std::map<std::string, std::string>& Files() {
  static const auto* files = new std::map<std::string, std::string>{
      {"index.html", std::string(612, 'i')},
      {"a.txt", std::string(100, 'a')},
      {"mid.bin", std::string(40000, 'm')},
      {"big.bin", std::string(300000, 'b')},
  };
  return *files;
}

class FuzzLoop final : public io::Loop {
 public:
  explicit FuzzLoop(uint8_t faults) : faults_(faults) {}
  const char* Name() const override { return "fuzz"; }
  void Accept(int, io::Completion*) override {}
  void Recv(int, io::Completion* c) override { recv = c; }
  void Send(int, iovec* iov, int iovcnt, io::Completion* c, bool) override {
    uint64_t n = 0;
    for (int i = 0; i < iovcnt; ++i) n += iov[i].iov_len;
    const bool fail = (faults_ & 1) != 0 && ++sends_ % 7 == 0;
    Later(c, fail ? -ECONNRESET : static_cast<int64_t>(n));
  }
  void SendFile(int, int, uint64_t, uint64_t length, io::Completion* c, bool) override {
    Later(c, static_cast<int64_t>(length));
  }
  void Open(int, const char* path, io::FileStat* stat, io::Completion* c) override {
    if (std::strcmp(path, ".") == 0) {  // the root
      stat->mode = 040755;
      stat->inode = 1;
      return Later(c, next_fd_++);
    }
    auto it = Files().find(path);
    if (it == Files().end()) return Later(c, -ENOENT);
    stat->size = it->second.size();
    stat->mtime_sec = 1700000000;
    stat->inode = std::hash<std::string>()(it->first);
    stat->mode = 0100644;
    const int fd = next_fd_++;
    open_[fd] = &it->second;
    Later(c, fd);
  }
  void Read(int fd, char* buf, uint64_t length, uint64_t offset, io::Completion* c) override {
    auto it = open_.find(fd);
    if (it == open_.end()) return Later(c, -EBADF);
    const std::string& content = *it->second;
    uint64_t n = offset < content.size() ? std::min<uint64_t>(length, content.size() - offset) : 0;
    if ((faults_ & 2) != 0 && ++reads_ % 5 == 0 && n > 0) --n;  // a file cut short
    std::memcpy(buf, content.data() + offset, n);
    Later(c, static_cast<int64_t>(n));
  }
  void Cancel(io::Completion* c) override {
    if (c == recv) {
      recv = nullptr;
      Later(c, -ECANCELED);
    }
  }
  void PauseRecv(io::Completion*) override {}
  void ResumeRecv(io::Completion*) override {}
  void Shutdown(int, int) override {}
  void Close(int fd) override { open_.erase(fd); }
  int64_t MonotonicMs() const override { return now_ms; }
  int64_t RealtimeSec() const override { return 1700000000 + now_ms / 1000; }
  void Poll(int) override {
    std::deque<std::function<void()>> now;
    now.swap(ready_);
    for (auto& f : now) f();
  }
  void Wake() override {}
  io::LoopStats Stats() const override { return {}; }
  bool Idle() const { return ready_.empty(); }

  io::Completion* recv = nullptr;
  int64_t now_ms = 1000;

 private:
  void Later(io::Completion* c, int64_t result) {
    ready_.push_back([c, result] {
      c->result = result;
      c->more = false;
      c->callback(c);
    });
  }
  uint8_t faults_;
  uint32_t sends_ = 0, reads_ = 0;
  int next_fd_ = 100;
  std::map<int, const std::string*> open_;
  std::deque<std::function<void()>> ready_;
};

class Host final : public ConnectionHost {
 public:
  void RoomMayHaveChanged() override {}
};

}  // namespace
}  // namespace ringd

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace ringd;
  if (size < 2) return 0;
  uint32_t split = data[0] | 1u;
  FuzzLoop loop(data[1]);
  data += 2;
  size -= 2;
  Config config;
  config.max_connections = 2;
  config.open_file_cache_entries = 8;
  config.small_file_max = 0;  // every body is read through the loop
  config.http2_max_streams = 8;
  // Slots for the connection and, as many as the machine has slots, its streams' exchanges.
  constexpr uint32_t kSlots = 16;
  mem::BufferPool input(
      config.max_request_head + http::kMaxLeadingEmptyBytes + config.recv_buffer_size, kSlots);
  ShardStats stats;
  Host host;
  ConnectionParts parts;
  parts.config = &config;
  parts.loop = &loop;
  parts.input_pool = &input;
  parts.root_fd = 3;
  parts.capacity = kSlots;
  parts.stats = &stats;
  parts.host = &host;
  {
    ConnectionMachine machine(std::move(parts));
    machine.Tick(loop.now_ms, loop.RealtimeSec());
    if (machine.Open(7, false) == nullptr) return 0;
    std::string bytes = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
    bytes.append(reinterpret_cast<const char*>(data), size);
    size_t at = 0;
    while (at < bytes.size() && loop.recv != nullptr) {
      split = split * 1103515245u + 12345u;
      const size_t n = std::min<size_t>(
          bytes.size() - at, std::min<size_t>(1 + (split >> 16) % 256, config.recv_buffer_size));
      io::Completion* c = loop.recv;
      c->result = static_cast<int64_t>(n);
      c->data = bytes.data() + at;
      c->more = true;
      c->callback(c);
      at += n;
      for (int turn = 0; turn < 4 && !loop.Idle(); ++turn) {
        loop.Poll(0);
        machine.RunWakeups();
      }
    }
    // Let what is under way finish, then the drain and its deadline end the connection.
    for (int turn = 0; turn < 64 && !loop.Idle(); ++turn) {
      loop.Poll(0);
      machine.RunWakeups();
    }
    machine.BeginDrain();
    for (int turn = 0; turn < 64 && !loop.Idle(); ++turn) {
      loop.Poll(0);
      machine.RunWakeups();
    }
    machine.AbortAll();
    if (loop.recv != nullptr) loop.Cancel(loop.recv);
    for (int turn = 0; turn < 64 && !loop.Idle(); ++turn) {
      loop.Poll(0);
      machine.RunWakeups();
    }
    RINGD_ASSERT(machine.live() == 0);
    RINGD_ASSERT(machine.exchanges_in_use() == 0);
  }
  return 0;
}
