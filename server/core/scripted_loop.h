// A loop whose completions come when the test says, for driving the connection state machine
// (through a Shard, or alone) step by step, in orderings the shard simulator (tests/sim) reaches
// only by chance.
#pragma once

#include <functional>
#include <utility>
#include <vector>

#include "gtest/gtest.h"
#include "io/loop.h"

namespace ringd {

// Records what the machine starts; the test completes it from the next Poll (Then).
class ScriptedLoop final : public io::Loop {
 public:
  explicit ScriptedLoop(const int64_t* now_ms) : now_ms_(now_ms) {}
  const char* Name() const override { return "scripted"; }
  void Accept(int, io::Completion* c) override { accepts.push_back(c); }
  void Recv(int, io::Completion* c) override { recvs.push_back(c); }
  void Send(int, iovec* iov, int iovcnt, io::Completion* c, bool) override {
    uint64_t bytes = 0;
    for (int i = 0; i < iovcnt; ++i) bytes += iov[i].iov_len;
    sends.push_back({c, bytes});
    if (on_send) on_send(iov, iovcnt);
  }
  void SendFile(int, int, uint64_t, uint64_t, io::Completion*, bool) override { ADD_FAILURE(); }
  void Open(int dirfd, const char*, io::FileStat*, io::Completion* c) override {
    if (!record_opens) ADD_FAILURE();
    opens.push_back(c);
    open_dirs.push_back(dirfd);
  }
  void Read(int, char*, uint64_t, uint64_t, io::Completion*) override { ADD_FAILURE(); }
  void Cancel(io::Completion* c) override { cancels.push_back(c); }
  void PauseRecv(io::Completion*) override {}
  void ResumeRecv(io::Completion*) override {}
  void Shutdown(int fd, int how) override { shutdowns.push_back({fd, how}); }
  void Close(int fd) override { closes.push_back(fd); }
  int64_t MonotonicMs() const override { return *now_ms_; }
  int64_t RealtimeSec() const override { return 1700000000 + *now_ms_ / 1000; }
  void Poll(int) override {
    std::vector<std::function<void()>> now;
    now.swap(then_);
    for (auto& f : now) f();
  }
  void Wake() override {}
  io::LoopStats Stats() const override { return {}; }

  // Runs `f` (a completion) from the next Poll, as a loop runs callbacks.
  void Then(std::function<void()> f) { then_.push_back(std::move(f)); }

  bool record_opens = false;  // else an open fails the test
  std::vector<io::Completion*> accepts, recvs, cancels, opens;
  std::vector<std::pair<io::Completion*, uint64_t>> sends;
  std::vector<std::pair<int, int>> shutdowns;
  std::vector<int> closes;
  std::vector<int> open_dirs;                      // each open's directory, as opens
  std::function<void(const iovec*, int)> on_send;  // sees what each Send carries

 private:
  const int64_t* now_ms_;
  std::vector<std::function<void()>> then_;
};

}  // namespace ringd
