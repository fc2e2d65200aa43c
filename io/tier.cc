#include "io/tier.h"

#include <utility>

#include "io/assert.h"

namespace ringd::io {

void TierTable::Register(Tier tier) {
  RINGD_ASSERT(Find(tier.name) == nullptr && tier.name != "auto");
  RINGD_ASSERT(tier.usable != nullptr && tier.adapt != nullptr && tier.make != nullptr);
  tiers_.push_back(std::move(tier));
}

const Tier* TierTable::Find(std::string_view name) const {
  for (const Tier& t : tiers_) {
    if (t.name == name) return &t;
  }
  return nullptr;
}

std::string TierTable::NamesForHelp() const {
  std::string names = "auto";
  for (size_t i = 0; i < tiers_.size(); ++i) {
    names += i + 1 == tiers_.size() ? " or " : ", ";
    names += tiers_[i].name;
  }
  return names;
}

bool TierTable::Usable(const Tier& tier, const ProbeReport& probe, const TierNeeds& needs,
                       std::string* why) const {
  if (!tier.usable(probe, why)) return false;
  if (tier.can.file_table_per_connection && needs.descriptor_limit != 0 &&
      needs.descriptor_limit < needs.file_table_slots) {
    *why = "RLIMIT_NOFILE (" + std::to_string(needs.descriptor_limit) +
           ") is below the registered file table a shard needs (" +
           std::to_string(needs.file_table_slots) + " slots for --max-connections)";
    return false;
  }
  return true;
}

TierChoice TierTable::Choose(std::string_view asked, const ProbeReport& probe,
                             const TierNeeds& needs) const {
  TierChoice choice;
  std::string why;
  if (asked != "auto") {
    const Tier* tier = Find(asked);
    const std::string name(asked);
    if (tier == nullptr) {
      choice.reason = "--io: expected " + NamesForHelp() + ", got '" + name + "'";
    } else if (!Usable(*tier, probe, needs, &why)) {
      choice.reason = "--io=" + name + ", but the " + name + " tier is unusable: " + why;
    } else {
      choice.tier = tier;
      choice.reason = name + ": chosen with --io=" + name + " (" + why + ")";
    }
    return choice;
  }
  // The first tier that works here; each one passed over says why, after the chosen one's line.
  std::string passed_over;
  for (const Tier& t : tiers_) {
    bool ok = Usable(t, probe, needs, &why);
    if (ok && needs.names_clients && !t.can.names_clients) {
      ok = false;
      why = "the access log is on, and " + t.name + " connections cannot name the client";
    }
    if (ok) {
      choice.tier = &t;
      choice.reason = t.name + ": " + why + passed_over;
      return choice;
    }
    passed_over += "; not " + t.name + ": " + why;
  }
  choice.reason = "no io tier works here" + passed_over;
  return choice;
}

}  // namespace ringd::io
