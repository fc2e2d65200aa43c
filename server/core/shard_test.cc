// The connection state machine driven step by step: a Shard on a loop whose completions come
// when the test says, for orderings the shard simulator (tests/sim) reaches only by chance.
#include "server/core/shard.h"

#include <sys/eventfd.h>
#include <sys/socket.h>

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "gtest/gtest.h"
#include "server/core/scripted_loop.h"

namespace ringd {
namespace {

class ShardTest : public ::testing::Test {
 protected:
  static constexpr int kConn = 7;  // the accepted connection's (fake) descriptor

  void SetUp() override {
    config_.max_connections = 16;
    config_.open_file_cache_entries = 16;
    config_.small_file_max = 0;
    config_.pin = false;
    config_.send_timeout_ms = 1000;
    const int listener = ::eventfd(0, EFD_CLOEXEC);  // a descriptor the shard may close
    ASSERT_GE(listener, 0);
    shard_ = std::make_unique<Shard>(
        0, config_, std::vector<int>{listener}, -1, nullptr,
        [this](const io::LoopOptions&) -> absl::StatusOr<std::unique_ptr<io::Loop>> {
          auto loop = std::make_unique<ScriptedLoop>(&now_ms_);
          loop_ = loop.get();
          return loop;
        },
        -1);
    ASSERT_TRUE(shard_->Setup()) << shard_->error();
    ASSERT_EQ(loop_->accepts.size(), 1u);
  }

  // Completes `c` from the next Poll, then takes one step.
  void Complete(io::Completion* c, int64_t result, bool more, const std::string* data = nullptr) {
    loop_->Then([=] {
      c->result = result;
      c->more = more;
      c->data = data != nullptr ? data->data() : nullptr;
      c->callback(c);
    });
    shard_->Step();
  }

  // A connection whose client asked to close: its one response is sent whole, and its receive
  // was cancelled beside the send (nothing more to read); the cancellation has not come back.
  io::Completion* AnsweredCloseRequest() {
    Complete(loop_->accepts[0], kConn, true);
    EXPECT_EQ(loop_->recvs.size(), 1u);
    io::Completion* recv = loop_->recvs[0];
    Complete(recv, static_cast<int64_t>(request_.size()), true, &request_);
    EXPECT_EQ(loop_->sends.size(), 1u);
    EXPECT_EQ(loop_->cancels, std::vector<io::Completion*>{recv}) << "ended beside the send";
    Complete(loop_->sends[0].first, static_cast<int64_t>(loop_->sends[0].second), false);
    return recv;
  }

  // How many connections are in `state` now (the snapshot the admin thread reads).
  uint32_t InState(ConnState state) {
    shard_->snapshot_slot().Request();
    shard_->Step();
    return shard_->snapshot_slot().data().connection_states[static_cast<int>(state)];
  }

  Config config_;
  int64_t now_ms_ = 1000;
  ScriptedLoop* loop_ = nullptr;
  std::unique_ptr<Shard> shard_;
  const std::string request_ = "OPTIONS / HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n";
};

// The last response is out, and the close waits for the receive's last callback to choose
// between closing and lingering. Nothing is being sent: no send timeout, however long the
// cancellation takes to come back.
TEST_F(ShardTest, AConnectionWaitingForItsReceivesEndIsNoSendTimeout) {
  io::Completion* recv = AnsweredCloseRequest();
  EXPECT_EQ(InState(ConnState::kEndingRecv), 1u);
  EXPECT_EQ(InState(ConnState::kSending), 0u) << "sending, with nothing to send";
  now_ms_ += config_.send_timeout_ms + 10;
  shard_->Step();
  EXPECT_EQ(shard_->Stats().send_timeouts, 0u);
  EXPECT_TRUE(loop_->closes.empty()) << "closed before the receive's last callback";
  Complete(recv, -ECANCELED, false);
  EXPECT_EQ(loop_->closes, std::vector<int>{kConn});
  EXPECT_TRUE(loop_->shutdowns.empty()) << "a client done sending is closed, not lingered on";
  EXPECT_EQ(shard_->Usage().connections, 0u);
}

// The same, and the receive's last word is that the client sent more after all: the connection
// lingers (FIN, then reads until the client closes).
TEST_F(ShardTest, AConnectionWaitingForItsReceivesEndLingersIfTheClientSentMore) {
  io::Completion* recv = AnsweredCloseRequest();
  Complete(recv, io::kRecvCancelledWithInput, false);
  EXPECT_EQ(loop_->shutdowns, (std::vector<std::pair<int, int>>{{kConn, SHUT_WR}}));
  ASSERT_EQ(loop_->recvs.size(), 2u) << "reads again while it lingers";
  EXPECT_TRUE(loop_->closes.empty());
  Complete(loop_->recvs[1], 0, false);  // the client closes
  EXPECT_EQ(loop_->closes, std::vector<int>{kConn});
  EXPECT_EQ(shard_->Usage().connections, 0u);
}

// A client pipelines part of a second head behind its request, then finishes sending while the
// response is on its way: that head can never be finished, so the connection closes once the
// response is out (limits_test has the same with a real client, on every tier).
TEST_F(ShardTest, AnUnfinishedHeadAfterEndOfStreamClosesOnceTheResponseIsOut) {
  Complete(loop_->accepts[0], kConn, true);
  io::Completion* recv = loop_->recvs.at(0);
  const std::string bytes = "OPTIONS / HTTP/1.1\r\nHost: t\r\n\r\nGET /next HTTP/1.1\r\nHo";
  Complete(recv, static_cast<int64_t>(bytes.size()), true, &bytes);
  ASSERT_EQ(loop_->sends.size(), 1u);
  Complete(recv, 0, false);  // end of stream, the response still in flight
  EXPECT_TRUE(loop_->closes.empty());
  Complete(loop_->sends[0].first, static_cast<int64_t>(loop_->sends[0].second), false);
  EXPECT_EQ(loop_->closes, std::vector<int>{kConn}) << "held for the rest of a head";
  EXPECT_EQ(shard_->Usage().connections, 0u);
  EXPECT_EQ(shard_->Stats().header_timeouts, 0u);
}

// At the limit with nobody idle, accepting pauses (the kernel's backlog holds newcomers); once a
// connection goes idle it can give way to a newcomer, and accepting resumes.
TEST_F(ShardTest, AcceptingResumesWhenAConnectionAtTheLimitGoesIdle) {
  io::Completion* accept = loop_->accepts[0];
  for (uint32_t i = 0; i < config_.max_connections; ++i) Complete(accept, 100 + i, true);
  EXPECT_EQ(loop_->cancels, std::vector<io::Completion*>{accept}) << "paused at the limit";
  Complete(accept, -ECANCELED, false);  // the cancelled accept's last callback
  EXPECT_EQ(loop_->accepts.size(), 1u) << "nobody can give way yet: still paused";
  const std::string request = "OPTIONS / HTTP/1.1\r\nHost: t\r\n\r\n";
  Complete(loop_->recvs.at(0), static_cast<int64_t>(request.size()), true, &request);
  ASSERT_EQ(loop_->sends.size(), 1u);
  Complete(loop_->sends[0].first, static_cast<int64_t>(loop_->sends[0].second), false);
  EXPECT_EQ(loop_->accepts.size(), 2u) << "an idle connection can give way: accepting again";
  EXPECT_EQ(shard_->Stats().accept_paused, 1u);
}

}  // namespace
}  // namespace ringd
