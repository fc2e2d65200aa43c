// A shard's I/O memory: one anonymous mapping made at start-up and carved into the regions the
// shard's pools use (input buffers, small-file contents, the receive buffers the io_uring
// backend provides to the kernel). One owner, one size, decided from flags; pages are touched
// only when first used (MAP_NORESERVE).
//
//   mem::ShardMemory memory({input_bytes, content_bytes, recv_bytes});
//   char* input = memory.Region(0);
#pragma once

#include <cstddef>
#include <initializer_list>
#include <string>
#include <vector>

namespace ringd::mem {

class ShardMemory {
 public:
  // Maps the sum of `sizes` (each rounded up to 4 KiB); ok() is false if that fails.
  explicit ShardMemory(std::initializer_list<size_t> sizes);
  ~ShardMemory();
  ShardMemory(const ShardMemory&) = delete;
  ShardMemory& operator=(const ShardMemory&) = delete;

  bool ok() const { return base_ != nullptr; }
  const std::string& error() const { return error_; }
  char* Region(size_t i) const { return regions_[i]; }
  size_t RegionSize(size_t i) const { return sizes_[i]; }
  size_t total() const { return total_; }

 private:
  char* base_ = nullptr;
  size_t total_ = 0;
  std::vector<char*> regions_;
  std::vector<size_t> sizes_;
  std::string error_;
};

}  // namespace ringd::mem
