// Single-thread cost of the shard pools against the general allocators they replace on the hot
// path: SlabPool get/put vs malloc/free vs mi_malloc/mi_free for a connection-sized object, and
// BufferPool get/put vs the same for a 16 KiB buffer. Built twice: :pools_benchmark links
// mimalloc (so malloc is mimalloc there, as in ringd), :pools_benchmark_glibc does not (malloc is
// glibc's, and the mi_* cases are left out).
#include <cstdlib>

#include "benchmark/benchmark.h"
#include "mem/buffer_pool.h"
#include "mem/slab_pool.h"
#ifndef RINGD_GLIBC_MALLOC
#include "mimalloc.h"
#endif

namespace ringd::mem {
namespace {

struct Object {
  char bytes[368];  // sizeof(Connection) on x86-64
};

void BM_SlabPoolGetPut(benchmark::State& state) {
  SlabPool<Object> pool(1024);
  for (auto _ : state) {
    Object* o = pool.Get();
    benchmark::DoNotOptimize(o);
    pool.Put(o);
  }
}
BENCHMARK(BM_SlabPoolGetPut);

void BM_MallocFreeObject(benchmark::State& state) {
  for (auto _ : state) {
    void* p = std::malloc(sizeof(Object));
    benchmark::DoNotOptimize(p);
    std::free(p);
  }
}
BENCHMARK(BM_MallocFreeObject);

#ifndef RINGD_GLIBC_MALLOC
void BM_MimallocObject(benchmark::State& state) {
  for (auto _ : state) {
    void* p = mi_malloc(sizeof(Object));
    benchmark::DoNotOptimize(p);
    mi_free(p);
  }
}
BENCHMARK(BM_MimallocObject);
#endif

void BM_BufferPoolGetPut(benchmark::State& state) {
  BufferPool pool(16384, 256);
  for (auto _ : state) {
    char* b = pool.Get();
    benchmark::DoNotOptimize(b);
    pool.Put(b);
  }
}
BENCHMARK(BM_BufferPoolGetPut);

void BM_MallocFreeBuffer(benchmark::State& state) {
  for (auto _ : state) {
    void* p = std::malloc(16384);
    benchmark::DoNotOptimize(p);
    std::free(p);
  }
}
BENCHMARK(BM_MallocFreeBuffer);

#ifndef RINGD_GLIBC_MALLOC
void BM_MimallocBuffer(benchmark::State& state) {
  for (auto _ : state) {
    void* p = mi_malloc(16384);
    benchmark::DoNotOptimize(p);
    mi_free(p);
  }
}
BENCHMARK(BM_MimallocBuffer);
#endif

// A burst: 64 objects out, then back, as a batch of accepted connections would.
void BM_SlabPoolBurst64(benchmark::State& state) {
  SlabPool<Object> pool(64);
  Object* out[64];
  for (auto _ : state) {
    for (auto& o : out) o = pool.Get();
    for (auto& o : out) pool.Put(o);
  }
  state.SetItemsProcessed(state.iterations() * 64);
}
BENCHMARK(BM_SlabPoolBurst64);

void BM_MallocBurst64(benchmark::State& state) {
  void* out[64];
  for (auto _ : state) {
    for (auto& o : out) o = std::malloc(sizeof(Object));
    benchmark::DoNotOptimize(out);
    for (auto& o : out) std::free(o);
  }
  state.SetItemsProcessed(state.iterations() * 64);
}
BENCHMARK(BM_MallocBurst64);

}  // namespace
}  // namespace ringd::mem
