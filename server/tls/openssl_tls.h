// TLS sessions on OpenSSL 3, driven over memory BIOs (no socket BIO, no blocking call): the
// server side of tls_session.h. One factory for the process, shared by every shard: it holds one
// SSL_CTX per site (certificates with the same names; an ECDSA and an RSA certificate for the
// same names share one, and OpenSSL picks the one the client can verify), chosen by SNI, the
// first site when no name matches. TLS 1.2 and 1.3 only, forward-secret AEAD suites, ALPN
// http/1.1, stateless session tickets (TLS 1.3 and 1.2) under keys every shard shares, no
// renegotiation, no 0-RTT, and the library's buffers released while a connection is idle.
//
// OCSP stapling from files: each --tls-ocsp response (DER, as `openssl ocsp -respout` writes it)
// is matched to the certificate it answers for (by the issuer in that certificate's chain) and
// sent to clients that ask for it, until its nextUpdate passes. A response that answers for no
// certificate in use (one fetched before a renewal) or is out of date is left out with a line,
// never failing the load: a staple is an optimisation the handshake does without.
//
// TicketKeys encrypts the session tickets of every site, every shard and every reload, with a key
// rotated on a schedule and the previous one still accepted; ReloadableTls swaps in freshly loaded
// certificates (SIGHUP) while sessions made from the old ones finish with them.
//
//   TicketKeys keys(/*rotate_sec=*/43200);
//   TlsOptions o;  o.pairs = {{"site.crt", "site.key"}};  o.tickets = &keys;
//   std::string error;
//   ReloadableTls tls;
//   if (!tls.Load(o, &error)) ...;                   // error: one line naming the file
//   std::unique_ptr<TlsSession> s = tls.Make();        // any thread
//   if (!tls.Load(o, &error)) ...;                   // a reload: the old certificates stay
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "server/tls/tls_session.h"

typedef struct ssl_ctx_st SSL_CTX;
typedef struct x509_st X509;
typedef struct evp_pkey_st EVP_PKEY;
struct stack_st_X509;  // STACK_OF(X509)
typedef struct evp_cipher_ctx_st EVP_CIPHER_CTX;
typedef struct evp_mac_ctx_st EVP_MAC_CTX;
typedef struct ssl_st SSL;

namespace ringd::tls {

struct TlsCertPair {
  std::string cert_file;  // PEM: the certificate, then its chain
  std::string key_file;   // PEM: its private key
};

// The keys session tickets are encrypted with (AES-256-CBC and HMAC-SHA256, as OpenSSL's own):
// one set for the process, so a ticket from any shard, site or certificate generation resumes on
// any other. The current key is replaced every `rotate_sec`; tickets under the previous one are
// still accepted (and renewed), so a ticket lives up to twice the period. A resumed TLS 1.3
// connection is always sent a new ticket (clients offer each once), a TLS 1.2 one only when its
// ticket's key is the previous one (the ticket may be offered again).
// A rotation whose random bytes cannot be had fails the handshake that asked for it (OpenSSL's
// RAND_bytes can fail, its entropy source gone); the keys stay, and the next handshake tries
// again.
//
// Every shard reads the keys on every ticket it issues or opens: the read side takes no lock and
// writes nothing shared. The keys in use are one immutable generation, published through an
// atomic pointer; a rotation (once a period) builds the next generation in a slot of a fixed
// ring and publishes it, under a lock only rotations take (rotation_locks counts them). A slot is
// rebuilt kGenerations rotations after it was retired, at least kGenerations - 1 periods later,
// while a reader holds a generation for the time of one key copy.
class TicketKeys {
 public:
  // `now_sec`: the clock rotations follow; `random`: fills `n` bytes, false when it cannot (tests
  // give their own). The first key is made here, at start-up: without it ringd stops loudly.
  explicit TicketKeys(int64_t rotate_sec, int64_t (*now_sec)() = &WallSeconds,
                      bool (*random)(unsigned char* out, int n) = &SystemRandom);
  static int64_t WallSeconds();
  static bool SystemRandom(unsigned char* out, int n);  // RAND_bytes
  // OpenSSL's ticket key callback (SSL_CTX_set_tlsext_ticket_key_evp_cb), for any context whose
  // app data is this object.
  static int Callback(SSL* ssl, unsigned char* key_name, unsigned char* iv, EVP_CIPHER_CTX* cipher,
                      EVP_MAC_CTX* mac, int encrypt);
  uint64_t rotations() const;
  uint64_t rotation_locks() const;  // times the rotation lock was taken

  static constexpr size_t kGenerations = 8;

 private:
  struct Key {
    unsigned char name[16];
    unsigned char aes[32];
    unsigned char hmac[32];
    int64_t born_sec = 0;
  };
  struct Generation {
    Key current;
    Key previous;
    bool has_previous = false;
    uint64_t rotations = 0;
  };
  // A new key born at `now_sec`; false when the random bytes cannot be had.
  bool Fresh(int64_t now_sec, Key* out) const;
  // The generation in use at `now`: the live one, or the next once its current key has served a
  // period (null: the rotation's random bytes cannot be had).
  const Generation* Live(int64_t now);

  const int64_t rotate_sec_;
  int64_t (*const now_sec_)();
  bool (*const random_)(unsigned char* out, int n);
  std::atomic<const Generation*> live_{nullptr};
  std::mutex rotate_mu_;           // rotations only
  Generation ring_[kGenerations];  // slot: rotations % kGenerations
  std::atomic<uint64_t> rotation_locks_{0};
};

struct TlsOptions {
  TicketKeys* tickets = nullptr;  // null: OpenSSL's own keys, per context
  // TLS 1.3 tickets sent after a full handshake; a resumed connection gets one whatever the
  // number (OpenSSL sends at most one after a resumption). 0: none, and none on TLS 1.2.
  uint32_t tickets_per_handshake = 1;
  std::vector<TlsCertPair> pairs;
  // DER OCSP responses, each for one of the certificates (in any order).
  std::vector<std::string> ocsp_files;
  // --tls-expired=refuse: a certificate past its notAfter fails the load. Otherwise it loads
  // (clients refuse it, but the other listeners and sites keep serving) and the caller says so.
  bool refuse_expired = false;
  std::string min_version = "1.2";  // "1.2" or "1.3"
  // ALPN offers h2 before http/1.1 (--http2); false: http/1.1 alone.
  bool http2 = true;
  // TLS 1.2 suites (OpenSSL cipher list syntax) and TLS 1.3 suites (OpenSSL ciphersuites).
  std::string ciphers = "ECDHE+AESGCM:ECDHE+CHACHA20";
  std::string ciphersuites =
      "TLS_AES_128_GCM_SHA256:TLS_AES_256_GCM_SHA384:TLS_CHACHA20_POLY1305_SHA256";
};

struct FactoryPin;  // a thread's hold on a ReloadableTls generation (openssl_tls.cc)

class OpenSslFactory final : public TlsSessionFactory,
                             public std::enable_shared_from_this<OpenSslFactory> {
 public:
  // Loads and checks every pair: readable, the key matches the certificate (and not expired, with
  // refuse_expired); an error of one line naming the file otherwise. Each session keeps its
  // factory alive.
  static absl::StatusOr<std::shared_ptr<OpenSslFactory>> Create(const TlsOptions& options);
  ~OpenSslFactory() override;

  std::unique_ptr<TlsSession> Make() override;

  struct Certificate {
    std::string file;
    std::string subject;
    int64_t not_after_sec = 0;         // expiry, seconds since the epoch
    std::string ocsp_file;             // its stapled OCSP response, if any
    int64_t ocsp_next_update_sec = 0;  // when that response goes stale (0: it never says)
    int64_t not_before_sec = 0;        // valid from, seconds since the epoch
  };
  const std::vector<Certificate>& certificates() const { return certificates_; }
  // The --tls-ocsp files left out of this generation (one that answers for no certificate in
  // use, or is out of date), and a line for each naming why.
  const std::vector<std::string>& dropped_ocsp() const { return dropped_ocsp_; }
  const std::vector<std::string>& warnings() const { return warnings_; }

 private:
  struct Site {
    SSL_CTX* ctx = nullptr;
    X509* leaf = nullptr;  // the first certificate's, for matching SNI (owned by ctx)
    std::vector<int> key_types;
  };
  // An OCSP response for one certificate, sent as it was read.
  struct Staple {
    X509* cert = nullptr;  // a reference of its own
    std::string der;
    int64_t next_update_sec = 0;  // 0: none given
  };
  friend class ReloadableTls;
  OpenSslFactory() = default;
  // A session kept alive by `pin` (its count, on its thread) rather than by a shared reference.
  std::unique_ptr<TlsSession> MakePinned(FactoryPin* pin) const;
  static int OnClientHello(SSL* ssl, int* alert, void* arg);
  static int OnStatusRequest(SSL* ssl, void* arg);
  bool AddCertificate(const TlsOptions& options, const TlsCertPair& pair, X509* cert,
                      stack_st_X509* chain, EVP_PKEY* key,
                      std::vector<std::vector<std::string>>* site_names, std::string* error);
  bool LoadStaples(const std::vector<std::string>& files, const std::vector<X509*>& leaves,
                   const std::vector<X509*>& issuers, std::string* error);

  std::vector<Site> sites_;
  std::vector<Certificate> certificates_;
  std::vector<Staple> staples_;
  std::vector<std::string> dropped_ocsp_;
  std::vector<std::string> warnings_;
};

// The certificates in use, reloadable while serving: Make hands out sessions of the newest
// generation; sessions (handshakes in flight included) finish on the generation they began with.
// Each thread pins the newest generation on its first Make after a reload (one lock, counted by
// pin_locks); its sessions count on that pin, not on the generation's shared count, so a Make
// between reloads takes no lock and writes nothing shared. A session is ended on the thread that
// made it (a shard's), or after that thread has exited; it may outlive the ReloadableTls.
class ReloadableTls final : public TlsSessionFactory {
 public:
  ReloadableTls();
  ~ReloadableTls() override;
  // Loads a generation; on failure the current one stays and the error says why.
  absl::Status Load(const TlsOptions& options);
  std::unique_ptr<TlsSession> Make() override;
  std::vector<OpenSslFactory::Certificate> certificates() const;
  // The newest generation's dropped_ocsp() and warnings() (OpenSslFactory).
  std::vector<std::string> dropped_ocsp() const;
  std::vector<std::string> warnings() const;
  uint64_t generation() const;
  uint64_t pin_locks() const;  // pins made: a thread's first Make of each generation

 private:
  const uint64_t id_;  // this instance among a thread's pins
  mutable std::mutex mu_;
  std::shared_ptr<OpenSslFactory> current_;  // under mu_
  std::atomic<uint64_t> generation_{0};      // written under mu_
  std::atomic<uint64_t> pin_locks_{0};
};

}  // namespace ringd::tls
