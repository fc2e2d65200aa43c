// ringd's configuration: every flag, its default, and the parser that fills it from the command
// line and from --flagfile. A bad flag or value is one line on stderr and exit status 2.
//
//   Config config;
//   bool exit_now;
//   if (absl::Status s = ParseFlags(argc, argv, &config, &exit_now); !s.ok()) Die(2, s);
#pragma once

#include <netinet/in.h>
#include <sys/socket.h>

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "server/http/client_address.h"
#include "server/http/client_limits.h"
#include "server/http/compression.h"
#include "server/http/dir_listing.h"
#include "server/http/origin_headers.h"

namespace ringd {

struct ListenAddress {
  std::string text;  // as given, for messages (without its options)
  sockaddr_storage addr{};
  socklen_t len = 0;
  // ",proxy": every connection begins with a PROXY protocol header (v1 or v2) naming the client,
  // before HTTP or TLS; from a peer not in --proxy-from, or without one, it is closed.
  bool proxy = false;
};

// Hard ceilings of flags that size arrays elsewhere (static_asserts tie them to those arrays).
constexpr uint32_t kMaxHeaderFields = 256;     // --max-headers: Shard's header array
constexpr uint32_t kMaxRangesPerRequest = 64;  // --max-ranges: http::RangeSet
constexpr uint32_t kMaxRequestHead = 65536;    // --max-request-head
constexpr uint32_t kMaxRecvBufferSize = 1 << 20;
constexpr uint32_t kIncrementalRecvBuffer = 64 << 10;  // one buffer of --recv-pool-kib

// A virtual host (--site=NAMES, or a [site NAMES] line in a flagfile): requests whose Host names
// it are served from its root with its options; the top-level flags are the default site's.
struct SiteConfig {
  std::vector<std::string> names;  // as given: host names, "*.SUFFIX" wildcards, addresses
  std::string where;               // where its --site was given, for messages
  std::string root;
  std::string index;  // empty: the top-level --index
  // --add-header, --cache-control, --default-cache-control and --error-page given in the site;
  // without any (own_origin false) the site has the top-level ones, as an nginx server block
  // inherits add_header and error_page only when it has none of its own.
  bool own_origin = false;
  http::OriginHeaders origin;
  std::vector<std::string> tls_cert, tls_key;  // its certificates, chosen by SNI
  // --allow / --deny given in the site: who may ask it (a refused client's request is answered
  // 403, as nginx's allow/deny in a server block); empty: everyone the top-level rules let in.
  http::ClientRules client_rules;
  // --autoindex / --autoindex-format given in the site (unset: the top-level ones).
  std::optional<bool> autoindex;
  std::optional<http::ListingFormat> autoindex_format;
  std::string name() const { return names.front(); }  // the log's and the metrics' name
};

// What answers a request whose host names no site (or that has no Host) when there are sites.
enum class UnknownSite : uint8_t { kDefault, kMisdirected, kClose };

struct Config {
  std::string root;
  // Virtual hosts, chosen by Host (HTTP/2: :authority); empty: every request is the default
  // site's (the top-level flags), at no cost.
  std::vector<SiteConfig> sites;
  UnknownSite unknown_site = UnknownSite::kDefault;  // --unknown-site
  std::vector<ListenAddress> listen;
  // HTTPS (server/tls): listeners whose connections speak TLS, and the certificate and key files
  // (PEM), paired in order.
  std::vector<ListenAddress> listen_tls;
  std::vector<std::string> tls_cert;
  std::vector<std::string> tls_key;
  std::vector<std::string> tls_ocsp;  // DER OCSP responses to staple, each for one certificate
  std::string tls_min_version = "1.2";
  // --tls-expired=refuse: an expired certificate stops start-up (and fails a reload), and /readyz
  // answers 503 once one in use expires. serve (the default): it is served with a line, a metric
  // and a warning in /readyz's 200, and the other listeners and sites keep serving.
  bool tls_refuse_expired = false;
  uint32_t tls_max_handshakes = 256;  // per shard
  bool redirect_https = false;        // plaintext listeners answer 301 to https://
  bool defer_accept = false;          // TCP_DEFER_ACCEPT (1 s) on every listener
  // A new ticket key this often; the previous one still resumes.
  uint32_t tls_ticket_rotate_s = 43200;
  uint32_t tls_tickets = 1;  // TLS 1.3 tickets per handshake; 0: no ticket resumption
  std::string tls_ciphers = "ECDHE+AESGCM:ECDHE+CHACHA20";
  std::string tls_ciphersuites =
      "TLS_AES_128_GCM_SHA256:TLS_AES_256_GCM_SHA384:TLS_CHACHA20_POLY1305_SHA256";
  // Who may send a PROXY protocol header to a ",proxy" listener (--proxy-from; default
  // loopback: 127.0.0.0/8 and ::1), and who may connect at all (--allow / --deny, in order, the
  // first match deciding, as nginx's allow/deny; empty: everyone), judged on the client's
  // address (the PROXY header's where the listener reads one).
  http::ClientRules proxy_from;
  bool proxy_from_all = false;  // --proxy-from all: no peer is asked for its address
  http::ClientRules client_rules;
  // Limits per client (a shard's own tables: with several shards, each shard's;
  // docs/OPERATIONS.md): concurrent connections (--limit-conn, 0: none), closed at accept beyond
  // it; a request rate with a burst (--limit-req; microrequests_per_s 0: none), answered
  // limit_req_status (with Retry-After) beyond it; the rate table's entries per shard; IPv6 clients
  // keyed by this prefix.
  uint32_t limit_conn = 0;
  http::RateLimit limit_req;
  uint32_t limit_req_status = 503;
  uint32_t limit_table = 16384;
  uint32_t limit_ipv6_prefix = 64;
  // nginx's realip: a request from a --real-ip-from peer names its client in this header.
  http::ClientRules real_ip_from;
  std::string real_ip_header = "X-Forwarded-For";
  bool real_ip_recursive = false;
  // Whether some --site has --allow / --deny of its own.
  bool any_site_rules() const {
    for (const SiteConfig& s : sites)
      if (!s.client_rules.empty()) return true;
    return false;
  }
  // Whether some site, or the top level, lists directories (the lister thread is started).
  bool any_autoindex() const {
    if (autoindex) return true;
    for (const SiteConfig& s : sites)
      if (s.autoindex.value_or(false)) return true;
    return false;
  }
  bool limits_clients() const { return limit_conn != 0 || limit_req.microrequests_per_s != 0; }
  bool any_proxy_listener() const {
    for (const ListenAddress& a : listen)
      if (a.proxy) return true;
    for (const ListenAddress& a : listen_tls)
      if (a.proxy) return true;
    return false;
  }
  uint32_t shards = 0;  // 0: one per CPU this process may run on
  // --io: a tier's name or "auto"; the composition root checks it against io's tier table.
  std::string io = "auto";
  // --io-mask: features the probe reports missing (tests); names as `ringd --probe` prints them.
  std::vector<std::string> io_mask;
  bool sqpoll = false;            // bypass only
  bool sqpoll_per_shard = false;  // one SQ thread per shard instead of one shared
  bool bypass_sendfile = true;    // bypass: sendfile cached bodies on an installed fd
  bool tcp_nopush = true;         // TCP_CORK around a body's inline sendfiles
  uint64_t splice_min_bytes = 0;  // uring tiers: bodies this large always splice (0: never)
  uint32_t batch_wait_us = 0;     // uring tiers: a wait takes a batch (0: off)
  uint32_t busy_poll_us = 0;      // uring tiers: NAPI busy polling while waiting (0: off)
  int32_t sqpoll_cpu = -1;
  uint32_t sqpoll_idle_ms = 1000;
  uint32_t iowq_max_workers = 0;  // 0: the kernel's default
  bool pin = true;

  // Timeouts (milliseconds) and limits.
  uint32_t header_timeout_ms = 10000;
  uint32_t keepalive_timeout_ms = 75000;
  uint32_t send_timeout_ms = 60000;
  // After a response, the rest of a request body we skip must arrive within this (nginx drops a
  // body that stalls after 5 s); separate from keep-alive idleness.
  uint32_t discard_body_timeout_ms = 5000;
  uint32_t shutdown_timeout_ms = 10000;
  // Per shard. At the limit the oldest idle keep-alive connections give way to newcomers (as
  // nginx reuses them); only when none is idle does accepting pause.
  uint32_t max_connections = 10000;
  uint32_t max_requests_per_connection = 1000;
  uint32_t max_request_line = 8192;
  uint32_t max_request_head = 16384;
  uint32_t max_headers = 64;
  uint64_t max_discarded_body = 65536;
  uint32_t max_ranges = 16;

  // Files.
  std::string index = "index.html";
  // --fallback: served (relative to the root) for a path that names nothing; empty: none.
  std::string fallback;
  // --autoindex: a directory without an index is answered with a listing, in this format.
  bool autoindex = false;
  http::ListingFormat autoindex_format = http::ListingFormat::kHtml;
  // --autoindex-max-entries: the entries one listing shows (DirLister: the names it holds).
  uint32_t autoindex_max_entries = 100000;
  std::string mime_types;         // empty: /etc/mime.types when it exists
  std::string charset = "utf-8";  // text types' charset parameter; empty: none (--charset off)
  bool precompressed = true;
  // --compress: text compressed on the fly, once per file version and coding, kept per shard.
  bool compress = false;
  std::string compress_types;  // empty: http::kDefaultCompressTypes
  uint64_t compress_min_bytes = 256;
  uint64_t compress_max_bytes = 8 << 20;
  uint64_t compress_cache_bytes = 64 << 20;  // per shard
  http::CompressPolicy compress_policy;      // from the three above (Parse)
  // HTTP/2: h2 by ALPN over TLS, and h2c with prior knowledge beside HTTP/1.1 on plaintext
  // listeners (the connection preface picks the protocol).
  bool http2 = true;
  uint32_t http2_max_streams = 100;  // SETTINGS_MAX_CONCURRENT_STREAMS per connection
  // h2c: DATA payloads from files go out with SendFile behind their frame headers, not read into
  // the send buffer (docs/PERFORMANCE.md, "DATA path in plaintext").
  bool http2_sendfile = false;
  bool serve_dot_files = false;
  uint32_t small_file_max = 16384;  // files up to this size are served from memory
  // Per shard. The buffers are registered with the ring, which makes them resident: keep it modest.
  uint64_t small_file_cache_bytes = 16 << 20;
  uint32_t open_file_cache_entries = 10000;  // per shard
  uint32_t open_file_cache_valid_ms = 1000;  // revalidate with statx after this long

  // io.
  uint32_t recv_buffers = 1024;  // per shard, a power of two
  uint32_t recv_buffer_size = 8192;
  // uring tiers with incremental receive buffers (the probe's "incremental receive"): the shard's
  // receive memory, in buffers of kIncrementalRecvBuffer bytes; receives take only what they fill.
  uint32_t recv_pool_kib = 1024;
  // bypass: registered buffers file bodies are read into and sent from (then splice, when all
  // are busy); per shard. Registered memory is pinned: body_buffers x body_buffer_kib KiB. Off by
  // default: splicing costs less CPU per large body (a read into a buffer, then a send, copies
  // every byte twice; docs/PERFORMANCE.md).
  uint32_t body_buffers = 0;
  uint32_t body_buffer_kib = 128;
  uint32_t pipes = 64;   // per shard, for splice
  bool send_zc = false;  // uring: IORING_OP_SEND_ZC for sends of at least send_zc_min_bytes
  uint32_t send_zc_min_bytes = 8192;
  uint32_t send_turn_bytes = 1 << 20;  // file bytes per connection per loop turn,
  uint32_t send_turn_share_bytes = 8
                                   << 20;  // after the turn's first bytes, shared up to 1 MiB each
  // A page-cache hit for a file range is trusted this long before an inline send asks again.
  uint32_t page_cache_trust_ms = 100;
  // Send scheduling (server/core/send_queue.h): shortest remaining response first, at most
  // send_slots long bodies in flight per shard; responses with at most send_short_bytes left
  // never wait; a body that waited send_max_wait_ms goes at once. false: every body sends at
  // once and the kernel shares the bandwidth (processor sharing, --send-order=fair).
  // Off by default: it costs more CPU per large body (docs/PERFORMANCE.md).
  bool send_srpt = false;
  uint32_t send_slots = 2;
  uint64_t send_short_bytes = 256 << 10;
  uint32_t send_max_wait_ms = 500;
  uint32_t send_slot_hold_ms = 10;  // a slot held this long stops counting (a slow client)
  uint32_t workers = 4;             // epoll: blocking file work per shard
  uint32_t worker_queue = 1024;

  // Observability (docs/OPERATIONS.md).
  std::string access_log;        // a file to append one line per response to; empty: off
  bool access_log_json = false;  // --access-log-format=json (else combined)
  uint32_t access_log_buffer_bytes = 1 << 20;  // per shard: lines waiting for the writer
  // Why responses were errors (--error-log): a file, or empty for stderr; off: none.
  std::string error_log;
  bool error_log_off = false;
  uint8_t error_log_level = 0;    // ErrorLevel (access_log.h): 0 error, 1 warn, 2 info
  bool has_admin_listen = false;  // --admin-listen: /metrics, /healthz, ...
  ListenAddress admin_listen;

  // What the caches in front read (docs/OPERATIONS.md): --cache-control, --default-cache-control,
  // --add-header, --error-page. Written out once here; shards only point at it.
  http::OriginHeaders origin;

  // Privileges. Root with --user: after binding, opening the root and creating the rings, ringd
  // becomes this user (and group: the user's own unless NAME:GROUP says otherwise). Root without
  // --user refuses to serve unless --allow-root.
  bool has_user = false;
  std::string user, group;  // as given
  uint32_t uid = 0, gid = 0;
  bool allow_root = false;
  // Join listeners already bound to the --listen addresses (another ringd, as the same user)
  // instead of refusing: the new half of a zero-downtime restart.
  bool takeover = false;

  bool probe_only = false;  // --probe: print what io_uring offers here, and exit
  // -t, --check-config: check as start-up does, short of listening; say what is wrong, and exit.
  // Set (before the other flags are parsed) wherever it stands on the command line.
  bool check_config = false;

  // Every flag as it was given, in order (flagfiles read in place): its name without "--" and
  // its value ("true"/"false" for a bare or --no boolean). A SIGHUP reload compares these to find
  // the flags whose change needs a restart.
  std::vector<std::pair<std::string, std::string>> given;
};

// Parses argv into config; an error of one line on failure. On --help or --version prints to
// stdout and sets *exit_now. A flag that takes one value is refused the second time it is given
// (on the command line, in a flagfile, or in both); lists (--listen, --add-header, ...) repeat.
absl::Status ParseFlags(int argc, char** argv, Config* config, bool* exit_now);

std::string Usage();

// The size of one buffer of --recv-pool-kib: 64 KiB, or the power of two that holds one receive
// of --recv-buffer-size.
uint32_t IncrementalRecvBufferBytes(const Config& config);

}  // namespace ringd
