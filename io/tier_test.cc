// The tier table on tiers of the test's own: names, the order auto prefers, the reasons it gives,
// and the needs a tier must meet.
#include "io/tier.h"

#include <string>

#include "gtest/gtest.h"

namespace ringd::io {

namespace {

Tier MakeTier(const std::string& name, bool* works, bool names_clients = true,
              bool file_table = false) {
  Tier t;
  t.name = name;
  t.summary = "a test tier";
  t.can.names_clients = names_clients;
  t.can.file_table_per_connection = file_table;
  // The test's tiers ignore the probe report and say what `works` says.
  t.usable = [works, name](const ProbeReport&, std::string* why) {
    *why = *works ? name + " works" : name + " is broken";
    return *works;
  };
  t.adapt = [](const ProbeReport&, LoopOptions*, std::string*) {};
  t.make = [](const LoopOptions&) -> absl::StatusOr<std::unique_ptr<Loop>> {
    return absl::FailedPreconditionError("not made in this test");
  };
  return t;
}

class TierTableTest : public testing::Test {
 protected:
  void SetUp() override {
    table_.Register(MakeTier("fast", &fast_, /*names_clients=*/false, /*file_table=*/true));
    table_.Register(MakeTier("plain", &plain_));
    table_.Register(MakeTier("slow", &slow_));
  }
  bool fast_ = true, plain_ = true, slow_ = true;
  ProbeReport probe_;
  TierTable table_;
};

TEST_F(TierTableTest, AutoTakesTheFirstTierThatWorks) {
  TierChoice c = table_.Choose("auto", probe_, {});
  ASSERT_NE(c.tier, nullptr);
  EXPECT_EQ(c.tier->name, "fast");
  EXPECT_EQ(c.reason, "fast: fast works");
  fast_ = false;
  plain_ = false;
  c = table_.Choose("auto", probe_, {});
  ASSERT_NE(c.tier, nullptr);
  EXPECT_EQ(c.tier->name, "slow");
  EXPECT_EQ(c.reason, "slow: slow works; not fast: fast is broken; not plain: plain is broken");
}

TEST_F(TierTableTest, AutoFailsOnlyWhenNoTierWorks) {
  fast_ = plain_ = slow_ = false;
  const TierChoice c = table_.Choose("auto", probe_, {});
  EXPECT_EQ(c.tier, nullptr);
  EXPECT_EQ(c.reason,
            "no io tier works here; not fast: fast is broken; not plain: plain is broken; not "
            "slow: slow is broken");
}

TEST_F(TierTableTest, ANamedTierIsTakenOrRefusedWithItsReason) {
  TierChoice c = table_.Choose("plain", probe_, {});
  ASSERT_NE(c.tier, nullptr);
  EXPECT_EQ(c.reason, "plain: chosen with --io=plain (plain works)");
  plain_ = false;
  c = table_.Choose("plain", probe_, {});
  EXPECT_EQ(c.tier, nullptr);
  EXPECT_EQ(c.reason, "--io=plain, but the plain tier is unusable: plain is broken");
  c = table_.Choose("kqueue", probe_, {});
  EXPECT_EQ(c.tier, nullptr);
  EXPECT_EQ(c.reason, "--io: expected auto, fast, plain or slow, got 'kqueue'");
}

TEST_F(TierTableTest, AutoPassesOverATierThatCannotNameClientsWhenTheLogNeedsThem) {
  TierNeeds needs;
  needs.names_clients = true;
  TierChoice c = table_.Choose("auto", probe_, needs);
  ASSERT_NE(c.tier, nullptr);
  EXPECT_EQ(c.tier->name, "plain");
  EXPECT_EQ(c.reason,
            "plain: plain works; not fast: the access log is on, and fast connections cannot "
            "name the client");
  // Asked for by name, it serves (its log lines then name no client).
  c = table_.Choose("fast", probe_, needs);
  ASSERT_NE(c.tier, nullptr);
}

TEST_F(TierTableTest, AFileTableMustFitTheDescriptorLimit) {
  TierNeeds needs;
  needs.file_table_slots = 10096;
  needs.descriptor_limit = 4096;
  TierChoice c = table_.Choose("fast", probe_, needs);
  EXPECT_EQ(c.tier, nullptr);
  EXPECT_EQ(c.reason,
            "--io=fast, but the fast tier is unusable: RLIMIT_NOFILE (4096) is below the "
            "registered file table a shard needs (10096 slots for --max-connections)");
  // Tiers without a file table do not care; an unlimited descriptor limit holds any table.
  EXPECT_NE(table_.Choose("plain", probe_, needs).tier, nullptr);
  needs.descriptor_limit = 0;
  EXPECT_NE(table_.Choose("fast", probe_, needs).tier, nullptr);
}

TEST_F(TierTableTest, NamesAreUniqueAndAutoIsReserved) {
  EXPECT_EQ(table_.NamesForHelp(), "auto, fast, plain or slow");
  EXPECT_EQ(table_.Find("auto"), nullptr);
  bool works = true;
  EXPECT_DEATH(table_.Register(MakeTier("plain", &works)), "assertion failed");
  EXPECT_DEATH(table_.Register(MakeTier("auto", &works)), "assertion failed");
}

}  // namespace
}  // namespace ringd::io
