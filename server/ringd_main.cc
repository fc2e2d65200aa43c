// ringd: flags and the files they name (Prepare, which `ringd -t` runs alone), the io probe,
// listening sockets, one thread per shard, and graceful shutdown on SIGTERM/SIGINT/SIGQUIT.
// Everything on the request path lives in the shards.
#include <fcntl.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <deque>
#include <fstream>
#include <functional>
#include <future>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "io/probe.h"
#include "io/registry.h"
#include "io/tier.h"
#include "server/core/config.h"
#include "server/core/document_root.h"
#include "server/core/shard.h"
#include "server/core/sites.h"
#include "server/core/version.h"
#include "server/http/mime_types.h"
#include "server/io_setup.h"
#include "server/observe/observability.h"
#include "server/ops/listeners.h"
#include "server/ops/privileges.h"
#include "server/ops/systemd.h"
#include "server/tls/openssl_tls.h"
#include "server/tls/tls_loop.h"
#include "server/tls/tls_memory.h"

namespace ringd {
namespace {

// "ringd: MESSAGE" on stderr, one line always: a control byte from a flag's value (a CR or LF in
// --add-header) is written as \xHH.
void Say(const std::string& message) {
  std::string line;
  for (const char ch : message) {
    const unsigned char c = static_cast<unsigned char>(ch);
    if (c < 0x20 || c == 0x7f) {
      char hex[5];
      std::snprintf(hex, sizeof hex, "\\x%02x", c);
      line += hex;
    } else {
      line += ch;
    }
  }
  std::fprintf(stderr, "ringd: %s\n", line.c_str());
}

[[noreturn]] void Die(int code, const std::string& message) {
  Say(message);
  std::exit(code);
}

[[noreturn]] void Die(int code, const absl::Status& status) {
  Die(code, std::string(status.message()));
}

std::vector<int> UsableCpus() {
  std::vector<int> cpus;
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof set, &set) == 0) {
    for (int i = 0; i < CPU_SETSIZE; ++i) {
      if (CPU_ISSET(i, &set)) cpus.push_back(i);
    }
  }
  if (cpus.empty()) cpus.push_back(-1);
  return cpus;
}

// A shard's loop factory: the tier's loop, inside a TlsLoop when the shard has TLS listeners.
// `proxy_fds`: those of tls_fds whose connections begin with a PROXY protocol header, judged by
// `client_rules` (the process's Config, which outlives the shards).
io::LoopFactory WithTls(io::LoopFactory make, tls::TlsSessionFactory* sessions,
                        std::vector<int> tls_fds, uint32_t max_connections, uint32_t max_handshakes,
                        std::vector<int> proxy_fds, const http::ClientRules* client_rules) {
  if (tls_fds.empty()) return make;
  return [=](const io::LoopOptions& o) -> absl::StatusOr<std::unique_ptr<io::Loop>> {
    absl::StatusOr<std::unique_ptr<io::Loop>> inner = make(o);
    if (!inner.ok()) return inner.status();
    const uint32_t recv_max = o.recv_max_bytes != 0 ? o.recv_max_bytes : o.recv_buffer_size;
    auto loop = std::make_unique<tls::TlsLoop>(*std::move(inner), sessions, tls_fds, recv_max,
                                               max_connections, max_handshakes);
    if (!proxy_fds.empty()) loop->ReadProxyHeaders(proxy_fds, client_rules);
    return loop;
  };
}

// HTTPS state for the process: the certificates in use (reloadable), the options they are loaded
// with, and the ticket keys every generation shares.
struct Tls {
  bool on = false;
  std::unique_ptr<tls::TicketKeys> ticket_keys;
  tls::TlsOptions options;
  tls::ReloadableTls sessions;
};

std::string UtcTime(int64_t sec) {
  const time_t at = static_cast<time_t>(sec);
  tm t{};
  gmtime_r(&at, &t);
  char when[32];
  std::strftime(when, sizeof when, "%Y-%m-%d %H:%M:%S UTC", &t);
  return when;
}

// What loads but will not serve as meant, one line each, at start-up and on every reload: a
// certificate not valid yet (as in nginx; a renewal may come early) or expired (--tls-expired=
// serve: plain HTTP and the other sites go on serving), which clients refuse, and each
// --tls-ocsp response left out.
std::vector<std::string> CertificateLines(const Tls& tls) {
  std::vector<std::string> lines;
  const int64_t now = static_cast<int64_t>(std::time(nullptr));
  for (const tls::OpenSslFactory::Certificate& c : tls.sessions.certificates()) {
    if (c.not_before_sec > now) {
      lines.push_back("--tls-cert '" + c.file + "' is not valid before " +
                      UtcTime(c.not_before_sec) + ": clients refuse it until then");
    }
    if (c.not_after_sec <= now) {
      lines.push_back("WARNING: --tls-cert '" + c.file + "' has expired (notAfter " +
                      UtcTime(c.not_after_sec) +
                      "): served as it is (--tls-expired=serve), and clients refuse it; renew it "
                      "and send SIGHUP");
    }
  }
  for (std::string& line : tls.sessions.warnings()) lines.push_back(std::move(line));
  return lines;
}

// The flags a SIGHUP reload takes up: the certificates, keys and OCSP responses (new paths
// too), what the handshake offers, and the origin headers (OriginPublisher). Every other flag
// needs a restart.
constexpr const char* kTlsFlags[] = {"tls-cert",    "tls-key",          "tls-ocsp",
                                     "tls-ciphers", "tls-ciphersuites", "tls-min-version",
                                     "tls-tickets"};
constexpr const char* kOriginFlags[] = {"add-header", "cache-control", "default-cache-control",
                                        "error-page"};
// --site and every flag given in a site (Config::given names those "site" too).
constexpr const char* kSiteFlags[] = {"site", "unknown-site"};

bool Reloaded(const std::string& flag) {
  return std::find(std::begin(kTlsFlags), std::end(kTlsFlags), flag) != std::end(kTlsFlags) ||
         std::find(std::begin(kOriginFlags), std::end(kOriginFlags), flag) !=
             std::end(kOriginFlags) ||
         std::find(std::begin(kSiteFlags), std::end(kSiteFlags), flag) != std::end(kSiteFlags);
}

// The sites (--site) every shard chooses among, published whole as the origin headers are: a
// reload that changes them builds a new generation (each site's root opened again) and stores
// its pointer; each shard takes it up at its next turn (ConnectionMachine::TakeUpSites), and
// exchanges that chose a site before finish with it. Generations stay alive until kKeptMax
// newer ones have followed. The RootWatch thread checks the roots of the newest (under mu_,
// which a reload takes only to publish).
class SitesPublisher {
 public:
  static constexpr size_t kKeptMax = 64;
  const std::atomic<const Sites*>* word() const { return &current_; }
  // Main thread only.
  void Publish(std::unique_ptr<Sites> next) {
    std::lock_guard<std::mutex> lock(mu_);
    kept_.push_back(std::move(next));
    current_.store(kept_.back().get(), std::memory_order_release);
    if (kept_.size() > kKeptMax) kept_.pop_front();  // never the current one: it is the back
  }
  // The RootWatch thread: each root of the sites in use checked (DocumentRoot::Check); whether
  // any moved.
  bool CheckRoots() {
    std::lock_guard<std::mutex> lock(mu_);
    if (kept_.empty()) return false;
    bool moved = false;
    for (const std::unique_ptr<DocumentRoot>& root : kept_.back()->roots) {
      const uint64_t before = root->state();
      const std::string line = root->Check();
      if (!line.empty()) std::fprintf(stderr, "%s\n", line.c_str());
      moved |= root->state() != before;
    }
    return moved;
  }
  const Sites& current() const { return *current_.load(std::memory_order_acquire); }

 private:
  std::mutex mu_;
  std::atomic<const Sites*> current_{nullptr};
  std::deque<std::unique_ptr<Sites>> kept_;
};

// The origin headers every shard plans with (--add-header, --cache-control,
// --default-cache-control, --error-page), published whole: a reload makes a new generation and
// stores its pointer; each shard takes it up at the start of its next turn
// (ConnectionMachine::Tick), and a plan made before goes on viewing the one it was made with.
// Generations stay alive until kKeptMax newer ones have followed, as DocumentRoot keeps old roots;
// the one the process started with (Config::origin) lives as long as the process.
class OriginPublisher {
 public:
  static constexpr size_t kKeptMax = 64;
  explicit OriginPublisher(const http::OriginHeaders* initial) : current_(initial) {}
  const std::atomic<const http::OriginHeaders*>* word() const { return &current_; }
  // Main thread only.
  void Publish(const http::OriginHeaders& next) {
    kept_.push_back(std::make_unique<const http::OriginHeaders>(next));
    current_.store(kept_.back().get(), std::memory_order_release);
    if (kept_.size() > kKeptMax) kept_.pop_front();  // never the current one: it is the back
  }

 private:
  std::atomic<const http::OriginHeaders*> current_;
  std::deque<std::unique_ptr<const http::OriginHeaders>> kept_;
};

void SetTlsOptions(const Config& config, tls::TlsOptions* options) {
  options->pairs.clear();
  for (size_t i = 0; i < config.tls_cert.size(); ++i)
    options->pairs.push_back(tls::TlsCertPair{config.tls_cert[i], config.tls_key[i]});
  // Each site's certificates join the top level's (the first pair stays the default, for a
  // client that names no site); SNI picks among them by the names they are for.
  for (const SiteConfig& site : config.sites) {
    for (size_t i = 0; i < site.tls_cert.size(); ++i)
      options->pairs.push_back(tls::TlsCertPair{site.tls_cert[i], site.tls_key[i]});
  }
  options->ocsp_files = config.tls_ocsp;
  options->min_version = config.tls_min_version;
  options->ciphers = config.tls_ciphers;
  options->ciphersuites = config.tls_ciphersuites;
  options->tickets_per_handshake = config.tls_tickets;
}

// Every certificate and key is read and checked here, before privileges are dropped (a SIGHUP
// reads them again as the user ringd runs as); one generation of certificates serves every shard,
// and one set of ticket keys every generation.
absl::Status LoadTls(const Config& config, Tls* tls) {
  // Certificates without a TLS listener are refused once the sockets systemd passed are known
  // (CheckListenAddresses): sockets named https are TLS listeners too.
  tls->on = !config.tls_cert.empty();
  if (!tls->on) return absl::OkStatus();
  // Before anything asks OpenSSL for memory (tls_memory.h: an idle TLS connection's allocations
  // in fewer bytes; nothing before this point uses the library, and a plaintext ringd reserves
  // nothing for it). Where it cannot be routed the library uses plain malloc.
  if (!tls::RouteOpenSslAllocations() && tls::RoutingBuiltIn())
    std::fprintf(stderr, "ringd: OpenSSL's allocations not routed: it uses malloc\n");
  tls->ticket_keys = std::make_unique<tls::TicketKeys>(config.tls_ticket_rotate_s);
  SetTlsOptions(config, &tls->options);
  tls->options.http2 = config.http2;
  tls->options.refuse_expired = config.tls_refuse_expired;
  tls->options.tickets = tls->ticket_keys.get();
  return tls->sessions.Load(tls->options);
}

// The flags whose values differ between two parses (in the order first given), other than
// those a reload takes up: one line each.
std::vector<std::string> NeedRestart(const Config& running, const Config& next) {
  auto values = [](const Config& c, const std::string& name) {
    std::vector<std::string> out;
    for (const auto& [flag, value] : c.given)
      if (flag == name) out.push_back(value);
    return out;
  };
  std::vector<std::string> names;
  for (const Config* c : {&running, &next}) {
    for (const auto& given : c->given) {
      const std::string& name = given.first;
      if (std::find(names.begin(), names.end(), name) != names.end()) continue;
      if (Reloaded(name)) continue;
      names.push_back(name);
    }
  }
  std::vector<std::string> lines;
  for (const std::string& name : names) {
    if (values(running, name) != values(next, name))
      lines.push_back("--" + name + " needs a restart: the value in use is kept");
  }
  return lines;
}

// A page that cannot be read is answered with the built-in one (as a missing file is): a line
// for each, at start-up and at a reload that names new pages.
std::vector<std::string> UnreadableErrorPages(const Config& config, int root_fd) {
  std::vector<std::string> lines;
  for (const auto& [status, page] : config.origin.error_pages()) {
    if (::faccessat(root_fd, page.c_str(), R_OK, AT_EACCESS) == 0) continue;
    lines.push_back("--error-page " + std::to_string(status) + "=/" + page + ": cannot read '" +
                    config.root + "/" + page + "': " + strerror(errno) +
                    "; the built-in page is served instead");
  }
  return lines;
}

// Whether any of `flags` was given other values in `a` than in `b`.
template <size_t N>
bool Differ(const Config& a, const Config& b, const char* const (&flags)[N]) {
  auto values = [&flags](const Config& c) {
    std::vector<std::pair<std::string, std::string>> out;
    for (const auto& given : c.given)
      if (std::find(std::begin(flags), std::end(flags), given.first) != std::end(flags))
        out.push_back(given);
    return out;
  };
  return values(a) != values(b);
}

// What a SIGHUP reload changes, and whom it tells.
struct Reloadable {
  Tls* tls = nullptr;
  OriginPublisher* origin = nullptr;
  const std::vector<std::unique_ptr<Shard>>* shards = nullptr;  // woken to take up new headers
  const DocumentRoot* root = nullptr;  // where new --error-page files are looked for
  Observability* observability = nullptr;
  SitesPublisher* sites = nullptr;
  // Whether the shards keep each connection's client for the sites' --allow / --deny: only when
  // the process started with some (ConnectionMachine's peers_; the tier was checked for them).
  bool site_rules = false;
  // Whether the shards have a directory lister (the process started with some --autoindex).
  bool autoindex = false;
};

// SIGHUP: the command line and every flagfile it names are read again. New connections get the
// new certificates, keys and OCSP responses; connections and handshakes already under way finish
// on the ones they began with. New origin headers serve the requests planned from each shard's
// next turn on. A flag whose change needs a restart is named and keeps its value. Flags that do
// not parse, or certificates that do not load, keep everything as it was. `running` is the
// configuration in use, updated by a reload that takes.
void Reload(int argc, char** argv, Config* running, const Reloadable& r) {
  Tls* tls = r.tls;
  Observability* observability = r.observability;
  Config next;
  bool exit_now = false;
  if (absl::Status s = ParseFlags(argc, argv, &next, &exit_now); !s.ok() || exit_now) {
    Say("SIGHUP: keeping the configuration in use: " +
        (s.ok() ? std::string("the flags ask for --help or --version") : std::string(s.message())));
    observability->ReloadDone(false);
    return;
  }
  const std::vector<std::string> restart = NeedRestart(*running, next);
  if (tls->on && next.tls_cert.empty()) {
    Say("SIGHUP: keeping the configuration in use: no --tls-cert is left, and turning HTTPS off "
        "needs a restart");
    observability->ReloadDone(false);
    return;
  }
  if (!tls->on && !next.tls_cert.empty()) {
    Say("SIGHUP: --tls-cert needs a restart: HTTPS is off in the process serving");
  }
  // New sites are built (their roots opened) before anything is taken up: a root that cannot be
  // opened keeps the whole configuration in use.
  const bool sites_changed = Differ(*running, next, kSiteFlags);
  std::unique_ptr<Sites> next_sites;
  if (sites_changed && next.any_site_rules() && !r.site_rules) {
    Say("SIGHUP: keeping the configuration in use: --allow/--deny in a --site needs a restart "
        "when the process started with no site's --allow/--deny");
    observability->ReloadDone(false);
    return;
  }
  if (sites_changed && next.any_autoindex() && !r.autoindex) {
    Say("SIGHUP: keeping the configuration in use: --autoindex in a --site needs a restart when "
        "the process started with no --autoindex");
    observability->ReloadDone(false);
    return;
  }
  if (sites_changed) {
    std::string error;
    next_sites = BuildSites(next, {}, &error);
    if (next_sites == nullptr) {
      Say("SIGHUP: keeping the configuration in use: " + error);
      observability->ReloadDone(false);
      return;
    }
  }
  if (tls->on) {
    tls::TlsOptions options = tls->options;
    SetTlsOptions(next, &options);
    if (absl::Status s = tls->sessions.Load(options); !s.ok()) {
      Say("SIGHUP: keeping the certificates in use: " + std::string(s.message()));
      observability->ReloadDone(false);
      return;
    }
    tls->options = std::move(options);
  }
  const bool origin_changed = Differ(*running, next, kOriginFlags);
  if (origin_changed) {
    r.origin->Publish(next.origin);
    for (auto& s : *r.shards) s->loop()->Wake();  // an idle shard would sleep up to a second
  }
  if (sites_changed) {
    r.sites->Publish(std::move(next_sites));
    for (auto& s : *r.shards) s->loop()->Wake();
  }
  for (const std::string& line : restart) Say("SIGHUP: " + line);
  if (sites_changed) {
    Say("SIGHUP: sites taken up (" + std::to_string(next.sites.size()) +
        "): each shard serves them from its next turn");
  }
  for (const std::string& line : CertificateLines(*tls)) Say(line);
  if (origin_changed) {
    Say("SIGHUP: --add-header, --cache-control, --default-cache-control and --error-page taken "
        "up: each shard serves them from its next turn");
    for (const std::string& line : UnreadableErrorPages(next, DocumentRoot::Fd(r.root->state())))
      Say(line);
  }
  // The flags a reload cannot take keep their values in use: the next reload compares to those.
  std::vector<std::pair<std::string, std::string>> given;
  for (const Config* c : {static_cast<const Config*>(running), static_cast<const Config*>(&next)}) {
    for (const auto& flag : c->given) {
      if (Reloaded(flag.first) == (c == &next)) given.push_back(flag);
    }
  }
  running->given = std::move(given);
  running->tls_cert = next.tls_cert;
  running->tls_key = next.tls_key;
  running->tls_ocsp = next.tls_ocsp;
  running->tls_ciphers = next.tls_ciphers;
  running->tls_ciphersuites = next.tls_ciphersuites;
  running->tls_min_version = next.tls_min_version;
  running->tls_tickets = next.tls_tickets;
  running->origin = next.origin;
  running->sites = next.sites;
  running->unknown_site = next.unknown_site;
  Say(tls->on
          ? "SIGHUP: TLS certificates reloaded (" + std::to_string(tls->options.pairs.size()) +
                "), as the flags read again name them"
          : std::string("SIGHUP: flags read again; no certificates to reload (no --listen-tls)"));
  observability->ReloadDone(true);
}

// Like nginx's worker_rlimit_nofile: every descriptor the hard limit allows (a tier with a file
// table per connection is held to it as well). The limit now; 0 when there is none.
uint64_t RaiseDescriptorLimit() {
  rlimit nofile{};
  if (::getrlimit(RLIMIT_NOFILE, &nofile) != 0) return 0;
  if (nofile.rlim_cur < nofile.rlim_max) {
    nofile.rlim_cur = nofile.rlim_max;
    if (::setrlimit(RLIMIT_NOFILE, &nofile) != 0) ::getrlimit(RLIMIT_NOFILE, &nofile);
  }
  return nofile.rlim_cur == RLIM_INFINITY ? 0 : nofile.rlim_cur;
}

const io::TierTable& Tiers() {
  static const io::TierTable tiers = io::BuiltinTiers();
  return tiers;
}

// `ringd --probe`: what the probe finds and what each tier would do with it.
int Probe(const Config& config) {
  const uint64_t descriptor_limit = RaiseDescriptorLimit();
  if (absl::Status s = CheckIoFlags(config, Tiers()); !s.ok()) Die(2, s);
  const io::ProbeReport probe = io::ProbeUring(config.io_mask);
  std::fputs(DescribeProbe(config, Tiers(), probe, descriptor_limit).c_str(), stdout);
  return 0;
}

// The user ringd serves as can search the root: every file is opened beneath it as that user
// (the root's descriptor is opened before the switch), and without search permission there
// every request is a 403.
absl::Status RootSearchable(const Config& config, int root_fd) {
  if (::faccessat(root_fd, ".", X_OK, AT_EACCESS) == 0) return absl::OkStatus();
  return absl::FailedPreconditionError("--root: the user ringd serves as cannot search '" +
                                       config.root + "': " + strerror(errno));
}

// What start-up reads before it binds a socket or makes a shard, and what it found.
struct Prepared {
  Tls tls;
  IoSetup io;
  int root_fd = -1;
  std::vector<int> site_root_fds;  // each --site's root, as root_fd (-1: it could not be opened)
  http::MimeTypes mime;
  uint32_t shards = 0;
};

struct Findings {
  struct Problem {
    int exit_status;  // 2: a flag ringd cannot use; 1: what the machine or a file refused
    std::string line;
  };
  std::vector<Problem> problems;      // start-up stops at the first; -t says each
  std::vector<std::string> warnings;  // said, and ringd serves all the same
};

// Every file the flags name, read and checked as start-up uses it: the identity ringd runs as, the
// certificates, keys and OCSP responses, the io tier against the probe, --root (opened, and
// searchable by the user ringd serves as where that is this process), --mime-types, the
// --error-page and --fallback files, the --access-log's file or directory, and sizes this machine
// cannot give. Nothing is bound and no shard is made: start-up goes on from here, and `ringd -t`
// stops here.
Findings Prepare(const Config& config, Prepared* out) {
  Findings found;
  auto problem = [&found](int exit_status, std::string line) {
    found.problems.push_back({exit_status, std::move(line)});
  };
  if (absl::Status s = RootAllowed(config); !s.ok()) problem(1, std::string(s.message()));
  if (absl::Status s = LoadTls(config, &out->tls); !s.ok()) {
    problem(1, std::string(s.message()));
  } else {
    for (std::string& line : CertificateLines(out->tls)) found.warnings.push_back(std::move(line));
  }
  const uint64_t descriptor_limit = RaiseDescriptorLimit();
  if (absl::Status s = CheckIoFlags(config, Tiers()); !s.ok()) {
    problem(2, std::string(s.message()));
  } else {
    const io::ProbeReport probe = io::ProbeUring(config.io_mask);
    absl::StatusOr<IoSetup> chosen = ChooseIo(config, Tiers(), probe, descriptor_limit);
    if (chosen.ok()) {
      out->io = *std::move(chosen);
    } else {
      problem(1, std::string(chosen.status().message()));
    }
  }
  out->root_fd = ::open(config.root.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC);
  if (out->root_fd < 0) {
    problem(1, "--root: cannot open '" + config.root + "': " + strerror(errno));
  } else if (!(config.has_user && ::geteuid() == 0)) {
    // Started as root with --user, the search is checked once ringd is that user (StartShards).
    if (absl::Status s = RootSearchable(config, out->root_fd); !s.ok())
      problem(1, std::string(s.message()));
  }
  for (const SiteConfig& site : config.sites) {
    const int fd = ::open(site.root.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC);
    out->site_root_fds.push_back(fd);
    if (fd < 0) {
      problem(1, "--site " + site.name() + ": --root: cannot open '" + site.root +
                     "': " + strerror(errno));
    } else if (!(config.has_user && ::geteuid() == 0) &&
               ::faccessat(fd, ".", X_OK, AT_EACCESS) != 0) {
      problem(1, "--site " + site.name() + ": --root: the user ringd serves as cannot search '" +
                     site.root + "': " + strerror(errno));
    } else if (site.own_origin) {
      Config pages;
      pages.root = site.root;
      pages.origin = site.origin;
      for (std::string& line : UnreadableErrorPages(pages, fd))
        found.warnings.push_back("--site " + site.name() + ": " + std::move(line));
    }
  }
  std::string mime_error;
  out->mime = http::MimeTypes::Load(
      config.mime_types.empty() ? http::MimeTypes::kSystemFile : config.mime_types, &mime_error);
  if (!config.mime_types.empty() && !mime_error.empty()) problem(1, "--mime-types: " + mime_error);
  out->mime.SetCharset(config.charset);
  if (out->root_fd >= 0) {
    for (std::string& line : UnreadableErrorPages(config, out->root_fd))
      found.warnings.push_back(std::move(line));
    // A fallback that cannot be read is a 404 for every path that names nothing.
    if (!config.fallback.empty() &&
        ::faccessat(out->root_fd, config.fallback.c_str(), R_OK, AT_EACCESS) != 0) {
      found.warnings.push_back("--fallback /" + config.fallback + ": cannot read '" + config.root +
                               "/" + config.fallback + "': " + strerror(errno) +
                               "; a path that names nothing is answered 404 instead");
    }
  }
  // The logs are opened (created if need be) once every check has passed; here, whether they
  // can be. An empty path: off, or the error log on stderr.
  const auto check_log = [&](const char* flag, const std::string& path) {
    if (path.empty()) return;
    const size_t slash = path.rfind('/');
    const std::string dir = slash == std::string::npos ? "." : path.substr(0, slash + 1);
    const bool can =
        ::faccessat(AT_FDCWD, path.c_str(), W_OK, AT_EACCESS) == 0 ||
        (errno == ENOENT && ::faccessat(AT_FDCWD, dir.c_str(), W_OK | X_OK, AT_EACCESS) == 0);
    if (!can) {
      problem(1,
              std::string(flag) + ": cannot open '" + path + "' for appending: " + strerror(errno));
    }
  };
  check_log("--access-log", config.access_log);
  check_log("--error-log", config.error_log);
  const size_t cpus = UsableCpus().size();
  out->shards = config.shards != 0 ? config.shards : static_cast<uint32_t>(cpus);
  for (std::string& line : SizingWarnings(config, out->shards, descriptor_limit, cpus))
    found.warnings.push_back(std::move(line));
  return found;
}

// `ringd -t`: each problem and warning, then whether the configuration would start.
int ReportCheck(const Findings& found) {
  for (const Findings::Problem& p : found.problems) Say(p.line);
  for (const std::string& line : found.warnings) Say(line);
  if (!found.problems.empty()) {
    Say("configuration test failed");
    return 1;
  }
  Say("configuration ok");
  return 0;
}

// The tier chosen and why, once every start-up check has passed: a start-up that fails says
// why in one line.
void LogIo(const Config& config, const IoSetup& io) {
  std::fprintf(stderr, "ringd: io backend %s\n", io.line.c_str());
  if (!io.tier->can.names_clients && !config.access_log.empty()) {
    std::fprintf(stderr, "ringd: --io=%s: access log lines name no client address (\"-\")%s\n",
                 io.tier->name.c_str(),
                 config.any_proxy_listener() ? " but the one a PROXY protocol header names" : "");
  }
}

// Socket activation: systemd bound the sockets (ringd.socket, and ringd-https.socket for those
// named https) and passed them, and a drain leaves them open for the next process; then --listen
// is not used, nor --listen-tls when HTTPS sockets were passed. Otherwise each shard binds its own
// SO_REUSEPORT socket per address and the kernel spreads connections across shards.
struct Inherited {
  std::vector<int> fds, tls_fds;
  std::vector<std::vector<int>> by_shard, tls_by_shard;
  // Of fds and tls_fds, those named proxy or https-proxy: a PROXY protocol header comes first.
  std::vector<int> proxy_fds;
  bool any() const { return !fds.empty() || !tls_fds.empty(); }
  // Whether `fd` (a shard's duplicate) listens where a socket named proxy or https-proxy does:
  // the shards' duplicates are dealt out by address, so the address says which it is.
  bool ReadsProxyHeader(int fd) const {
    sockaddr_storage a{}, b{};
    socklen_t alen = sizeof a;
    if (::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &alen) != 0) return false;
    for (const int p : proxy_fds) {
      socklen_t blen = sizeof b;
      if (::getsockname(p, reinterpret_cast<sockaddr*>(&b), &blen) == 0 && alen == blen &&
          std::memcmp(&a, &b, alen) == 0) {
        return true;
      }
    }
    return false;
  }
};

Inherited CheckListenAddresses(const Config& config, uint32_t shards) {
  std::string error;
  Inherited in;
  absl::StatusOr<ListenSockets> passed = TakeListenSockets();
  if (!passed.ok()) Die(1, passed.status());
  in.fds = std::move(passed->fds);
  in.tls_fds = std::move(passed->tls_fds);
  in.proxy_fds = std::move(passed->proxy_fds);
  in.by_shard = AssignInheritedSockets(in.fds, shards, &error);
  if (!error.empty()) Die(1, error);
  in.tls_by_shard = AssignInheritedSockets(in.tls_fds, shards, &error);
  if (!error.empty()) Die(1, error);
  if (!in.tls_fds.empty() && config.tls_cert.empty()) {
    Die(1,
        "LISTEN_FDS: systemd passed HTTPS sockets (FileDescriptorName=https) but there is no "
        "certificate: --tls-cert FILE --tls-key FILE");
  }
  if (!config.tls_cert.empty() && config.listen_tls.empty() && in.tls_fds.empty())
    Die(2, "--tls-cert without --listen-tls: no listener would use it");
  if (config.redirect_https && config.listen_tls.empty() && in.tls_fds.empty())
    Die(2, "--redirect-https needs --listen-tls: there is no HTTPS to redirect to");
  // (With sockets passed, the plaintext listeners are those, whatever --listen says.)
  if (config.redirect_https && (in.any() ? in.fds.empty() : config.listen.empty()))
    Die(2, "--redirect-https needs --listen: there is no plaintext listener to redirect from");
  if (in.any() && config.any_proxy_listener()) {
    Die(2,
        "--listen ADDR,proxy and --listen-tls ADDR,proxy apply to the sockets ringd binds, not to "
        "sockets systemd passes (LISTEN_FDS): name those FileDescriptorName=proxy or "
        "https-proxy instead");
  }
  if (!config.takeover) {
    if (!in.any()) {
      for (const ListenAddress& a : config.listen) {
        if (!AddressFree(a, &error)) Die(1, error);
      }
    }
    if (in.tls_fds.empty()) {
      for (const ListenAddress& a : config.listen_tls) {
        if (!AddressFree(a, &error)) Die(1, error);
      }
    }
  } else if (!in.any()) {
    // The old process shuts its listeners down when it drains; connections already queued on
    // them move to ours only with tcp_migrate_req (Linux 5.14), else they are reset.
    std::ifstream f("/proc/sys/net/ipv4/tcp_migrate_req");
    int migrate = 0;
    f >> migrate;
    std::fprintf(stderr, "ringd: --takeover: sharing the listening addresses (SO_REUSEPORT)%s\n",
                 migrate == 1 ? "; net.ipv4.tcp_migrate_req=1 moves the old listeners' queues here"
                              : "; net.ipv4.tcp_migrate_req=0: connections still queued on the "
                                "old process's listeners when it stops are reset (set it to 1)");
  }
  return in;
}

// The first HTTPS address: --redirect-https sends requests to its port.
sockaddr_storage FirstHttpsAddress(const Config& config, const Inherited& inherited) {
  if (inherited.tls_fds.empty()) return config.listen_tls[0].addr;
  sockaddr_storage a{};
  socklen_t len = sizeof a;
  ::getsockname(inherited.tls_fds[0], reinterpret_cast<sockaddr*>(&a), &len);
  return a;
}

// The shards, each with its listening sockets (plain ones first, then TLS ones) and its loop
// factory (the tier's, inside a TlsLoop where it has TLS listeners).
std::vector<std::unique_ptr<Shard>> MakeShards(Config& config, const Inherited& inherited,
                                               uint32_t shards, int root_fd,
                                               const http::MimeTypes* mime, const IoSetup& io,
                                               Tls* tls, bool heartbeat) {
  const std::vector<int> cpus = UsableCpus();
  std::string error;
  std::vector<std::unique_ptr<Shard>> list;
  for (uint32_t i = 0; i < shards; ++i) {
    std::vector<int> fds;
    if (inherited.any()) {
      fds = inherited.by_shard[i];
    } else {
      for (ListenAddress& a : config.listen) {
        const int fd = Listen(a, &error);
        if (fd < 0) Die(1, error);
        fds.push_back(fd);
      }
    }
    const size_t plain = fds.size();
    std::vector<int> tls_fds;
    if (!inherited.tls_fds.empty()) {
      tls_fds = inherited.tls_by_shard[i];
    } else {
      for (ListenAddress& a : config.listen_tls) {
        const int fd = Listen(a, &error);
        if (fd < 0) Die(1, error);
        tls_fds.push_back(fd);
      }
    }
    std::vector<int> tls_proxy_fds;
    for (size_t k = 0; k < tls_fds.size(); ++k) {
      if (inherited.tls_fds.empty() ? config.listen_tls[k].proxy
                                    : inherited.ReadsProxyHeader(tls_fds[k])) {
        tls_proxy_fds.push_back(tls_fds[k]);
      }
    }
    fds.insert(fds.end(), tls_fds.begin(), tls_fds.end());
    for (int fd : fds) SetDeferAccept(fd, config.defer_accept);  // own and inherited alike
    const size_t all = fds.size();
    const std::vector<int> shard_fds = fds;  // the shard takes `fds`
    auto shard = std::make_unique<Shard>(
        static_cast<int>(i), config, std::move(fds), root_fd, mime,
        WithTls(io.tier->make, &tls->sessions, tls_fds, config.max_connections,
                config.tls_max_handshakes, std::move(tls_proxy_fds), &config.client_rules),
        cpus[i % cpus.size()]);
    shard->SetListenersShared(inherited.any());
    if (config.redirect_https) {
      // The plain listeners redirect to the first TLS address's port.
      std::vector<bool> redirect(all, false);
      for (size_t k = 0; k < plain; ++k) redirect[k] = true;
      const int port = PortOf(FirstHttpsAddress(config, inherited));
      shard->SetHttpsRedirect(std::move(redirect), port == 443 ? "" : ":" + std::to_string(port));
    }
    if (config.any_proxy_listener() || !inherited.proxy_fds.empty()) {
      // Sockets systemd passed read a PROXY header when named proxy or https-proxy (the
      // ,proxy of --listen never applies to them: CheckListenAddresses refuses the mix).
      std::vector<Shard::ProxyHeader> proxy(all, Shard::ProxyHeader::kNone);
      for (size_t k = 0; k < plain; ++k) {
        if (inherited.any() ? inherited.ReadsProxyHeader(shard_fds[k]) : config.listen[k].proxy)
          proxy[k] = Shard::ProxyHeader::kPlain;
      }
      for (size_t k = plain; k < all; ++k) {
        if (inherited.tls_fds.empty() ? config.listen_tls[k - plain].proxy
                                      : inherited.ReadsProxyHeader(shard_fds[k])) {
          proxy[k] = Shard::ProxyHeader::kBeforeTls;
        }
      }
      shard->SetProxyListeners(std::move(proxy));
    }
    shard->SetLoopFeatures(io.features);
    shard->SetHeartbeat(heartbeat);
    list.push_back(std::move(shard));
  }
  return list;
}

// Each shard creates its ring (and pools) on its own thread, then waits for `go`: ringd drops
// root (--user) between the two, so that nothing is served, and no file opened, as root, and
// checks that the user it serves as can search the root.
std::vector<std::thread> StartShards(const Config& config, int root_fd, const Sites& sites,
                                     const std::vector<std::unique_ptr<Shard>>& shard_list) {
  const size_t shards = shard_list.size();
  std::vector<std::thread> threads;
  std::vector<std::promise<bool>> started(shards);
  std::promise<bool> go;
  std::shared_future<bool> go_future = go.get_future().share();
  // With one shared SQ thread (--sqpoll without --sqpoll-per-shard) the first shard's ring owns
  // it and the others attach to that ring (IORING_SETUP_ATTACH_WQ): it must exist first.
  const bool share_sq = config.sqpoll && !config.sqpoll_per_shard;
  std::promise<int> first_ring;
  std::future<int> first_ring_fd = first_ring.get_future();
  for (size_t i = 0; i < shards; ++i) {
    if (i == 1 && share_sq) {
      const int fd = first_ring_fd.get();
      for (size_t k = 1; k < shards; ++k) shard_list[k]->SetAttachRing(fd);
    }
    Shard* s = shard_list[i].get();
    std::promise<bool>* ready = &started[i];
    std::promise<int>* ring = i == 0 ? &first_ring : nullptr;
    threads.emplace_back([s, ready, ring, go_future] {
      const bool ok = s->Setup();
      if (ring != nullptr) ring->set_value(ok ? s->loop()->RingFd() : -1);
      ready->set_value(ok);
      if (ok && go_future.get()) s->Serve();
    });
  }
  bool all_ok = true;
  std::string first_error;
  for (size_t i = 0; i < shards; ++i) {
    if (!started[i].get_future().get()) {
      all_ok = false;
      if (first_error.empty()) first_error = shard_list[i]->error();
    }
  }
  if (all_ok) {
    if (absl::Status s = DropPrivileges(config); !s.ok()) {
      first_error = std::string(s.message());
      all_ok = false;
    } else if (absl::Status r = RootSearchable(config, root_fd); !r.ok()) {
      first_error = std::string(r.message());
      all_ok = false;
    } else {
      for (size_t i = 0; i < sites.roots.size() && all_ok; ++i) {
        if (::faccessat(DocumentRoot::Fd(sites.roots[i]->state()), ".", X_OK, AT_EACCESS) == 0)
          continue;
        first_error = "--site " + sites.sites[i].name + ": --root: the user ringd serves as " +
                      "cannot search '" + sites.configs[i].root + "': " + strerror(errno);
        all_ok = false;
      }
    }
  }
  go.set_value(all_ok);
  if (!all_ok) {
    for (auto& s : shard_list) s->RequestStop();
    for (auto& t : threads) t.join();
    Die(1, first_error);
  }
  if (config.has_user) {
    // The files were read as root; a SIGHUP reads them again as the user, and fails then.
    auto unreadable = [&config](const char* flag, const std::vector<std::string>& files) {
      for (const std::string& f : files) {
        if (::faccessat(AT_FDCWD, f.c_str(), R_OK, AT_EACCESS) == 0) continue;
        std::fprintf(stderr,
                     "ringd: %s '%s': %s can not read it, so a SIGHUP reload will fail (make it "
                     "readable by that user or its group)\n",
                     flag, f.c_str(), config.user.c_str());
      }
    };
    unreadable("--tls-cert", config.tls_cert);
    unreadable("--tls-key", config.tls_key);
    unreadable("--tls-ocsp", config.tls_ocsp);
    std::fprintf(stderr, "ringd: running as %s (uid %u, gid %u)\n", config.user.c_str(),
                 static_cast<unsigned>(::getuid()), static_cast<unsigned>(::getgid()));
  }
  return threads;
}

// "serving ROOT on ADDRESSES with N shards, PROTOCOLS (ringd VERSION, commit C)"; closes the
// inherited sockets, which the shards hold duplicates of.
std::string ServingLine(const Config& config, const Inherited& inherited, uint32_t shards) {
  std::string where;
  auto add = [&where](const char* kind, const std::string& address) {
    where += (where.empty() ? "" : ", ") + std::string(kind) + address;
  };
  auto inherited_address = [](int fd) {
    ListenAddress a;
    a.len = sizeof a.addr;
    ::getsockname(fd, reinterpret_cast<sockaddr*>(&a.addr), &a.len);
    return a.addr.ss_family == AF_INET || a.addr.ss_family == AF_INET6
               ? AddressText(a.addr)
               : std::string("fd ") + std::to_string(fd);
  };
  auto proxy_mark = [&inherited](int fd) {
    return std::find(inherited.proxy_fds.begin(), inherited.proxy_fds.end(), fd) !=
                   inherited.proxy_fds.end()
               ? ",proxy"
               : "";
  };
  if (inherited.any()) {
    for (const int fd : inherited.fds) add("", inherited_address(fd) + proxy_mark(fd));
    std::vector<int> all = inherited.fds;
    all.insert(all.end(), inherited.tls_fds.begin(), inherited.tls_fds.end());
    std::fprintf(stderr,
                 "ringd: listening on %zu socket%s passed by systemd (LISTEN_FDS%s), %s; "
                 "--listen is not used%s\n",
                 all.size(), all.size() == 1 ? "" : "s",
                 inherited.tls_fds.empty()
                     ? ""
                     : (", " + std::to_string(inherited.tls_fds.size()) + " named https").c_str(),
                 InheritedSharing(all, shards).c_str(),
                 inherited.tls_fds.empty() ? "" : ", nor --listen-tls");
  } else {
    for (const ListenAddress& a : config.listen) {
      add("", AddressText(a.addr) + (a.proxy ? ",proxy" : ""));
    }
  }
  if (!inherited.tls_fds.empty()) {
    for (const int fd : inherited.tls_fds) add("https ", inherited_address(fd) + proxy_mark(fd));
  } else {
    for (const ListenAddress& a : config.listen_tls) {
      add("https ", AddressText(a.addr) + (a.proxy ? ",proxy" : ""));
    }
  }
  for (const int fd : inherited.fds) ::close(fd);
  for (const int fd : inherited.tls_fds) ::close(fd);
  return "serving " + config.root + " on " + where + " with " + std::to_string(shards) + " shard" +
         (shards == 1 ? "" : "s") +
         (config.http2 ? ", HTTP/1.1 and HTTP/2 (h2 by ALPN, h2c by its preface)"
                       : ", HTTP/1.1 alone (--http2=false)") +
         " (ringd " + BuildVersion() + ", commit " + BuildCommit() + ")";
}

// The main loop: signals, the once-a-second ticks, and the watchdog. Each watchdog period it
// sends WATCHDOG=1 if every shard answered the question asked one period before (its loop
// turned), then asks again. Returns the signal that stops ringd.
int WaitForStop(const sigset_t& signals, ServiceNotifier& notifier, Observability& observability,
                const std::vector<std::unique_ptr<Shard>>& shard_list,
                const std::function<void()>& reload, RootWatch* root_watch) {
  using Clock = std::chrono::steady_clock;
  const int64_t watchdog_ms = static_cast<int64_t>(notifier.watchdog_interval_ms());
  const auto tick =
      std::chrono::milliseconds(watchdog_ms > 0 && watchdog_ms < 1000 ? watchdog_ms : 1000);
  // The ticks keep their times whatever arrives between them: a wait cut short by a signal
  // waits out the rest of the tick, so that a stream of SIGHUP or SIGUSR1 delays no tick and no
  // watchdog ping.
  Clock::time_point next_tick = Clock::now() + tick;
  for (;;) {
    const auto left = std::chrono::duration_cast<std::chrono::nanoseconds>(
        std::max(next_tick - Clock::now(), Clock::duration::zero()));
    const timespec wait{static_cast<time_t>(left.count() / 1000000000),
                        static_cast<long>(left.count() % 1000000000)};
    const int sig = sigtimedwait(&signals, nullptr, &wait);
    if (sig == SIGINT || sig == SIGTERM || sig == SIGQUIT) return sig;
    if (sig == SIGUSR2) {
      // nginx's binary upgrade: an nginx habit must not kill ringd (its default action).
      std::fprintf(stderr,
                   "ringd: SIGUSR2 ignored (a new binary takes over with --takeover or the "
                   "socket unit: docs/OPERATIONS.md)\n");
    } else if (sig == SIGUSR1) {
      observability.ReopenLog();
    } else if (sig == SIGHUP) {
      reload();
      root_watch->CheckNow();
    }
    const Clock::time_point now = Clock::now();
    if (now < next_tick) continue;  // a signal (or EINTR) before the tick
    // The next tick one period on; one period from now after a stall (a slow SIGHUP reload).
    next_tick += tick;
    if (next_tick <= now) next_tick = now + tick;
    observability.Tick();
    if (watchdog_ms == 0) continue;
    bool all_turned = true;
    for (auto& s : shard_list) all_turned = all_turned && s->heartbeat().Answered();
    if (all_turned) notifier.Watchdog();
    for (auto& s : shard_list) {
      if (s->heartbeat().Answered()) {
        s->heartbeat().Ask();
        s->loop()->Wake();
      }
    }
  }
}

// After SIGINT, SIGTERM or SIGQUIT: the shards finish what is in flight and stop; the process says
// so. SIGTERM and SIGINT give the responses under way --shutdown-timeout-ms; SIGQUIT lets each
// run as long as it keeps moving (nginx's graceful QUIT), until a SIGTERM or SIGINT bounds it.
void Drain(const Config& config, int sig, const sigset_t& signals,
           const std::vector<std::unique_ptr<Shard>>& shard_list, std::vector<std::thread>* threads,
           Observability* observability, ServiceNotifier* notifier) {
  bool while_moving = sig == SIGQUIT;
  for (auto& s : shard_list) {
    s->RequestStop(while_moving ? Shard::StopBound::kWhileMoving : Shard::StopBound::kTimeout);
  }
  // Each shard begins its drain at its next turn; the process says it drains (/readyz 503,
  // /debug/shards) once they all have, so that nothing is served after the flag says otherwise
  // (a shard that does not get there within a second is not waited for).
  for (int waited_ms = 0; waited_ms < 1000; ++waited_ms) {
    bool all = true;
    for (auto& s : shard_list) all = all && s->DrainBegun();
    if (all) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  observability->BeginDrain();  // /readyz answers 503 from here on
  notifier->Stopping("draining");
  if (while_moving) {
    std::fprintf(stderr,
                 "ringd: SIGQUIT: finishing responses in flight, each as long as it keeps moving "
                 "(one that moves nothing for --send-timeout-ms %u ends; SIGTERM sets a bound of "
                 "--shutdown-timeout-ms %u)\n",
                 config.send_timeout_ms, config.shutdown_timeout_ms);
  } else {
    std::fprintf(stderr, "ringd: %s: finishing responses in flight (up to %u ms)\n",
                 sig == SIGINT ? "SIGINT" : "SIGTERM", config.shutdown_timeout_ms);
  }
  // Signals still come while the shards finish: SIGTERM or SIGINT bounds a SIGQUIT drain,
  // SIGUSR1 reopens the log (a drain may outlast a rotation); the others wait for no one.
  for (;;) {
    bool stopped = true;
    for (auto& s : shard_list) stopped = stopped && s->snapshot_slot().closed();
    if (stopped) break;
    const timespec wait{0, 100 * 1000 * 1000};
    const int more = sigtimedwait(&signals, nullptr, &wait);
    if (more == SIGUSR1) observability->ReopenLog();
    if (while_moving && (more == SIGTERM || more == SIGINT)) {
      while_moving = false;
      std::fprintf(stderr, "ringd: %s: responses still in flight end within %u ms\n",
                   more == SIGINT ? "SIGINT" : "SIGTERM", config.shutdown_timeout_ms);
      for (auto& s : shard_list) s->RequestStop(Shard::StopBound::kTimeout);
    }
  }
  for (auto& t : *threads) t.join();
  observability->Stop();  // the admin listener, then the log's last lines
  // Requests as ringd_requests_total counts them: every response, 400s to unparseable input too.
  uint64_t accepted = 0, responses = 0, cut = 0;
  for (auto& s : shard_list) {
    accepted += s->Stats().accepted;
    responses += s->Responses();
    cut += s->Stats().cut_at_drain_deadline;
  }
  std::string cut_text;
  if (cut > 0) {
    cut_text = "; " + std::to_string(cut) + (cut == 1 ? " response" : " responses") +
               " still sending cut at --shutdown-timeout-ms";
  }
  std::fprintf(stderr, "ringd: stopped after %llu connections, %llu requests%s\n",
               static_cast<unsigned long long>(accepted),
               static_cast<unsigned long long>(responses), cut_text.c_str());
}

int Main(int argc, char** argv) {
  // Signals are handled by the main thread alone, with sigwait (WaitForStop), and blocked first
  // thing: one that arrives while ringd starts (reading certificates, binding, starting shards)
  // waits until ringd serves, where the default action would kill it (SIGHUP, SIGUSR1, SIGUSR2)
  // or dump its core (SIGQUIT). Every thread started later inherits the mask.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGINT);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGQUIT);  // nginx's graceful stop: transfers still moving finish
  sigaddset(&signals, SIGUSR2);  // ignored, with a line (nginx's binary upgrade)
  sigaddset(&signals, SIGUSR1);  // reopen the access log
  sigaddset(&signals, SIGHUP);   // re-read the flags: certificates, keys, OCSP responses
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);
  ::signal(SIGPIPE, SIG_IGN);

  Config config;
  bool exit_now = false;
  if (absl::Status s = ParseFlags(argc, argv, &config, &exit_now); !s.ok()) {
    if (config.check_config) {
      Findings found;
      found.problems.push_back({2, std::string(s.message())});
      return ReportCheck(found);
    }
    Die(2, s);
  }
  if (exit_now) return 0;
  // A check (-t) or a probe serves nothing: a signal stops it as it stops any command.
  if (config.probe_only || config.check_config) pthread_sigmask(SIG_UNBLOCK, &signals, nullptr);
  if (config.probe_only) return Probe(config);
  Prepared prepared;
  const Findings found = Prepare(config, &prepared);
  if (config.check_config) return ReportCheck(found);
  if (!found.problems.empty()) Die(found.problems[0].exit_status, found.problems[0].line);
  Tls& tls = prepared.tls;
  const IoSetup& io = prepared.io;
  const int root_fd = prepared.root_fd;
  DocumentRoot document_root(config.root, root_fd);  // followed when --root is renamed over
  OriginPublisher origin(&config.origin);            // replaced by a SIGHUP reload
  const http::MimeTypes& mime = prepared.mime;
  const uint32_t shards = prepared.shards;
  // --site: each site's root, followed as --root is, and the table every shard reads.
  SitesPublisher sites;
  {
    std::string error;
    std::unique_ptr<Sites> first = BuildSites(config, prepared.site_root_fds, &error);
    if (first == nullptr) Die(1, error);
    sites.Publish(std::move(first));
  }

  const Inherited inherited = CheckListenAddresses(config, shards);
  // A passed socket's peer is judged by --proxy-from at accept (getpeername), as a ,proxy
  // listener's: a tier without peer addresses needs every peer trusted.
  if (!inherited.proxy_fds.empty() && !config.proxy_from_all && !io.tier->can.names_clients) {
    Die(2,
        "sockets named proxy or https-proxy (LISTEN_FDNAMES) without --proxy-from all need a "
        "tier that names clients (--io=uring or --io=epoll); the " +
            io.tier->name + " tier does not");
  }
  Observability observability;  // the access log and the admin listener (before the shards)
  if (absl::Status s = observability.Open(config, shards); !s.ok()) Die(1, s);
  // Said once nothing that refuses the flags is left (a start-up that fails is one line).
  for (const std::string& line : found.warnings) Say(line);
  if (tls.on) {
    observability.SetCertificates(
        [&tls] {
          std::vector<ProcessInfo::Certificate> out;
          for (const tls::OpenSslFactory::Certificate& c : tls.sessions.certificates())
            out.push_back(ProcessInfo::Certificate{c.file, c.not_after_sec, c.ocsp_file,
                                                   c.ocsp_next_update_sec});
          return out;
        },
        [&tls] { return tls.sessions.dropped_ocsp(); }, config.tls_refuse_expired);
  }
  ServiceNotifier notifier;  // systemd's Type=notify; nothing without NOTIFY_SOCKET
  const std::vector<std::unique_ptr<Shard>> shard_list = MakeShards(
      config, inherited, shards, root_fd, &mime, io, &tls, notifier.watchdog_interval_ms() > 0);
  for (size_t i = 0; i < shard_list.size(); ++i) {
    shard_list[i]->SetDocumentRoot(document_root.state_word());
    shard_list[i]->SetOriginHeaders(origin.word());
    shard_list[i]->SetSites(sites.word());
    observability.Attach(shard_list[i].get(), static_cast<int>(i));
  }
  std::vector<std::thread> threads = StartShards(config, root_fd, sites.current(), shard_list);
  LogIo(config, io);

  std::vector<Shard*> serving;
  for (auto& s : shard_list) serving.push_back(s.get());
  observability.Start(serving, io.tier->name.c_str(), io.line);
  if (observability.has_admin())
    std::fprintf(stderr, "ringd: admin listener on %s\n", observability.admin_address().c_str());
  const std::string serving_line = ServingLine(config, inherited, shards);
  std::fprintf(stderr, "ringd: %s\n", serving_line.c_str());
  notifier.Ready(serving_line);  // every shard's accept is armed

  // A moved root is taken up by each shard at the start of its next turn: the shards are woken
  // (an idle one would otherwise sleep up to a second first).
  RootWatch root_watch([&document_root, &sites, &shard_list] {
    const uint64_t before = document_root.state();
    const std::string line = document_root.Check();
    if (!line.empty()) std::fprintf(stderr, "%s\n", line.c_str());
    const bool site_moved = sites.CheckRoots();
    if (document_root.state() != before || site_moved) {
      for (auto& s : shard_list) s->loop()->Wake();
    }
  });
  // What a SIGHUP compares the flags it reads to: the configuration in use (the shards keep
  // reading `config`, which a reload never touches).
  Config in_use = config;
  const auto reload = [&] {
    Reload(argc, argv, &in_use,
           Reloadable{&tls, &origin, &shard_list, &document_root, &observability, &sites,
                      config.any_site_rules(), config.any_autoindex()});
  };
  const int sig = WaitForStop(signals, notifier, observability, shard_list, reload, &root_watch);
  Drain(config, sig, signals, shard_list, &threads, &observability, &notifier);
  if (!root_watch.Stop(std::chrono::seconds(1))) {
    // Everything is served and said; only a stat of --root on a server that does not answer
    // is left, and it would hold the exit until the supervisor's stop timeout.
    std::fprintf(stderr, "ringd: a check of --root has not returned; exiting without it\n");
    std::fflush(nullptr);
    ::_exit(0);
  }
  return 0;
}

}  // namespace
}  // namespace ringd

int main(int argc, char** argv) { return ringd::Main(argc, argv); }
