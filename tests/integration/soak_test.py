"""The soak: the real ringd on one tier (RINGD_IO) serves a site's mix of requests for
RINGD_SOAK_SECONDS (default 60; `tools/soak` runs 30 minutes per tier) while faults are mixed
in, then checks that nothing went wrong and nothing was kept.

Load, all the time: keep-alive GETs of small, medium and large files over HTTP and HTTPS, HEAD,
single and multiple ranges, conditionals (304s and misses), precompressed bodies, 404s,
pipelined batches; a sweep through more cold files than the open-file cache holds. Faults, all
the time: resets mid-response (SO_LINGER 0, plain and TLS), slow readers (a 4 KiB receive buffer,
pauses), half-closes (SHUT_WR after pipelined requests, some with a request cut in half), files
replaced (renamed over) and truncated while they are sent. Faults in windows, once per 20 s
period: an idle flood past --max-connections (idle keep-alive and silent clients, three times
the limit), EMFILE (ringd's RLIMIT_NOFILE lowered to the descriptors it holds, with prlimit), and
memory pressure (ringd's memory cgroup limited to what it uses plus a margin while its page
cache is dropped; skipped, saying why, where no memory cgroup can be made).

What "valid" means. Every request for a file that does not change must succeed: the right
status and byte-exact bodies, however slow (a 60 s bound per request), with two exceptions, both
behaviour HTTP and docs/OPERATIONS.md promise:
- in an EMFILE window (and 2 s after it, for lookups already under way) a 503 is a right answer,
  and the connection may close after it (the requests behind it are sent again); so is the
  file itself, without its encoding, for a request its precompressed sibling would have served
  (the sibling could not be opened: nginx's gzip_static falls back the same way);
- a request that got no byte of its response on a connection ringd may have reclaimed (one that
  sat idle between two requests while a flood or EMFILE window was on: idle keep-alive
  connections give way to newcomers at the limit, and to free descriptors on EMFILE; or a TLS
  handshake under way in a flood) is sent again on a new connection, as a client retries an
  idempotent request whose connection closed (RFC 9112 9.3.1).
Both are counted and reported. A response whose head went out is never cut short by EMFILE: a
body that must splice waits for the pipe each shard makes at start and keeps. A request for a
file that is replaced or truncated while it is
sent may end short with the connection closed (the promised length cannot be kept), but every
byte it got must belong to one version of the file: never bytes of another version or past
that version's end; where the version was truncated, zeros may stand past the cut (what the
kernel's truncation does to the pages a zero-copy send still holds: soak_site.check_volatile).

Checks at the end: no failed valid request, ringd's RSS after warm-up flat (see RSS_GROWTH),
every pool back to empty once the clients have gone (connections, exchanges, input buffers,
pipes, pinned cache entries, TLS connections, io operations back to the idle server's count),
exit status 0 on SIGTERM and no assertion in its log. A report (requests by kind, faults, RSS
samples, latency) is printed, and written to $TEST_UNDECLARED_OUTPUTS_DIR/soak_report.json.
"""
import array
import collections
import json
import os
import random
import resource
import shutil
import socket
import ssl
import struct
import tempfile
import threading
import time
import unittest

from ringd_harness import (ADMIN, BACKEND, BackendTestCase, Reader, Response, Server, admin_get,
                           metric_sum, wait_for)
from soak_cgroup import MemoryCgroup
from soak_site import Site
from tls_pki import make_pki

SECONDS = float(os.environ.get("RINGD_SOAK_SECONDS", "60"))
PERIOD = 20.0             # one round of the windowed faults; the first is the warm-up
VALID_TIMEOUT = 60.0      # a valid request may be this slow on a loaded machine, never fail
MAX_CONNECTIONS = 64      # per shard: small, so that a flood goes well past it
EMFILE_GRACE = 2.0        # lookups started in the window may answer 503 this long after it
FLOOD_GRACE = 1.0
MiB = 1 << 20
# RSS after warm-up may exceed the warm-up's peak by this much: 10 %, at least 8 MiB. Pools are
# sized at start-up and steady serving allocates nothing (alloc_test), so once every fault has
# run (the first period) only allocator slack from TLS sessions and pages first touched by a
# deeper burst can add to it; a leak of a kilobyte per request or per connection passes the
# bound within minutes (a 30-minute soak: tools/soak).
RSS_GROWTH = (0.10, 8 * MiB)


class Ledger:
    """What the run did and what went wrong, shared by every thread."""

    def __init__(self):
        self.lock = threading.Lock()
        self.counts = collections.Counter()
        self.latency_s = array.array("d")  # valid requests of the mix: sent to last body byte
        self.failures = []
        self.windows = []           # [kind, start, end or None]
        self.stop = threading.Event()
        self.start = time.monotonic()

    def count(self, key, n=1):
        with self.lock:
            self.counts[key] += n

    def latency(self, seconds):
        with self.lock:
            self.latency_s.append(seconds)

    def fail(self, what):
        with self.lock:
            self.failures.append("%.1fs %s" % (time.monotonic() - self.start, what))
            if len(self.failures) >= 50:
                self.stop.set()  # enough to go on; stop the run

    def open_window(self, kind):
        with self.lock:
            self.windows.append([kind, time.monotonic(), None])
            return self.windows[-1]

    def close_window(self, window):
        with self.lock:
            window[2] = time.monotonic()

    def overlaps(self, kind, start, end, grace):
        with self.lock:
            return any(k == kind and s <= end and (e is None or start <= e + grace)
                       for k, s, e in self.windows)


class Conn:
    """A client connection (plain or TLS) and its reader; `served` counts responses on it, and
    `idle_since` is when it last had nothing outstanding (ringd may reclaim it from then until
    its next request arrives)."""

    def __init__(self, port, tls_ctx=None, rcvbuf=None, timeout=VALID_TIMEOUT):
        raw = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        if rcvbuf:
            raw.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
        raw.settimeout(timeout)
        try:
            raw.connect(("127.0.0.1", port))
            raw.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            self.sock = tls_ctx.wrap_socket(raw, server_hostname="localhost") if tls_ctx else raw
        except BaseException:
            raw.close()
            raise
        self.reader = Reader(self.sock)
        self.served = 0
        self.idle_since = time.monotonic()

    def reset(self):
        """Closes with an RST (SO_LINGER 0): whatever ringd was sending is cut off."""
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        self.sock.close()

    def close(self):
        self.sock.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.sock.close()


def http_request(method, target, headers=()):
    lines = ["%s %s HTTP/1.1" % (method, target), "Host: localhost"]
    lines += ["%s: %s" % h for h in headers]
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")


class Plan:
    """One request of the mix and how to judge its response (check returns what is wrong);
    `due` is the body it must have, where one body is due."""

    def __init__(self, kind, method, target, headers, check, due=None):
        self.kind, self.method, self.target, self.headers, self.check, self.due = \
            kind, method, target, headers, check, due

    def bytes(self):
        return http_request(self.method, self.target, self.headers)


def parse_multipart(resp):
    """[(first, last, bytes)] of a multipart/byteranges body."""
    ctype = resp.header("content-type") or ""
    if not ctype.startswith("multipart/byteranges; boundary="):
        raise ValueError("not multipart: %r" % ctype)
    boundary = ctype.split("boundary=")[1].encode()
    parts = resp.body.split(b"--" + boundary)
    if parts[-1] != b"--\r\n":
        raise ValueError("no closing boundary")
    out = []
    for part in parts[1:-1]:
        head, _, content = part.partition(b"\r\n\r\n")
        rng = [l for l in head.split(b"\r\n") if l.lower().startswith(b"content-range")][0]
        first, last = rng.split(b" ")[-1].split(b"/")[0].split(b"-")
        out.append((int(first), int(last), content[:-2] if content.endswith(b"\r\n") else content))
    return out


class Mix:
    """Plans the requests of a site's mix on the static files, and learns their validators."""

    def __init__(self, site):
        self.site = site
        by_dir = collections.defaultdict(list)
        for rel in site.static:
            if not rel.startswith("g/"):
                by_dir[rel.split("/")[0]].append(rel)
        self.small, self.medium, self.large = by_dir["s"] + ["index.html"], by_dir["m"], by_dir["l"]
        self.validators = {}  # rel -> (etag, last-modified), from 200s
        self.lock = threading.Lock()

    def pick(self, rng):
        return rng.choice(rng.choices([self.small, self.medium, self.large], [75, 22, 3])[0])

    def plan(self, rng):
        site = self.site
        rel = self.pick(rng)
        data = site.static[rel]
        kind = rng.choices(["get", "head", "range", "suffix", "multirange", "inm", "ims",
                            "inm_miss", "missing", "gzip"], [40, 5, 12, 4, 4, 10, 5, 4, 6, 4])[0]
        if kind in ("range", "suffix", "multirange") and len(data) < 1000:
            kind = "get"
        with self.lock:
            known = self.validators.get(rel)
        if kind in ("inm", "ims") and not known:
            kind = "get"

        def full(resp, status=200):
            if resp.status != status:
                return "status %d, wanted %d" % (resp.status, status)
            if resp.body != data:
                return "body of %d bytes is not the file's %d" % (len(resp.body), len(data))
            with self.lock:
                self.validators[rel] = (resp.header("etag"), resp.header("last-modified"))
            return None

        target = "/" + rel
        if kind == "get":
            return Plan(kind, "GET", target, [], full, data)
        if kind == "inm_miss":
            return Plan(kind, "GET", target, [("If-None-Match", '"soak-no-such-tag"')], full, data)
        if kind == "head":
            def head(resp):
                if resp.status != 200 or resp.header("content-length") != str(len(data)):
                    return "HEAD: status %d, length %s" % (resp.status, resp.header("content-length"))
                return None
            return Plan(kind, "HEAD", target, [], head)
        if kind in ("range", "suffix"):
            if kind == "range":
                a = rng.randrange(len(data) - 1)
                b = min(len(data) - 1, a + rng.choice([0, 99, 4095, 65535, 1 << 20]))
                spec = "bytes=%d-%d" % (a, b)
            else:
                k = rng.randint(1, len(data))
                a, b, spec = len(data) - k, len(data) - 1, "bytes=-%d" % k

            def part(resp):
                want = "bytes %d-%d/%d" % (a, b, len(data))
                if resp.status != 206 or resp.header("content-range") != want:
                    return "range %s: status %d, %s" % (spec, resp.status, resp.header("content-range"))
                return None if resp.body == data[a:b + 1] else "range %s: wrong bytes" % spec
            return Plan(kind, "GET", target, [("Range", spec)], part, data[a:b + 1])
        if kind == "multirange":
            cut = sorted(rng.sample(range(len(data)), 4))
            ranges = [(cut[0], cut[1] - 1 if cut[1] > cut[0] else cut[0]), (cut[2] + 1, cut[3])]
            ranges = [(x, y) for x, y in ranges if x <= y]
            # Ringd coalesces ranges closer than its overhead: keep them well apart or give one.
            if len(ranges) == 2 and ranges[1][0] - ranges[0][1] < 200:
                ranges = ranges[:1]
            spec = "bytes=" + ",".join("%d-%d" % r for r in ranges)

            def multi(resp):
                if resp.status != 206:
                    return "ranges %s: status %d" % (spec, resp.status)
                if len(ranges) == 1:
                    x, y = ranges[0]
                    return None if resp.body == data[x:y + 1] else "range %s: wrong bytes" % spec
                try:
                    got = parse_multipart(resp)
                except (ValueError, IndexError) as e:
                    return "ranges %s: %s" % (spec, e)
                want = [(x, y, data[x:y + 1]) for x, y in ranges]
                return None if got == want else "ranges %s: wrong parts" % spec
            return Plan(kind, "GET", target, [("Range", spec)], multi)
        if kind in ("inm", "ims"):
            etag, modified = known
            header = ("If-None-Match", etag) if kind == "inm" else ("If-Modified-Since", modified)

            def not_modified(resp):
                if resp.status != 304 or resp.body:
                    return "%s: status %d" % (header[0], resp.status)
                return None
            return Plan(kind, "GET", target, [header], not_modified)
        if kind == "missing":
            return Plan(kind, "GET", "/nope/%d.html" % rng.randrange(1000), [],
                        lambda resp: None if resp.status == 404 else "status %d, wanted 404" % resp.status)
        gz = site.static["g/app.js.gz"]

        def gzipped(resp):
            if resp.status != 200 or resp.header("content-encoding") != "gzip" or resp.body != gz:
                return "precompressed: status %d, encoding %s" % (resp.status, resp.header("content-encoding"))
            return None
        return Plan("gzip", "GET", "/g/app.js", [("Accept-Encoding", "gzip")], gzipped, gz)


class Soak:
    """The clients, the faults and the monitor around one ringd."""

    def __init__(self, server, site, tls_ctx, cgroup, ledger, seconds):
        self.server, self.site, self.tls_ctx, self.cgroup = server, site, tls_ctx, cgroup
        self.ledger = ledger
        self.mix = Mix(site)
        self.start = time.monotonic()
        self.deadline = self.start + seconds
        self.rss = []  # (seconds since start, bytes)

    def running(self):
        return time.monotonic() < self.deadline and not self.ledger.stop.is_set()

    def connect(self, tls=False, **kw):
        return Conn(self.server.tls_port if tls else self.server.port,
                    self.tls_ctx if tls else None, **kw)

    # ---- valid requests -----------------------------------------------------------------
    def exchange(self, conn, plans, tls, fresh_ok=True):
        """Sends `plans` pipelined on `conn` (None: a new connection) and judges each response;
        returns the connection to go on with (None once it is closed). A request that needs
        sending again (see the module's doc) goes again, once, on a new connection."""
        sent_at = time.monotonic()
        judged = 0
        try:
            if conn is None:
                conn = self.connect(tls)
            conn.sock.sendall(b"".join(p.bytes() for p in plans))
            for plan in plans:
                resp = self.read_response(conn, plan, sent_at)
                judged += 1
                conn.served += 1
                self.judge(plan, resp, sent_at)
                conn.idle_since = time.monotonic()
                if (resp.header("connection") or "").lower() == "close":
                    conn.close()
                    if plans[judged:]:
                        self.ledger.count("sent again after a %d that closed its connection" % resp.status,
                                          len(plans) - judged)
                        return self.exchange(None, plans[judged:], tls, fresh_ok)
                    return None
            return conn
        except (OSError, EOFError, ssl.SSLError, ValueError, AssertionError) as e:
            now = time.monotonic()
            reused = conn is not None and conn.served > 0
            handshake = conn is None and tls
            got_bytes = judged > 0 or (conn is not None and conn.reader.buf)
            if conn is not None:
                conn.close()
            window = self.reclaim_window(conn.idle_since if reused else sent_at, now)
            if not got_bytes and fresh_ok and (reused or handshake) and window:
                self.ledger.count("sent again: connection reclaimed in %s window" % window, len(plans))
                return self.exchange(None, plans, tls, fresh_ok=False)
            for plan in plans[judged:]:
                self.ledger.fail("%s %s (%s%s; %d of %d in a batch sent at %.1fs, on a connection that "
                                 "had %d answers): %s: %s" % (
                                     plan.method, plan.target, plan.kind, ", tls" if tls else "",
                                     plans.index(plan) + 1, len(plans), sent_at - self.start,
                                     conn.served if conn else -1, type(e).__name__, e))
            return None

    def read_response(self, conn, plan, sent_at):
        """The response to `plan`, its body read whole."""
        status, reason, headers = conn.reader.read_head()
        length = 0 if plan.method == "HEAD" or status == 304 else int(headers.get("content-length", "0"))
        return Response(status, reason, headers, conn.reader.read_exact(length))

    def reclaim_window(self, start, end):
        """The window ("flood", "EMFILE") in which ringd may have closed a connection idle from
        `start` (its last answer) until `end`, or None: at the connection limit idle ones give
        way to newcomers, and out of descriptors they give way to free some
        (docs/OPERATIONS.md). A client that took a while to send its next request finds the
        connection closed then."""
        if self.ledger.overlaps("flood", start, end, FLOOD_GRACE):
            return "a flood"
        if self.ledger.overlaps("emfile", start, end, EMFILE_GRACE):
            return "an EMFILE"
        return None

    def judge(self, plan, resp, sent_at):
        now = time.monotonic()
        if resp.status == 503 and self.ledger.overlaps("emfile", sent_at, now, EMFILE_GRACE):
            self.ledger.count("503 in an EMFILE window")
            return
        if (plan.kind == "gzip" and resp.status == 200 and resp.header("content-encoding") is None
                and resp.body == self.site.static["g/app.js"]
                and self.ledger.overlaps("emfile", sent_at, now, EMFILE_GRACE)):
            # Its .gz sibling could not be opened for want of a descriptor: the file itself is a
            # right answer (every client takes identity), as nginx's gzip_static gives.
            self.ledger.count("app.js without its .gz in an EMFILE window")
            return
        problem = plan.check(resp)
        if problem:
            self.ledger.fail("%s %s (%s): %s" % (plan.method, plan.target, plan.kind, problem))
            return
        self.ledger.count("valid " + plan.kind)
        self.ledger.latency(now - sent_at)

    def client(self, seed, tls):
        """Keep-alive sessions of the mix: single requests and pipelined batches."""
        rng = random.Random(seed)
        while self.running():
            conn = None
            for _ in range(rng.randint(1, 12)):
                size = 1 if rng.random() < 0.6 else rng.randint(2, 6)
                conn = self.exchange(conn, [self.mix.plan(rng) for _ in range(size)], tls)
                self.ledger.count("https requests" if tls else "http requests", size)
                if conn is None or not self.running():
                    break
            if conn is not None:
                conn.close()

    def cold_sweep(self, seed):
        """More distinct files than the open-file cache holds, over and over: opens all the
        time (and EMFILE in its windows)."""
        rng = random.Random(seed)
        i = rng.randrange(len(self.site.cold))
        while self.running():
            conn = None
            for _ in range(rng.randint(1, 20)):
                rel = self.site.cold[i % len(self.site.cold)]
                i += 1
                data = self.site.cold_bytes(rel)
                plan = Plan("cold", "GET", "/" + rel, [],
                            lambda resp, data=data: None if resp.status == 200 and resp.body == data
                            else "status %d, %d bytes" % (resp.status, len(resp.body)))
                conn = self.exchange(conn, [plan], False)
                if conn is None or not self.running():
                    break
            if conn is not None:
                conn.close()

    # ---- faults all the time ------------------------------------------------------------
    def resets(self, seed):
        rng = random.Random(seed)
        while self.running():
            tls = rng.random() < 0.25
            variant = rng.choice(["mid-body", "mid-body", "pipelined", "head-cut", "at-once"])
            try:
                with self.connect(tls) as conn:
                    if variant == "head-cut":
                        conn.sock.sendall(b"GET /" + rng.choice(self.mix.large).encode() + b" HTTP/1.1\r\nHo")
                    elif variant != "at-once":
                        targets = rng.choices(self.mix.large + self.mix.medium, k=1 if variant == "mid-body" else 4)
                        conn.sock.sendall(b"".join(http_request("GET", "/" + t) for t in targets))
                        # Fewer bytes than the bodies: the reset always cuts a response off (a
                        # client waiting for more than comes would wait for its socket timeout).
                        bodies = sum(len(self.site.static[t]) for t in targets)
                        want, got = rng.randint(1, min(300000, bodies - 1)), 0
                        while got < want:
                            chunk = conn.sock.recv(min(65536, want - got))
                            if not chunk:
                                break
                            got += len(chunk)
                    conn.reset()
                self.ledger.count("fault: reset " + variant + (" (tls)" if tls else ""))
            except (OSError, ssl.SSLError) as e:
                if self.running():
                    self.ledger.fail("reset client could not connect or read: %r" % e)
            time.sleep(rng.uniform(0.01, 0.08))

    def slow_reader(self, seed):
        """A 4 KiB receive buffer read 4 KiB at a time with pauses, some of them long: a valid
        request that must still arrive byte-exact."""
        rng = random.Random(seed)
        while self.running():
            rel = rng.choice(self.mix.medium + self.mix.large[:1])
            data = self.site.static[rel]
            sent_at = time.monotonic()
            try:
                with self.connect(rng.random() < 0.2, rcvbuf=4096) as conn:
                    conn.sock.sendall(http_request("GET", "/" + rel))
                    status, _, headers = conn.reader.read_head()
                    if status == 503 and self.ledger.overlaps("emfile", sent_at, time.monotonic(), EMFILE_GRACE):
                        self.ledger.count("503 in an EMFILE window")
                        continue
                    body, pause_at = [conn.reader.buf], rng.randrange(len(data))
                    have = len(conn.reader.buf)
                    conn.reader.buf = b""
                    while have < len(data):
                        chunk = conn.sock.recv(4096)
                        if not chunk:
                            raise EOFError("closed after %d of %d bytes" % (have, len(data)))
                        body.append(chunk)
                        if have < pause_at <= have + len(chunk):
                            time.sleep(rng.uniform(0.5, 3.0))  # well within --send-timeout-ms
                        have += len(chunk)
                        time.sleep(0.002)
                body = b"".join(body)
                if status != 200 or body != data:
                    self.ledger.fail("slow reader %s: status %d, %d bytes, match %s" % (
                        rel, status, len(body), body == data))
                else:
                    self.ledger.count("valid slow read")
            except (OSError, EOFError, ssl.SSLError) as e:
                self.ledger.fail("slow reader %s: %s: %s" % (rel, type(e).__name__, e))

    def half_closes(self, seed):
        """Pipelined requests, then SHUT_WR; sometimes with the last request cut in half. The
        whole ones are answered byte-exact, then the connection ends."""
        rng = random.Random(seed)
        while self.running():
            plans = [Plan("half-close", "GET", "/" + r, [], None)
                     for r in (rng.choice(self.mix.small + self.mix.medium) for _ in range(rng.randint(1, 4)))]
            cut = rng.random() < 0.5
            sent_at = time.monotonic()
            try:
                with self.connect() as conn:
                    tail = b"GET /index.html HTTP/1.1\r\nHost: loc" if cut else b""
                    conn.sock.sendall(b"".join(p.bytes() for p in plans) + tail)
                    conn.sock.shutdown(socket.SHUT_WR)
                    for p in plans:
                        p.due = self.site.static[p.target[1:]]
                        resp = self.read_response(conn, p, sent_at)
                        if resp.status == 503 and self.ledger.overlaps("emfile", sent_at, time.monotonic(),
                                                                       EMFILE_GRACE):
                            self.ledger.count("503 in an EMFILE window")
                            break  # and the connection closes after it
                        if resp.status != 200 or resp.body != self.site.static[p.target[1:]]:
                            self.ledger.fail("half-close %s: status %d, %d bytes" % (
                                p.target, resp.status, len(resp.body)))
                        else:
                            self.ledger.count("valid half-close")
                    extra = conn.reader.buf
                    while True:
                        chunk = conn.sock.recv(65536)
                        if not chunk:
                            break
                        extra += chunk
                if extra and not extra.startswith(b"HTTP/1.1 400 "):
                    self.ledger.fail("half-close: after the answers came %r" % extra[:80])
                self.ledger.count("fault: half-close" + (" mid-request" if cut else "")
                                  + (" (400)" if extra else ""))
            except (OSError, EOFError, ValueError, AssertionError) as e:
                self.ledger.fail("half-close: %s: %s" % (type(e).__name__, e))
            time.sleep(rng.uniform(0.02, 0.1))

    def mutator(self, seed):
        rng = random.Random(seed)
        paths = sorted(self.site.versions)
        while self.running():
            rel = rng.choice(paths)
            if rng.random() < 0.5:
                self.site.replace(rel)
                self.ledger.count("fault: file replaced")
            else:
                self.site.truncate(rel)
                self.ledger.count("fault: file truncated")
            time.sleep(rng.uniform(0.05, 0.3))

    def volatile_client(self, seed):
        """Files replaced and truncated while sent: short bodies allowed, wrong bytes never."""
        rng = random.Random(seed)
        paths = sorted(self.site.versions)
        conn = None
        while self.running():
            rel = rng.choice(paths)
            ranged = rng.random() < 0.4
            start = rng.randrange(0, 1 << 20) if ranged else 0
            if ranged and "small" in rel:
                start = rng.randrange(0, 1000)
            headers = [("Range", "bytes=%d-" % start)] if ranged else []
            sent_at = time.monotonic()
            try:
                if conn is None:
                    conn = self.connect(rng.random() < 0.2)
                conn.sock.sendall(http_request("GET", "/" + rel, headers))
                status, _, h = conn.reader.read_head()
            except (OSError, EOFError, ssl.SSLError) as e:
                reused = conn is not None and conn.served > 0
                if conn is not None:
                    conn.close()
                window = self.reclaim_window(conn.idle_since if reused else sent_at, time.monotonic())
                conn = None
                if reused and window:
                    self.ledger.count("volatile: connection reclaimed in %s window" % window)
                else:
                    self.ledger.fail("volatile %s: no response: %s: %s" % (rel, type(e).__name__, e))
                continue
            conn.served += 1
            length = int(h.get("content-length", "0"))
            if status == 503 and self.ledger.overlaps("emfile", sent_at, time.monotonic(), EMFILE_GRACE):
                conn.reader.read_exact(length)
                conn.idle_since = time.monotonic()
                self.ledger.count("503 in an EMFILE window")
                continue
            if status == 416 and ranged:  # truncated below the start
                conn.reader.read_exact(length)
                conn.idle_since = time.monotonic()
                self.ledger.count("volatile 416 (truncated below the range)")
                continue
            if status not in (200, 206) or (status == 206) != ranged:
                self.ledger.fail("volatile %s: status %d" % (rel, status))
                conn.close()
                conn = None
                continue
            total, first = length, 0
            if status == 206:
                spec = h.get("content-range", "")
                first = int(spec.split(" ")[1].split("-")[0])
                total = int(spec.split("/")[1])
                if first != start:
                    self.ledger.fail("volatile %s: asked from %d, got %s" % (rel, start, spec))
            try:
                body = conn.reader.read_exact(length)
                short = False
                conn.idle_since = time.monotonic()
            except (OSError, EOFError, ssl.SSLError):
                body, short = conn.reader.buf, True
                conn.close()
                conn = None
            problem = self.site.check_volatile(rel, first, body, total)
            if problem:
                self.ledger.fail("volatile %s: %s" % (rel, problem))
            self.ledger.count("volatile short (connection closed)" if short else "volatile whole")
            if conn is not None and rng.random() < 0.1:
                conn.close()
                conn = None
        if conn is not None:
            conn.close()

    # ---- faults in windows ----------------------------------------------------------------
    def schedule(self):
        """Each period: an idle flood at 1 s, EMFILE at 7 s, memory pressure at 12 s."""
        period = 0
        while self.running():
            base = self.start + period * PERIOD
            for offset, length, fault in ((1, 3, self.flood), (7, 3, self.emfile),
                                          (12, 5, self.memory_pressure)):
                at = base + offset
                if at + length > self.deadline:
                    return
                while self.running() and time.monotonic() < at:
                    time.sleep(0.05)
                if not self.running():
                    return
                fault(length)
            period += 1

    def reclaimed(self):
        return (self.server.metric("ringd_connections_idle_reclaimed_total") +
                self.server.metric("ringd_connections_silent_reclaimed_total"))

    def flood(self, _length):
        """Three times as many connections as ringd has slots: most of them idle keep-alive
        (one request answered, then quiet), a quarter silent (no byte sent). Every newcomer's
        request must be answered; the idle and silent ones give way."""
        capacity = sum(s["pools"]["connections"]["capacity"] for s in self.server.debug_shards()["shards"])
        before = self.reclaimed()
        window = self.ledger.open_window("flood")
        held = []
        rng = random.Random(len(self.ledger.windows))
        try:
            for i in range(3 * capacity):
                if not self.running():
                    break
                try:
                    s = socket.create_connection(("127.0.0.1", self.server.port), timeout=VALID_TIMEOUT)
                except OSError as e:
                    self.ledger.fail("flood connection %d refused: %s" % (i, e))
                    break
                held.append(s)
                if i % 4 == 3:
                    continue  # silent
                rel = rng.choice(self.mix.small)
                s.sendall(http_request("GET", "/" + rel))
                try:
                    resp = Reader(s).read_response()
                    if resp.status != 200 or resp.body != self.site.static[rel]:
                        self.ledger.fail("flood newcomer %d: status %d" % (i, resp.status))
                    else:
                        self.ledger.count("valid flood newcomer")
                except (OSError, EOFError) as e:
                    self.ledger.fail("flood newcomer %d not answered: %s: %s" % (i, type(e).__name__, e))
            gave_way = self.reclaimed() - before
            self.ledger.count("fault: idle flood")
            self.ledger.count("flood connections", len(held))
            self.ledger.count("flood connections that gave way", int(gave_way))
            if gave_way <= 0 and self.running():
                self.ledger.fail("a flood of %d connections over %d slots reclaimed none" % (len(held), capacity))
        finally:
            for s in held:
                s.close()
            self.ledger.close_window(window)

    # What ringd counted in an EMFILE window (its admin listener takes no connection in one).
    WINDOW_METRICS = [("503s", "ringd_requests_total", {"code": "5xx"}),
                      ("idle reclaimed", "ringd_connections_idle_reclaimed_total", {}),
                      ("send errors", "ringd_connection_errors_total", {"kind": "send"}),
                      ("recv errors", "ringd_connection_errors_total", {"kind": "recv"})]

    def window_metrics(self):
        status, text = admin_get(self.server.admin_port(), "/metrics")
        return {k: metric_sum(text, name, **labels) for k, name, labels in self.WINDOW_METRICS}

    def emfile(self, length):
        """ringd's soft RLIMIT_NOFILE lowered to the descriptors it holds now: new descriptors
        (accepts on the uring and epoll tiers, file opens and splice pipes on every tier) fail
        with EMFILE."""
        pid = self.server.proc.pid
        before = self.window_metrics()
        old = resource.prlimit(pid, resource.RLIMIT_NOFILE)
        held = len(os.listdir("/proc/%d/fd" % pid))
        window = self.ledger.open_window("emfile")
        try:
            resource.prlimit(pid, resource.RLIMIT_NOFILE, (held, old[1]))
            time.sleep(length)
        finally:
            resource.prlimit(pid, resource.RLIMIT_NOFILE, old)
            self.ledger.close_window(window)
        time.sleep(EMFILE_GRACE)
        after = self.window_metrics()
        self.ledger.count("fault: EMFILE window")
        for key, _, _ in self.WINDOW_METRICS:
            self.ledger.count("EMFILE windows: ringd's " + key, int(after[key] - before[key]))

    def memory_pressure(self, length):
        if self.cgroup is None:
            return
        before = self.window_metrics()
        window = self.ledger.open_window("memory")
        try:
            self.cgroup.squeeze(margin=24 * MiB)
            deadline = time.monotonic() + length
            while time.monotonic() < deadline and self.running():
                self.site.drop_page_cache(self.mix.large + self.mix.medium)
                time.sleep(0.5)
        finally:
            self.cgroup.release()
            self.ledger.close_window(window)
        after = self.window_metrics()
        self.ledger.count("fault: memory pressure window")
        for key, _, _ in self.WINDOW_METRICS:
            self.ledger.count("memory windows: ringd's " + key, int(after[key] - before[key]))

    # ---- the monitor -----------------------------------------------------------------------
    def monitor(self):
        while self.running():
            if self.server.proc.poll() is not None:
                self.ledger.fail("ringd exited with %s during the soak" % self.server.proc.returncode)
                return
            self.server.logged("")  # drains its stderr, so that a full pipe never blocks it
            with open("/proc/%d/status" % self.server.proc.pid) as f:
                for line in f:
                    if line.startswith("VmRSS:"):
                        self.rss.append((time.monotonic() - self.start, int(line.split()[1]) * 1024))
            time.sleep(0.5)

    def run(self):
        threads = [threading.Thread(target=self.monitor, name="monitor"),
                   threading.Thread(target=self.schedule, name="schedule"),
                   threading.Thread(target=self.mutator, args=(11,), name="mutator"),
                   threading.Thread(target=self.volatile_client, args=(12,), name="volatile"),
                   threading.Thread(target=self.cold_sweep, args=(13,), name="cold"),
                   threading.Thread(target=self.resets, args=(14,), name="resets"),
                   threading.Thread(target=self.slow_reader, args=(15,), name="slow"),
                   threading.Thread(target=self.half_closes, args=(16,), name="half-close")]
        threads += [threading.Thread(target=self.client, args=(100 + i, i >= 5), name="client%d" % i)
                    for i in range(7)]
        for t in threads:
            t.daemon = True
            t.start()
        for t in threads:
            t.join(timeout=max(1.0, self.deadline - time.monotonic()) + 2 * VALID_TIMEOUT)
            if t.is_alive():
                self.ledger.fail("thread %s still running %g s after the end" % (t.name, 2 * VALID_TIMEOUT))


def percentile(values, p):
    if not values:
        return 0.0
    values = sorted(values)
    return values[min(len(values) - 1, int(p / 100.0 * len(values)))]


def rss_verdict(samples, seconds):
    """(baseline, last third's peak, allowed, slope in MiB/min) of RSS samples (t, bytes):
    the baseline is the peak of the warm-up's last period (every fault has run by then)."""
    warm = max(PERIOD, seconds / 6.0)
    base = [b for t, b in samples if warm - PERIOD <= t <= warm]
    tail = [b for t, b in samples if t >= seconds * 2.0 / 3.0]
    if not base or not tail:
        return None
    baseline, peak = max(base), max(tail)
    after = [(t, b) for t, b in samples if t >= warm]
    slope = 0.0
    if len(after) > 2:
        mt = sum(t for t, _ in after) / len(after)
        mb = sum(b for _, b in after) / len(after)
        var = sum((t - mt) ** 2 for t, _ in after)
        slope = sum((t - mt) * (b - mb) for t, b in after) / var * 60 / MiB if var else 0.0
    return baseline, peak, baseline + max(RSS_GROWTH[0] * baseline, RSS_GROWTH[1]), slope


class SoakTest(BackendTestCase):
    def test_soak(self):
        site = Site.make()
        pki = tempfile.mkdtemp(prefix="ringd-soak-tls-")
        cgroup, why = MemoryCgroup.create()
        server = None
        try:
            make_pki(pki)
            tls_ctx = ssl.create_default_context(cafile=os.path.join(pki, "ca.crt"))
            server = Server(site.root, "--listen-tls", "127.0.0.1:0",
                            "--tls-cert", os.path.join(pki, "localhost-ec.crt"),
                            "--tls-key", os.path.join(pki, "localhost-ec.key"),
                            "--max-connections", str(MAX_CONNECTIONS),
                            "--open-file-cache-entries", "1024",
                            "--small-file-cache-bytes", str(4 * MiB), *ADMIN,
                            preexec_fn=cgroup.join if cgroup else None)
            if cgroup and not cgroup.holds(server.proc.pid):
                cgroup.remove()
                cgroup, why = None, "ringd could not be moved into %s" % cgroup.path
            idle_ops = self.io_operations(server)
            ledger = Ledger()
            soak = Soak(server, site, tls_ctx, cgroup, ledger, SECONDS)
            soak.run()
            pools = self.wait_for_empty_pools(server, idle_ops, ledger)
            memory = cgroup.report() if cgroup else {"skipped": why}
            rc = server.stop(timeout=30)
            server_log = server.log
            server = None
            asserts = [l for l in server_log if "assert" in l.lower()]
            verdict = rss_verdict(soak.rss, SECONDS)
            report = self.report(ledger, soak, pools, memory, rc, verdict)
            print(report, flush=True)
            self.assertEqual(rc, 0, "ringd exited %s: %s" % (rc, "\n".join(server_log[-20:])))
            self.assertEqual(asserts, [])
            self.assertEqual(ledger.failures, [], "failed valid requests or faults:\n" +
                             "\n".join(ledger.failures[:50]))
            self.assertIsNotNone(verdict, "too few RSS samples: %s" % soak.rss)
            baseline, peak, allowed, _ = verdict
            self.assertLessEqual(peak, allowed, "RSS grew after warm-up: %.1f MiB -> %.1f MiB" %
                                 (baseline / MiB, peak / MiB))
        finally:
            if server is not None:
                server.proc.kill()
                server.proc.wait()
            if cgroup:
                cgroup.remove()
            shutil.rmtree(site.root, ignore_errors=True)
            shutil.rmtree(pki, ignore_errors=True)

    @staticmethod
    def io_operations(server):
        """The idle server's io operations in flight (its accepts), summed over the shards."""
        return sum(s["io_operations_in_flight"] for s in server.debug_shards()["shards"])

    def wait_for_empty_pools(self, server, idle_ops, ledger):
        """Once the clients have gone: every shard holds no connection, exchange, input buffer,
        pipe or pinned cache entry, no TLS connection, and only the io operations it had idle."""
        def state():
            shards = server.debug_shards()["shards"]
            return {"connections": sum(s["pools"]["connections"]["in_use"] for s in shards),
                    "exchanges": sum(s["pools"]["exchanges"]["in_use"] for s in shards),
                    "input_buffers": sum(s["pools"]["input_buffers"]["in_use"] for s in shards),
                    "pipes": sum(s["pools"]["pipes"]["in_use"] for s in shards),
                    "cache_pinned": sum(s["cache_pinned"] for s in shards),
                    "tls_connections": int(server.metric("ringd_tls_connections")),
                    "io_operations_over_idle": self.io_operations(server) - idle_ops,
                    "content_buffers (cached contents, kept)": sum(s["pools"]["content_buffers"]["in_use"] for s in shards)}
        last = {}

        def empty():
            last.clear()
            last.update(state())
            return all(v == 0 for k, v in last.items() if not k.startswith("content"))
        try:
            wait_for(empty, "every pool back to empty", timeout=60)
        except AssertionError:
            ledger.fail("pools not back to empty 60 s after the clients left: %s" % last)
        return dict(last)

    @staticmethod
    def report(ledger, soak, pools, memory, rc, verdict):
        c = ledger.counts
        lat = ledger.latency_s
        rss = soak.rss
        lines = ["", "soak report: tier %s, %g s" % (BACKEND, SECONDS)]
        lines.append("  requests by kind: " + ", ".join("%s %d" % (k, v) for k, v in sorted(c.items())
                                                        if not k.startswith("fault")))
        lines.append("  faults: " + ", ".join("%s %d" % (k[7:], v) for k, v in sorted(c.items())
                                              if k.startswith("fault")))
        lines.append("  memory cgroup: %s" % memory)
        lines.append("  latency of %d valid requests: p50 %.1f ms, p99 %.1f ms, max %.1f ms" % (
            len(lat), percentile(lat, 50) * 1e3, percentile(lat, 99) * 1e3, max(lat or [0]) * 1e3))
        step = max(1, len(rss) // 12)
        lines.append("  RSS MiB (t s: MiB): " + ", ".join("%d: %.1f" % (t, b / MiB) for t, b in rss[::step]))
        if verdict:
            lines.append("  RSS: warm-up peak %.1f MiB, last third's peak %.1f MiB (allowed %.1f), "
                         "slope after warm-up %+.2f MiB/min" % (verdict[0] / MiB, verdict[1] / MiB,
                                                                verdict[2] / MiB, verdict[3]))
        lines.append("  pools at the end: %s" % pools)
        shown = ledger.windows[:9]  # the first three periods; the rest keep the same rhythm
        lines.append("  windows (s from the start): " + ", ".join(
            "%s %.1f-%.1f" % (k, s - ledger.start, (e or s) - ledger.start) for k, s, e in shown) +
            (", and %d more" % (len(ledger.windows) - len(shown)) if len(ledger.windows) > len(shown) else ""))
        lines.append("  exit status %s; failures %d" % (rc, len(ledger.failures)))
        for f in ledger.failures[:20]:
            lines.append("    " + f)
        out = os.environ.get("TEST_UNDECLARED_OUTPUTS_DIR")
        if out:
            with open(os.path.join(out, "soak_report.json"), "w") as f:
                json.dump({"tier": BACKEND, "seconds": SECONDS, "counts": dict(c),
                           "latency_ms": {"p50": percentile(lat, 50) * 1e3, "p99": percentile(lat, 99) * 1e3,
                                          "max": max(lat or [0]) * 1e3},
                           "rss": rss, "pools": pools, "memory": memory, "exit": rc,
                           "failures": ledger.failures}, f, indent=1)
        return "\n".join(lines)


if __name__ == "__main__":
    unittest.main()
