"""The scenarios: each one entry of SCENARIOS, carrying everything the harness and the report need
to know about it. Adding a scenario is adding an entry (and, if it needs one, a Hooks subclass).

    s = SCENARIOS["large"]
    s.load.command(bins["load"], port, data_root, duration_s=5, client_cpus="0")
"""
import os
import shutil
import subprocess
import tempfile
import time
from dataclasses import dataclass, field, replace
from functools import partial
from typing import Dict, FrozenSet, Optional, Tuple

from . import colddisk, longtail, tls
from .slowdisk import Unavailable


# h2load's warm-up before each measured run: every connection and its TLS handshake is made in it.
H2LOAD_WARM_UP_S = 1
# The h2-idle scenarios' client (idle HTTP/2 connections held while h2load runs).
H2IDLE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "h2idle.py")
# Seconds h2idle.py holds its connections idle before the server's memory is read: an idle
# connection is one that has waited, longer than a server's own trims of idle connections take
# (ringd's: an HTTP/2 frame buffer after 1 s with no stream, TLS record buffers after 2 s).
H2IDLE_SETTLE_S = 3
# The h2-page scenarios' client (page loads one after another, each an h2load run).
H2PAGE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "h2page.py")


@dataclass(frozen=True)
class Load:
    """What the load generator does: ringd-load's flags, and wrk's where wrk can do it."""
    connections: int
    paths: Tuple[str, ...] = ()
    paths_file: Optional[str] = None   # a file of the data root, one path per line
    paths_glob: Optional[str] = None   # a folder of the data root: every file in it
    close: bool = False
    bulk: bool = False                 # discard bodies in the kernel (MSG_TRUNC)
    rate: int = 0                      # open loop: requests/s over all connections
    idle: int = 0                      # idle keep-alive connections held during the run
    idle_setup: int = 100              # of those, set up at once (0: all at once, a burst)
    idle_settle_s: float = 0           # seconds they are held idle before the server's memory is read
    zipf: float = 0                    # > 0: paths drawn Zipf-distributed, the first the most popular
    uniform: bool = False              # paths drawn uniformly at random (not in turn)
    size_classes: Tuple[int, ...] = () # body-size bounds: latency per size class
    tls_resume: bool = False           # over TLS: each connection resumes its slot's last session
    hello_flood: bool = False          # over TLS: ClientHellos only (perf/hello_flood), not ringd-load
    streams: int = 0                   # > 0: HTTP/2 from h2load, this many streams at once per connection
    page_assets: int = 0               # > 0: HTTP/2 page loads (h2page.py): paths[0] and this many files of paths_glob
    headers: Tuple[str, ...] = ()      # request header lines ("Accept-Encoding: gzip")

    def scaled(self, divisors):
        """The --quick version: rate and idle divided as the scenario says."""
        return replace(self, **{k: getattr(self, k) // d for k, d in divisors.items()})

    def url_paths(self, root):
        paths = list(self.paths)
        if self.paths_glob:
            d = os.path.join(root, self.paths_glob)
            paths += ["/%s/%s" % (self.paths_glob, f) for f in sorted(os.listdir(d))]
        return paths

    def command(self, load_bin, port, root, duration_s, client_cpus, threads=1, tls=False):
        """ringd-load's command line; tls: the server speaks HTTPS (bodies are then read and
        decrypted: no --bulk, whatever the load says)."""
        cmd = ["taskset", "-c", client_cpus, load_bin, "--port", str(port),
               "--connections", str(self.connections), "--duration-s", str(duration_s)]
        if self.hello_flood:
            # load_bin is hello_flood: it takes nothing more. It shares the client core with the
            # load it floods beside, so it runs there only when that load has nothing to do
            # (SCHED_IDLE): the measured clients' latency is then the server's, not the shared
            # core's, as with an attacker on machines of its own.
            return ["chrt", "--idle", "0"] + cmd
        if threads > 1:
            cmd += ["--threads", str(threads)]
        if self.close:
            cmd.append("--close")
        if tls:
            cmd.append("--tls")
            if self.tls_resume:
                cmd.append("--tls-resume")
        elif self.bulk:
            cmd.append("--bulk")
        if self.rate:
            cmd += ["--rate", str(self.rate)]
        if self.idle:
            cmd += ["--idle", str(self.idle)]
            if self.idle_setup != 100:
                cmd += ["--idle-setup", str(self.idle_setup)]
            if self.idle_settle_s:
                cmd += ["--idle-settle-s", "%g" % self.idle_settle_s]
        for p in self.url_paths(root):
            cmd += ["--path", p]
        if self.paths_file:
            cmd += ["--paths-file", os.path.join(root, self.paths_file)]
        if self.zipf:
            cmd += ["--zipf", "%g" % self.zipf]
        if self.uniform:
            cmd.append("--uniform")
        if self.size_classes:
            cmd += ["--size-classes", ",".join(str(b) for b in self.size_classes)]
        for h in self.headers:
            cmd += ["--header", h]
        return cmd

    def wrk_command(self, port, root, duration_s, client_cpus, threads=1, tls=False):
        """wrk: closed loop, one path (it copies every body byte, so large-file figures are capped
        by the client); tls: an https:// URL (wrk negotiates what its OpenSSL prefers)."""
        cmd = ["taskset", "-c", client_cpus, "wrk", "-t%d" % threads, "-c%d" % self.connections,
               "-d%ds" % max(1, int(round(duration_s))), "--latency"]
        if self.close:
            cmd += ["-H", "Connection: close"]
        for h in self.headers:
            cmd += ["-H", h]
        return cmd + ["%s://127.0.0.1:%d%s" % ("https" if tls else "http", port, self.url_paths(root)[0])]

    def h2load_command(self, port, root, duration_s, client_cpus, threads=1, tls=False, warm_up_s=H2LOAD_WARM_UP_S):
        """h2load: closed loop, every connection with `streams` requests in flight, the paths in
        turn; tls: h2 by ALPN (h2 alone offered, so a server without it fails rather than falling
        back to HTTP/1.1; the suite and group ringd-load offers), else h2c with prior knowledge.
        Its rate counts the main duration only: the connections (handshakes included) open in the
        warm-up before it, which the harness leaves out of the server's CPU too. With idle, h2idle.py
        first opens and holds that many HTTP/2 connections, one request done on each, then runs it."""
        if self.page_assets:
            # Page loads one after another (h2page.py), each an h2load run of one connection asking
            # for the page and every asset at once: a count of requests, so no warm-up.
            return ["taskset", "-c", client_cpus, H2PAGE, "--duration-s", "%g" % duration_s, "--port", str(port)] + (
                ["--tls"] if tls else []) + ["--root", root, "--page", self.paths[0], "--assets", self.paths_glob,
                                             "--count", str(self.page_assets)]
        cmd = ["taskset", "-c", client_cpus, "h2load", "-t%d" % threads, "-c%d" % self.connections,
               "-m%d" % self.streams, "-D%dms" % max(1, round(duration_s * 1000)),
               "--warm-up-time=%dms" % round(warm_up_s * 1000)]
        if tls:
            cmd += ["--npn-list=h2", "--tls13-ciphers=TLS_AES_128_GCM_SHA256", "--groups=X25519"]
        paths = self.url_paths(root)
        urls = ["%s://127.0.0.1:%d%s" % ("https" if tls else "http", port, p) for p in paths]
        cmd += urls
        if not self.idle:
            return cmd
        return ["taskset", "-c", client_cpus, H2IDLE, "--port", str(port), "--idle", str(self.idle),
                "--path", paths[0]] + (["--tls"] if tls else []) + ["--settle-s", "%g" % H2IDLE_SETTLE_S,
                                                                   "--"] + cmd

    def warm(self):
        """The unmeasured warm-up: the same paths, closed loop, no idle connections."""
        return replace(self, idle=0, rate=0, bulk=True)


@dataclass(frozen=True)
class Metric:
    key: str       # a key of Result.figures()
    label: str     # its column header
    scale: float   # report units per stored unit
    higher_is_better: bool


@dataclass(frozen=True)
class Column:
    """An extra column of a scenario's table."""
    header: str
    key: str          # a key of Result.figures()
    fmt: str = "%.2f"
    per: float = 1    # shown as value / per
    key2: Optional[str] = None  # a second figure in the same cell: "value / value2"
    # The cell is the figure over nginx's round by round (stats.by_round), not the figure.
    by_round: bool = False


RPS = Metric("rps", "requests/s", 1, True)
THROUGHPUT = Metric("bytes_per_s", "throughput (MB/s)", 1e-6, True)
PACKETS = Column("packets/request", "packets_per_request")
# On loopback part of the client's TCP work runs in whichever process holds the socket at the
# time (a packet for a socket its owner has locked waits in the backlog for the owner), so how
# busy the server is moves CPU between the two: read the server's CPU beside the client's.
CLIENT_CPU = Column("client CPU us/request", "client_cpu_us_per_request")
# CPU per request counts the server's threads only; TCP work that the kernel runs in softirq
# context off any thread (ksoftirqd) is charged to no process, and how much of it goes there
# differs from server to server. Everything that ran on the server's cores, per request:
CORE_CPU = Column("server cores' CPU us/request", "core_us_per_request")


class Hooks:
    """Per-scenario setup and teardown around the runs; the default does nothing."""

    def setup(self, ctx):
        """Before any server starts; returns the document root the servers serve."""
        return ctx.data

    def server_prefix(self):
        """An argv prefix for every server command (the longtail scenario's cgroups)."""
        return []

    def before_run(self, ctx, serve_root):
        """Before each measured run."""

    def after_run(self, ctx, result):
        """After each measured run: may add figures to its Result."""

    def teardown(self, ctx):
        """After the last run (also when a run raised)."""


def evict(folder):
    """Drops a folder's files from the page cache (posix_fadvise DONTNEED)."""
    for f in os.listdir(folder):
        fd = os.open(os.path.join(folder, f), os.O_RDONLY)
        try:
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)


class ColdDisk(Hooks):
    """The cold scenario's slow disk: a FUSE passthrough (perf/slowfs) sleeping before each read,
    and the cold files evicted from the page cache before every run, on both sides of it."""

    def __init__(self):
        self.mount, self.fuse = None, None

    def setup(self, ctx):
        mnt = tempfile.mkdtemp(prefix="ringd-slowfs-")
        os.chmod(mnt, 0o755)
        with open(os.path.join(ctx.outdir, "slowfs.log"), "w") as log:
            fuse = subprocess.Popen([ctx.bins["slowfs"], ctx.data, mnt, str(ctx.args.slow_read_us)],
                                    stdout=subprocess.DEVNULL, stderr=log)
        for _ in range(50):
            if os.path.ismount(mnt):
                self.mount, self.fuse = mnt, fuse
                ctx.meta["cold_disk"] = ("FUSE passthrough (perf/slowfs) sleeping %d us per read; page cache"
                                         " evicted before each run" % ctx.args.slow_read_us)
                return mnt
            if fuse.poll() is not None:
                break
            time.sleep(0.1)
        fuse.kill()
        fuse.wait()
        os.rmdir(mnt)
        ctx.meta["cold_disk"] = "page cache evicted before each run (FUSE unavailable: no slow-disk simulation)"
        return ctx.data

    def before_run(self, ctx, serve_root):
        evict(os.path.join(ctx.data, "cold"))
        evict(os.path.join(serve_root, "cold"))

    def teardown(self, ctx):
        if self.mount:
            subprocess.run(["fusermount3", "-u", self.mount], stderr=subprocess.DEVNULL)
            self.fuse.wait(timeout=10)
            os.rmdir(self.mount)
            self.mount = None


class TlsCertificate(Hooks):
    """The TLS scenarios' setup: the run's certificate (made once per run into its folder's tls/,
    the same for every server) and, once per run, what one server core encrypts with AES-128-GCM
    (meta aes_128_gcm_bytes_per_s: tls-large's reference)."""

    def setup(self, ctx):
        if ctx.tls is None:
            ctx.tls = tls.make_certificate(os.path.join(ctx.outdir, "tls"))
            ctx.meta["tls"] = tls.CERT_DESCRIPTION + "; client: ringd-load --tls (X25519, TLS_AES_128_GCM_SHA256)"
        if "aes_128_gcm_bytes_per_s" not in ctx.meta:
            speed, cmd = tls.aes_gcm_speed(ctx.args.server_cpus.split(",")[0], 1 if ctx.args.quick else 3)
            ctx.meta["aes_128_gcm_bytes_per_s"] = speed
            ctx.meta["aes_128_gcm"] = ("%.0f MB/s of one core's CPU time (16 KiB blocks): %s" % (speed / 1e6, " ".join(cmd))
                                       if speed else "not measured: %s said nothing" % " ".join(cmd))
        return ctx.data


class H2load(Hooks):
    """The HTTP/2 scenarios' setup: h2load (Debian's nghttp2-client, which tools/setup installs)
    must be there, or the scenario is skipped with the reason."""

    def setup(self, ctx):
        if shutil.which("h2load") is None:
            raise Unavailable("h2load is not installed (Debian's nghttp2-client)")
        return ctx.data


class H2loadTls(TlsCertificate):
    """H2load's check, then the TLS scenarios' certificate and AES-128-GCM reference."""

    def setup(self, ctx):
        H2load().setup(ctx)
        return super().setup(ctx)


class AssetPaths(Hooks):
    """Writes paths-assets.txt into the data root, every file of assets/ once: a load spread over
    many paths, which the fleet's URI hash spreads over its nodes."""

    def setup(self, ctx):
        with open(os.path.join(ctx.data, "paths-assets.txt"), "w") as f:
            f.writelines("/assets/%s\n" % n for n in sorted(os.listdir(os.path.join(ctx.data, "assets"))))
        return ctx.data


class TextAssetPaths(Hooks):
    """Writes paths-text-assets.txt into the data root: every text asset of assets/ (css, js, svg,
    json; their .gz siblings left out) once."""

    def setup(self, ctx):
        names = sorted(n for n in os.listdir(os.path.join(ctx.data, "assets"))
                       if n.rsplit(".", 1)[-1] in ("css", "js", "svg", "json"))
        with open(os.path.join(ctx.data, "paths-text-assets.txt"), "w") as f:
            f.writelines("/assets/%s\n" % n for n in names)
        return ctx.data


@dataclass(frozen=True)
class Scenario:
    name: str
    what: str
    seed: str
    load: Load
    metric: Metric = RPS
    columns: Tuple[Column, ...] = ()
    quick: Dict[str, int] = field(default_factory=dict)  # --quick: load field -> divisor
    # A shorter --duration (--quick's half second) is raised to this: a scenario whose slowest
    # server needs longer for its first measured response.
    min_duration_s: float = 0
    wrk: bool = False             # wrk can drive it (closed loop, one path)
    fresh_server: bool = False    # every repeat on a freshly started server
    warm: bool = True             # an unmeasured warm-up before measuring (off: from a cold start)
    cpu_column: bool = True       # CPU per request means something here
    packets: bool = True          # count loopback packets per request
    background: Optional[Load] = None  # a second load run at the same time
    background_label: str = ""
    notes: Tuple[str, ...] = ()   # lines under the table
    # A reference row (a peer): where it ran, every server also gets "fraction of <reference>", its
    # main figure over the reference's median in the same run, and reference_note goes under the table.
    reference: Optional[str] = None
    reference_note: str = ""
    hooks: type = Hooks
    opt_in: bool = False          # not in perf/run's default list: only where --scenarios names it
    servers: Optional[FrozenSet[str]] = None  # only these peers take part (None: every one that runs in it)
    quick_skip: bool = False      # left out of --quick's default list (it keeps one TLS scenario)
    # HTTPS: the peers that terminate TLS serve it (Peer.in_tls), the client speaks it to them.
    tls: bool = False
    # More ratios, each a column: the main figure over these peers' ("x h2o"), and CPU per request
    # over theirs ("CPU x nginx"), in the same run.
    ratio_to: Tuple[str, ...] = ()
    cpu_ratio_to: Tuple[str, ...] = ()
    # (meta key, header): the main figure over a number the run measured once (tls-large: one
    # core's AES-128-GCM bytes per second).
    meta_reference: Optional[Tuple[str, str]] = None

    @property
    def http2(self):
        """h2load drives it: HTTP/2, h2 by ALPN where `tls`, else h2c with prior knowledge."""
        return self.load.streams > 0

    def takes(self, peer):
        return self.servers is None or peer in self.servers

    def duration(self, args):
        """Seconds each measured run of this scenario lasts."""
        return max(args.duration, self.min_duration_s)

    def loads(self, quick):
        """The main and background loads, scaled for --quick."""
        scale = (lambda l: l.scaled(self.quick)) if quick else (lambda l: l)
        return scale(self.load), scale(self.background) if self.background else None


_ENTRIES = [
    Scenario("small-keepalive", "612-byte index.html, 100 keep-alive connections, closed loop",
             "004 (wrk -c100 against nginx's 612-byte page) and 001 (ab -k)",
             Load(100, paths=("/index.html",)), columns=(PACKETS, CORE_CPU, CLIENT_CPU), wrk=True),
    Scenario("small-close", "612-byte index.html, `Connection: close` on every request, 1,000 connections",
             "002 (1,000 concurrent clients) and 003 (tuning for many short connections)",
             Load(1000, paths=("/index.html",), close=True), columns=(PACKETS, CORE_CPU, CLIENT_CPU),
             wrk=True),
    Scenario("large", "4 MiB files, 10 keep-alive connections, bodies discarded by the client (MSG_TRUNC)",
             "000 (4 MB files, sendfile)", Load(10, paths_glob="4mb", bulk=True),
             metric=THROUGHPUT, wrk=True, reference="loopback",
             reference_note="loopback is raw loopback TCP: perf/loopback sends the same 4 MiB response from memory"
                            " with plain send(2) loops (no file, no parsing) into the same client, in the same run;"
                            " fraction of loopback is a server's throughput over loopback's median."),
    Scenario("large-read", "large's 4 MiB files and 10 keep-alive connections; the client reads every body byte"
             " into a buffer, as real clients do (no MSG_TRUNC)",
             "000 (4 MB files, sendfile) and issue 30 (CPU per big body)", Load(10, paths_glob="4mb"),
             metric=THROUGHPUT, columns=(CORE_CPU, CLIENT_CPU),
             notes=("CPU us/request is per 4 MiB response. The client's copy of every byte shares the"
                    " machine with the server: read server CPU per response, not the rate alone.",)),
    Scenario("mixed", "the data set's size mix (612 B page, 4-100 KiB assets, 4 MiB files), 100 connections",
             "000 and 004 (a site rather than one file)",
             Load(100, paths_file="paths-mixed.txt", bulk=True), metric=THROUGHPUT,
             columns=(Column("p99 ms, responses < 1 MiB", "p99_small_us", "%.2f", 1000),
                      Column("mean ms", "mean_us", "%.2f", 1000),
                      Column("p99 ms, responses >= 1 MiB", "p99_large_us", "%.1f", 1000),
                      Column("MB/s x nginx by round", "bytes_per_s", by_round=True),
                      Column("p99 < 1 MiB x nginx by round", "p99_small_us", by_round=True),
                      Column("p99 >= 1 MiB x nginx by round", "p99_large_us", by_round=True))),
    Scenario("idle-10k",
             "10,000 idle keep-alive connections (one request done on each, set up 100 at a time) held while"
             " small-keepalive runs; each run on a freshly started server, so memory growth is measured"
             " from the same start",
             "002 (20,000 keep-alive connections on images.rambler.ru)",
             Load(100, paths=("/index.html",), idle=10000), quick={"idle": 10}, fresh_server=True,
             packets=False, columns=(Column("bytes per idle connection", "idle_bytes_per_connection", "%.0f"),)),
    Scenario("idle-fresh",
             "9,000 idle keep-alive connections (one request done on each, set up 100 at a time) held while"
             " small-keepalive runs, on a freshly started server with no warm-up: what a burst of new"
             " connections costs a server that has served nothing yet",
             "002 (20,000 keep-alive connections on images.rambler.ru)",
             Load(100, paths=("/index.html",), idle=9000), quick={"idle": 10}, fresh_server=True,
             warm=False, packets=False,
             columns=(Column("bytes per idle connection", "idle_bytes_per_connection", "%.0f"),)),
    Scenario("idle-fresh-burst",
             "idle-fresh with the 9,000 connections opened all at once, each sending its first request as"
             " soon as it is connected: a burst of newcomers on a server that has served nothing yet;"
             " the server's memory is read once they have been idle 3 s (what the burst left, not its"
             " peak)",
             "issue 45 (idle memory from a cold start, connections all at once)",
             Load(100, paths=("/index.html",), idle=9000, idle_setup=0, idle_settle_s=3), quick={"idle": 10},
             fresh_server=True, warm=False, packets=False, quick_skip=True,
             columns=(Column("bytes per idle connection", "idle_bytes_per_connection", "%.0f"),)),
    Scenario("cold",
             "hot 612-byte requests at a fixed rate while other clients read 4 MiB files that are not in the"
             " page cache, from a slow disk",
             "000 (nginx thread pools: the 9x cold-cache result)",
             Load(20, paths=("/index.html",), rate=2000), quick={"rate": 4},
             # nginx without aio serves a hot request only between cold reads: about a second.
             min_duration_s=2,
             metric=Metric("p99_us", "hot p99 latency (ms)", 1e-3, False),
             columns=(Column("cold MB/s", "cold_bytes_per_s", "%.1f", 1e6),),
             cpu_column=False, packets=False,
             background=Load(16, paths_glob="cold", bulk=True), background_label="Cold load, at the same time",
             notes=("(CPU per request is not shown here: the server's CPU goes mostly to the cold transfers.)",),
             hooks=ColdDisk),
    Scenario("fleet",
             "the data set's assets (4-100 KiB) over 100 keep-alive connections through HAProxy"
             " (deploy/haproxy/ringd-fleet.cfg: consistent hashing of the URI, /readyz checks) to 1 and to 2"
             " ringd nodes on loopback addresses of their own; ringd-bypass takes the same load directly."
             " HAProxy and the nodes share the server CPUs",
             "issue 14 (an origin tier grows past one machine)",
             Load(100, paths_file="paths-assets.txt", bulk=True), hooks=AssetPaths,
             columns=(Column("HAProxy CPU us/request", "cpu_us_per_request_haproxy"),
                      Column("ringd CPU us/request", "cpu_us_per_request_ringd"),
                      Column("client CPU us/request", "client_cpu_us_per_request")),
             servers=frozenset({"ringd-bypass", "fleet-1", "fleet-2"}), reference="ringd-bypass",
             reference_note="fraction of ringd-bypass: requests/s through HAProxy over one ringd's without it, same"
                            " run. CPU us/request is HAProxy and every node together (the launcher's share is"
                            " nil); on one server core two nodes cannot serve more than one: HAProxy's cost per"
                            " request bounds the rate, and a second node only splits ringd's share."
                            " See docs/PERFORMANCE.md (fleet)."),
    Scenario("sites",
             "612-byte index.html, 100 keep-alive connections whose requests name site50.example.org:"
             " ringd-uring and nginx serve one site, ringd-uring-sites and nginx-sites 100 sites (the"
             " request's among them) with a request-rate limit and an allow-list that never refuse the load",
             "issue 46 (sites and per-client rules at no cost to a request)",
             Load(100, paths=("/index.html",), headers=("Host: site50.example.org",)),
             metric=Metric("cpu_us_per_request", "CPU us/request", 1, False), ratio_to=("ringd-uring",),
             opt_in=True, wrk=True, columns=(Column("requests/s", "rps", "%.0f"), CORE_CPU, CLIENT_CPU),
             servers=frozenset({"ringd-uring", "ringd-uring-sites", "nginx", "nginx-sites"}),
             notes=("ringd-uring-sites: a flagfile of 100 `[site siteN.example.org]` sections (each the data"
                    " root), `--limit-req 1000000r/s,burst=1000000` and `--allow 127.0.0.0/8`; nginx-sites: 100"
                    " `server` blocks with `limit_req_zone ... rate=1000000r/s`, `limit_req ... burst=1000000"
                    " nodelay` and `allow 127.0.0.0/8; deny all;`. The uring tier: the bypass tier cannot name a"
                    " connection's client, which the limit and the allow-list need.",)),
    Scenario("compress",
             "the data set's text assets (css, js, svg, json; 4-100 KiB) to 100 keep-alive connections that"
             " send `Accept-Encoding: gzip`: ringd-bypass sends their .gz siblings (level 6), ringd-bypass-compress"
             " ignores the siblings (--precompressed=false) and compresses each once on the fly (--compress,"
             " gzip 6, cached), nginx-gzip compresses every response (`gzip on`, gzip_comp_level 6)",
             "issue 47 (compression on the fly, done once, with a cache)",
             Load(100, paths_file="paths-text-assets.txt", bulk=True, headers=("Accept-Encoding: gzip",)),
             hooks=TextAssetPaths, opt_in=True, columns=(Column("MB/s", "bytes_per_s", "%.1f", 1e6), CORE_CPU),
             servers=frozenset({"ringd-bypass", "ringd-bypass-compress", "nginx-gzip"}),
             reference="nginx-gzip",
             reference_note="fraction of nginx-gzip: requests/s over nginx's with `gzip on` in the same run; every"
                            " row sends gzip bodies of about the same size (level 6)."),
    Scenario("mixed-at-rate",
             "the mixed scenario's requests at a fixed 6,000 requests/s over 100 connections (open loop: the"
             " servers ran 20-40% busy here), so the order of service can change response times without"
             " changing the rate",
             "000 and 004; Harchol-Balter et al., size-based scheduling of a web server (issue 16)",
             Load(100, paths_file="paths-mixed.txt", bulk=True, rate=6000), quick={"rate": 4},
             metric=Metric("mean_us", "mean response (ms)", 1e-3, False), opt_in=True,
             columns=(Column("MB/s", "bytes_per_s", "%.0f", 1e6),
                      Column("p99 ms, responses < 1 MiB", "p99_small_us", "%.2f", 1000),
                      Column("p99 ms, all", "p99_us", "%.1f", 1000),
                      Column("mean ms, responses >= 1 MiB", "mean_large_us", "%.1f", 1000),
                      Column("p99 ms, responses >= 1 MiB", "p99_large_us", "%.1f", 1000))),
    Scenario("mixed-at-load",
             "the mixed scenario's requests at a fixed 15,000 requests/s over 100 connections (open loop: about"
             " 55% of nginx's rate in `mixed` on this machine, up to 90% in its slow rounds): both servers"
             " get the same work, so the downloads' and the pages' times compare without the closed loop's"
             " trade between them",
             "000 and 004; issue 30 (large responses in a mix)",
             Load(100, paths_file="paths-mixed.txt", bulk=True, rate=15000), quick={"rate": 4},
             metric=Metric("mean_us", "mean response (ms)", 1e-3, False), opt_in=True,
             columns=(Column("MB/s", "bytes_per_s", "%.0f", 1e6),
                      Column("p99 ms, responses < 1 MiB", "p99_small_us", "%.2f", 1000),
                      Column("p99 ms, responses >= 1 MiB", "p99_large_us", "%.1f", 1000),
                      Column("p99 < 1 MiB x nginx by round", "p99_small_us", by_round=True),
                      Column("p99 >= 1 MiB x nginx by round", "p99_large_us", by_round=True))),
    Scenario("latency-at-rate", "612-byte index.html at a fixed 20,000 requests/s over 100 connections (open loop)",
             "004 (latency figures under load)", Load(100, paths=("/index.html",), rate=20000),
             quick={"rate": 4}, metric=Metric("p99_us", "p99 latency (ms)", 1e-3, False)),
]


_TLS_NOTE = ("Every server but ringd-plaintext serves HTTPS with the run's certificate (%s); ringd-plaintext"
             " takes the same load in plaintext: the floor. haproxy-tls is HAProxy terminating TLS"
             " (deploy/haproxy/ringd-fleet.cfg, `ssl crt` on its bind) in front of one ringd node serving"
             " plaintext, both on the server CPUs; its CPU is both together. CPU x PEER is CPU per"
             " request over PEER's, same run." % "ECDSA P-256, X25519, TLS 1.3, TLS_AES_128_GCM_SHA256")
_TLS = dict(tls=True, hooks=TlsCertificate, ratio_to=("h2o",), cpu_ratio_to=("nginx", "h2o", "haproxy-tls"))
_HANDSHAKES = Column("handshakes/s", "tls_handshakes_per_s", "%.0f")
_RESUMED = Column("resumed %", "tls_resumed_percent", "%.1f")
_PER_CORE = Column("handshakes per server CPU second", "tls_handshakes_per_cpu_s", "%.0f")
_SPLIT = (Column("HAProxy CPU us/request", "cpu_us_per_request_haproxy"),
          Column("ringd CPU us/request", "cpu_us_per_request_ringd"))

_ENTRIES += [
    Scenario("tls-keepalive", "612-byte index.html over HTTPS, 100 keep-alive connections, closed loop",
             "issue 28 (HTTPS on the ring)", Load(100, paths=("/index.html",)), wrk=True,
             columns=(PACKETS, CORE_CPU, CLIENT_CPU) + _SPLIT, notes=(_TLS_NOTE,), **_TLS),
    Scenario("tls-handshake",
             "612-byte index.html over HTTPS, `Connection: close` on every request, 100 connections:"
             " one full handshake per request (the client keeps no session)",
             "issue 28 (HTTPS on the ring)", Load(100, paths=("/index.html",), close=True),
             columns=(_HANDSHAKES, _PER_CORE, _RESUMED, CORE_CPU, CLIENT_CPU) + _SPLIT, notes=(_TLS_NOTE,),
             quick_skip=True, **_TLS),
    Scenario("tls-handshake-resumed",
             "tls-handshake with resumption: each connection offers the newest session ticket its"
             " slot was sent, each ticket once as browsers do, so a resumption the server sends no"
             " new ticket after leaves the next connection a full handshake (resumed % says how"
             " many the server took)",
             "issue 28 (HTTPS on the ring)", Load(100, paths=("/index.html",), close=True, tls_resume=True),
             columns=(_HANDSHAKES, _PER_CORE, _RESUMED, CORE_CPU, CLIENT_CPU) + _SPLIT, notes=(_TLS_NOTE,), **_TLS),
    Scenario("tls-at-rate",
             "612-byte index.html over HTTPS at a fixed 2,000 requests/s over 50 established keep-alive"
             " connections: tls-handshake-flood's latency without the flood",
             "issue 28 (a handshake flood must not starve established connections)",
             Load(50, paths=("/index.html",), rate=2000), quick={"rate": 4},
             metric=Metric("p99_us", "p99 latency (ms)", 1e-3, False), quick_skip=True,
             notes=(_TLS_NOTE,), **_TLS),
    Scenario("tls-handshake-flood",
             "tls-at-rate while 100 other connections flood the server with ClientHellos (perf/hello_flood:"
             " each sends one, reads the first bytes of the answer, and resets): established connections'"
             " latency under the cheap attack on a TLS server, against tls-at-rate's (the target: p99 at"
             " most 2x)",
             "issue 28 (a handshake flood must not starve established connections)",
             Load(50, paths=("/index.html",), rate=2000), quick={"rate": 4},
             metric=Metric("p99_us", "p99 latency (ms)", 1e-3, False), quick_skip=True,
             columns=(Column("ClientHellos answered/s", "background_rps", "%.0f"),),
             background=Load(100, hello_flood=True),
             background_label="The flood, at the same time", cpu_column=False,
             notes=(_TLS_NOTE, "(CPU per request is not shown: the server's CPU goes mostly to the"
                    " flood's ClientHellos.) ringd-plaintext takes the flood's bytes on a plain port."), **_TLS),
    Scenario("tls-large",
             "4 MiB files over HTTPS, 10 keep-alive connections; the client reads and decrypts every body",
             "issue 28 (HTTPS on the ring: bodies encrypted in user space)", Load(10, paths_glob="4mb"),
             metric=THROUGHPUT, wrk=True, columns=_SPLIT, quick_skip=True,
             meta_reference=("aes_128_gcm_bytes_per_s", "fraction of one core's AES-128-GCM"),
             notes=(_TLS_NOTE, "fraction of one core's AES-128-GCM: throughput over `openssl speed -evp"
                    " aes-128-gcm` (16 KiB blocks) on one server core, same run (the machine table): the"
                    " limit of user-space TLS with one core encrypting. CPU us/request is per 4 MiB response;"
                    " ringd-plaintext's client reads every body too (no MSG_TRUNC)."), **_TLS),
    Scenario("tls-idle",
             "5,000 idle HTTPS keep-alive connections (handshake and one request done on each, set up 100"
             " at a time, memory read after 3 s idle: a connection keeps its record buffers 2 s after its"
             " last exchange) held while tls-keepalive's load runs; each run on a freshly started server",
             "issue 28 (memory per idle TLS connection)",
             Load(100, paths=("/index.html",), idle=5000, idle_settle_s=3), quick={"idle": 10}, fresh_server=True,
             packets=False, quick_skip=True,
             columns=(Column("bytes per idle connection", "idle_bytes_per_connection", "%.0f"),),
             notes=(_TLS_NOTE, "5,000 rather than idle-10k's 10,000: HAProxy's shipped config holds 8,000"
                    " connections (global maxconn)."), **_TLS),
]


_H2_NOTE = ("HTTP/2 from h2load (Debian's nghttp2-client), one thread on the client CPUs: over TLS h2 by ALPN"
            " (h2 alone offered, TLS_AES_128_GCM_SHA256, X25519, the run's certificate), in plaintext (h2c-*)"
            " h2c with prior knowledge. Every server keeps its own HTTP/2 defaults (windows, frame size,"
            " concurrent streams); nginx has `http2` on its listen line. The connections and their handshakes"
            " are made in h2load's %d s warm-up; requests/s and CPU per request count only its main duration"
            " (the server's CPU is read when h2load says the main duration starts and ends). A run with a"
            " failed, errored or timed-out request, a 4xx or 5xx, or another protocol than h2 (h2c) is"
            " failed, not a figure. h2load reports no percentiles: p50 and p99 are empty, mean ms is its"
            " mean time per request." % H2LOAD_WARM_UP_S)
_CPU = Metric("cpu_us_per_request", "CPU us/request", 1, False)
_MEAN = Column("mean ms", "mean_us", "%.2f", 1000)
_H2_SMALL = dict(load=Load(100, paths=("/index.html",), streams=10), metric=_CPU, ratio_to=("h2o",),
                 columns=(Column("requests/s", "rps", "%.0f"), _MEAN, PACKETS, CORE_CPU, CLIENT_CPU))
_H2_LARGE = dict(load=Load(10, paths_glob="4mb", streams=1), metric=THROUGHPUT, ratio_to=("h2o",),
                 cpu_ratio_to=("h2o",), columns=(_MEAN, CORE_CPU, CLIENT_CPU), quick_skip=True)
_ENTRIES += [
    Scenario("h2-small", "612-byte index.html over HTTP/2 and TLS (h2 by ALPN), 100 connections, 10 streams"
             " each, closed loop", "issue 43 (HTTP/2 on every tier)", tls=True, hooks=H2loadTls,
             notes=(_H2_NOTE,), **_H2_SMALL),
    Scenario("h2c-small", "h2-small in plaintext: h2c with prior knowledge", "issue 43 (HTTP/2 on every tier)",
             hooks=H2load, quick_skip=True, notes=(_H2_NOTE,), **_H2_SMALL),
    Scenario("h2-large", "4 MiB files over HTTP/2 and TLS (h2 by ALPN), 10 connections, one stream at a time"
             " each; the client reads and decrypts every body", "issue 43 (HTTP/2 on every tier)",
             tls=True, hooks=H2loadTls,
             meta_reference=("aes_128_gcm_bytes_per_s", "fraction of one core's AES-128-GCM"),
             notes=(_H2_NOTE, "CPU us/request is per 4 MiB response. fraction of one core's AES-128-GCM: as"
                    " in tls-large."), **_H2_LARGE),
    Scenario("h2c-large", "h2-large in plaintext: h2c with prior knowledge; the client reads every body"
             " (no MSG_TRUNC: compare with large-read, not large)", "issue 43 (HTTP/2 on every tier)",
             hooks=H2load, notes=(_H2_NOTE, "CPU us/request is per 4 MiB response."), **_H2_LARGE),
]
_H2_PAGE_NOTE = ("Page loads from perf/harness/h2page.py, one after another for the duration: each is one h2load"
                 " run (Debian's nghttp2-client) of one new connection (over TLS h2 alone offered by ALPN,"
                 " TLS_AES_128_GCM_SHA256, X25519, a full handshake; in plaintext h2c with prior knowledge)"
                 " that opens a stream for the page"
                 " and one for each of the data set's first 100 assets (4-100 KiB, precompressed siblings"
                 " left out) at once, as a browser does once it has the page. p50, p99 and"
                 " mean are of the time to the last byte of the last asset, the connection included;"
                 " requests/s is page loads per second of that time, and CPU us/request is the server's CPU"
                 " per page load (handshake included). A failed page load (a failed request, a 4xx or 5xx,"
                 " another protocol) fails the run.")
_H2_PAGE = dict(load=Load(1, paths=("/index.html",), paths_glob="assets", streams=101, page_assets=100),
                metric=Metric("p99_us", "p99 page load (ms)", 1e-3, False), ratio_to=("h2o",),
                packets=False, columns=(_MEAN, Column("page loads/s", "rps", "%.1f"), CORE_CPU, CLIENT_CPU))
_ENTRIES += [
    Scenario("h2-page", "a page and its 100 assets (4-100 KiB) over one new HTTP/2 connection over TLS (h2 by"
             " ALPN), every stream at once; page loads one after another; time to the last byte",
             "issue 43 (HTTP/2 on every tier)", tls=True, hooks=H2loadTls, quick_skip=True,
             notes=(_H2_PAGE_NOTE,), **_H2_PAGE),
    Scenario("h2c-page", "h2-page in plaintext: h2c with prior knowledge", "issue 43 (HTTP/2 on every tier)",
             hooks=H2load, quick_skip=True, notes=(_H2_PAGE_NOTE,), **_H2_PAGE),
]
_H2_IDLE_NOTE = ("The idle connections are opened one after another by perf/harness/h2idle.py (over TLS h2 by"
                 " ALPN, else h2c), each with one GET answered, its fields coded without indexing, the"
                 " server's SETTINGS acknowledged; then h2-small's load runs beside them. Bytes per idle"
                 " connection: growth of the server's anonymous memory (RssAnon) from before the first"
                 " connection to once all are held and have been idle the --settle-s seconds the load's"
                 " command gives (none where it gives none), before the load begins, over the"
                 " connections held.")
_H2_IDLE = dict(load=Load(100, paths=("/index.html",), streams=10, idle=2000), quick={"idle": 10},
                fresh_server=True, packets=False, quick_skip=True, ratio_to=("h2o",),
                metric=Metric("idle_bytes_per_connection", "bytes per idle connection", 1, False),
                columns=(Column("connections held", "idle_held", "%d"), Column("requests/s", "rps", "%.0f")))
_ENTRIES += [
    Scenario("h2-idle", "2,000 idle HTTP/2 connections over TLS (h2 by ALPN; handshake and one request done on"
             " each) held while h2-small's load runs; each run on a freshly started server",
             "issue 43 (bytes per idle h2 connection)", tls=True, hooks=H2loadTls,
             notes=(_H2_NOTE, _H2_IDLE_NOTE), **_H2_IDLE),
    Scenario("h2c-idle", "h2-idle in plaintext: 2,000 idle h2c connections (prior knowledge)",
             "issue 43 (bytes per idle h2 connection)", hooks=H2load, notes=(_H2_NOTE, _H2_IDLE_NOTE), **_H2_IDLE),
]


def _longtail(profile):
    classes = longtail.SIZE_CLASSES
    bounds = ["< 16 KiB", "16-128 KiB", "128 KiB-1 MiB", ">= 1 MiB"]
    assert len(bounds) == len(classes) + 1
    return Scenario(
        "longtail-" + profile,
        "many files with a site's size mix, several times the page cache, requested Zipf-distributed over"
        " 128 connections, from ext4 on a loop device behind a read-throttled blkio cgroup (%s profile)"
        " with every server in a memory cgroup" % profile,
        "000 (an origin's long tail: what a CDN does not hold comes from disk)",
        Load(128, paths_file=longtail.PATHS_FILE, bulk=True, zipf=longtail.ZIPF_S, size_classes=classes),
        metric=THROUGHPUT, packets=False, opt_in=True, hooks=partial(longtail.LongtailDisk, profile),
        columns=(Column("requests/s", "rps", "%.0f"), Column("mean ms", "mean_us", "%.2f", 1000),
                 Column("page-cache hit ratio", "page_cache_hit_ratio", "%.2f"),
                 Column("disk MB/s", "disk_bytes_per_s", "%.1f", 1e6),
                 Column("disk read / served", "read_amplification", "%.2f"))
        + tuple(Column("p50 / p99 ms, %s" % b, "p50_class%d_us" % k, "%.1f", 1000, key2="p99_class%d_us" % k)
                for k, b in enumerate(bounds)),
        notes=("Hit ratio is by bytes: 1 - disk bytes read / bytes served, so read-ahead nobody asked for"
               " counts as a miss; disk figures come from the loop device's /sys/block/loopN/stat.",))


def _many_files():
    bounds = ["< 16 KiB", "16-128 KiB", "128 KiB-1 MiB", ">= 1 MiB"]
    return Scenario(
        "many-files",
        "longtail's size mix over 8,000 files, all in the page cache, requested Zipf-distributed over 128"
        " connections: the open-file cache, its revalidations and the page-cache checks, with no disk",
        "000 (a site of thousands of files, its hot set in memory)",
        Load(128, paths_file=longtail.PATHS_FILE, bulk=True, zipf=longtail.ZIPF_S, size_classes=longtail.SIZE_CLASSES),
        metric=THROUGHPUT, opt_in=True, hooks=longtail.ManyFiles,
        columns=(Column("requests/s", "rps", "%.0f"), Column("mean ms", "mean_us", "%.2f", 1000))
        + tuple(Column("p50 / p99 ms, %s" % b, "p50_class%d_us" % k, "%.1f", 1000, key2="p99_class%d_us" % k)
                for k, b in enumerate(bounds)),
        notes=("Data: longtail's quick set (8,000 files, 0.53 GiB), written once to a folder beside the perf"
               " data set and read into the page cache before each run; no cgroup.",))


def _cold_on(profile):
    cold = next(s for s in _ENTRIES if s.name == "cold")
    return replace(
        cold, name="cold-" + profile, opt_in=True, hooks=partial(colddisk.ColdSlowDisk, profile),
        # Each cold request picks a file at random: in turn, connection i would ask for a file right
        # after connection i + 1 had read it, and 15 of 16 reads would find it cached.
        background=replace(cold.background, uniform=True),
        what="hot 612-byte requests at a fixed rate while other clients read 4 MiB files from ext4 on a loop"
             " device behind a read-throttled blkio cgroup (%s profile), every server in a memory cgroup whose"
             " page cache holds a few percent of the cold files" % profile,
        columns=cold.columns + (Column("disk MB/s", "disk_bytes_per_s", "%.1f", 1e6),
                                Column("disk read / served", "read_amplification", "%.2f")),
        notes=cold.notes + ("disk figures come from the loop device's /sys/block/loopN/stat; served bytes are the"
                            " hot and the cold loads' together.",))


_ENTRIES += [_longtail("nvme"), _longtail("hdd"), _cold_on("nvme"), _cold_on("hdd"), _many_files()]

SCENARIOS = {s.name: s for s in _ENTRIES}
