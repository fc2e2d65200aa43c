"""Starts the real ringd binary on an ephemeral loopback port and talks to it with real clients.

Every test class here runs once per io backend: the backend comes from RINGD_IO (uring or epoll).
A backend this kernel cannot run is a skip that says why, never a silent pass; and a failure
where the tier is required (RINGD_REQUIRED_TIERS, which tools/test sets in CI), so that a green
run there means every tier ran.
"""
import json
import os
import re
import shlex
import shutil
import select
import signal
import socket
import subprocess
import tempfile
import time
import unittest
import urllib.error
import urllib.request

RINGD = os.environ.get("RINGD_BINARY", "")
BACKEND = os.environ.get("RINGD_IO", "uring")  # uring, epoll, or auto
# A command to run ringd under, e.g. the seccomp wrapper that blocks io_uring.
WRAP = [w for w in os.environ.get("RINGD_WRAP", "").split(" ") if w]
# Extra flags for every server a test starts (a variant of the suite, e.g. --send-zc).
# Shell-quoted: a feature name for --io-mask has spaces ("--io-mask='incremental receive'").
EXTRA_FLAGS = shlex.split(os.environ.get("RINGD_FLAGS", ""))
# ringd refuses to serve as root without --user or --allow-root; the tests run as root here
# and in CI. Every ringd a test starts gets these flags (tests of the refusal itself leave them out).
ROOT_FLAGS = ["--allow-root"] if os.geteuid() == 0 else []
# Tiers that must run here, comma-separated ("bypass,uring,epoll"): a test that would skip for
# want of one fails instead.
REQUIRED_TIERS = {t.strip() for t in os.environ.get("RINGD_REQUIRED_TIERS", "").split(",") if t.strip()}
_probe_cache = {}
# Flags for a server whose state a test waits for (Server.connections, Server.draining).
ADMIN = ("--admin-listen", "127.0.0.1:0")


def wait_for(condition, what, timeout=10):
    """Polls `condition` until it returns a true value, and returns that; fails saying `what`
    was awaited once `timeout` seconds have passed. Tests wait for states this way, not for a
    time: a loaded two-core machine stretches any time, and a state says what the test needs."""
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError("waited %g s for %s" % (timeout, what))
        time.sleep(0.01)


def skip_for_tier(tier, why):
    """Skips the test (or its class) because `tier` cannot run here, saying why; fails instead
    when RINGD_REQUIRED_TIERS names the tier."""
    if tier in REQUIRED_TIERS:
        raise AssertionError("the %s tier is required here (RINGD_REQUIRED_TIERS=%s) but cannot "
                             "run: %s" % (tier, ",".join(sorted(REQUIRED_TIERS)), why))
    raise unittest.SkipTest("%s tier unusable on this machine: %s" % (tier, why))


def uring_usable(tier="uring"):
    """Whether `ringd --probe` says the tier ("uring" or "bypass") works here, and its line. The
    probe masks what the servers' extra flags mask (--io-mask in RINGD_FLAGS)."""
    if tier not in _probe_cache:
        masks = [f for i, f in enumerate(EXTRA_FLAGS) if f.startswith("--io-mask") or
                 (i > 0 and EXTRA_FLAGS[i - 1] == "--io-mask")]
        out = subprocess.run([RINGD, "--probe"] + masks, capture_output=True, text=True,
                             timeout=10).stdout
        prefix = tier + " tier: "
        line = next((l for l in out.splitlines() if l.startswith(prefix)), "no probe output")
        _probe_cache[tier] = (line.startswith(prefix + "usable"), line)
    return _probe_cache[tier]


def _tcp_queues():
    """{(local (ip, port), remote (ip, port)): (tx_queue, rx_queue)} of this namespace's IPv4 TCP
    sockets, from /proc/net/tcp."""
    def addr(text):
        ip, port = text.split(":")
        return socket.inet_ntoa(bytes.fromhex(ip)[::-1]), int(port, 16)
    out = {}
    with open("/proc/net/tcp") as f:
        next(f)
        for line in f:
            fields = line.split()
            tx, rx = fields[4].split(":")
            out[(addr(fields[1]), addr(fields[2]))] = (int(tx, 16), int(rx, 16))
    return out


def listening_ports(pid):
    """The IPv4 TCP ports process `pid` listens on, from the kernel (/proc/net/tcp entries in
    state LISTEN whose socket is one of the process's descriptors): for a peer that cannot
    report the port it bound."""
    inodes = set()
    try:
        fds = os.listdir("/proc/%d/fd" % pid)
    except FileNotFoundError:  # it has exited
        return set()
    for fd in fds:
        try:
            link = os.readlink("/proc/%d/fd/%s" % (pid, fd))
        except OSError:
            continue
        if link.startswith("socket:["):
            inodes.add(link[len("socket:["):-1])
    ports = set()
    with open("/proc/net/tcp") as f:
        next(f)
        for line in f:
            fields = line.split()
            if fields[3] == "0A" and fields[9] in inodes:  # 0A: TCP_LISTEN
                ports.add(int(fields[1].split(":")[1], 16))
    return ports


def sends_stalled(socks, settle=0.2):
    """Whether the server's sends to each client socket in `socks` (loopback) have stopped: its
    side's send queue is not empty and did not move over `settle` seconds (the client reads
    nothing and its window is full, so a send in flight there stays in flight)."""
    def queues():
        q = _tcp_queues()
        return [q.get((s.getpeername()[:2], s.getsockname()[:2]), (0, 0))[0] for s in socks]
    before = queues()
    time.sleep(settle)
    return all(b > 0 for b in before) and queues() == before


def passed_by_systemd(fds, names=None, env=""):
    """An argv prefix that runs the command after it with `fds` passed as systemd's socket
    activation passes them: descriptors 3 on, LISTEN_PID, LISTEN_FDS, and LISTEN_FDNAMES from
    `names` (colon-joined) when given; `env`: more `NAME=value` words to export. The caller
    gives the same fds to subprocess as pass_fds."""
    dups = " ".join("%d<&%d" % (3 + i, fd) for i, fd in enumerate(fds))
    exports = "LISTEN_PID=$$ LISTEN_FDS=%d" % len(fds)
    if names:
        exports += " LISTEN_FDNAMES=" + ":".join(names)
    if env:
        exports += " " + env
    return ["/bin/sh", "-c", 'exec %s; export %s; exec "$@"' % (dups, exports), "sh"]


def listening_sockets(n, backlog=128):
    """`n` TCP sockets listening on loopback ports the kernel chose, as systemd would pass them;
    the caller closes them once ringd holds them."""
    listeners = []
    for _ in range(n):
        l = socket.socket()
        l.bind(("127.0.0.1", 0))
        l.listen(backlog)
        listeners.append(l)
    return listeners


def logged_client(log, marker):
    """The client address (the first field) of the access log line of the request whose line
    holds `marker` (a query), once it is written."""
    def find():
        with open(log) as f:
            for line in f:
                if marker in line:
                    return line.split(" ", 1)[0]
        return None
    return wait_for(find, "the access log line of %s" % marker)


def admin_get(port, path, timeout=10):
    """(status, body) of a GET on the admin listener."""
    try:
        with urllib.request.urlopen("http://127.0.0.1:%d%s" % (port, path), timeout=timeout) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


def metric_sum(text, name, **labels):
    """The sum of every sample of `name` whose labels include `labels`."""
    total = 0.0
    for line in text.splitlines():
        if line.startswith("#"):
            continue
        m = re.match(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{.*\})? (\S+)$", line)
        if not m or m.group(1) != name:
            continue
        got = dict(re.findall(r'(\w+)="((?:[^"\\]|\\.)*)"', m.group(2) or ""))
        if all(got.get(k) == v for k, v in labels.items()):
            total += float(m.group(3))
    return total


def server_has_read(sock):
    """Whether the server has read everything sent on the client socket `sock` (loopback): none
    of it waits in the client's send queue or in the server side's receive queue."""
    here, there = sock.getsockname()[:2], sock.getpeername()[:2]
    queues = _tcp_queues()
    mine, theirs = queues.get((here, there)), queues.get((there, here))
    return mine is not None and theirs is not None and mine[0] == 0 and theirs[1] == 0


class Server:
    """A ringd process serving `root`; stop() sends SIGTERM and returns the exit status.
    `listen=None`: no --listen (a server with --listen-tls only; `port` is then its TLS port).
    `binary`: another copy of the ringd under test (one that another user may run)."""

    def __init__(self, root, *flags, backend=None, env=None, wrap=None, preexec_fn=None,
                 listen="127.0.0.1:0", binary=None):
        self.root = root
        # Two shards unless the test says how many: ringd refuses a flag given twice.
        shards = [] if any(f == "--shards" or f.startswith("--shards=") for f in flags) else \
            ["--shards", "2"]
        args = list(WRAP if wrap is None else wrap) + [binary or RINGD, "--root", root] + \
            (["--listen", listen] if listen else []) + shards + ["--io", backend or BACKEND] + \
            ROOT_FLAGS + EXTRA_FLAGS + list(flags)
        self.proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                     env=env, text=True, preexec_fn=preexec_fn)
        self.log = []
        self._partial = b""  # the start of a line logged() has not seen the end of
        deadline = time.time() + 10
        # Read the raw descriptor, not the buffered text stream: a readline() there can pull
        # several lines into its buffer, and select() would then wait for more that never come.
        fd = self.proc.stderr.fileno()
        pending = b""
        while time.time() < deadline:
            ready, _, _ = select.select([fd], [], [], 0.2)
            if ready:
                chunk = os.read(fd, 65536)
                if not chunk:
                    break
                pending += chunk
                while b"\n" in pending:
                    raw_line, pending = pending.split(b"\n", 1)
                    line = raw_line.decode(errors="replace")
                    self.log.append(line)
                    m = re.search(r"serving .* on (?:https )?[0-9.]+:(\d+)", line)
                    if m:
                        self.port = int(m.group(1))
                        tls = re.search(r"https [0-9.]+:(\d+)", line)
                        self.tls_port = int(tls.group(1)) if tls else None
                        if pending:
                            self.log.extend(pending.decode(errors="replace").splitlines())
                        return
            elif self.proc.poll() is not None:
                break
        self.proc.kill()
        rest = self.proc.stderr.read() if self.proc.stderr else ""
        raise RuntimeError("ringd did not start: %s %s" % ("\n".join(self.log), rest))

    def logged(self, text):
        """Whether a line of ringd's stderr so far contains `text` (reads what has come, without
        waiting); for wait_for."""
        fd = self.proc.stderr.fileno()
        while select.select([fd], [], [], 0)[0]:
            chunk = os.read(fd, 65536)
            if not chunk:
                break
            self._partial += chunk
            while b"\n" in self._partial:
                raw_line, self._partial = self._partial.split(b"\n", 1)
                self.log.append(raw_line.decode(errors="replace"))
        return any(text in line for line in self.log)

    def admin_port(self):
        """The port of the admin listener (a server started with ADMIN)."""
        for line in self.log:
            m = re.search(r"admin listener on [0-9.]+:(\d+)", line)
            if m:
                return int(m.group(1))
        raise AssertionError("no admin listener (start the server with ADMIN): %s" % self.log)

    def metric(self, name, **labels):
        """The sum of the samples of metric `name` (with `labels`) on /metrics now (a server
        started with ADMIN)."""
        status, text = admin_get(self.admin_port(), "/metrics")
        assert status == 200, text
        return metric_sum(text, name, **labels)

    def debug_shards(self):
        """/debug/shards, parsed (docs/OPERATIONS.md): each shard's connections by state, pools."""
        url = "http://127.0.0.1:%d/debug/shards" % self.admin_port()
        with urllib.request.urlopen(url, timeout=10) as r:
            return json.loads(r.read().decode())

    def connections(self):
        """Connections now, summed over the shards: reading, waiting_file, sending, lingering,
        closing, idle, open; and accept_paused, true if any shard's accepting is paused."""
        total = {"accept_paused": False}
        for shard in self.debug_shards()["shards"]:
            if not shard.get("up"):
                continue
            for state, n in shard["connections"].items():
                total[state] = total.get(state, 0) + n
            total["accept_paused"] |= shard["accept_paused"]
        return total

    def draining(self):
        """Whether the server has begun a graceful stop (what /debug/shards says)."""
        return self.debug_shards()["draining"]

    def connect(self, timeout=10):
        s = socket.create_connection(("127.0.0.1", self.port), timeout=timeout)
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        return s

    def stop(self, sig=signal.SIGTERM, timeout=15):
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
        try:
            rc = self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            raise
        rest = self._partial.decode(errors="replace") + self.proc.stderr.read()
        self._partial = b""
        self.log.extend(rest.splitlines())
        return rc


class Response:
    def __init__(self, status, reason, headers, body):
        self.status = status
        self.reason = reason
        self.headers = headers  # lower-case name -> value (last wins)
        self.body = body

    def header(self, name):
        return self.headers.get(name.lower())


class Reader:
    """Reads HTTP/1.1 responses off a socket, one after another (pipelining)."""

    def __init__(self, sock):
        self.sock = sock
        self.buf = b""

    def _recv(self):
        chunk = self.sock.recv(1 << 20)
        if not chunk:
            raise EOFError("connection closed")
        return chunk

    def _fill(self):
        self.buf += self._recv()

    def read_head(self):
        while b"\r\n\r\n" not in self.buf:
            self._fill()
        head, self.buf = self.buf.split(b"\r\n\r\n", 1)
        lines = head.decode("latin-1").split("\r\n")
        version, status, reason = (lines[0].split(" ", 2) + [""])[:3]
        assert version == "HTTP/1.1", lines[0]
        headers = {}
        for line in lines[1:]:
            name, _, value = line.partition(":")
            headers[name.strip().lower()] = value.strip()
        return int(status), reason, headers

    def read_exact(self, n):
        # The chunks are joined once: `buf += chunk` copies everything read so far on every recv,
        # quadratic in the body, which for a body of tens of MiB on a loaded machine is slow
        # enough to outlast a drain deadline.
        if len(self.buf) < n:
            parts, have = [self.buf], len(self.buf)
            try:
                while have < n:
                    parts.append(self._recv())
                    have += len(parts[-1])
            finally:
                self.buf = b"".join(parts)  # what came before an EOF stays readable
        out, self.buf = self.buf[:n], self.buf[n:]
        return out

    def read_chunked(self):
        """A chunked body (RFC 9112 section 7.1): its chunks' data joined; the trailer section,
        if any, read and dropped."""
        parts = []
        while True:
            while b"\r\n" not in self.buf:
                self._fill()
            line, self.buf = self.buf.split(b"\r\n", 1)
            size = int(line.split(b";")[0], 16)
            if size == 0:
                while True:  # trailer fields, then the empty line
                    while b"\r\n" not in self.buf:
                        self._fill()
                    field, self.buf = self.buf.split(b"\r\n", 1)
                    if not field:
                        return b"".join(parts)
            data = self.read_exact(size + 2)
            assert data.endswith(b"\r\n"), data[-8:]
            parts.append(data[:-2])

    def read_to_eof(self):
        parts = [self.buf]
        self.buf = b""
        while True:
            chunk = self.sock.recv(1 << 20)
            if not chunk:
                return b"".join(parts)
            parts.append(chunk)

    def read_response(self, head_request=False):
        status, reason, headers = self.read_head()
        if head_request or status == 304:
            body = b""
        elif headers.get("transfer-encoding") == "chunked":
            body = self.read_chunked()
        elif "content-length" not in headers and headers.get("connection") == "close":
            body = self.read_to_eof()  # an HTTP/1.0 body of no stated length
        else:
            body = self.read_exact(int(headers.get("content-length", "0")))
        return Response(status, reason, headers, body)

    def at_eof(self, timeout=5):
        self.sock.settimeout(timeout)
        if self.buf:
            return False
        try:
            return self.sock.recv(1) == b""
        except ConnectionResetError:
            return True


def request(server, method, target, headers=None, version="HTTP/1.1"):
    """One request on a fresh connection; returns the Response."""
    lines = ["%s %s %s" % (method, target, version)]
    hdrs = {"Host": "test"} if version == "HTTP/1.1" else {}
    hdrs.update(headers or {})
    lines += ["%s: %s" % kv for kv in hdrs.items()]
    with server.connect() as s:
        s.sendall(("\r\n".join(lines) + "\r\n\r\n").encode("latin-1"))
        return Reader(s).read_response(head_request=(method == "HEAD"))


def raw(server, data, timeout=5):
    """Sends raw bytes, returns (status, everything read until the server closed or timed out)."""
    with server.connect(timeout=timeout) as s:
        s.sendall(data)
        out = b""
        try:
            while True:
                chunk = s.recv(65536)
                if not chunk:
                    break
                out += chunk
        except (socket.timeout, ConnectionResetError):
            pass
    m = re.match(rb"HTTP/1\.1 (\d{3}) ", out)
    return (int(m.group(1)) if m else None), out


def curl(url, *args):
    """(HTTP version, status, lowercased header dict, body) of one request with curl (`args`:
    more of curl's options, e.g. --http2-prior-knowledge)."""
    d = tempfile.mkdtemp(prefix="ringd-curl-")
    try:
        out = subprocess.run(["curl", "-sk", "--max-time", "20", "-D", os.path.join(d, "h"),
                              "-o", os.path.join(d, "b"), "-w", "%{http_version} %{http_code}",
                              *args, url], capture_output=True, text=True, timeout=30)
        version, status = out.stdout.split()
        headers = {}
        with open(os.path.join(d, "h"), "rb") as f:
            for line in f.read().decode("latin-1").split("\r\n")[1:]:
                if ":" in line:
                    k, v = line.split(":", 1)
                    headers[k.strip().lower()] = v.strip()
        body = b""
        if os.path.exists(os.path.join(d, "b")):
            with open(os.path.join(d, "b"), "rb") as f:
                body = f.read()
        return version, int(status), headers, body
    finally:
        shutil.rmtree(d, ignore_errors=True)


def make_docroot():
    """A document root with the size mix the tests need; deterministic contents."""
    root = tempfile.mkdtemp(prefix="ringd-test-")
    os.chmod(root, 0o755)

    def write(rel, data):
        path = os.path.join(root, rel)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "wb") as f:
            f.write(data)
        return path

    def pattern(n, seed):
        block = bytes((i * 31 + seed) & 0xFF for i in range(4096))
        return (block * (n // 4096 + 1))[:n]

    files = {
        "index.html": b"<!doctype html><title>t</title>" + b"x" * 580,   # 612 bytes, as in the seeds
        "small.txt": pattern(612, 1),
        "medium.bin": pattern(100 * 1024, 2),
        "large.bin": pattern(5 * 1024 * 1024 + 123, 3),
        "empty.txt": b"",
        "dir/index.html": b"<p>dir index</p>",
        "nodir/file.txt": b"file in a directory without an index",
        "app.js": b"console.log('hello');\n" * 100,
        ".hidden": b"secret",
        ".well-known/thing.txt": b"well known",
    }
    for rel, data in files.items():
        write(rel, data)
    import gzip
    write("app.js.gz", gzip.compress(files["app.js"], mtime=0))
    os.utime(os.path.join(root, "app.js.gz"), None)  # not older than app.js
    os.symlink("small.txt", os.path.join(root, "link.txt"))
    os.symlink("/etc/passwd", os.path.join(root, "escape"))
    os.symlink("../" * 8 + "etc/passwd", os.path.join(root, "escape2"))
    return root, files


class BackendTestCase(unittest.TestCase):
    """Skips the whole class when the selected backend cannot run here."""

    @classmethod
    def setUpClass(cls):
        if not RINGD or not os.path.exists(RINGD):
            raise RuntimeError("RINGD_BINARY is not set to the ringd binary")
        if BACKEND in ("uring", "bypass"):
            ok, why = uring_usable(BACKEND)
            if not ok:
                skip_for_tier(BACKEND, why)


class DocrootTestCase(BackendTestCase):
    """One document root (make_docroot) for the class, its servers started by each test."""

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        cls.root, cls.files = make_docroot()

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.root, ignore_errors=True)
