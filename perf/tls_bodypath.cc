// tls_bodypath: the candidate ways to send a cached file as TLS 1.3 application data without
// kernel TLS, measured alone. One process serves the same file over and over on one loopback
// connection, one response per one-byte request, to a child process that decrypts every byte
// (OpenSSL over its socket, TLS_AES_128_GCM_SHA256, an ECDSA P-256 certificate made in memory);
// the variants take turns, interleaved over rounds. It reports the server's CPU per response
// (every thread of its process: the child is another process), the bytes per second, the
// client's time to the first decrypted byte, and the client's own CPU (who is the bottleneck).
// No HTTP, no ringd: just the body path, so its cost can be read directly.
//
//   tls_bodypath [--size 4194304] [--seconds 2] [--rounds 5] [--variants a-mem-64k,...]
//
// Every variant sends with IORING_OP_SEND (or SEND_ZC) as ringd's rings do. Variants:
//   a-mem-64k    pread 64 KiB into a buffer, SSL_write into a memory BIO, BIO_read the records
//                into the send buffer, send (TlsLoop's path before its own BIO)
//   a-mem-16k    the same, 16 KiB at a time
//   b-direct-64k pread 64 KiB, SSL_write into a BIO whose write lands in the send buffer (no
//                copy out of a memory BIO), send
//   b-direct-256k b, 256 KiB at a time (a quarter of the sends)
//   c-mmap-64k   b, but SSL_write straight from a mapping of the file kept for the run, each 64
//                KiB range checked resident with mincore(2) first (no pread copy)
//   c-mmap-each  c, but the file mapped and unmapped once per response (the page-table cost)
//   d-first-1k   b, but the first 1 KiB of each response goes out alone in its own record
//   d-records-4k b, with 4 KiB records (SSL_set_max_send_fragment) instead of 16 KiB
//   e-send-zc    b, but IORING_OP_SEND_ZC from two registered send buffers
//   ce-mmap-zc   c and e together
#include <fcntl.h>
#include <liburing.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <openssl/bio.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>
#include <sched.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "perf/bench_util.h"
#include "perf/tool_flags.h"

ABSL_FLAG(uint64_t, size, 4 << 20, "bytes per response");
ABSL_FLAG(double, seconds, 2, "seconds per variant and round");
ABSL_FLAG(int, rounds, 5, "rounds of every variant");
ABSL_FLAG(int, server_cpu, 1, "the server's CPU (--server-cpu)");
ABSL_FLAG(int, client_cpu, 0, "the client's CPU (--client-cpu)");
ABSL_FLAG(std::string, variants, "", "comma-separated variants (default: all)");

namespace {

using ringd::perf::Now;
using ringd::perf::Pin;

constexpr size_t kPage = 4096;
constexpr size_t kMaxChunk = 256 << 10;
// A chunk's records: a TLS 1.3 record adds 22 bytes (header, content type, tag) to at most 16
// KiB, 352 bytes per 256 KiB; 4 KiB over covers a 64 KiB chunk in 4 KiB records too.
constexpr size_t kOutBytes = kMaxChunk + 4096;
constexpr size_t kMaxResponses = 1 << 20;  // the shared timing arrays' length
constexpr size_t kCheckEvery = 16;         // the client compares every 16th response's bytes

enum class Source { kPread, kMapping, kMappingEach };
enum class Wbio { kMemory, kDirect };

struct Variant {
  const char* name;
  size_t chunk;
  Wbio wbio;
  Source source;
  size_t first_write;  // 0: the first chunk is a whole one
  size_t max_fragment;
  bool zero_copy;
};

const Variant kVariants[] = {
    {"a-mem-64k", 64 << 10, Wbio::kMemory, Source::kPread, 0, 16384, false},
    {"a-mem-16k", 16 << 10, Wbio::kMemory, Source::kPread, 0, 16384, false},
    {"b-direct-64k", 64 << 10, Wbio::kDirect, Source::kPread, 0, 16384, false},
    {"b-direct-256k", 256 << 10, Wbio::kDirect, Source::kPread, 0, 16384, false},
    {"c-mmap-64k", 64 << 10, Wbio::kDirect, Source::kMapping, 0, 16384, false},
    {"c-mmap-each", 64 << 10, Wbio::kDirect, Source::kMappingEach, 0, 16384, false},
    {"d-first-1k", 64 << 10, Wbio::kDirect, Source::kPread, 1024, 16384, false},
    {"d-records-4k", 64 << 10, Wbio::kDirect, Source::kPread, 0, 4096, false},
    {"e-send-zc", 64 << 10, Wbio::kDirect, Source::kPread, 0, 16384, true},
    {"ce-mmap-zc", 64 << 10, Wbio::kDirect, Source::kMapping, 0, 16384, true},
};

// What the client writes for the server to read once it has exited.
struct Shared {
  double ttfb_s[kMaxResponses];        // request written -> first decrypted byte
  double client_cpu_s[kMaxResponses];  // the client's process CPU when the response ended
  int bad_response;                    // -1, or the index of a response whose bytes differed
};

[[noreturn]] void Die(const std::string& what) {
  std::fprintf(stderr, "tls_bodypath: %s\n", what.c_str());
  ERR_print_errors_fp(stderr);
  std::exit(1);
}

struct Usage {
  double cpu_s;
  long minor_faults;
};

Usage ProcessUsage() {  // every thread of this process: io-wq workers are threads of it
  rusage ru{};
  getrusage(RUSAGE_SELF, &ru);
  return {static_cast<double>(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) +
              static_cast<double>(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) / 1e6,
          ru.ru_minflt};
}

// Per socket, so the machine's settings are left alone: CUBIC (the harness's congestion
// control) and TCP_NODELAY, as ringd's listeners and ringd-load set it.
void TuneSocket(int fd) {
  const char cc[] = "cubic";
  setsockopt(fd, IPPROTO_TCP, TCP_CONGESTION, cc, sizeof cc - 1);
  const int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
}

// A self-signed ECDSA P-256 certificate for "localhost", made in memory.
SSL_CTX* ServerContext() {
  EVP_PKEY* key = EVP_EC_gen("P-256");
  X509* cert = X509_new();
  if (key == nullptr || cert == nullptr) Die("EVP_EC_gen");
  X509_set_version(cert, 2);
  ASN1_INTEGER_set(X509_get_serialNumber(cert), 1);
  X509_gmtime_adj(X509_getm_notBefore(cert), -3600);
  X509_gmtime_adj(X509_getm_notAfter(cert), 86400);
  X509_set_pubkey(cert, key);
  X509_NAME* name = X509_get_subject_name(cert);
  X509_NAME_add_entry_by_txt(name, "CN", MBSTRING_ASC,
                             reinterpret_cast<const unsigned char*>("localhost"), -1, -1, 0);
  X509_set_issuer_name(cert, name);
  if (X509_sign(cert, key, EVP_sha256()) == 0) Die("X509_sign");
  SSL_CTX* ctx = SSL_CTX_new(TLS_server_method());
  SSL_CTX_set_min_proto_version(ctx, TLS1_3_VERSION);
  SSL_CTX_set_ciphersuites(ctx, "TLS_AES_128_GCM_SHA256");
  SSL_CTX_set1_groups_list(ctx, "X25519");
  SSL_CTX_set_num_tickets(ctx, 0);  // nothing but the responses after the handshake
  if (SSL_CTX_use_certificate(ctx, cert) != 1 || SSL_CTX_use_PrivateKey(ctx, key) != 1)
    Die("the certificate");
  X509_free(cert);
  EVP_PKEY_free(key);
  return ctx;
}

int Connect(uint16_t port) {
  const int s = socket(AF_INET, SOCK_STREAM, 0);
  TuneSocket(s);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(port);
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (connect(s, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) _exit(1);
  return s;
}

// The client: asks for a response, decrypts all of it, again, until the server closes.
void Client(uint16_t port, int cpu, size_t size, const std::string& body, Shared* shared) {
  Pin(cpu);
  signal(SIGPIPE, SIG_IGN);
  const int s = Connect(port);
  SSL_CTX* ctx = SSL_CTX_new(TLS_client_method());
  SSL_CTX_set_min_proto_version(ctx, TLS1_3_VERSION);
  SSL_CTX_set_ciphersuites(ctx, "TLS_AES_128_GCM_SHA256");
  SSL_CTX_set1_groups_list(ctx, "X25519");
  SSL_CTX_set_verify(ctx, SSL_VERIFY_NONE, nullptr);
  SSL_CTX_set_read_ahead(ctx, 1);  // whole records from the socket, as ringd-load reads
  SSL* ssl = SSL_new(ctx);
  SSL_set_fd(ssl, s);
  if (SSL_connect(ssl) != 1) _exit(1);
  std::vector<char> buf(kMaxChunk);
  timespec cpu_ts;
  for (size_t i = 0; i < kMaxResponses; ++i) {
    const double t0 = Now();
    if (SSL_write(ssl, "G", 1) != 1) break;
    size_t got = 0;
    while (got < size) {
      const int n = SSL_read(ssl, buf.data(), static_cast<int>(buf.size()));
      if (n <= 0) _exit(0);  // the server closed: the run is over
      if (got == 0) shared->ttfb_s[i] = Now() - t0;
      if (i % kCheckEvery == 0 && std::memcmp(buf.data(), body.data() + got, n) != 0)
        shared->bad_response = static_cast<int>(i);
      got += static_cast<size_t>(n);
    }
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &cpu_ts);
    shared->client_cpu_s[i] =
        static_cast<double>(cpu_ts.tv_sec) + static_cast<double>(cpu_ts.tv_nsec) / 1e9;
  }
  _exit(0);
}

// A write-only BIO whose writes land in the current send buffer: OpenSSL's records are copied
// once, from its write buffer to the buffer the ring sends, never through a memory BIO.
struct OutBuffer {
  char* data = nullptr;
  size_t cap = 0;
  size_t len = 0;
};

int OutWrite(BIO* bio, const char* data, size_t len, size_t* written) {
  auto* out = static_cast<OutBuffer*>(BIO_get_data(bio));
  BIO_clear_retry_flags(bio);
  if (len > out->cap - out->len) {  // never: kOutBytes holds a chunk's records
    BIO_set_retry_write(bio);
    return 0;
  }
  std::memcpy(out->data + out->len, data, len);
  out->len += len;
  *written = len;
  return 1;
}

long OutCtrl(BIO*, int cmd, long, void*) { return cmd == BIO_CTRL_FLUSH ? 1 : 0; }

int OutCreate(BIO* bio) {
  BIO_set_init(bio, 1);
  return 1;
}

BIO* NewOutBio(OutBuffer* out) {
  static BIO_METHOD* method = [] {
    BIO_METHOD* m = BIO_meth_new(BIO_get_new_index() | BIO_TYPE_SOURCE_SINK, "ringd-out");
    BIO_meth_set_write_ex(m, OutWrite);
    BIO_meth_set_ctrl(m, OutCtrl);
    BIO_meth_set_create(m, OutCreate);
    return m;
  }();
  BIO* bio = BIO_new(method);
  BIO_set_data(bio, out);
  return bio;
}

struct Server {
  io_uring ring{};
  int sock = -1;
  int file = -1;
  size_t size = 0;
  SSL* ssl = nullptr;
  BIO* rbio = nullptr;        // the requests' records, received with recv(2)
  BIO* memory_out = nullptr;  // a-*: SSL_write's records, read out with BIO_read
  BIO* direct_out = nullptr;  // the rest: records land in `out`
  OutBuffer out;
  char* send_buf[2] = {};       // registered, kOutBytes each
  unsigned notifs_due[2] = {};  // SEND_ZC notifications not yet reaped, per buffer
  std::vector<char> file_buf;
  char* mapping = nullptr;
  std::vector<unsigned char> residency;
  long cold_chunks = 0;  // mapping chunks mincore called not resident: read with pread instead

  // Reads the one-byte request.
  void ReadRequest() {
    char b;
    for (;;) {
      const int r = SSL_read(ssl, &b, 1);
      if (r == 1) return;
      if (SSL_get_error(ssl, r) != SSL_ERROR_WANT_READ) Die("SSL_read");
      char net[256];
      const ssize_t n = recv(sock, net, sizeof net, 0);
      if (n <= 0) Die("recv");
      BIO_write(rbio, net, static_cast<int>(n));
    }
  }

  // Waits for one completion: a send's result (returned) or a SEND_ZC notification (counted).
  int Reap() {
    io_uring_cqe* cqe = nullptr;
    if (io_uring_wait_cqe(&ring, &cqe) != 0) Die("io_uring_wait_cqe");
    const bool notif = (cqe->flags & IORING_CQE_F_NOTIF) != 0;
    const bool more = (cqe->flags & IORING_CQE_F_MORE) != 0;
    const int res = cqe->res;
    const unsigned buf = static_cast<unsigned>(cqe->user_data);
    io_uring_cqe_seen(&ring, cqe);
    if (notif) {
      --notifs_due[buf];
      return INT32_MIN;
    }
    if (more) ++notifs_due[buf];
    if (res <= 0) Die(std::string("send: ") + strerror(-res));
    return res;
  }

  // Sends send_buf[buf][0, len): plain IORING_OP_SEND, or SEND_ZC from the registered buffer.
  void Send(unsigned buf, size_t len, bool zero_copy) {
    size_t done = 0;
    while (done < len) {
      io_uring_sqe* sqe = io_uring_get_sqe(&ring);
      if (zero_copy) {
        io_uring_prep_send_zc_fixed(sqe, sock, send_buf[buf] + done, len - done, MSG_NOSIGNAL, 0,
                                    buf);
      } else {
        io_uring_prep_send(sqe, sock, send_buf[buf] + done, len - done, MSG_NOSIGNAL);
      }
      sqe->user_data = buf;
      io_uring_submit(&ring);
      int r;
      while ((r = Reap()) == INT32_MIN) {
      }
      done += static_cast<size_t>(r);
    }
  }

  // The plaintext of [off, off + n): a pointer into the mapping when mincore calls it resident,
  // else read into file_buf.
  const char* Plain(const Variant& v, const char* map, size_t off, size_t n) {
    if (v.source != Source::kPread) {
      const size_t start = off & ~(kPage - 1);
      if (mincore(const_cast<char*>(map) + start, off + n - start, residency.data()) == 0 &&
          std::all_of(residency.begin(), residency.begin() + (off + n - start + kPage - 1) / kPage,
                      [](unsigned char c) { return (c & 1) != 0; }))
        return map + off;
      ++cold_chunks;  // a real server would read it through the ring instead
    }
    if (pread(file, file_buf.data(), n, static_cast<off_t>(off)) != static_cast<ssize_t>(n))
      Die("pread");
    return file_buf.data();
  }

  void Respond(const Variant& v) {
    ReadRequest();
    const char* map = mapping;
    if (v.source == Source::kMappingEach) {
      map = static_cast<const char*>(mmap(nullptr, size, PROT_READ, MAP_SHARED, file, 0));
      if (map == MAP_FAILED) Die("mmap");
    }
    unsigned buf = 0;
    for (size_t off = 0; off < size;) {
      const size_t n =
          std::min(off == 0 && v.first_write != 0 ? v.first_write : v.chunk, size - off);
      while (notifs_due[buf] != 0) Reap();  // SEND_ZC: the kernel may still read this buffer
      const char* plain = Plain(v, map, off, n);
      size_t len = 0;
      if (v.wbio == Wbio::kDirect) {
        out = {send_buf[buf], kOutBytes, 0};
        if (SSL_write(ssl, plain, static_cast<int>(n)) != static_cast<int>(n)) Die("SSL_write");
        len = out.len;
      } else {
        if (SSL_write(ssl, plain, static_cast<int>(n)) != static_cast<int>(n)) Die("SSL_write");
        size_t got = 0;
        if (BIO_read_ex(memory_out, send_buf[buf], kOutBytes, &got) != 1 ||
            BIO_ctrl_pending(memory_out) != 0)
          Die("BIO_read_ex");
        len = got;
      }
      Send(buf, len, v.zero_copy);
      if (v.zero_copy) buf ^= 1;
      off += n;
    }
    if (v.source == Source::kMappingEach) munmap(const_cast<char*>(map), size);
  }

  // Puts the variant's write BIO and record size on the session (between responses, with
  // nothing pending in either BIO).
  void Use(const Variant& v) {
    BIO* w = v.wbio == Wbio::kDirect ? direct_out : memory_out;
    if (SSL_get_wbio(ssl) != w) {
      BIO_up_ref(w);  // SSL_set0_wbio takes a reference and frees the one it drops
      SSL_set0_wbio(ssl, w);
    }
    if (SSL_set_max_send_fragment(ssl, static_cast<long>(v.max_fragment)) != 1)
      Die("SSL_set_max_send_fragment");
  }
};

struct Round {
  double responses = 0, seconds = 0, cpu_s = 0, client_cpu_s = 0;
  long minor_faults = 0;
  std::vector<double> ttfb_s;
};

double Median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

double Percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[std::min(v.size() - 1, static_cast<size_t>(p * static_cast<double>(v.size())))];
}

struct Options {
  size_t size;
  double seconds;
  int rounds;
  int server_cpu;
  int client_cpu;
  std::vector<Variant> variants;
};

Options ParseOptions(int argc, char** argv) {
  constexpr char kUsage[] =
      "usage: tls_bodypath [--size BYTES] [--seconds S] [--rounds N] [--server-cpu C] "
      "[--client-cpu C] [--variants a-mem-64k,...]";
  const bool stray = ringd::ParseToolFlags(argc, argv, kUsage).size() > 1;
  Options o;
  o.size = absl::GetFlag(FLAGS_size);
  o.seconds = absl::GetFlag(FLAGS_seconds);
  o.rounds = absl::GetFlag(FLAGS_rounds);
  o.server_cpu = absl::GetFlag(FLAGS_server_cpu);
  o.client_cpu = absl::GetFlag(FLAGS_client_cpu);
  if (stray || o.size == 0) Die(kUsage);
  const std::string wanted = "," + absl::GetFlag(FLAGS_variants) + ",";
  for (const Variant& v : kVariants) {
    if (wanted == ",," || wanted.find(std::string(",") + v.name + ",") != std::string::npos)
      o.variants.push_back(v);
  }
  if (o.variants.empty()) Die("--variants: none known");
  return o;
}

// The file, written and so in the page cache, mapped for the run; returns its bytes, which the
// client compares against.
std::string MakeFile(Server& s, size_t size) {
  char path[] = "/tmp/tls_bodypath-XXXXXX";
  s.size = size;
  s.file = mkstemp(path);
  if (s.file < 0) Die("mkstemp");
  unlink(path);
  std::string body(size, 'x');
  for (size_t i = 0; i < size; ++i) body[i] = static_cast<char>('a' + i * 7 % 26);
  if (write(s.file, body.data(), size) != static_cast<ssize_t>(size)) Die("write");
  s.mapping = static_cast<char*>(mmap(nullptr, size, PROT_READ, MAP_SHARED, s.file, 0));
  if (s.mapping == MAP_FAILED) Die("mmap");
  s.residency.resize(kMaxChunk / kPage + 2);
  s.file_buf.resize(kMaxChunk);
  return body;
}

Shared* MapShared() {
  auto* shared = static_cast<Shared*>(
      mmap(nullptr, sizeof(Shared), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0));
  if (shared == MAP_FAILED) Die("mmap shared");
  shared->bad_response = -1;
  return shared;
}

// Listens on a loopback port, forks the client to connect to it, pins the server and accepts
// the client's connection into s.sock; returns the client's pid.
pid_t ForkClient(Server& s, const Options& o, const std::string& body, Shared* shared) {
  uint16_t port = 0;
  const int l = ringd::perf::ListenLoopback(&port);
  if (l < 0) Die("listen");
  const pid_t child = fork();
  if (child == 0) Client(port, o.client_cpu, o.size, body, shared);
  Pin(o.server_cpu);
  s.sock = accept(l, nullptr, nullptr);
  if (s.sock < 0) Die("accept");
  TuneSocket(s.sock);
  return child;
}

// The server's TLS session and its BIOs; returns the context, for the end to free.
SSL_CTX* StartTls(Server& s) {
  SSL_CTX* ctx = ServerContext();
  s.ssl = SSL_new(ctx);
  SSL_set_fd(s.ssl, s.sock);  // the handshake over the socket, then memory BIOs for the rest
  if (SSL_accept(s.ssl) != 1) Die("SSL_accept");
  s.rbio = BIO_new(BIO_s_mem());
  BIO_set_mem_eof_return(s.rbio, -1);
  SSL_set0_rbio(s.ssl, s.rbio);
  s.memory_out = BIO_new(BIO_s_mem());
  s.direct_out = NewOutBio(&s.out);
  return ctx;
}

// The ring and its two registered send buffers.
void StartRing(Server& s) {
  if (io_uring_queue_init(64, &s.ring, 0) != 0) Die("io_uring_queue_init");
  iovec iov[2];
  for (int i = 0; i < 2; ++i) {
    s.send_buf[i] = static_cast<char*>(
        mmap(nullptr, kOutBytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
    iov[i] = {s.send_buf[i], kOutBytes};
  }
  if (io_uring_register_buffers(&s.ring, iov, 2) != 0) Die("io_uring_register_buffers");
}

struct Results {
  std::vector<std::vector<Round>> rounds;        // per variant, per round
  std::vector<std::pair<size_t, size_t>> spans;  // per (round, variant): [first, end) responses
};

// One untimed response per variant, then the timed rounds, the variants taking turns.
Results RunRounds(Server& s, const Options& o) {
  const std::vector<Variant>& variants = o.variants;
  size_t index = 0;                    // the next response's index in the shared arrays
  for (const Variant& v : variants) {  // one untimed response each: buffers grown, pages mapped
    s.Use(v);
    s.Respond(v);
    ++index;
  }
  Results results;
  results.rounds.resize(variants.size());
  for (int round = 0; round < o.rounds; ++round) {
    for (size_t m = 0; m < variants.size(); ++m) {
      s.Use(variants[m]);
      Round r;
      const size_t first = index;
      const double t0 = Now();
      const Usage u0 = ProcessUsage();
      while (Now() - t0 < o.seconds && index + 8 < kMaxResponses) {
        for (int k = 0; k < 4; ++k, ++index) s.Respond(variants[m]);
      }
      const Usage u1 = ProcessUsage();
      r.seconds = Now() - t0;
      r.cpu_s = u1.cpu_s - u0.cpu_s;
      r.minor_faults = u1.minor_faults - u0.minor_faults;
      r.responses = static_cast<double>(index - first);
      results.rounds[m].push_back(r);
      results.spans.push_back({first, index});
    }
  }
  return results;
}

// Closes the connection, waits for the client, checks what it decrypted and reaps the SEND_ZC
// notifications still due.
void EndClient(Server& s, pid_t child, const Shared* shared) {
  shutdown(s.sock, SHUT_RDWR);
  waitpid(child, nullptr, 0);
  if (shared->bad_response >= 0)
    Die("the client decrypted wrong bytes in response " + std::to_string(shared->bad_response));
  if (s.notifs_due[0] + s.notifs_due[1] != 0) {
    while (s.notifs_due[0] + s.notifs_due[1] != 0) s.Reap();
  }
}

// The client's figures, by the responses each round served (the first response of a round
// has no client CPU before it in the round: its delta is taken from the previous response).
void AddClientFigures(const Options& o, const Shared* shared, Results& results) {
  size_t k = 0;
  for (int round = 0; round < o.rounds; ++round) {
    for (size_t m = 0; m < o.variants.size(); ++m, ++k) {
      const auto [first, end] = results.spans[k];
      Round& r = results.rounds[m][static_cast<size_t>(round)];
      if (first > 0 && end > first)
        r.client_cpu_s = shared->client_cpu_s[end - 1] - shared->client_cpu_s[first - 1];
      for (size_t i = first; i < end; ++i) r.ttfb_s.push_back(shared->ttfb_s[i]);
    }
  }
}

// "median [min-max]" of v, each figure written with fmt's conversions.
std::string MedianRange(const std::vector<double>& v, const char* fmt) {
  char b[96];
  std::snprintf(b, sizeof b, fmt, Median(v), *std::min_element(v.begin(), v.end()),
                *std::max_element(v.begin(), v.end()));
  return std::string(b);
}

// Variant m's row of the table.
void PrintRow(const Options& o, const Results& results, size_t m) {
  std::vector<double> cpu, ratio, mbps, busy, client, ttfb;
  double faults = 0, responses = 0;
  for (size_t round = 0; round < results.rounds[m].size(); ++round) {
    // The ratio to the first variant in the same round: the machine's speed drifts between
    // rounds (other work, the host), less within one.
    const Round& r = results.rounds[m][round];
    const Round& base = results.rounds[0][round];
    cpu.push_back(r.cpu_s / r.responses * 1e6);
    ratio.push_back(r.cpu_s / r.responses / (base.cpu_s / base.responses));
    mbps.push_back(r.responses * static_cast<double>(o.size) / r.seconds / 1e6);
    busy.push_back(100 * r.cpu_s / r.seconds);
    client.push_back(r.client_cpu_s / r.responses * 1e6);
    ttfb.insert(ttfb.end(), r.ttfb_s.begin(), r.ttfb_s.end());
    faults += static_cast<double>(r.minor_faults);
    responses += r.responses;
  }
  std::printf("| %s | %s | %s | %s | %s | %s | %.0f / %.0f / %.0f | %.1f |\n", o.variants[m].name,
              MedianRange(cpu, "%.0f [%.0f-%.0f]").c_str(),
              MedianRange(ratio, "%.2f [%.2f-%.2f]").c_str(),
              MedianRange(mbps, "%.0f [%.0f-%.0f]").c_str(),
              MedianRange(busy, "%.0f%% [%.0f-%.0f]").c_str(),
              MedianRange(client, "%.0f [%.0f-%.0f]").c_str(), Percentile(ttfb, 0.1) * 1e6,
              Percentile(ttfb, 0.5) * 1e6, Percentile(ttfb, 0.99) * 1e6, faults / responses);
}

void PrintReport(const Options& o, const Results& results, long cold_chunks) {
  std::printf(
      "%zu-byte responses, %d rounds of %.1f s, server on CPU %d, client on CPU %d; "
      "figures: median [min-max] over the rounds\n\n",
      o.size, o.rounds, o.seconds, o.server_cpu, o.client_cpu);
  std::printf(
      "| variant | server CPU us per response | x %s, same round | MB/s | server busy | client "
      "CPU us per response | time to first byte us, p10 / p50 / p99 | minor faults per response "
      "|\n| --- | --- | --- | --- | --- | --- | --- | --- |\n",
      o.variants[0].name);
  for (size_t m = 0; m < o.variants.size(); ++m) PrintRow(o, results, m);
  std::printf("\nmapping chunks found not resident (read with pread instead): %ld\n", cold_chunks);
}

}  // namespace

int main(int argc, char** argv) {
  const Options o = ParseOptions(argc, argv);
  Server s;
  const std::string body = MakeFile(s, o.size);
  Shared* shared = MapShared();
  const pid_t child = ForkClient(s, o, body, shared);
  SSL_CTX* ctx = StartTls(s);
  StartRing(s);
  Results results = RunRounds(s, o);
  EndClient(s, child, shared);
  AddClientFigures(o, shared, results);
  PrintReport(o, results, s.cold_chunks);
  io_uring_queue_exit(&s.ring);
  SSL_free(s.ssl);
  SSL_CTX_free(ctx);
  return 0;
}
