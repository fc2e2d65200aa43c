// OpenSSL's allocations routed by size between mimalloc and ringd's 16-byte-step slabs: the
// slabs themselves (sizes, reuse, the region's end, another thread's free), where sizes go, and
// OpenSSL allocating, resizing and freeing through the routing, a whole handshake included.
// Routing must come before OpenSSL's first allocation: every test that needs it routes first
// (gtest runs nothing that touches OpenSSL before).
#include "server/tls/tls_memory.h"

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>

#include <atomic>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "gtest/gtest.h"

#ifndef RINGD_NO_MIMALLOC
#include "mimalloc.h"
#endif

namespace ringd::tls {
namespace {

TEST(StepSlabs, BlocksInSixteenByteStepsReusedAndOwnedByAddress) {
  StepSlabs slabs(4 * StepSlabs::kRunBytes);
  ASSERT_TRUE(slabs.ok());
  void* a = slabs.Alloc(7608);
  void* b = slabs.Alloc(7608);
  void* c = slabs.Alloc(1);
  ASSERT_NE(a, nullptr);
  ASSERT_NE(b, nullptr);
  ASSERT_NE(c, nullptr);
  EXPECT_TRUE(slabs.Owns(a));
  EXPECT_EQ(static_cast<char*>(b) - static_cast<char*>(a), 7616);  // no header between blocks
  EXPECT_EQ(slabs.BlockBytes(a), 7616u);
  EXPECT_EQ(slabs.BlockBytes(c), 16u);
  EXPECT_EQ(slabs.runs_used(), 2u);  // one run per size
  std::memset(a, 0xab, 7608);
  int on_the_stack = 0;
  EXPECT_FALSE(slabs.Owns(&on_the_stack));
  std::vector<char> heap(64);
  EXPECT_FALSE(slabs.Owns(heap.data()));
  slabs.Free(a);
  EXPECT_EQ(slabs.Alloc(7601), a);  // the same size's freed block first
  slabs.Free(b);
  slabs.Free(c);
}

TEST(StepSlabs, ASpentRegionSaysSoAndFreedBlocksStillServe) {
  StepSlabs slabs(2 * StepSlabs::kRunBytes);
  ASSERT_TRUE(slabs.ok());
  std::vector<void*> got;
  while (void* p = slabs.Alloc(StepSlabs::kMaxBytes)) got.push_back(p);
  EXPECT_EQ(got.size(), 2 * (StepSlabs::kRunBytes / StepSlabs::kMaxBytes));
  EXPECT_EQ(slabs.Alloc(32), nullptr);  // no run left for a new size
  slabs.Free(got.back());
  EXPECT_EQ(slabs.Alloc(StepSlabs::kMaxBytes), got.back());
}

TEST(StepSlabs, ABlockFreedOnAnotherThreadIsReused) {
  StepSlabs slabs(4 * StepSlabs::kRunBytes);
  void* p = slabs.Alloc(960);
  std::thread([&] { slabs.Free(p); }).join();
  EXPECT_EQ(slabs.Alloc(960), p);
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&slabs] {
      for (int i = 0; i < 2000; ++i) {
        void* q = slabs.Alloc(928);
        ASSERT_NE(q, nullptr);
        std::memset(q, i, 928);
        slabs.Free(q);
      }
    });
  }
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(slabs.runs_used(), 2u);
}

// Shards share nothing on the hot path: two threads allocating and freeing at once, each from
// its own lists once its working set is carved, take no lock at all (and TSan finds no race).
TEST(StepSlabs, TwoThreadsAllocateAndFreeAtOnceWithNoLockOnceWarm) {
  StepSlabs slabs(256 * StepSlabs::kRunBytes);
  ASSERT_TRUE(slabs.ok());
  constexpr int kHeld = 64, kRounds = 2000;
  std::atomic<int> warm{0};
  std::atomic<bool> go{false}, leave{false};
  std::atomic<int> done{0};
  auto hammer = [&](size_t seed) {
    std::vector<void*> held(kHeld);
    auto round = [&](int r) {
      for (int i = 0; i < kHeld; ++i) {
        const size_t n = 1 + (seed + static_cast<size_t>(i) * 37) % 2000;
        held[static_cast<size_t>(i)] = slabs.Alloc(n);
        ASSERT_NE(held[static_cast<size_t>(i)], nullptr);
        std::memset(held[static_cast<size_t>(i)], r, n);
      }
      for (void* p : held) slabs.Free(p);
    };
    round(0);  // carves this thread's working set
    warm.fetch_add(1);
    while (!go.load()) std::this_thread::yield();
    for (int r = 1; r <= kRounds; ++r) round(r);
    done.fetch_add(1);
    while (!leave.load()) std::this_thread::yield();
  };
  std::thread a(hammer, 0), b(hammer, 1000);
  while (warm.load() < 2) std::this_thread::yield();
  const uint64_t locks = slabs.locks_taken();
  go.store(true);
  while (done.load() < 2) std::this_thread::yield();
  EXPECT_EQ(slabs.locks_taken(), locks) << "a lock taken while serving from the threads' lists";
  leave.store(true);  // a thread's exit hands its lists over, under the lock
  a.join();
  b.join();
  EXPECT_EQ(slabs.locks_taken(), locks + 2);
}

#ifdef RINGD_NO_MIMALLOC
TEST(TlsMemory, RoutesNothingWithoutMimalloc) {
  EXPECT_FALSE(RouteOpenSslAllocations());
  EXPECT_EQ(RoutedAllocator(7608), Allocator::kMimalloc);
}
#else

TEST(TlsMemory, SizesGoWhereTheyTakeFewerBytes) {
  EXPECT_EQ(StepBytes(1), 16u);
  EXPECT_EQ(StepBytes(7608), 7616u);
  // The SSL object: 8 KiB in mimalloc's class, 7,616 bytes in a slab.
  EXPECT_EQ(RoutedAllocator(7608), Allocator::kSlabs);
  EXPECT_EQ(RoutedBytes(7608), 7616u);
  // Small ones sit exactly in mimalloc's classes from 80 bytes on; up to kScratchBytes they go
  // to the slabs anyway (the library's per-record scratch, 40 bytes, reused from a free list).
  EXPECT_EQ(RoutedAllocator(80), Allocator::kMimalloc);
  EXPECT_EQ(RoutedBytes(80), 80u);
  EXPECT_EQ(RoutedAllocator(40), Allocator::kSlabs);
  EXPECT_EQ(RoutedBytes(40), 48u);
  EXPECT_EQ(RoutedAllocator(kScratchBytes), Allocator::kSlabs);
  // Beyond the slabs' largest step: mimalloc.
  EXPECT_EQ(RoutedAllocator(StepSlabs::kMaxBytes + 1), Allocator::kMimalloc);
  for (size_t n = 1; n <= (70 << 10); n += 7) {
    if (n > kScratchBytes) {
      ASSERT_LE(RoutedBytes(n), mi_good_size(n)) << n;
    }
    ASSERT_LT(RoutedBytes(n), mi_good_size(n) + StepSlabs::kStep) << n;
    ASSERT_GE(RoutedBytes(n), n) << n;
  }
}

TEST(TlsMemory, OpenSslAllocatesFreesAndResizesWhereRouted) {
  ASSERT_TRUE(RouteOpenSslAllocations());
  EXPECT_TRUE(RouteOpenSslAllocations());  // once is enough; asking again changes nothing
  void* big = OPENSSL_malloc(7608);
  void* small = OPENSSL_malloc(80);
  ASSERT_NE(big, nullptr);
  ASSERT_NE(small, nullptr);
  EXPECT_TRUE(InRoutedSlabs(big)) << "a 7,608-byte block came from mimalloc";
  EXPECT_FALSE(InRoutedSlabs(small));
  static_cast<char*>(big)[0] = 'b';
  static_cast<char*>(small)[0] = 's';
  // Shrunk within its block, a slab block stays; grown, it moves to a block routed for the size.
  EXPECT_EQ(OPENSSL_realloc(big, 7000), big);
  big = OPENSSL_realloc(big, 9000);
  ASSERT_NE(big, nullptr);
  EXPECT_TRUE(InRoutedSlabs(big));
  EXPECT_EQ(static_cast<char*>(big)[0], 'b');
  big = OPENSSL_realloc(big, 40000);  // beyond the slabs: mimalloc
  ASSERT_NE(big, nullptr);
  EXPECT_FALSE(InRoutedSlabs(big));
  EXPECT_EQ(static_cast<char*>(big)[0], 'b');
  small = OPENSSL_realloc(small, 7608);  // a mimalloc block resizes in mimalloc
  ASSERT_NE(small, nullptr);
  EXPECT_EQ(static_cast<char*>(small)[0], 's');
  EXPECT_EQ(OPENSSL_realloc(small, 0), nullptr);  // freed, as OpenSSL's own realloc does
  OPENSSL_free(big);
  OPENSSL_free(nullptr);
}

// A TLS 1.3 handshake between two OpenSSL objects over memory: everything the library allocates
// and frees on the way goes through the routing.
TEST(TlsMemory, AHandshakeRunsThroughTheRouting) {
  ASSERT_TRUE(RouteOpenSslAllocations());
  EVP_PKEY* key = EVP_EC_gen("P-256");
  ASSERT_NE(key, nullptr);
  X509* cert = X509_new();
  ASN1_INTEGER_set(X509_get_serialNumber(cert), 1);
  X509_gmtime_adj(X509_getm_notBefore(cert), -60);
  X509_gmtime_adj(X509_getm_notAfter(cert), 3600);
  X509_set_pubkey(cert, key);
  X509_set_issuer_name(cert, X509_get_subject_name(cert));
  ASSERT_GT(X509_sign(cert, key, EVP_sha256()), 0);

  SSL_CTX* sctx = SSL_CTX_new(TLS_server_method());
  ASSERT_EQ(SSL_CTX_use_certificate(sctx, cert), 1);
  ASSERT_EQ(SSL_CTX_use_PrivateKey(sctx, key), 1);
  SSL_CTX_set_mode(sctx, SSL_MODE_RELEASE_BUFFERS);
  SSL_CTX* cctx = SSL_CTX_new(TLS_client_method());
  SSL* server = SSL_new(sctx);
  SSL* client = SSL_new(cctx);
  // The SSL object is the library's largest allocation a connection keeps.
  EXPECT_TRUE(InRoutedSlabs(server));
  BIO *s_bio = nullptr, *c_bio = nullptr;
  ASSERT_EQ(BIO_new_bio_pair(&s_bio, 0, &c_bio, 0), 1);
  SSL_set_bio(server, s_bio, s_bio);
  SSL_set_bio(client, c_bio, c_bio);
  SSL_set_accept_state(server);
  SSL_set_connect_state(client);
  bool done = false;
  for (int round = 0; round < 20 && !done; ++round) {
    const int c = SSL_do_handshake(client);
    const int s = SSL_do_handshake(server);
    done = c == 1 && s == 1;
  }
  ASSERT_TRUE(done);
  const char request[] = "GET / HTTP/1.1\r\n\r\n";
  size_t n = 0;
  ASSERT_EQ(SSL_write_ex(client, request, sizeof request - 1, &n), 1);
  char got[64];
  ASSERT_EQ(SSL_read_ex(server, got, sizeof got, &n), 1);
  EXPECT_EQ(std::string(got, n), request);
  EXPECT_STREQ(SSL_get_version(server), "TLSv1.3");
  SSL_free(client);
  SSL_free(server);
  SSL_CTX_free(cctx);
  SSL_CTX_free(sctx);
  X509_free(cert);
  EVP_PKEY_free(key);
}

#endif

}  // namespace
}  // namespace ringd::tls
