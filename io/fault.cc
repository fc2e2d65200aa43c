// FaultPlan (fault.h): the chances, the log.
#include "io/fault.h"

#include <algorithm>
#include <cstdio>
#include <cstring>

namespace ringd::io {

const char* FaultName(Fault f) {
  switch (f) {
    case Fault::kShort:
      return "short";
    case Fault::kEagain:
      return "EAGAIN";
    case Fault::kEintr:
      return "EINTR";
    case Fault::kEnomem:
      return "ENOMEM";
    case Fault::kEbusy:
      return "EBUSY";
    case Fault::kEnobufs:
      return "ENOBUFS";
    case Fault::kEmfile:
      return "EMFILE";
    case Fault::kEndMultishot:
      return "end-multishot";
    case Fault::kHoldBack:
      return "hold-back";
    case Fault::kNotCached:
      return "not-cached";
    case Fault::kCount:
      break;
  }
  return "?";
}

void FaultPlan::Set(Fault f, double probability) {
  const double p = std::clamp(probability, 0.0, 1.0);
  chance_[static_cast<size_t>(f)] = static_cast<uint32_t>(p * 65536.0);
}

void FaultPlan::Note(Fault f, const char* site, uint64_t detail) {
  ++counts_[static_cast<size_t>(f)];
  auto it = std::find_if(sites_.begin(), sites_.end(), [&](const SiteCount& sc) {
    return sc.fault == f && std::strcmp(sc.site, site) == 0;
  });
  if (it == sites_.end()) {
    sites_.push_back(SiteCount{f, site, 1});
  } else {
    ++it->count;
  }
  const Entry e{total_++, site, f, detail};
  if (log_.size() < kLogLines) {
    log_.push_back(e);
  } else {
    log_[e.seq % kLogLines] = e;
  }
}

std::string FaultPlan::Log() const {
  std::string out =
      "fault plan, seed " + std::to_string(seed_) + ": " + std::to_string(total_) + " injected:";
  for (size_t i = 0; i < counts_.size(); ++i) {
    if (counts_[i] == 0) continue;
    out += std::string(" ") + FaultName(static_cast<Fault>(i)) + " " + std::to_string(counts_[i]);
  }
  out += "\n";
  std::vector<Entry> last = log_;
  std::sort(last.begin(), last.end(), [](const Entry& a, const Entry& b) { return a.seq < b.seq; });
  if (total_ > last.size())
    out += "  (the first " + std::to_string(total_ - last.size()) + " left out)\n";
  for (const Entry& e : last) {
    char line[160];
    std::snprintf(line, sizeof line, "  #%llu %s at %s", static_cast<unsigned long long>(e.seq),
                  FaultName(e.fault), e.site);
    out += line;
    if (e.fault == Fault::kShort) out += " to " + std::to_string(e.detail) + " bytes";
    out += "\n";
  }
  return out;
}

}  // namespace ringd::io
