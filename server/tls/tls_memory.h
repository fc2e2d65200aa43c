// Where OpenSSL's allocations live. An idle TLS connection keeps about 40 of the library's
// allocations (13.7 KB asked, `perf/tls_live`): its SSL object, the AES-GCM contexts, the
// session, the certificate set, locks. mimalloc's size classes are an eighth apart, so some of
// them are rounded up by hundreds of bytes (the 7,608-byte SSL object takes an 8 KiB class);
// glibc's malloc costs every allocation an 8-byte header and rounds to 16 bytes. Routed, each
// allocation of the library goes to whichever of the two holds it in fewer bytes, and is freed or
// resized by the one that made it.
//
//   int main() { tls::RouteOpenSslAllocations(); ... }   // before anything calls OpenSSL
#pragma once

#include <cstddef>

namespace ringd::tls {

enum class Allocator { kMimalloc, kLibc };

// Installs the routing with CRYPTO_set_mem_functions. False, changing nothing, where the library
// has allocated already, where glibc's own malloc cannot be found, or in a build without mimalloc
// (the sanitizers bring their own allocator): OpenSSL then uses plain malloc.
bool RouteOpenSslAllocations();

// The allocator an allocation of `n` bytes goes to once routed, and what it takes there.
Allocator RoutedAllocator(size_t n);
size_t LibcChunkBytes(size_t n);  // glibc: header and 16-byte steps, 32 bytes at least
size_t RoutedBytes(size_t n);     // the smaller of that and mimalloc's size class

}  // namespace ringd::tls
