// The snapshot the admin thread asks a shard for (connection_observe.cc has what each exchange
// records). It runs on the shard's thread.
#include <cstring>

#include "io/assert.h"
#include "server/core/shard.h"

namespace ringd {
namespace {

static_assert(static_cast<int>(ConnState::kH2) + 1 == kConnStates);

}  // namespace

uint64_t Shard::Responses() const {
  if (machine_ == nullptr) return 0;  // never set up
  uint64_t n = 0;
  for (const auto& row : machine_->metrics().responses)
    for (uint64_t v : row) n += v;
  return n;
}

void Shard::FillSnapshot() {
  ShardSnapshot& s = snapshot_.data();
  s.shard = index_;
  s.backend = loop_->Name();
  s.draining = draining_;
  s.accept_paused = accept_paused_;
  s.stats = stats_;
  s.stats.sends_queued = machine_->sends().stats().queued;
  s.stats.sends_aged = machine_->sends().stats().aged;
  s.requests = machine_->metrics();
  const auto& sites = machine_->site_files();
  s.sites.resize(sites.empty() ? 0 : sites.size() + 1);
  for (size_t i = 0; i < s.sites.size(); ++i) {
    s.sites[i].name = i == 0 ? "-" : sites[i - 1]->name;
    s.sites[i].requests = i == 0 ? machine_->default_site_requests() : sites[i - 1]->requests;
  }
  s.loop = loop_->Stats();
  s.cache = machine_->files().Stats();
  if (machine_->compressor() != nullptr) s.compress = machine_->compressor()->Stats();
  // With --site, every site's cache too (counted afresh from a reload that changes the sites).
  for (const auto& site : machine_->site_files()) s.cache.Add(site->files->Stats());
  s.cache_content_buffer_bytes = content_pool_ != nullptr ? content_pool_->buffer_size() : 0;
  s.connection_capacity = capacity();
  std::memcpy(s.connection_states, machine_->state_counts(), sizeof s.connection_states);
  s.idle_connections = machine_->idle_connections();
  s.exchanges = machine_->exchanges_in_use();
  s.exchange_capacity = capacity();
  s.input_buffers = static_cast<uint32_t>(input_pool_->count() - input_pool_->Available());
  s.input_buffer_capacity = input_pool_->count();
  if (content_pool_ != nullptr) {
    s.content_buffers = static_cast<uint32_t>(content_pool_->count() - content_pool_->Available());
    s.content_buffer_capacity = content_pool_->count();
  }
  s.pipes_in_use = static_cast<uint32_t>(s.loop.pipes_in_use);
  s.pipe_capacity = static_cast<uint32_t>(s.loop.pipe_capacity);
  s.listings = machine_->listings_in_use();
  s.listing_capacity = machine_->listing_capacity();
  if (log_ != nullptr) {
    s.log_lines = log_->ring().lines();
    s.log_dropped = log_->ring().dropped();
  }
  snapshot_.Publish();
}

}  // namespace ringd
