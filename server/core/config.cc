#include "server/core/config.h"

#include <arpa/inet.h>
#include <grp.h>
#include <netdb.h>
#include <pwd.h>
#include <sys/stat.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <map>
#include <optional>
#include <sstream>
#include <string_view>

#include "io/loop.h"
#include "server/core/version.h"
#include "server/http/decimal.h"
#include "server/http/site_table.h"
#include "server/http/text.h"

namespace ringd {
namespace {

constexpr int kMaxFlagfileDepth = 4;

bool ParseUint(const std::string& v, uint64_t max, uint64_t* out) {
  return http::ParseDecimal(v, max, out);
}

bool ParseBool(const std::string& v, bool* out) {
  if (v == "true" || v == "1" || v == "yes" || v == "on") return *out = true, true;
  if (v == "false" || v == "0" || v == "no" || v == "off") return *out = false, true;
  return false;
}

bool ParseListen(const std::string& given, ListenAddress* out, std::string* error,
                 const char* flag = "--listen", bool options = false) {
  // Options follow the address after commas: "127.0.0.1:8443,proxy".
  std::string text = given;
  bool proxy = false;
  if (const size_t comma = given.find(','); options && comma != std::string::npos) {
    text = given.substr(0, comma);
    std::string_view rest = std::string_view(given).substr(comma + 1);
    while (true) {
      const size_t next = rest.find(',');
      const std::string_view option = rest.substr(0, next);
      if (option != "proxy") {
        *error = std::string(flag) + ": unknown option '" + std::string(option) + "' in '" + given +
                 "' (options: proxy)";
        return false;
      }
      proxy = true;
      if (next == std::string_view::npos) break;
      rest = rest.substr(next + 1);
    }
  }
  out->proxy = proxy;
  std::string host, port;
  if (!text.empty() && text[0] == '[') {
    const size_t close = text.find(']');
    if (close == std::string::npos || close + 1 >= text.size() || text[close + 1] != ':') {
      *error = std::string(flag) + ": expected [IPV6]:PORT, got '" + text + "'";
      return false;
    }
    host = text.substr(1, close - 1);
    port = text.substr(close + 2);
  } else {
    const size_t colon = text.rfind(':');
    if (colon == std::string::npos) {
      *error = std::string(flag) + ": expected HOST:PORT, got '" + text + "'";
      return false;
    }
    host = text.substr(0, colon);
    port = text.substr(colon + 1);
  }
  uint64_t p;
  if (!ParseUint(port, 65535, &p)) {
    *error = std::string(flag) + ": bad port in '" + text + "'";
    return false;
  }
  addrinfo hints{};
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_NUMERICSERV | AI_PASSIVE;
  addrinfo* res = nullptr;
  const int rc = getaddrinfo(host.empty() ? nullptr : host.c_str(), port.c_str(), &hints, &res);
  if (rc != 0 || res == nullptr) {
    *error = std::string(flag) + ": cannot resolve '" + text + "': " + gai_strerror(rc);
    return false;
  }
  out->text = text;
  std::memcpy(&out->addr, res->ai_addr, res->ai_addrlen);
  out->len = res->ai_addrlen;
  freeaddrinfo(res);
  return true;
}

// Whether two addresses name the same port on overlapping hosts (a wildcard host overlaps every
// host of its family). Port 0 picks a free port: it never collides.
bool SameEndpoint(const ListenAddress& a, const ListenAddress& b) {
  if (a.addr.ss_family != b.addr.ss_family) return false;
  if (a.addr.ss_family == AF_INET) {
    const auto* x = reinterpret_cast<const sockaddr_in*>(&a.addr);
    const auto* y = reinterpret_cast<const sockaddr_in*>(&b.addr);
    if (x->sin_port == 0 || x->sin_port != y->sin_port) return false;
    return x->sin_addr.s_addr == y->sin_addr.s_addr || x->sin_addr.s_addr == INADDR_ANY ||
           y->sin_addr.s_addr == INADDR_ANY;
  }
  if (a.addr.ss_family == AF_INET6) {
    const auto* x = reinterpret_cast<const sockaddr_in6*>(&a.addr);
    const auto* y = reinterpret_cast<const sockaddr_in6*>(&b.addr);
    if (x->sin6_port == 0 || x->sin6_port != y->sin6_port) return false;
    return std::memcmp(&x->sin6_addr, &y->sin6_addr, 16) == 0 ||
           IN6_IS_ADDR_UNSPECIFIED(&x->sin6_addr) || IN6_IS_ADDR_UNSPECIFIED(&y->sin6_addr);
  }
  return false;
}

bool AddCidr(http::ClientRules* rules, bool allow, const std::string& v, const char* flag,
             std::string* error) {
  const std::optional<http::Cidr> cidr = http::ParseCidr(v);
  if (!cidr.has_value()) {
    *error = std::string(flag) +
             ": expected ADDRESS, ADDRESS/BITS (no host bits set) or all, got '" + v + "'";
    return false;
  }
  rules->Add(allow, *cidr);
  return true;
}

struct Flag {
  const char* name;
  const char* help;
  bool is_bool;
  std::function<bool(Config*, const std::string&, std::string*)> set;
  // A list (--listen, --add-header, ...): each time adds one. Any other flag takes one value and
  // is refused the second time it is given, as nginx refuses a second `root`.
  bool repeatable = false;
};

Flag Repeatable(Flag flag) {
  flag.repeatable = true;
  return flag;
}

template <typename T>
Flag UintFlag(const char* name, const char* help, T Config::*field, uint64_t min, uint64_t max) {
  return Flag{name, help, false, [=](Config* c, const std::string& v, std::string* error) {
                uint64_t x;
                if (!ParseUint(v, max, &x) || x < min) {
                  *error = std::string("--") + name + ": expected an integer from " +
                           std::to_string(min) + " to " + std::to_string(max) + ", got '" + v + "'";
                  return false;
                }
                c->*field = static_cast<T>(x);
                return true;
              }};
}

Flag BoolFlag(const char* name, const char* help, bool Config::*field) {
  return Flag{name, help, true, [=](Config* c, const std::string& v, std::string* error) {
                if (!ParseBool(v, &(c->*field))) {
                  *error = std::string("--") + name + ": expected true or false, got '" + v + "'";
                  return false;
                }
                return true;
              }};
}

Flag StringFlag(const char* name, const char* help, std::string Config::*field) {
  return Flag{name, help, false, [=](Config* c, const std::string& v, std::string* error) {
                if (v.empty()) {
                  *error = std::string("--") + name + ": must not be empty";
                  return false;
                }
                c->*field = v;
                return true;
              }};
}

const std::vector<Flag>& Flags() {
  static const std::vector<Flag> flags = {
      StringFlag("root",
                 "directory to serve (required); followed within a second when its name is "
                 "renamed over (a deploy switching releases)",
                 &Config::root),
      Repeatable(Flag{"listen",
                      "HOST:PORT or [IPV6]:PORT to listen on; repeatable (default 127.0.0.1:8080); "
                      "HOST:PORT,proxy: every connection begins with a PROXY protocol header "
                      "(v1 or v2) from a --proxy-from address",
                      false,
           [](Config* c, const std::string& v, std::string* error) {
             ListenAddress a;
             if (!ParseListen(v, &a, error, "--listen", true)) return false;
             c->listen.push_back(a);
             return true;
           }}),
      Repeatable(Flag{"listen-tls",
           "HOST:PORT or [IPV6]:PORT to serve HTTPS on; repeatable (needs --tls-cert and "
           "--tls-key); HOST:PORT,proxy: a PROXY protocol header comes first, before TLS",
           false,
           [](Config* c, const std::string& v, std::string* error) {
             ListenAddress a;
             if (!ParseListen(v, &a, error, "--listen-tls", true)) return false;
             c->listen_tls.push_back(a);
             return true;
           }}),
      Repeatable(Flag{"proxy-from",
           "CIDR (or an address, or all) whose connections to a ,proxy listener may send the "
           "PROXY protocol header; repeatable; a connection from elsewhere is closed (default "
           "127.0.0.0/8 and ::1)",
           false,
           [](Config* c, const std::string& v, std::string* error) {
             if (v == "all") c->proxy_from_all = true;
             return AddCidr(&c->proxy_from, true, v, "--proxy-from", error);
           }}),
      Repeatable(Flag{"allow",
           "CIDR (or an address, or all) whose clients may connect; repeatable, judged in order "
           "with --deny, the first match deciding (nginx's allow); a refused client's "
           "connection is closed at once; inside a --site, its requests are judged and a refused "
           "client's is answered 403",
           false,
           [](Config* c, const std::string& v, std::string* error) {
             return AddCidr(&c->client_rules, true, v, "--allow", error);
           }}),
      Repeatable(Flag{"deny",
           "CIDR (or an address, or all) whose clients are refused; repeatable, judged in order "
           "with --allow (nginx's deny); no rule matching: allowed; inside a --site, its "
           "requests are judged (403)",
           false,
           [](Config* c, const std::string& v, std::string* error) {
             return AddCidr(&c->client_rules, false, v, "--deny", error);
           }}),
      UintFlag("limit-conn",
               "connections one client address may hold at once, per shard (nginx's limit_conn); "
               "beyond it a newcomer is closed at accept (default 0: no limit)",
               &Config::limit_conn, 0, 1000000),
      Flag{"limit-req",
           "requests per client address, per shard, as 10r/s or 600r/m, with ,burst=N: how "
           "many may come at once beyond the rate (nginx's limit_req ... nodelay); beyond it "
           "the request is answered --limit-req-status with Retry-After (default: no limit)",
           false,
           [](Config* c, const std::string& v, std::string* error) {
             const std::optional<http::RateLimit> r = http::ParseRateLimit(v);
             if (!r.has_value()) {
               *error = "--limit-req: expected RATE[,burst=N] such as 10r/s or 600r/m,burst=20 "
                        "(from 1r/m to 1000000r/s), got '" + v + "'";
               return false;
             }
             c->limit_req = *r;
             return true;
           }},
      Flag{"limit-req-status", "the status of a request over --limit-req: 429 or 503 (default 503, "
                               "as nginx's limit_req_status)",
           false,
           [](Config* c, const std::string& v, std::string* error) {
             if (v != "429" && v != "503") {
               *error = "--limit-req-status: expected 429 or 503, got '" + v + "'";
               return false;
             }
             c->limit_req_status = v == "429" ? 429 : 503;
             return true;
           }},
      UintFlag("limit-table",
               "client addresses each shard's --limit-req table holds; beyond it the least "
               "recently seen is forgotten (default 16384)",
               &Config::limit_table, 8, 1u << 24),
      UintFlag("limit-ipv6-prefix",
               "the limits count an IPv6 client by this many leading bits of its address "
               "(default 64: a /64 is one client)",
               &Config::limit_ipv6_prefix, 1, 128),
      Repeatable(Flag{"real-ip-from",
           "CIDR (or an address) of a proxy trusted to name the client in --real-ip-header; "
           "repeatable (nginx's set_real_ip_from); that client is the access log's, the "
           "limits' and a site's --allow/--deny's (the top-level --allow/--deny judge the "
           "connection's)",
           false,
           [](Config* c, const std::string& v, std::string* error) {
             return AddCidr(&c->real_ip_from, true, v, "--real-ip-from", error);
           }}),
      StringFlag("real-ip-header",
                 "the header a --real-ip-from peer names the client in (default X-Forwarded-For)",
                 &Config::real_ip_header),
      BoolFlag("real-ip-recursive",
               "addresses of --real-ip-from in the header are proxies too: the client is the last "
               "untrusted one (nginx's real_ip_recursive; default false: the last address)",
               &Config::real_ip_recursive),
      Repeatable(Flag{"tls-cert",
           "PEM file: a certificate and its chain; repeatable, paired in order with --tls-key "
           "(certificates with the same names and different key types serve one site; others are "
           "chosen by SNI, the first by default)",
           false,
           [](Config* c, const std::string& v, std::string*) {
             c->tls_cert.push_back(v);
             return true;
           }}),
      Repeatable(Flag{"tls-key", "PEM file: the private key of the --tls-cert in the same position",
                      false,
           [](Config* c, const std::string& v, std::string*) {
             c->tls_key.push_back(v);
             return true;
           }}),
      Repeatable(Flag{"tls-ocsp",
           "DER file: an OCSP response to staple (openssl ocsp -respout); repeatable, each "
           "matched to the --tls-cert it answers for, whose file must hold its issuer; "
           "reloaded on SIGHUP",
           false,
           [](Config* c, const std::string& v, std::string*) {
             c->tls_ocsp.push_back(v);
             return true;
           }}),
      Flag{"tls-expired",
           "serve or refuse: a --tls-cert past its notAfter is served with a loud line, the "
           "ringd_tls_certificate_expired metric and a warning in /readyz's 200 (serve), or stops "
           "start-up, fails a SIGHUP reload and makes /readyz 503 (refuse) (default serve)",
           false,
           [](Config* c, const std::string& v, std::string* error) {
             if (v != "serve" && v != "refuse") {
               *error = "--tls-expired: expected serve or refuse, got '" + v + "'";
               return false;
             }
             c->tls_refuse_expired = v == "refuse";
             return true;
           }},
      Flag{"tls-min-version", "oldest TLS version accepted: 1.2 or 1.3 (default 1.2)", false,
           [](Config* c, const std::string& v, std::string* error) {
             if (v != "1.2" && v != "1.3") {
               *error = "--tls-min-version: expected 1.2 or 1.3, got '" + v + "'";
               return false;
             }
             c->tls_min_version = v;
             return true;
           }},
      BoolFlag("redirect-https",
               "the --listen addresses answer every GET and HEAD with 301 to the same target "
               "over HTTPS, on the first --listen-tls address's port (default false)",
               &Config::redirect_https),
      UintFlag("tls-max-handshakes",
               "TLS handshakes under way at once per shard; connections beyond are closed at "
               "accept (default 256)",
               &Config::tls_max_handshakes, 1, 1 << 20),
      UintFlag("tls-ticket-rotate-s",
               "seconds between new session ticket keys; tickets under the previous key still "
               "resume (default 43200)",
               &Config::tls_ticket_rotate_s, 60, 7 * 86400),
      UintFlag("tls-tickets",
               "TLS 1.3 session tickets sent after each full handshake (a second, as OpenSSL "
               "and nginx send, cost a full handshake 4% more CPU in the same run); a resumed "
               "TLS 1.3 connection gets one new ticket whatever the number, as clients use each "
               "once; 0 turns resumption by ticket off on both versions, as nginx's "
               "ssl_session_tickets off (default 1)",
               &Config::tls_tickets, 0, 8),
      StringFlag("tls-ciphers",
                 "TLS 1.2 cipher suites, OpenSSL's list syntax (default "
                 "ECDHE+AESGCM:ECDHE+CHACHA20)",
                 &Config::tls_ciphers),
      StringFlag("tls-ciphersuites",
                 "TLS 1.3 cipher suites, OpenSSL's syntax, colon-separated (default "
                 "TLS_AES_128_GCM_SHA256, TLS_AES_256_GCM_SHA384, TLS_CHACHA20_POLY1305_SHA256 "
                 "in that order)",
                 &Config::tls_ciphersuites),
      UintFlag("shards", "shard threads, each with its own ring (default: one per usable CPU)",
               &Config::shards, 1, 1024),
      StringFlag("io",
                 "io tier by name, or auto: the first tier that works here (ringd --probe lists "
                 "the tiers and what each needs; default auto)",
                 &Config::io),
      Repeatable(Flag{"io-mask",
           "features the probe treats as missing, comma-separated (testing the fallbacks)", false,
           [](Config* c, const std::string& v, std::string*) {
             size_t start = 0;
             while (start <= v.size()) {
               const size_t comma = std::min(v.find(',', start), v.size());
               c->io_mask.push_back(v.substr(start, comma - start));
               start = comma + 1;
             }
             return true;
           }}),
      BoolFlag("defer-accept",
               "TCP_DEFER_ACCEPT on every listener (inherited ones too): a connection is accepted "
               "when its first bytes come, or after a second without, so its accept and its "
               "request wake a shard once; as nginx's listen ... deferred. Off by default: a "
               "--takeover restart can lose clients that connected and had not sent yet (they "
               "wait in the old process's listener) unless net.ipv4.tcp_migrate_req=1 (default "
               "false)",
               &Config::defer_accept),
      BoolFlag("sqpoll",
               "bypass: a kernel thread submits for the shards (spends a core; default false)",
               &Config::sqpoll),
      BoolFlag("sqpoll-per-shard",
               "with --sqpoll: one SQ thread per shard instead of one shared by all (default "
               "false)",
               &Config::sqpoll_per_shard),
      BoolFlag("tcp-nopush",
               "TCP_CORK while a file body goes out with sendfile, first chunk to last, and "
               "its head waits for it (MSG_MORE), so it leaves in whole segments, as nginx's "
               "tcp_nopush (default true)",
               &Config::tcp_nopush),
      BoolFlag("bypass-sendfile",
               "bypass: a connection's first file body installs a process fd for its socket, so "
               "cached pages go out with sendfile, not spliced through io-wq (Linux 6.8; default "
               "true)",
               &Config::bypass_sendfile),
      UintFlag("splice-min-bytes",
               "uring tiers: file bodies at least this large splice through the ring even when "
               "cached: faster for a few large downloads, slower in a site's mix (default 0: "
               "never)",
               &Config::splice_min_bytes, 0, 1ULL << 40),
      UintFlag("batch-wait-us",
               "uring tiers without --sqpoll: a shard's wait for completions lasts until 32 "
               "have come, or this long from its start once at least one has; fewer system "
               "calls and wake-ups for up to this much latency (Linux 6.12; default 0: off)",
               &Config::batch_wait_us, 0, 10000),
      UintFlag("busy-poll-us",
               "uring tiers: busy-poll the NIC's queues (NAPI) this long while waiting for "
               "completions; spends CPU for latency (default 0: off)",
               &Config::busy_poll_us, 0, 1000000),
      UintFlag("sqpoll-cpu", "pin the SQ threads to this CPU (default: unpinned)",
               &Config::sqpoll_cpu, 0, 4095),
      UintFlag("sqpoll-idle-ms", "the SQ thread sleeps after this long without work (default 1000)",
               &Config::sqpoll_idle_ms, 1, 60000),
      UintFlag(
          "io-wq-max-workers",
          "uring tiers: kernel io-wq workers per shard for blocking work (default 0: the kernel's)",
          &Config::iowq_max_workers, 0, 4096),
      BoolFlag("pin", "pin shard i to the i-th usable CPU (default true)", &Config::pin),
      UintFlag("header-timeout-ms", "time to receive a request head (default 10000)",
               &Config::header_timeout_ms, 1, 3600000),
      UintFlag("keepalive-timeout-ms", "idle time allowed between requests (default 75000)",
               &Config::keepalive_timeout_ms, 1, 3600000),
      UintFlag("send-timeout-ms", "time a send may make no progress (default 60000)",
               &Config::send_timeout_ms, 1, 3600000),
      UintFlag("discard-body-timeout-ms",
               "after a response, time for the rest of a skipped request body (default 5000)",
               &Config::discard_body_timeout_ms, 1, 3600000),
      UintFlag("shutdown-timeout-ms",
               "on SIGTERM or SIGINT, time to finish responses in flight, then those left are cut; "
               "SIGQUIT waits for each as long as it keeps moving (default 10000)",
               &Config::shutdown_timeout_ms, 0, 3600000),
      UintFlag("max-connections",
               "connections per shard; at the limit idle keep-alive ones give way (a burst may "
               "take up to 32 more, the slots kept for connections on their way out; default "
               "10000)",
               &Config::max_connections, 1, 1000000),
      UintFlag("max-requests-per-connection", "then the connection closes (default 1000)",
               &Config::max_requests_per_connection, 1, 100000000),
      UintFlag("max-request-line", "longer request lines get 414 (default 8192)",
               &Config::max_request_line, 64, 65536),
      UintFlag("max-request-head", "larger request heads get 431 (default 16384)",
               &Config::max_request_head, 256, kMaxRequestHead),
      UintFlag("max-headers", "more header fields get 431 (default 64)", &Config::max_headers, 1,
               kMaxHeaderFields),
      UintFlag("max-discarded-body",
               "request bodies up to this are read and dropped; larger get 413 (default 65536)",
               &Config::max_discarded_body, 0, uint64_t{1} << 40),
      UintFlag("max-ranges", "more ranges in one request are answered 200 (default 16)",
               &Config::max_ranges, 1, kMaxRangesPerRequest),
      Flag{"index", "file served for a directory (default index.html)", false,
           [](Config* c, const std::string& v, std::string* error) {
             // A name beneath each directory: one that leaves it (or starts at the root) would
             // answer 403 for every directory.
             const bool leaves = v.empty() || v[0] == '/' || v == ".." || v.starts_with("../") ||
                                 v.ends_with("/..") || v.find("/../") != std::string::npos ||
                                 v.find('\0') != std::string::npos;
             if (leaves) {
               *error = "--index: '" + v + "' is not a file name beneath the directory";
               return false;
             }
             c->index = v;
             return true;
           }},
      StringFlag("mime-types",
                 "mime.types file read at start-up; one named here must be readable (default: "
                 "/etc/mime.types when it exists, else the built-in table)",
                 &Config::mime_types),
      BoolFlag("autoindex",
               "a directory without an index file is answered with a listing of it, as nginx's "
               "autoindex: names sorted bytewise, with sizes and times, dot files hidden unless "
               "--serve-dot-files; streamed as it is made, off the shard (default false: 403)",
               &Config::autoindex),
      UintFlag("autoindex-max-entries",
               "entries one listing shows: a directory with more shows the first this many by "
               "name, then a line says how many of how many; its names are held while it is "
               "sent, at most twice this many as it is read (default 100000)",
               &Config::autoindex_max_entries, 1, 1000000),
      Flag{"autoindex-format", "html or json, as nginx's autoindex_format (default html)", false,
           [](Config* c, const std::string& v, std::string* error) {
             if (v == "html") {
               c->autoindex_format = http::ListingFormat::kHtml;
             } else if (v == "json") {
               c->autoindex_format = http::ListingFormat::kJson;
             } else {
               *error = "--autoindex-format: expected html or json, got '" + v + "'";
               return false;
             }
             return true;
           }},
      Flag{"fallback",
           "/PATH: a file beneath --root served with 200 for a path that names nothing, as a "
           "single-page app needs (nginx's try_files $uri $uri/ /index.html); files and "
           "directories that exist, hidden paths and forbidden files keep their answers; a "
           "missing fallback file is 404 (default: none)",
           false,
           [](Config* c, const std::string& v, std::string* error) {
             if (v.size() < 2 || v[0] != '/' ||
                 !http::IsPlainRootPath(std::string_view(v).substr(1))) {
               *error = "--fallback: '" + v +
                        "' is not a plain path beneath the root (e.g. /index.html)";
               return false;
             }
             c->fallback = v.substr(1);
             return true;
           }},
      Flag{"charset",
           "charset parameter of text types (text/*, JavaScript, JSON, XML, SVG); off: none, "
           "as nginx's charset off (default utf-8)",
           false,
           [](Config* c, const std::string& v, std::string* error) {
             if (v == "off") {
               c->charset.clear();
               return true;
             }
             // An RFC 9110 token, as a charset name is (RFC 2978): nothing that could end the
             // parameter or the header.
             const bool token = !v.empty() && std::all_of(v.begin(), v.end(), [](char ch) {
               return (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') ||
                      (ch >= '0' && ch <= '9') || std::strchr("!#$%&'*+-.^_`|~", ch) != nullptr;
             });
             if (!token) {
               *error = "--charset: '" + v + "' is not a charset name (utf-8, iso-8859-1, ...; " +
                        "or off)";
               return false;
             }
             c->charset = v;
             return true;
           }},
      BoolFlag("http2",
               "HTTP/2: h2 offered by ALPN on --listen-tls listeners, and h2c with prior "
               "knowledge beside HTTP/1.1 on plaintext ones, as nginx's http2 switch; false: "
               "HTTP/1.1 alone (default true)",
               &Config::http2),
      UintFlag("http2-max-streams",
               "HTTP/2 streams a connection may have open at once (SETTINGS_MAX_CONCURRENT_STREAMS,"
               " as nginx's http2_max_concurrent_streams; default 100)",
               &Config::http2_max_streams, 1, 1000),
      BoolFlag("http2-sendfile",
               "h2c (plaintext HTTP/2): each DATA frame's payload from a file goes out with "
               "sendfile behind its frame header, as nginx's sendfile; false: payloads are read "
               "into the send buffer beside their frame headers, many frames a send, as over TLS, "
               "which measured cheaper (default false)",
               &Config::http2_sendfile),
      BoolFlag("precompressed",
               "serve file.br / file.gz to clients that accept them, when not older than file,"
               " or in file's place when there is no file (default true)",
               &Config::precompressed),
      BoolFlag("compress",
               "compress responses on the fly with gzip, br or zstd, as the client's "
               "Accept-Encoding prefers, when no precompressed sibling serves it, as nginx's "
               "gzip on; each variant is made once, off the shard, and cached (default false)",
               &Config::compress),
      StringFlag("compress-types",
                 "comma-separated media types --compress applies to, TYPE/SUBTYPE or TYPE/*, as "
                 "nginx's gzip_types (default text/*, application/javascript, application/json, "
                 "application/xml, application/wasm, application/manifest+json, image/svg+xml)",
                 &Config::compress_types),
      UintFlag("compress-min-bytes",
               "smaller files are sent as they are, as nginx's gzip_min_length (default 256)",
               &Config::compress_min_bytes, 0, uint64_t{1} << 40),
      UintFlag("compress-max-bytes",
               "larger files are sent as they are: the compressor reads a file whole (default "
               "8388608)",
               &Config::compress_max_bytes, 1, uint64_t{1} << 30),
      UintFlag("compress-cache-bytes",
               "compressed variants kept per shard, the least recently served dropped first "
               "(default 67108864)",
               &Config::compress_cache_bytes, 1 << 16, uint64_t{1} << 40),
      BoolFlag("serve-dot-files", "serve path segments starting with '.' (default false: 404, but for a leading"
               " /.well-known/, RFC 8615, which ACME's http-01 challenges use)",
               &Config::serve_dot_files),
      UintFlag("small-file-max", "files up to this size are cached in memory (default 16384)",
               &Config::small_file_max, 0, 16384),
      UintFlag("small-file-cache-bytes",
               "small-file cache per shard; resident once registered (default 16777216)",
               &Config::small_file_cache_bytes, 0, uint64_t{1} << 36),
      UintFlag("open-file-cache-entries", "open-file cache entries per shard (default 10000)",
               &Config::open_file_cache_entries, 16, 1000000),
      UintFlag("open-file-cache-valid-ms",
               "revalidate a cached file after this long, in the background for one more such "
               "period (default 1000; 0: every request)",
               &Config::open_file_cache_valid_ms, 0, 3600000),
      UintFlag("recv-buffers", "receive buffers per shard, a power of two (default 1024)",
               &Config::recv_buffers, 16, io::kMaxRecvBuffers),
      UintFlag("recv-buffer-size", "bytes per receive buffer (default 8192)",
               &Config::recv_buffer_size, 1024, kMaxRecvBufferSize),
      UintFlag("recv-pool-kib",
               "uring tiers with incremental receive buffers (ringd --probe): receive memory per "
               "shard, a power of two; replaces --recv-buffers there (default 1024)",
               &Config::recv_pool_kib, 128, 1 << 20),
      UintFlag("pipes", "splice pipes per shard (default 64)", &Config::pipes, 1, 4096),
      UintFlag("body-buffers",
               "bypass: registered buffers per shard that file bodies are read into and sent "
               "from, instead of splicing (measured slower here; default 0: always splice)",
               &Config::body_buffers, 0, 4096),
      UintFlag("body-buffer-kib", "bypass: size of each body buffer (default 128)",
               &Config::body_buffer_kib, 4, 16384),
      BoolFlag("send-zc",
               "uring: zero-copy sends (IORING_OP_SEND_ZC) for large buffers (default false)",
               &Config::send_zc),
      UintFlag("send-zc-min-bytes",
               "uring: smallest send that goes zero-copy with --send-zc (default 8192)",
               &Config::send_zc_min_bytes, 1, 1 << 30),
      UintFlag("send-turn-bytes",
               "file bytes one connection sends per turn of its shard's loop before the others "
               "get theirs, like nginx's sendfile_max_chunk, once the turn's "
               "--send-turn-share-bytes are spent (default 1048576)",
               &Config::send_turn_bytes, 16384, 1 << 30),
      UintFlag("send-turn-share-bytes",
               "a turn's first file bytes, shared among the connections that sent in the turn "
               "before: up to 1 MiB each, at least --send-turn-bytes (so only below 1 MiB of "
               "those: a few downloads send in fewer, larger calls); 0: every connection "
               "--send-turn-bytes (default 8388608)",
               &Config::send_turn_share_bytes, 0, 1 << 30),
      UintFlag("page-cache-trust-ms",
               "how long a file range found in the page cache is trusted before a send of it asks "
               "the page cache again; 0 asks before every send (default 100)",
               &Config::page_cache_trust_ms, 0, 60000),
      Flag{"send-order",
           "srpt (shortest remaining response first, with --send-slots and an aging bound) or "
           "fair (every body at once: the kernel shares the bandwidth) (default fair)",
           false,
           [](Config* c, const std::string& v, std::string* error) {
             if (v != "srpt" && v != "fair") {
               *error = "--send-order: expected srpt or fair, got '" + v + "'";
               return false;
             }
             c->send_srpt = v == "srpt";
             return true;
           }},
      UintFlag("send-slots",
               "srpt: long response bodies in flight per shard; the rest wait, least remaining "
               "first (default 2)",
               &Config::send_slots, 1, 65536),
      UintFlag("send-short-bytes",
               "srpt: a response with at most this many bytes left never waits for a slot "
               "(default 262144)",
               &Config::send_short_bytes, 0, uint64_t{1} << 40),
      UintFlag("send-max-wait-ms",
               "srpt: a body that has waited this long for a slot goes at once (the aging "
               "bound; default 500)",
               &Config::send_max_wait_ms, 1, 3600000),
      UintFlag("send-slot-hold-ms",
               "srpt: a body chunk still sending after this long stops counting against "
               "--send-slots (its client is slow, the shard is not busy; default 10)",
               &Config::send_slot_hold_ms, 1, 3600000),
      UintFlag("workers", "epoll backend: threads per shard for blocking file work (default 4)",
               &Config::workers, 1, 256),
      UintFlag("worker-queue", "epoll backend: queued file jobs per shard (default 1024)",
               &Config::worker_queue, 1, 1 << 20),
      Flag{"access-log",
           "append one line per response to this file, or off (default off); SIGUSR1 reopens it",
           false,
           [](Config* c, const std::string& v, std::string* error) {
             if (v.empty()) {
               *error = "--access-log: expected a file or off";
               return false;
             }
             c->access_log = v == "off" ? "" : v;
             return true;
           }},
      Flag{"access-log-format", "combined (nginx's, byte for byte) or json (default combined)",
           false,
           [](Config* c, const std::string& v, std::string* error) {
             if (v != "combined" && v != "json") {
               *error = "--access-log-format: expected combined or json, got '" + v + "'";
               return false;
             }
             c->access_log_json = v == "json";
             return true;
           }},
      UintFlag("access-log-buffer-bytes",
               "per shard, log lines waiting for the writer; beyond it lines are dropped and "
               "counted (a power of two; default 1048576)",
               &Config::access_log_buffer_bytes, 65536, 1u << 30),
      Flag{"error-log",
           "append why a response was an error (a 403, a 5xx; a 404 at info) to this file, or "
           "off (default stderr); SIGUSR1 reopens it",
           false,
           [](Config* c, const std::string& v, std::string* error) {
             if (v.empty()) {
               *error = "--error-log: expected a file or off";
               return false;
             }
             c->error_log_off = v == "off";
             c->error_log = v == "off" || v == "stderr" ? "" : v;
             return true;
           }},
      Flag{"error-log-level",
           "error (403 and 5xx), warn, or info (every 4xx as well, a missing file's 404 among "
           "them) (default error)",
           false,
           [](Config* c, const std::string& v, std::string* error) {
             static constexpr const char* kLevels[] = {"error", "warn", "info"};
             for (uint8_t i = 0; i < 3; ++i) {
               if (v == kLevels[i]) {
                 c->error_log_level = i;
                 return true;
               }
             }
             *error = "--error-log-level: expected error, warn or info, got '" + v + "'";
             return false;
           }},
      Flag{"admin-listen",
           "HOST:PORT for /metrics, /healthz, /readyz and /debug/shards (default off; never a "
           "--listen address)",
           false,
           [](Config* c, const std::string& v, std::string* error) {
             if (!ParseListen(v, &c->admin_listen, error, "--admin-listen")) return false;
             c->has_admin_listen = true;
             return true;
           }},
      Repeatable(Flag{"cache-control",
           "GLOB=VALUE: Cache-Control for files whose path matches GLOB ('*.css', '/assets/*'); "
           "repeatable, the first match wins; sent on 200, 206 and 304",
           false,
           [](Config* c, const std::string& v, std::string* error) {
             const size_t eq = v.find('=');
             if (eq == std::string::npos) {
               *error = "--cache-control: expected GLOB=VALUE, got '" + v + "'";
               return false;
             }
             return c->origin.AddCacheRule(std::string_view(v).substr(0, eq),
                                           std::string_view(v).substr(eq + 1), error);
           }}),
      Flag{"default-cache-control",
           "Cache-Control for files no --cache-control glob matches (default: none)", false,
           [](Config* c, const std::string& v, std::string* error) {
             return c->origin.SetDefaultCacheControl(v, error);
           }},
      Repeatable(Flag{"add-header",
           "'Name: value' added to every 200, 206 and 304 response; repeatable (security "
           "headers, CORS)",
           false,
           [](Config* c, const std::string& v, std::string* error) {
             const size_t colon = v.find(':');
             if (colon == std::string::npos) {
               *error = "--add-header: expected 'Name: value', got '" + v + "'";
               return false;
             }
             const std::string_view text(v);
             return c->origin.AddHeader(text.substr(0, colon),
                                        http::TrimOws(text.substr(colon + 1)), error);
           }}),
      Repeatable(Flag{"error-page",
           "STATUS=/PATH: serve that file (beneath --root) with the error status, e.g. "
           "404=/404.html; repeatable; a missing file falls back to the built-in page",
           false,
           [](Config* c, const std::string& v, std::string* error) {
             const size_t eq = v.find('=');
             uint64_t status = 0;
             if (eq == std::string::npos || !ParseUint(v.substr(0, eq), 999, &status) ||
                 v.size() < eq + 3 || v[eq + 1] != '/') {
               *error = "--error-page: expected STATUS=/PATH (e.g. 404=/404.html), got '" + v + "'";
               return false;
             }
             return c->origin.SetErrorPage(static_cast<int>(status), v.substr(eq + 2), error);
           }}),
      Repeatable(Flag{"site",
           "NAMES: a virtual host for these comma-separated names (aliases, *.example.org "
           "wildcards); "
           "the --root, --index, --add-header, --cache-control, --default-cache-control, "
           "--error-page, --tls-cert, --tls-key, --allow, --deny, --autoindex and "
           "--autoindex-format after it, up to the next "
           "--site or the end of its flagfile, are the site's own ([site NAME ...] in a flagfile is the same)",
           false,
           [](Config* c, const std::string& v, std::string* error) {
             // ParseArgs opens the site's scope; here only its names.
             SiteConfig site;
             size_t start = 0;
             while (start <= v.size()) {
               const size_t comma = std::min(v.find(',', start), v.size());
               std::string name = v.substr(start, comma - start);
               if (name.empty()) {
                 *error = "--site: expected NAME[,NAME...], got '" + v + "'";
                 return false;
               }
               std::string normal;
               if (!http::ParseSiteName(name, &normal, error)) {
                 *error = "--site: " + *error;
                 return false;
               }
               site.names.push_back(std::move(name));
               start = comma + 1;
             }
             c->sites.push_back(std::move(site));
             return true;
           }}),
      Flag{"unknown-site",
           "what answers a request whose Host names no --site: default (the default site: the "
           "top-level flags), 421 (Misdirected Request), or close (421, then the connection "
           "closes)",
           false,
           [](Config* c, const std::string& v, std::string* error) {
             if (v == "default") {
               c->unknown_site = UnknownSite::kDefault;
             } else if (v == "421") {
               c->unknown_site = UnknownSite::kMisdirected;
             } else if (v == "close") {
               c->unknown_site = UnknownSite::kClose;
             } else {
               *error = "--unknown-site: expected default, 421 or close, got '" + v + "'";
               return false;
             }
             return true;
           }},
      Flag{"user",
           "NAME[:GROUP]: as root, become this user (and group) once the sockets are bound, the "
           "root opened and the rings created",
           false,
           [](Config* c, const std::string& v, std::string* error) {
             const size_t colon = v.find(':');
             c->user = v.substr(0, colon);
             c->group = colon == std::string::npos ? "" : v.substr(colon + 1);
             if (c->user.empty() || (colon != std::string::npos && c->group.empty())) {
               *error = "--user: expected NAME or NAME:GROUP, got '" + v + "'";
               return false;
             }
             c->has_user = true;
             return true;
           }},
      BoolFlag("allow-root", "serve as root without --user (refused otherwise; default false)",
               &Config::allow_root),
      BoolFlag("takeover",
               "share the --listen, --listen-tls and --admin-listen addresses with a ringd "
               "already serving them (SO_REUSEPORT), for a restart without refused connections: "
               "start the new one, then SIGTERM the old (default false)",
               &Config::takeover),
      BoolFlag("probe", "print what the io_uring probe finds on this machine, then exit",
               &Config::probe_only),
      BoolFlag("check-config",
               "check the flags and every file they name as start-up does, without listening or "
               "serving: print each problem and exit 1, or 'ringd: configuration ok' and exit 0 "
               "(-t is the same, as nginx -t)",
               &Config::check_config),
  };
  return flags;
}

const Flag* FindFlag(const std::string& name) {
  for (const Flag& f : Flags()) {
    if (name == f.name) return &f;
  }
  return nullptr;
}

// Where each single-valued flag was first given ("the command line", "FILE:LINE"), to name it
// when the flag comes again.
using FirstSeen = std::map<std::string, std::string>;

// On failure *failed_at is the index of the argument at fault. where(i): where argument i was
// written.
bool ParseArgs(const std::vector<std::string>& args,
               const std::function<std::string(size_t)>& where, Config* config, std::string* error,
               bool* exit_now, int depth, FirstSeen* seen, size_t* failed_at);

// One line of a flagfile, read as a shell reads a word: '...' is taken literally, "..." with \",
// \\, \$ and \` escaped, a backslash outside quotes escapes the next character, and a # at the
// start of a word (outside quotes) begins a comment to the end of the line. One flag per line:
// --name=value, or --name value where the value is the rest of the line, blank space within it
// kept as written. Appends nothing for a blank or comment line; false with *error for a quote
// left open (a flag and its value are one line).
bool ReadFlagfileLine(std::string_view line, std::vector<std::string>* args, std::string* error) {
  std::string text;                        // the line with its quoting taken off
  std::string blank;                       // blank space not yet known to be inside the line
  size_t name_end = std::string::npos;     // in text: where the first blank space began
  size_t value_start = std::string::npos;  // and where the word after it begins
  size_t i = 0;
  while (i < line.size()) {
    const char c = line[i];
    if (c == ' ' || c == '\t' || c == '\r') {
      blank += c;
      ++i;
      continue;
    }
    if (c == '#' && (text.empty() || !blank.empty())) break;
    if (!blank.empty() && !text.empty()) {
      if (name_end == std::string::npos) name_end = text.size();
      text += blank;
      if (value_start == std::string::npos) value_start = text.size();
    }
    blank.clear();
    if (c == '\'') {
      const size_t close = line.find('\'', i + 1);
      if (close == std::string::npos) {
        *error =
            "a ' quote is not closed on its line (a flag and its value are one line: "
            "--add-header='X-Frame-Options: DENY')";
        return false;
      }
      text.append(line.substr(i + 1, close - i - 1));
      i = close + 1;
    } else if (c == '"') {
      for (++i;; ++i) {
        if (i >= line.size()) {
          *error =
              "a \" quote is not closed on its line (a flag and its value are one line: "
              "--add-header=\"X-Frame-Options: DENY\")";
          return false;
        }
        if (line[i] == '"') break;
        if (line[i] == '\\' && i + 1 < line.size() && std::strchr("\"\\$`", line[i + 1]) != nullptr)
          ++i;
        text += line[i];
      }
      ++i;
    } else if (c == '\\') {
      if (i + 1 >= line.size()) {
        *error = "the line ends in a backslash (a flag and its value are one line)";
        return false;
      }
      text += line[i + 1];
      i += 2;
    } else {
      text += c;
      ++i;
    }
  }
  if (text.empty()) return true;
  // --name value, as on a command line: the name is the first word, when it has no '='.
  const std::string_view first = std::string_view(text).substr(0, name_end);
  if (name_end != std::string::npos && first.starts_with("--") &&
      first.find('=') == std::string_view::npos) {
    args->push_back(std::string(first));
    args->push_back(text.substr(value_start));
  } else {
    args->push_back(text);
  }
  return true;
}

// "[site example.org www.example.org]": true with the names, comma-separated, in *names (what
// --site takes). False for any other line; with *error set for a line that begins with '[' but is
// not such a section.
bool SiteSectionLine(std::string_view line, std::string* names, std::string* error) {
  line = http::TrimOws(line);
  if (!line.starts_with('[')) return false;
  // A comment may follow, as after a flag: "[site example.org]   # the main site".
  for (size_t i = 1; i < line.size(); ++i) {
    if (line[i] == '#' && (line[i - 1] == ' ' || line[i - 1] == '\t')) {
      line = http::TrimOws(line.substr(0, i));
      break;
    }
  }
  std::string_view inner = line.substr(1);
  if (!inner.starts_with("site") || !inner.ends_with(']') || inner.size() < 6 ||
      (inner[4] != ' ' && inner[4] != '\t')) {
    *error = "expected a section [site NAME ...], got '" + std::string(line) + "'";
    return false;
  }
  inner = inner.substr(4, inner.size() - 5);
  for (size_t i = 0; i < inner.size();) {
    while (i < inner.size() && (inner[i] == ' ' || inner[i] == '\t')) ++i;
    const size_t start = i;
    while (i < inner.size() && inner[i] != ' ' && inner[i] != '\t') ++i;
    if (i == start) break;
    if (!names->empty()) *names += ',';
    names->append(inner.substr(start, i - start));
  }
  if (names->empty()) {
    *error = "expected a section [site NAME ...], got '" + std::string(line) + "'";
    return false;
  }
  return true;
}

// The flags a site may have of its own; every other flag is the process's.
bool SiteFlag(std::string_view name) {
  for (const char* f :
       {"root", "index", "add-header", "cache-control", "default-cache-control", "error-page",
        "tls-cert", "tls-key", "allow", "deny", "autoindex", "autoindex-format"}) {
    if (name == f) return true;
  }
  return false;
}

// A site's scope in one argument list (the command line, or one flagfile): from its --site to
// the next, or to the end of the list. Its flags are parsed as the top-level ones are, into a
// Config of their own, and taken into the SiteConfig when the scope closes.
struct SiteScope {
  bool open = false;
  Config flags;
  FirstSeen seen;
};

bool CloseSite(SiteScope* scope, Config* config, std::string* error) {
  if (!scope->open) return true;
  scope->open = false;
  SiteConfig& site = config->sites.back();
  const Config& f = scope->flags;
  const std::string what = "--site " + site.name();
  if (f.root.empty()) {
    *error = what + ": needs --root (the directory its names are served from)";
    return false;
  }
  if (f.tls_cert.size() != f.tls_key.size()) {
    *error = what + ": --tls-cert and --tls-key come in pairs: got " +
             std::to_string(f.tls_cert.size()) + " certificates and " +
             std::to_string(f.tls_key.size()) + " keys";
    return false;
  }
  site.root = f.root;
  if (scope->seen.contains("index")) site.index = f.index;
  site.own_origin = !f.origin.empty();
  site.origin = f.origin;
  site.tls_cert = f.tls_cert;
  site.tls_key = f.tls_key;
  site.client_rules = f.client_rules;
  if (scope->seen.contains("autoindex")) site.autoindex = f.autoindex;
  if (scope->seen.contains("autoindex-format")) site.autoindex_format = f.autoindex_format;
  scope->flags = Config();
  scope->seen.clear();
  return true;
}

// A flagfile's error names the file and the line: "/etc/ringd/ringd.conf:12: unknown flag ...".
bool ReadFlagfile(const std::string& path, Config* config, std::string* error, bool* exit_now,
                  int depth, FirstSeen* seen) {
  if (depth > kMaxFlagfileDepth) {
    *error = "--flagfile: nested too deeply at '" + path + "'";
    return false;
  }
  std::ifstream in(path);
  if (!in) {
    *error = "--flagfile: cannot read '" + path + "': " + strerror(errno);
    return false;
  }
  std::vector<std::string> args;
  std::vector<int> line_numbers;  // of each argument
  std::string line;
  for (int number = 1; std::getline(in, line); ++number) {
    if (std::string names; SiteSectionLine(line, &names, error)) {
      args.push_back("--site=" + names);
      line_numbers.resize(args.size(), number);
      continue;
    } else if (!error->empty()) {
      *error = path + ":" + std::to_string(number) + ": " + *error;
      return false;
    }
    if (!ReadFlagfileLine(line, &args, error)) {
      *error = path + ":" + std::to_string(number) + ": " + *error;
      return false;
    }
    line_numbers.resize(args.size(), number);
  }
  auto where = [&](size_t i) {
    return path + ":" + std::to_string(line_numbers[std::min(i, line_numbers.size() - 1)]);
  };
  size_t failed_at = 0;
  if (ParseArgs(args, where, config, error, exit_now, depth + 1, seen, &failed_at)) return true;
  *error = where(failed_at) + ": " + *error;
  return false;
}

bool ParseArgs(const std::vector<std::string>& args,
               const std::function<std::string(size_t)>& where, Config* config, std::string* error,
               bool* exit_now, int depth, FirstSeen* seen, size_t* failed_at) {
  SiteScope site;
  for (size_t i = 0; i < args.size(); ++i) {
    *failed_at = i;
    const std::string& arg = args[i] == "-t" ? "--check-config" : args[i];  // nginx -t
    if (arg == "--help" || arg == "-h") {
      std::fputs(Usage().c_str(), stdout);
      *exit_now = true;
      return true;
    }
    if (arg == "--version" || arg == "-v" || arg == "-V") {
      std::puts(VersionLine().c_str());
      *exit_now = true;
      return true;
    }
    if (arg.size() < 3 || arg[0] != '-' || arg[1] != '-') {
      *error = "unexpected argument '" + arg + "' (flags look like --name=value; see --help)";
      return false;
    }
    std::string name = arg.substr(2), value;
    const size_t eq = name.find('=');
    const bool has_value = eq != std::string::npos;
    if (has_value) {
      value = name.substr(eq + 1);
      name = name.substr(0, eq);
    }
    if (name == "flagfile") {
      if (site.open) {
        *error = "--flagfile cannot be given inside --site " + config->sites.back().name() +
                 " (a site's flags are in the file that names it)";
        return false;
      }
      if (!has_value) {
        if (i + 1 >= args.size()) {
          *error = "--flagfile: needs a file";
          return false;
        }
        value = args[++i];
      }
      if (!ReadFlagfile(value, config, error, exit_now, depth, seen)) return false;
      if (*exit_now) return true;
      continue;
    }
    const Flag* flag = FindFlag(name);
    bool negated = false;  // --noname
    if (flag == nullptr && !has_value && name.starts_with("no")) {
      const Flag* f = FindFlag(name.substr(2));
      if (f != nullptr && f->is_bool) {
        flag = f;
        negated = true;
      }
    }
    if (flag == nullptr) {
      *error = "unknown flag --" + name + " (see --help)";
      return false;
    }
    const bool in_site = site.open && SiteFlag(flag->name);
    if (site.open && !in_site && std::string_view(flag->name) != "site") {
      *error = std::string("--") + flag->name + " cannot be given inside --site " +
               config->sites.back().name() +
               ": a site has --root, --index, --add-header, --cache-control, "
               "--default-cache-control, --error-page, --tls-cert, --tls-key, --allow and --deny; "
               "give the process's flags before the first site";
      return false;
    }
    if (!flag->repeatable) {
      const auto [first, is_first] = (in_site ? &site.seen : seen)->emplace(flag->name, where(i));
      if (!is_first) {
        *error = std::string("--") + flag->name + " is given twice (first " +
                 (first->second.empty() ? "on the command line" : "at " + first->second) +
                 "): it takes one value";
        return false;
      }
    }
    if (negated) {
      value = "false";
    } else if (!has_value) {
      if (flag->is_bool) {
        value = "true";
      } else if (i + 1 < args.size()) {
        value = args[++i];
      } else {
        *error = "--" + name + ": needs a value";
        return false;
      }
    }
    if (std::string_view(flag->name) == "site") {
      if (!CloseSite(&site, config, error)) return false;
      site.open = true;
    }
    if (in_site) {
      // A site's flags are one list to a reload: any change in any site is a change of --site.
      config->given.emplace_back("site", std::string("--") + flag->name + "=" + value);
      if (!flag->set(&site.flags, value, error)) {
        *error = "--site " + config->sites.back().name() + ": " + *error;
        return false;
      }
      continue;
    }
    config->given.emplace_back(flag->name, value);
    if (!flag->set(config, value, error)) return false;
  }
  *failed_at = args.empty() ? 0 : args.size() - 1;
  return CloseSite(&site, config, error);
}

}  // namespace

namespace {

// --help's layout: every flag once, under its topic, with the placeholder its value is shown as
// ("" for a flag that is an action: --probe, --check-config). A flag missing here still prints,
// under "Other" (config_test fails while there is one).
struct HelpTopic {
  const char* title;
  std::vector<std::pair<const char*, const char*>> flags;  // name, placeholder
};

const std::vector<HelpTopic>& HelpTopics() {
  static const std::vector<HelpTopic> topics = {
      {"Listening",
       {{"listen", "HOST:PORT"},
        {"listen-tls", "HOST:PORT"},
        {"admin-listen", "HOST:PORT"},
        {"redirect-https", "BOOL"},
        {"defer-accept", "BOOL"},
        {"takeover", "BOOL"}}},
      {"Who may connect",
       {{"proxy-from", "CIDR"},
        {"allow", "CIDR"},
        {"deny", "CIDR"},
        {"limit-conn", "N"},
        {"limit-req", "RATE"},
        {"limit-req-status", "429|503"},
        {"limit-table", "N"},
        {"limit-ipv6-prefix", "BITS"},
        {"real-ip-from", "CIDR"},
        {"real-ip-header", "NAME"},
        {"real-ip-recursive", "BOOL"}}},
      {"Files and responses",
       {{"root", "DIR"},
        {"index", "NAME"},
        {"mime-types", "FILE"},
        {"charset", "NAME"},
        {"precompressed", "BOOL"},
        {"compress", "BOOL"},
        {"compress-types", "TYPES"},
        {"compress-min-bytes", "BYTES"},
        {"compress-max-bytes", "BYTES"},
        {"compress-cache-bytes", "BYTES"},
        {"serve-dot-files", "BOOL"},
        {"cache-control", "GLOB=VALUE"},
        {"default-cache-control", "VALUE"},
        {"add-header", "HEADER"},
        {"error-page", "STATUS=/PATH"},
        {"fallback", "/PATH"},
        {"autoindex", "BOOL"},
        {"autoindex-format", "html|json"},
        {"autoindex-max-entries", "N"}}},
      {"Sites (virtual hosts)", {{"site", "NAMES"}, {"unknown-site", "default|421|close"}}},
      {"HTTPS",
       {{"tls-cert", "FILE"},
        {"tls-key", "FILE"},
        {"tls-ocsp", "FILE"},
        {"tls-expired", "serve|refuse"},
        {"tls-min-version", "VERSION"},
        {"tls-ciphers", "LIST"},
        {"tls-ciphersuites", "LIST"},
        {"tls-tickets", "N"},
        {"tls-ticket-rotate-s", "SECONDS"},
        {"tls-max-handshakes", "N"}}},
      {"HTTP/2", {{"http2", "BOOL"}, {"http2-max-streams", "N"}, {"http2-sendfile", "BOOL"}}},
      {"Limits and timeouts",
       {{"max-connections", "N"},
        {"max-requests-per-connection", "N"},
        {"max-request-line", "BYTES"},
        {"max-request-head", "BYTES"},
        {"max-headers", "N"},
        {"max-discarded-body", "BYTES"},
        {"max-ranges", "N"},
        {"header-timeout-ms", "MS"},
        {"keepalive-timeout-ms", "MS"},
        {"send-timeout-ms", "MS"},
        {"discard-body-timeout-ms", "MS"},
        {"shutdown-timeout-ms", "MS"}}},
      {"Logs and metrics",
       {{"access-log", "FILE"},
        {"access-log-format", "FORMAT"},
        {"access-log-buffer-bytes", "BYTES"},
        {"error-log", "FILE"},
        {"error-log-level", "LEVEL"}}},
      {"io tiers",
       {{"io", "TIER"},
        {"io-mask", "FEATURES"},
        {"sqpoll", "BOOL"},
        {"sqpoll-per-shard", "BOOL"},
        {"sqpoll-cpu", "CPU"},
        {"sqpoll-idle-ms", "MS"},
        {"batch-wait-us", "US"},
        {"busy-poll-us", "US"},
        {"io-wq-max-workers", "N"},
        {"bypass-sendfile", "BOOL"},
        {"splice-min-bytes", "BYTES"},
        {"pipes", "N"},
        {"body-buffers", "N"},
        {"body-buffer-kib", "KIB"},
        {"send-zc", "BOOL"},
        {"send-zc-min-bytes", "BYTES"},
        {"recv-pool-kib", "KIB"},
        {"workers", "N"},
        {"worker-queue", "N"}}},
      {"Tuning",
       {{"shards", "N"},
        {"pin", "BOOL"},
        {"tcp-nopush", "BOOL"},
        {"small-file-max", "BYTES"},
        {"small-file-cache-bytes", "BYTES"},
        {"open-file-cache-entries", "N"},
        {"open-file-cache-valid-ms", "MS"},
        {"recv-buffers", "N"},
        {"recv-buffer-size", "BYTES"},
        {"send-turn-bytes", "BYTES"},
        {"send-turn-share-bytes", "BYTES"},
        {"page-cache-trust-ms", "MS"},
        {"send-order", "ORDER"},
        {"send-slots", "N"},
        {"send-short-bytes", "BYTES"},
        {"send-max-wait-ms", "MS"},
        {"send-slot-hold-ms", "MS"}}},
      {"Process",
       {{"user", "NAME[:GROUP]"}, {"allow-root", "BOOL"}, {"probe", ""}, {"check-config", ""}}},
  };
  return topics;
}

constexpr size_t kHelpColumns = 100;
constexpr size_t kHelpTextColumn = 34;  // where each flag's text begins

// One flag's entry: "  --name=VALUE" and its text wrapped at kHelpColumns, continued under
// kHelpTextColumn; a name too long for its column puts the text on the lines below.
std::string HelpEntry(const std::string& name, std::string_view text) {
  std::string out = "  " + name;
  if (out.size() + 1 <= kHelpTextColumn) {
    out.resize(kHelpTextColumn, ' ');
  } else {
    out += "\n" + std::string(kHelpTextColumn, ' ');
  }
  size_t column = kHelpTextColumn;
  bool first = true;
  while (!text.empty()) {
    const size_t space = text.find(' ');
    const std::string_view word = text.substr(0, space);
    text = space == std::string_view::npos ? std::string_view() : text.substr(space + 1);
    if (!first && column + 1 + word.size() > kHelpColumns) {
      out += "\n" + std::string(kHelpTextColumn, ' ');
      column = kHelpTextColumn;
      first = true;
    }
    if (!first) {
      out += ' ';
      ++column;
    }
    out += word;
    column += word.size();
    first = false;
  }
  return out + "\n";
}

}  // namespace

std::string Usage() {
  std::string out =
      "usage: ringd --root DIR [flags]\n"
      "       ringd -t --flagfile FILE      (check the configuration, as nginx -t)\n"
      "A static file origin over HTTP/1.1 and HTTP/2, on io_uring (epoll where io_uring is "
      "unusable).\n"
      "Flags are --name=VALUE or --name VALUE; booleans also --name / --noname.\n";
  std::vector<const Flag*> placed;
  auto entry = [&](const char* name, const char* placeholder) {
    const Flag* f = FindFlag(name);
    if (f == nullptr) return std::string();
    placed.push_back(f);
    return HelpEntry(std::string("--") + name + (*placeholder != 0 ? "=" : "") + placeholder,
                     f->help);
  };
  for (const HelpTopic& topic : HelpTopics()) {
    out += std::string("\n") + topic.title + ":\n";
    for (const auto& [name, placeholder] : topic.flags) out += entry(name, placeholder);
  }
  // The last topic (Process) ends with what the parser handles itself.
  out += HelpEntry("--flagfile=FILE",
                   "read more flags from FILE, one per line: --name=value or --name value, "
                   "quoted as a shell quotes ('...', \"...\"); a # after blank space begins a "
                   "comment");
  out += HelpEntry("--help, -h", "print this list and exit");
  out += HelpEntry("--version, -v, -V",
                   "print the version and the commit ringd was built from, and exit");
  std::string other;
  for (const Flag& f : Flags()) {
    if (std::find(placed.begin(), placed.end(), &f) == placed.end())
      other += HelpEntry(std::string("--") + f.name + (f.is_bool ? "=BOOL" : "=VALUE"), f.help);
  }
  if (!other.empty()) out += "\nOther:\n" + other;
  return out;
}

uint32_t IncrementalRecvBufferBytes(const Config& config) {
  return std::bit_ceil(std::max(kIncrementalRecvBuffer, config.recv_buffer_size));
}

namespace {

// --root names a directory that can be used.
bool CheckRoot(Config* config, std::string* error) {
  if (config->root.empty()) {
    *error = "--root is required (the directory to serve; see --help)";
    return false;
  }
  struct stat st;
  if (::stat(config->root.c_str(), &st) != 0) {
    *error = "--root: cannot use '" + config->root + "': " + strerror(errno);
    return false;
  }
  if (!S_ISDIR(st.st_mode)) {
    *error = "--root: '" + config->root + "' is not a directory";
    return false;
  }
  return true;
}

// The receive pool's sizes.
bool CheckReceivePool(Config* config, std::string* error) {
  if ((config->recv_buffers & (config->recv_buffers - 1)) != 0) {
    *error = "--recv-buffers: must be a power of two, got " + std::to_string(config->recv_buffers);
    return false;
  }
  if ((config->recv_pool_kib & (config->recv_pool_kib - 1)) != 0) {
    *error =
        "--recv-pool-kib: must be a power of two, got " + std::to_string(config->recv_pool_kib);
    return false;
  }
  const uint32_t inc_buffer = IncrementalRecvBufferBytes(*config);
  if (uint64_t{config->recv_pool_kib} * 1024 < 2 * uint64_t{inc_buffer}) {
    *error = "--recv-pool-kib: must hold two receive buffers of " +
             std::to_string(inc_buffer / 1024) + " KiB";
    return false;
  }
  return true;
}

// Flags that need or exclude one another.
// --compress's flags become the planner's policy.
bool CheckCompress(Config* config, std::string* error) {
  http::CompressPolicy& p = config->compress_policy;
  const std::string_view types = config->compress_types.empty()
                                     ? http::kDefaultCompressTypes
                                     : std::string_view(config->compress_types);
  if (!p.ParseTypes(types, error)) {
    *error = "--compress-types: " + *error;
    return false;
  }
  if (config->compress_min_bytes > config->compress_max_bytes) {
    *error = "--compress-min-bytes must not exceed --compress-max-bytes";
    return false;
  }
  p.min_bytes = config->compress_min_bytes;
  p.max_bytes = config->compress_max_bytes;
  return true;
}

bool CheckCombinations(Config* config, std::string* error) {
  if (config->sqpoll_per_shard && !config->sqpoll) {
    *error = "--sqpoll-per-shard needs --sqpoll";
    return false;
  }
  if (config->batch_wait_us != 0 && config->sqpoll) {
    *error =
        "--batch-wait-us does not apply with --sqpoll (the SQ thread submits; the shard waits)";
    return false;
  }
  if (config->max_request_line > config->max_request_head) {
    *error = "--max-request-line must not exceed --max-request-head";
    return false;
  }
  return CheckCompress(config, error);
}

// Each site's names are its own and its root is a directory.
bool CheckSites(Config* config, std::string* error) {
  http::SiteTable table;
  for (const SiteConfig& site : config->sites) {
    const std::string what = "--site " + site.name();
    if (!table.Add(site.names, error)) {
      *error = what + ": " + *error;
      return false;
    }
    struct stat st;
    if (::stat(site.root.c_str(), &st) != 0) {
      *error = what + ": --root: cannot use '" + site.root + "': " + strerror(errno);
      return false;
    }
    if (!S_ISDIR(st.st_mode)) {
      *error = what + ": --root: '" + site.root + "' is not a directory";
      return false;
    }
  }
  if (config->sites.empty() && config->unknown_site != UnknownSite::kDefault) {
    *error = "--unknown-site needs a --site: without sites every request is the default site's";
    return false;
  }
  return true;
}

// The HTTPS flags: certificates and keys in pairs, and what needs a certificate.
bool CheckTls(Config* config, std::string* error) {
  bool site_certs = false;
  for (const SiteConfig& site : config->sites) site_certs |= !site.tls_cert.empty();
  if (site_certs && config->tls_cert.empty()) {
    *error =
        "a --site has a --tls-cert and the top level has none: give the default site's "
        "certificate (--tls-cert, --tls-key before the first site), served to clients that name "
        "no site";
    return false;
  }
  if (config->tls_cert.size() != config->tls_key.size()) {
    *error = "--tls-cert and --tls-key come in pairs: got " +
             std::to_string(config->tls_cert.size()) + " certificates and " +
             std::to_string(config->tls_key.size()) + " keys";
    return false;
  }
  if (!config->listen_tls.empty() && config->tls_cert.empty()) {
    *error = "--listen-tls needs a certificate: --tls-cert FILE --tls-key FILE";
    return false;
  }
  // With socket activation the HTTPS listeners may come from systemd (sockets named https):
  // --redirect-https and --tls-cert without --listen-tls are judged once they are known.
  if (config->redirect_https && config->tls_cert.empty()) {
    *error = "--redirect-https needs --listen-tls: there is no HTTPS to redirect to";
    return false;
  }
  if (config->tls_cert.empty() && !config->tls_ocsp.empty()) {
    *error = "--tls-ocsp without --tls-cert: there is no certificate to staple it to";
    return false;
  }
  return true;
}

// The access log's buffer.
bool CheckAccessLog(Config* config, std::string* error) {
  if ((config->access_log_buffer_bytes & (config->access_log_buffer_bytes - 1)) != 0) {
    *error = "--access-log-buffer-bytes: must be a power of two, got " +
             std::to_string(config->access_log_buffer_bytes);
    return false;
  }
  return true;
}

// --user and --group, looked up now (before any privilege is dropped).
bool ResolveUser(Config* config, std::string* error) {
  if (config->has_user) {
    const passwd* pw = ::getpwnam(config->user.c_str());
    if (pw == nullptr) {
      *error = "--user: no such user '" + config->user + "'";
      return false;
    }
    config->uid = pw->pw_uid;
    config->gid = pw->pw_gid;
    if (!config->group.empty()) {
      const group* gr = ::getgrnam(config->group.c_str());
      if (gr == nullptr) {
        *error = "--user: no such group '" + config->group + "'";
        return false;
      }
      config->gid = gr->gr_gid;
    }
    if (config->uid == 0) {
      *error = "--user: '" + config->user + "' is root; name an unprivileged user";
      return false;
    }
    if (config->sqpoll) {
      // The kernel's SQ thread submits with the credentials the ring was created with (root),
      // so with --sqpoll every open would still run as root after the switch.
      *error = "--user cannot be combined with --sqpoll: the SQ thread keeps root's credentials";
      return false;
    }
  }
  return true;
}

// Every listener has an address of its own. Two sockets of one SO_REUSEPORT group would split
// its connections between them: a port given to --listen and --listen-tls would answer half its
// clients in the other protocol, and the admin listener would take files' requests. A wildcard
// host overlaps every host of its family on the same port.
bool CheckListenAddresses(Config* config, std::string* error) {
  struct Named {
    const char* flag;
    const ListenAddress* address;
  };
  std::vector<Named> all;
  for (const ListenAddress& a : config->listen) all.push_back({"--listen", &a});
  for (const ListenAddress& a : config->listen_tls) all.push_back({"--listen-tls", &a});
  if (config->has_admin_listen) all.push_back({"--admin-listen", &config->admin_listen});
  for (size_t j = 1; j < all.size(); ++j) {
    for (size_t i = 0; i < j; ++i) {
      if (!SameEndpoint(*all[i].address, *all[j].address)) continue;
      const std::string what = std::string(all[j].flag) + " " + all[j].address->text;
      const std::string other = std::string(all[i].flag) + " " + all[i].address->text;
      if (std::string_view(all[j].flag) == "--admin-listen") {
        *error = "--admin-listen: " + all[j].address->text + " overlaps " + other +
                 "; the admin listener needs an address of its own";
      } else {
        *error = what + (what == other ? " is given twice" : " overlaps " + other) +
                 ": one port, one listener";
      }
      return false;
    }
  }
  return true;
}

}  // namespace

namespace {

// The command line's checks, in order; false with one line in *error at the first that fails.
bool Parse(int argc, char** argv, Config* config, std::string* error, bool* exit_now) {
  std::vector<std::string> args(argv + 1, argv + argc);
  FirstSeen seen;
  size_t failed_at;
  auto command_line = [](size_t) { return std::string(); };
  if (!ParseArgs(args, command_line, config, error, exit_now, 0, &seen, &failed_at)) return false;
  if (*exit_now || config->probe_only) return true;
  if (!CheckRoot(config, error) || !CheckSites(config, error) || !CheckReceivePool(config, error) ||
      !CheckCombinations(config, error) || !CheckTls(config, error)) {
    return false;
  }
  if (config->proxy_from.empty()) {  // loopback: an HAProxy on the same host
    config->proxy_from.Add(true, *http::ParseCidr("127.0.0.0/8"));
    config->proxy_from.Add(true, *http::ParseCidr("::1"));
  }
  if (config->listen.empty() && config->listen_tls.empty()) {
    ListenAddress a;
    if (!ParseListen("127.0.0.1:8080", &a, error)) return false;
    config->listen.push_back(a);
  }
  return CheckAccessLog(config, error) && ResolveUser(config, error) &&
         CheckListenAddresses(config, error);
}

}  // namespace

absl::Status ParseFlags(int argc, char** argv, Config* config, bool* exit_now) {
  *exit_now = false;
  // A configuration test reports a flag it cannot parse as a problem too, wherever -t stands.
  for (int i = 1; i < argc; ++i) {
    const std::string_view arg = argv[i];
    if (arg == "-t" || arg == "--check-config") config->check_config = true;
  }
  std::string error;
  if (!Parse(argc, argv, config, &error, exit_now)) return absl::InvalidArgumentError(error);
  return absl::OkStatus();
}

}  // namespace ringd
