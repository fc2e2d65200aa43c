// OpenSSL's allocations routed by size between mimalloc and glibc's malloc: each goes where it
// takes fewer bytes, is freed and resized there, and a whole handshake allocates and frees
// through the routing. Routing must come before OpenSSL's first allocation, so every test here
// calls it first (gtest runs nothing that touches OpenSSL before).
#include "server/tls/tls_memory.h"

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>

#include <string>

#include "gtest/gtest.h"

#ifndef RINGD_NO_MIMALLOC
#include "mimalloc.h"
#endif

namespace ringd::tls {
namespace {

#ifdef RINGD_NO_MIMALLOC
TEST(TlsMemory, RoutesNothingWithoutMimalloc) {
  EXPECT_FALSE(RouteOpenSslAllocations());
  EXPECT_EQ(RoutedAllocator(7608), Allocator::kLibc);
}
#else

TEST(TlsMemory, SizesGoWhereTheyTakeFewerBytes) {
  EXPECT_EQ(LibcChunkBytes(1), 32u);
  EXPECT_EQ(LibcChunkBytes(24), 32u);
  EXPECT_EQ(LibcChunkBytes(25), 48u);
  EXPECT_EQ(LibcChunkBytes(7608), 7616u);
  // The SSL object: 8 KiB in mimalloc's class, 7,616 bytes in glibc's.
  EXPECT_EQ(RoutedAllocator(7608), Allocator::kLibc);
  EXPECT_EQ(RoutedBytes(7608), 7616u);
  // Small ones sit exactly in mimalloc's classes, without a header.
  EXPECT_EQ(RoutedAllocator(64), Allocator::kMimalloc);
  EXPECT_EQ(RoutedBytes(64), 64u);
  // Large ones stay with mimalloc: glibc maps them one by one.
  EXPECT_EQ(RoutedAllocator(200 << 10), Allocator::kMimalloc);
  for (size_t n = 1; n <= (70 << 10); n += 7) {
    ASSERT_LE(RoutedBytes(n), mi_good_size(n)) << n;
    ASSERT_GE(RoutedBytes(n), n) << n;
  }
}

TEST(TlsMemory, OpenSslAllocatesFreesAndResizesWhereRouted) {
  ASSERT_TRUE(RouteOpenSslAllocations());
  EXPECT_TRUE(RouteOpenSslAllocations());  // once is enough; asking again changes nothing
  void* big = OPENSSL_malloc(7608);
  void* small = OPENSSL_malloc(64);
  ASSERT_NE(big, nullptr);
  ASSERT_NE(small, nullptr);
  EXPECT_FALSE(mi_is_in_heap_region(big)) << "a 7,608-byte block came from mimalloc";
  EXPECT_TRUE(mi_is_in_heap_region(small));
  // Resized, each block stays with its allocator, contents kept.
  static_cast<char*>(big)[0] = 'b';
  static_cast<char*>(small)[0] = 's';
  big = OPENSSL_realloc(big, 9000);
  small = OPENSSL_realloc(small, 7608);
  ASSERT_NE(big, nullptr);
  ASSERT_NE(small, nullptr);
  EXPECT_FALSE(mi_is_in_heap_region(big));
  EXPECT_TRUE(mi_is_in_heap_region(small));
  EXPECT_EQ(static_cast<char*>(big)[0], 'b');
  EXPECT_EQ(static_cast<char*>(small)[0], 's');
  OPENSSL_free(big);
  OPENSSL_free(small);
  OPENSSL_free(nullptr);
}

// A TLS 1.3 handshake between two OpenSSL objects over memory: everything the library allocates
// and frees on the way goes through the routing (a block freed by the wrong allocator aborts).
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
  EXPECT_FALSE(mi_is_in_heap_region(server));
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
