// TLS sessions on OpenSSL 3, driven over memory BIOs (no socket BIO, no blocking call): the
// server side of tls_session.h. One factory for the process, shared by every shard: it holds one
// SSL_CTX per site (certificates with the same names; an ECDSA and an RSA certificate for the
// same names share one, and OpenSSL picks the one the client can verify), chosen by SNI, the
// first site when no name matches. TLS 1.2 and 1.3 only, forward-secret AEAD suites, ALPN
// http/1.1, stateless session tickets (TLS 1.3 and 1.2) under keys every shard shares, no
// renegotiation, no 0-RTT, and the library's buffers released while a connection is idle.
//
//   TlsOptions o;  o.pairs = {{"site.crt", "site.key"}};
//   std::string error;
//   std::unique_ptr<OpenSslFactory> tls = OpenSslFactory::Create(o, &error);  // null: error says
//   std::unique_ptr<TlsSession> s = tls->Make();
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "server/tls/tls_session.h"

typedef struct ssl_ctx_st SSL_CTX;
typedef struct x509_st X509;
typedef struct ssl_st SSL;

namespace ringd::tls {

struct TlsCertPair {
  std::string cert_file;  // PEM: the certificate, then its chain
  std::string key_file;   // PEM: its private key
};

struct TlsOptions {
  std::vector<TlsCertPair> pairs;
  std::string min_version = "1.2";  // "1.2" or "1.3"
  // TLS 1.2 suites (OpenSSL cipher list syntax) and TLS 1.3 suites (OpenSSL ciphersuites).
  std::string ciphers = "ECDHE+AESGCM:ECDHE+CHACHA20";
  std::string ciphersuites =
      "TLS_AES_128_GCM_SHA256:TLS_AES_256_GCM_SHA384:TLS_CHACHA20_POLY1305_SHA256";
};

class OpenSslFactory final : public TlsSessionFactory {
 public:
  // Loads and checks every pair: readable, the key matches the certificate, not expired. One
  // line in *error naming the file otherwise.
  static std::unique_ptr<OpenSslFactory> Create(const TlsOptions& options, std::string* error);
  ~OpenSslFactory() override;

  std::unique_ptr<TlsSession> Make() override;

  struct Certificate {
    std::string file;
    std::string subject;
    int64_t not_after_sec = 0;  // expiry, seconds since the epoch
  };
  const std::vector<Certificate>& certificates() const { return certificates_; }

 private:
  struct Site {
    SSL_CTX* ctx = nullptr;
    X509* leaf = nullptr;  // the first certificate's, for matching SNI (owned by ctx)
    std::vector<int> key_types;
  };
  OpenSslFactory() = default;
  static int OnServerName(SSL* ssl, int* alert, void* arg);

  std::vector<Site> sites_;
  std::vector<Certificate> certificates_;
};

}  // namespace ringd::tls
