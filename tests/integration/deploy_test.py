"""Deployment: the origin headers a CDN reads, dropping root, and systemd.

- --cache-control / --default-cache-control / --add-header on 200, 206 and 304 only, and
  --error-page serving a file (small and large) with the error status;
- --user: the process's ids and capabilities in /proc after binding a privileged port as root,
  opens that run as the user (a file only root may read is refused), and the refusal to serve as
  root without --user or --allow-root;
- socket activation through systemd-socket-activate (the socket bound by it, every shard
  accepting on it) and the notify protocol on a socket of the test's own: READY=1 once serving,
  WATCHDOG=1 while the shards turn (and not while one is stopped, and on time under a stream of
  signals), STOPPING=1 when a drain begins;
- signals that arrive while ringd starts wait until it serves.
"""
import ctypes
import os
import pwd
import re
import select
import shutil
import signal
import socket
import ssl
import subprocess
import tempfile
import time
import unittest

from ringd_harness import (BACKEND, RINGD, ROOT_FLAGS, BackendTestCase, Reader, Server,
                           listening_sockets, make_docroot, passed_by_systemd, request)
from tls_pki import make_pki

ORIGIN_FLAGS = [
    "--cache-control", "*.css=public, max-age=31536000, immutable",
    "--cache-control", "/dir/*=public, max-age=60",
    "--cache-control", "*.bin=public, max-age=600",
    "--default-cache-control", "no-cache",
    "--add-header", "X-Content-Type-Options: nosniff",
    "--add-header", "Access-Control-Allow-Origin: *",
    "--error-page", "404=/errors/404.html",
    "--error-page", "403=/errors/missing-403.html",
    "--error-page", "416=/errors/416.html",
]


class Remote:
    """A server the test did not start through the harness: an address to connect to."""

    def __init__(self, port):
        self.port = port

    def connect(self, timeout=10):
        return socket.create_connection(("127.0.0.1", self.port), timeout=timeout)


class StderrLines:
    """Reads a child's stderr line by line off the raw descriptor (select() and a buffered
    readline() do not mix: the buffer may hold lines select() cannot see)."""

    def __init__(self, proc):
        self.fd = proc.stderr.fileno()
        self.pending = b""
        self.lines = []
        self.pos = 0  # lines before this were looked at by until()

    def until(self, pattern, timeout=10):
        """The next line (after the last one returned) that matches `pattern`."""
        deadline = time.time() + timeout
        while True:
            while self.pos < len(self.lines):
                line = self.lines[self.pos]
                self.pos += 1
                if re.search(pattern, line):
                    return line
            left = deadline - time.time()
            if left <= 0:
                raise AssertionError("no %r in %r" % (pattern, self.lines))
            if not self.read(min(left, 0.2)):
                raise AssertionError("stderr closed before %r: %r" % (pattern, self.lines))

    def read(self, timeout):
        """Takes in what arrives within `timeout` seconds; false once stderr is closed."""
        ready, _, _ = select.select([self.fd], [], [], timeout)
        if ready:
            chunk = os.read(self.fd, 65536)
            if not chunk:
                return False
            self.pending += chunk
            while b"\n" in self.pending:
                line, self.pending = self.pending.split(b"\n", 1)
                self.lines.append(line.decode(errors="replace"))
        return True

    def seen(self, pattern):
        """Whether a line so far (read without waiting) matches `pattern`."""
        self.read(0)
        return any(re.search(pattern, line) for line in self.lines)


def write(root, rel, data, mode=0o644):
    path = os.path.join(root, rel)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "wb") as f:
        f.write(data)
    os.chmod(path, mode)
    return path


class OriginHeadersTest(BackendTestCase):
    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        cls.root, cls.files = make_docroot()
        write(cls.root, "site.css", b"body{}\n" * 10)
        cls.page404 = b"<h1>not here</h1>\n"
        write(cls.root, "errors/404.html", cls.page404)
        # Larger than the small-file cache holds: the file path (sendfile / splice) serves it.
        cls.page416 = bytes(i % 251 for i in range(200 * 1024))
        write(cls.root, "errors/416.html", cls.page416)
        cls.server = Server(cls.root, *ORIGIN_FLAGS)

    @classmethod
    def tearDownClass(cls):
        cls.server.stop()
        shutil.rmtree(cls.root, ignore_errors=True)

    def assert_origin(self, r, cache_control):
        self.assertEqual(r.header("cache-control"), cache_control, r.headers)
        self.assertEqual(r.header("x-content-type-options"), "nosniff", r.headers)
        self.assertEqual(r.header("access-control-allow-origin"), "*", r.headers)

    def assert_none(self, r):
        for name in ("cache-control", "x-content-type-options", "access-control-allow-origin"):
            self.assertIsNone(r.header(name), (r.status, r.headers))

    def test_first_matching_glob_wins_then_the_default(self):
        css = request(self.server, "GET", "/site.css")
        self.assertEqual(css.status, 200)
        self.assert_origin(css, "public, max-age=31536000, immutable")
        self.assert_origin(request(self.server, "GET", "/dir/"), "public, max-age=60")
        self.assert_origin(request(self.server, "GET", "/medium.bin"), "public, max-age=600")
        self.assert_origin(request(self.server, "GET", "/large.bin"), "public, max-age=600")
        self.assert_origin(request(self.server, "GET", "/small.txt"), "no-cache")
        self.assert_origin(request(self.server, "HEAD", "/small.txt"), "no-cache")
        # Precompressed: the rule of the path asked for, whatever encoding is served.
        gz = request(self.server, "GET", "/app.js", {"Accept-Encoding": "gzip"})
        self.assertEqual(gz.header("content-encoding"), "gzip")
        self.assert_origin(gz, "no-cache")

    def test_ranges_and_not_modified(self):
        r = request(self.server, "GET", "/large.bin", {"Range": "bytes=100-199"})
        self.assertEqual(r.status, 206)
        self.assertEqual(r.body, self.files["large.bin"][100:200])
        self.assert_origin(r, "public, max-age=600")
        etag = request(self.server, "GET", "/site.css").header("etag")
        r = request(self.server, "GET", "/site.css", {"If-None-Match": etag})
        self.assertEqual(r.status, 304)
        self.assert_origin(r, "public, max-age=31536000, immutable")

    def test_errors_and_redirects_carry_none(self):
        for target in ("/dir", "/nodir/", "/nope.css"):
            r = request(self.server, "GET", target)
            self.assertIn(r.status, (301, 403, 404))
            self.assert_none(r)

    def test_error_page_from_the_root(self):
        r = request(self.server, "GET", "/nope.css")
        self.assertEqual(r.status, 404)
        self.assertEqual(r.body, self.page404)
        self.assertEqual(r.header("content-type"), "text/html; charset=utf-8")
        self.assertIsNone(r.header("etag"))
        head = request(self.server, "HEAD", "/nope.css")
        self.assertEqual((head.status, head.header("content-length")), (404, str(len(self.page404))))
        # Keep-alive holds across a file-backed error page: two on one connection.
        with self.server.connect() as s:
            s.sendall(b"GET /a HTTP/1.1\r\nHost: t\r\n\r\nGET /b HTTP/1.1\r\nHost: t\r\n\r\n")
            reader = Reader(s)
            for _ in range(2):
                r = reader.read_response()
                self.assertEqual((r.status, r.body), (404, self.page404))

    def test_large_error_page_and_a_missing_one(self):
        r = request(self.server, "GET", "/large.bin", {"Range": "bytes=99999999-"})
        self.assertEqual(r.status, 416)
        self.assertEqual(r.header("content-range"), "bytes */%d" % len(self.files["large.bin"]))
        self.assertEqual(r.body, self.page416)
        # The page for 403 does not exist: the built-in page, still a 403.
        r = request(self.server, "GET", "/nodir/")
        self.assertEqual(r.status, 403)
        self.assertIn(b"403 Forbidden", r.body)

    def test_curl_sees_them(self):
        out = subprocess.run(["curl", "-sS", "-D", "-", "-o", "/dev/null",
                              "http://127.0.0.1:%d/site.css" % self.server.port],
                             capture_output=True, text=True, timeout=10)
        self.assertIn("Cache-Control: public, max-age=31536000, immutable\n", out.stdout)

    def test_bad_flags_are_one_line_and_exit_2(self):
        for flags, says in [
            (["--add-header", "X-Bad\r\nInjected: 1"],
             "--add-header: 'X-Bad\\x0d\\x0aInjected' is not a header name"),
            (["--add-header", "X-Bad"], "--add-header: expected 'Name: value'"),
            (["--add-header", "X-Bad: a\nb"], "--add-header: the value of X-Bad is not a header"),
            (["--add-header", "Bad Name: x"], "--add-header: 'Bad Name' is not a header name"),
            (["--add-header", "Content-Type: text/plain"], "--add-header: ringd writes"),
            (["--cache-control", "*.css"], "--cache-control: expected GLOB=VALUE"),
            (["--default-cache-control", "a\rb"], "--default-cache-control:"),
            (["--error-page", "404=../x"], "--error-page: expected STATUS=/PATH"),
            (["--error-page", "302=/x.html"], "--error-page: ringd cannot serve a page"),
        ]:
            out = subprocess.run([RINGD, "--root", self.root, "--listen", "127.0.0.1:0",
                                  "--io", BACKEND] + ROOT_FLAGS + flags,
                                 capture_output=True, text=True, timeout=10)
            self.assertEqual(out.returncode, 2, (flags, out.stderr))
            lines = out.stderr.strip().splitlines()
            self.assertEqual(len(lines), 1, out.stderr)
            self.assertTrue(lines[0].startswith("ringd: " + says), lines[0])


def proc_status(pid):
    fields = {}
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            name, _, value = line.partition(":")
            fields[name] = value.split()
    return fields


def proc_status_task(pid, tid):
    fields = {}
    with open("/proc/%d/task/%s/status" % (pid, tid)) as f:
        for line in f:
            name, _, value = line.partition(":")
            fields[name] = value.split()
    return fields


def free_privileged_port():
    for port in list(range(81, 100)) + list(range(600, 1000)):
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
                return port
            except OSError:
                continue
    raise unittest.SkipTest("no free privileged port on 127.0.0.1")


class PrivilegesTest(BackendTestCase):
    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        if os.geteuid() != 0:
            raise unittest.SkipTest("dropping root needs root; the tests run as uid %d" % os.geteuid())
        cls.root, cls.files = make_docroot()
        # Only root may read it: served as the user, it is refused (403).
        write(cls.root, "root-only.txt", b"secret", mode=0o600)
        # Only root may search it: the same.
        write(cls.root, "root-only/index.html", b"secret", mode=0o600)
        os.chmod(os.path.join(cls.root, "root-only"), 0o700)

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.root, ignore_errors=True)

    def test_refuses_root_without_user_or_allow_root(self):
        out = subprocess.run([RINGD, "--root", self.root, "--listen", "127.0.0.1:0", "--io", BACKEND],
                             capture_output=True, text=True, timeout=10)
        self.assertEqual(out.returncode, 1, out.stderr)
        lines = out.stderr.strip().splitlines()
        self.assertEqual(len(lines), 1, out.stderr)
        self.assertIn("refusing to serve as root", lines[0])
        self.assertIn("--user", lines[0])

    def test_binds_a_privileged_port_then_serves_as_nobody(self):
        port = free_privileged_port()
        proc = subprocess.Popen([RINGD, "--root", self.root, "--listen", "127.0.0.1:%d" % port,
                                 "--io", BACKEND, "--shards", "2", "--user", "nobody"],
                                stderr=subprocess.PIPE)
        try:
            stderr = StderrLines(proc)
            stderr.until(r"serving ")
            self.assertTrue(any("running as nobody" in l for l in stderr.lines), stderr.lines)
            pw = pwd.getpwnam("nobody")
            status = proc_status(proc.pid)
            self.assertEqual([int(x) for x in status["Uid"]], [pw.pw_uid] * 4, status["Uid"])
            self.assertEqual([int(x) for x in status["Gid"]], [pw.pw_gid] * 4, status["Gid"])
            self.assertNotIn("0", status["Groups"])
            self.assertEqual(int(status["CapEff"][0], 16), 0)
            self.assertEqual(int(status["CapPrm"][0], 16), 0)
            # Every thread, the shards included, is nobody.
            for tid in os.listdir("/proc/%d/task" % proc.pid):
                st = proc_status_task(proc.pid, tid)
                self.assertEqual([int(x) for x in st["Uid"]], [pw.pw_uid] * 4, (tid, st["Name"], st["Uid"]))
            server = Remote(port)
            r = request(server, "GET", "/small.txt")
            self.assertEqual((r.status, r.body), (200, self.files["small.txt"]))
            r = request(server, "GET", "/large.bin", {"Range": "bytes=0-99"})
            self.assertEqual((r.status, r.body), (206, self.files["large.bin"][:100]))
            # Opens run as nobody, on every tier (io_uring takes the submitter's credentials).
            self.assertEqual(request(server, "GET", "/root-only.txt").status, 403)
            # Asked as a directory, as nginx answers: a file is not one (404), a directory the
            # user cannot search is forbidden (403).
            self.assertEqual(request(server, "GET", "/root-only.txt/").status, 404)
            self.assertEqual(request(server, "GET", "/root-only/").status, 403)
            self.assertEqual(request(server, "GET", "/root-only").status, 403)
        finally:
            proc.send_signal(signal.SIGTERM)
            self.assertEqual(proc.wait(timeout=15), 0)

    def test_a_root_the_user_cannot_search_is_refused(self):
        # Opened as root at start-up, the root would be served as nobody with a 403 for
        # everything; ringd checks it as the user it serves as, and says so.
        d = tempfile.mkdtemp(prefix="ringd-private-root-")
        try:
            write(d, "index.html", b"private")
            os.chmod(d, 0o700)
            out = subprocess.run([RINGD, "--root", d, "--listen", "127.0.0.1:0", "--io", BACKEND,
                                  "--user", "nobody"], capture_output=True, text=True, timeout=10)
            self.assertEqual(out.returncode, 1, out.stderr)
            lines = out.stderr.strip().splitlines()
            self.assertEqual(lines[-1], "ringd: --root: the user ringd serves as cannot search "
                                        "'%s': Permission denied" % d, out.stderr)
            self.assertFalse(any("serving" in l for l in lines), out.stderr)
        finally:
            shutil.rmtree(d)

    def test_an_unknown_user_is_a_flag_error(self):
        out = subprocess.run([RINGD, "--root", self.root, "--listen", "127.0.0.1:0", "--io", BACKEND,
                              "--user", "no-such-user-ringd"], capture_output=True, text=True, timeout=10)
        self.assertEqual(out.returncode, 2)
        self.assertEqual(out.stderr.strip(), "ringd: --user: no such user 'no-such-user-ringd'")


# --- systemd --------------------------------------------------------------------------------

libc = ctypes.CDLL(None, use_errno=True)
libc.ptrace.argtypes = [ctypes.c_long, ctypes.c_long, ctypes.c_void_p, ctypes.c_void_p]
libc.ptrace.restype = ctypes.c_long
PTRACE_DETACH, PTRACE_SEIZE, PTRACE_INTERRUPT = 17, 0x4206, 0x4207
WALL = 0x40000000


class StoppedThread:
    """Stops one thread of another process (ptrace), the others running on: a stuck shard."""

    def __init__(self, tid):
        self.tid = tid

    def __enter__(self):
        if libc.ptrace(PTRACE_SEIZE, self.tid, None, None) != 0:
            raise unittest.SkipTest("ptrace refused: %s" % os.strerror(ctypes.get_errno()))
        libc.ptrace(PTRACE_INTERRUPT, self.tid, None, None)
        os.waitpid(self.tid, WALL)
        return self

    def __exit__(self, *exc):
        libc.ptrace(PTRACE_DETACH, self.tid, None, None)


class NotifySocket:
    """The AF_UNIX datagram socket systemd would listen on (NOTIFY_SOCKET), for the test."""

    def __init__(self):
        self.dir = tempfile.mkdtemp(prefix="ringd-notify-")
        self.path = os.path.join(self.dir, "notify")
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.sock.bind(self.path)
        self.messages = []  # (monotonic time, {KEY: value})

    def read(self, timeout):
        """Reads what arrives within `timeout` seconds; returns the new messages."""
        new = []
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                break
            ready, _, _ = select.select([self.sock], [], [], left)
            if not ready:
                break
            data = self.sock.recv(4096).decode()
            fields = dict(l.split("=", 1) for l in data.split("\n") if "=" in l)
            new.append((time.monotonic(), fields))
        self.messages.extend(new)
        return new

    def wait_for(self, key, timeout=10):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for _, m in self.read(0.1):
                if key in m:
                    return m
        raise AssertionError("no %s within %ss; got %r" % (key, timeout, self.messages))

    def close(self):
        self.sock.close()
        shutil.rmtree(self.dir, ignore_errors=True)


def metric(text, name, shard):
    m = re.search(r'^%s\{shard="%d"\} (\d+)' % (name, shard), text, re.M)
    return int(m.group(1)) if m else None


def accepted_per_shard(admin_port, shards=2):
    with socket.create_connection(("127.0.0.1", admin_port), timeout=5) as s:
        s.sendall(b"GET /metrics HTTP/1.1\r\nHost: t\r\n\r\n")
        metrics = Reader(s).read_response().body.decode()
    return [metric(metrics, "ringd_connections_accepted_total", i) for i in range(shards)]


class SystemdTest(BackendTestCase):
    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        cls.activate = shutil.which("systemd-socket-activate")
        if cls.activate is None:
            # Debian's systemd package has it; tools/setup installs it.
            raise AssertionError("systemd-socket-activate is missing (tools/setup installs systemd)")
        cls.root, cls.files = make_docroot()

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.root, ignore_errors=True)

    def start(self, notify, watchdog_usec=None, shards=2, extra=()):
        with socket.socket() as s:  # a free port for systemd-socket-activate to bind
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        env_flags = ["-E", "NOTIFY_SOCKET=" + notify.path]
        if watchdog_usec:
            env_flags += ["-E", "WATCHDOG_USEC=%d" % watchdog_usec]
        proc = subprocess.Popen([self.activate, "-l", "127.0.0.1:%d" % port] + env_flags +
                                [RINGD, "--root", self.root, "--io", BACKEND, "--shards", str(shards),
                                 "--admin-listen", "127.0.0.1:0"] + ROOT_FLAGS + list(extra),
                                stderr=subprocess.PIPE)
        self.addCleanup(lambda: proc.poll() is None and proc.kill())
        # systemd-socket-activate binds, then execs ringd (same pid) on the first connection.
        proc.lines = StderrLines(proc)
        proc.lines.until(r"Listening on")
        return proc, Remote(port)

    def test_socket_activation_ready_and_stopping(self):
        notify = NotifySocket()
        self.addCleanup(notify.close)
        proc, server = self.start(notify)
        # The first connection is what makes systemd-socket-activate start ringd; it waits in the
        # socket's backlog meanwhile, and ringd answers it.
        first = request(server, "GET", "/small.txt")
        self.assertEqual((first.status, first.body), (200, self.files["small.txt"]))
        ready = notify.wait_for("READY")
        self.assertEqual(ready["READY"], "1")
        self.assertEqual(int(ready["MAINPID"]), proc.pid)
        self.assertIn("serving", ready["STATUS"])
        line = proc.lines.until(r"admin listener on")
        admin_port = int(re.search(r"admin listener on 127\.0\.0\.1:(\d+)", line).group(1))
        proc.lines.until(r"serving ")
        self.assertTrue(any("listening on 1 socket passed by systemd (LISTEN_FDS), shared by the "
                            "shards" in l for l in proc.lines.lines), proc.lines.lines)
        self.assertNotIn("WATCHDOG", ready)
        for _ in range(20):
            with server.connect() as s:
                s.sendall(b"GET /small.txt HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n")
                self.assertEqual(Reader(s).read_response().status, 200)
        accepted = accepted_per_shard(admin_port)
        self.assertEqual(sum(accepted), 21, accepted)
        proc.send_signal(signal.SIGTERM)
        stopping = notify.wait_for("STOPPING")
        self.assertEqual(stopping["STOPPING"], "1")
        self.assertEqual(proc.wait(timeout=15), 0)
        self.assertFalse(any("WATCHDOG" in m for _, m in notify.messages), notify.messages)

    def test_a_socket_per_shard_spreads_connections(self):
        # What systemd passes for ListenStream= given twice with ReusePort=yes: two SO_REUSEPORT
        # sockets bound to one address (systemd-socket-activate cannot make those).
        listeners = []
        for _ in range(2):
            l = socket.socket()
            l.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
            l.bind(("127.0.0.1", listeners[0].getsockname()[1] if listeners else 0))
            l.listen(128)
            listeners.append(l)
        self.addCleanup(lambda: [l.close() for l in listeners])
        notify = NotifySocket()
        self.addCleanup(notify.close)
        fds = [l.fileno() for l in listeners]
        proc = subprocess.Popen(
            passed_by_systemd(fds, env="NOTIFY_SOCKET=" + notify.path) +
            [RINGD, "--root", self.root, "--io", BACKEND, "--shards", "2", "--admin-listen",
             "127.0.0.1:0"] + ROOT_FLAGS,
            pass_fds=fds, stderr=subprocess.PIPE)
        self.addCleanup(lambda: proc.poll() is None and proc.kill())
        lines = StderrLines(proc)
        admin_port = int(re.search(r"admin listener on 127\.0\.0\.1:(\d+)",
                                   lines.until("admin listener on")).group(1))
        lines.until("each shard accepting on its own")
        self.assertEqual(notify.wait_for("READY")["READY"], "1")
        for l in listeners:
            l.close()  # ringd holds them now, as it would hold systemd's
        server = Remote(int(re.search(r"serving .* on 127\.0\.0\.1:(\d+)",
                                      lines.until("serving ")).group(1)))
        for _ in range(100):
            with server.connect() as s:
                s.sendall(b"GET /small.txt HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n")
                self.assertEqual(Reader(s).read_response().status, 200)
        accepted = accepted_per_shard(admin_port)
        self.assertEqual(sum(accepted), 100, accepted)
        self.assertTrue(all(a > 0 for a in accepted), accepted)  # the kernel spread them
        proc.send_signal(signal.SIGTERM)
        notify.wait_for("STOPPING")
        self.assertEqual(proc.wait(timeout=15), 0)

    def test_watchdog_pings_while_the_shards_turn(self):
        notify = NotifySocket()
        self.addCleanup(notify.close)
        proc, server = self.start(notify, watchdog_usec=400000)  # pings every 200 ms
        self.assertEqual(request(server, "GET", "/small.txt").status, 200)
        notify.wait_for("READY")
        pings = [t for t, m in notify.read(1.5) if m.get("WATCHDOG") == "1"]
        self.assertGreaterEqual(len(pings), 4, notify.messages)
        # One shard stuck (its thread stopped): the pings stop, though the main thread runs on.
        shard_tid = None
        for tid in os.listdir("/proc/%d/task" % proc.pid):
            with open("/proc/%d/task/%s/comm" % (proc.pid, tid)) as f:
                if f.read().strip() == "ringd-shard-1":
                    shard_tid = int(tid)
        self.assertIsNotNone(shard_tid)
        with StoppedThread(shard_tid):
            notify.read(0.5)  # a ping already decided may still arrive
            stuck = [m for _, m in notify.read(1.5) if m.get("WATCHDOG") == "1"]
            self.assertEqual(stuck, [])
        # Unstuck: the pings come back.
        resumed = [m for _, m in notify.read(1.5) if m.get("WATCHDOG") == "1"]
        self.assertGreaterEqual(len(resumed), 3)
        proc.send_signal(signal.SIGTERM)
        notify.wait_for("STOPPING")
        self.assertEqual(proc.wait(timeout=15), 0)

    def test_a_stream_of_signals_delays_no_watchdog_ping(self):
        # SIGUSR1 (reopen the log, none here) every 50 ms, four times a watchdog period (200 ms):
        # each cuts the main thread's wait short, and the pings keep their times.
        notify = NotifySocket()
        self.addCleanup(notify.close)
        proc, server = self.start(notify, watchdog_usec=400000)
        self.assertEqual(request(server, "GET", "/small.txt").status, 200)
        notify.wait_for("READY")
        pings = []
        deadline = time.monotonic() + 1.5
        while time.monotonic() < deadline:
            proc.send_signal(signal.SIGUSR1)
            pings += [t for t, m in notify.read(0.05) if m.get("WATCHDOG") == "1"]
        self.assertGreaterEqual(len(pings), 4, notify.messages)
        self.assertIsNone(proc.poll())
        proc.send_signal(signal.SIGTERM)
        notify.wait_for("STOPPING")
        self.assertEqual(proc.wait(timeout=15), 0)

    def test_sockets_named_https_serve_tls(self):
        # What systemd passes for ringd.socket and ringd-https.socket (FileDescriptorName=https):
        # LISTEN_FDNAMES names each socket; those named https serve HTTPS, the rest plain HTTP,
        # and --listen-tls is not bound. Without a certificate, an https socket is one line.
        pki = tempfile.mkdtemp(prefix="ringd-pki-")
        self.addCleanup(shutil.rmtree, pki, True)
        make_pki(pki)
        listeners = listening_sockets(2)
        self.addCleanup(lambda: [l.close() for l in listeners])
        fds = [l.fileno() for l in listeners]
        base = passed_by_systemd(fds, ["ringd.socket", "https"]) + [
            RINGD, "--root", self.root, "--io", BACKEND, "--shards", "2"] + ROOT_FLAGS
        out = subprocess.run(base, pass_fds=fds, capture_output=True, text=True, timeout=10)
        self.assertEqual(out.returncode, 1, out.stderr)
        self.assertIn("systemd passed HTTPS sockets (FileDescriptorName=https) but there is no "
                      "certificate", out.stderr.strip().splitlines()[-1])
        # Only the https socket passed: --redirect-https has no plaintext listener to answer on
        # (the default --listen is not bound when sockets are passed).
        only_https = passed_by_systemd([fds[1]], ["https"]) + [
            RINGD, "--root", self.root, "--io", BACKEND, "--shards", "2"] + ROOT_FLAGS
        out = subprocess.run(only_https + ["--tls-cert", os.path.join(pki, "localhost-ec.crt"),
                                           "--tls-key", os.path.join(pki, "localhost-ec.key"),
                                           "--redirect-https"],
                             pass_fds=fds, capture_output=True, text=True, timeout=10)
        self.assertEqual(out.returncode, 2, out.stderr)
        self.assertEqual(out.stderr.strip().splitlines()[-1],
                         "ringd: --redirect-https needs --listen: there is no plaintext listener "
                         "to redirect from")
        proc = subprocess.Popen(
            base + ["--tls-cert", os.path.join(pki, "localhost-ec.crt"),
                    "--tls-key", os.path.join(pki, "localhost-ec.key"), "--redirect-https"],
            pass_fds=fds, stderr=subprocess.PIPE)
        self.addCleanup(lambda: proc.poll() is None and proc.kill())
        lines = StderrLines(proc)
        self.assertIn("(LISTEN_FDS, 1 named https)", lines.until("passed by systemd"))
        serving = lines.until("serving ")
        plain_port, tls_port = (l.getsockname()[1] for l in listeners)
        self.assertIn("https 127.0.0.1:%d" % tls_port, serving)
        for l in listeners:
            l.close()  # ringd holds them now
        ctx = ssl.create_default_context(cafile=os.path.join(pki, "ca.crt"))
        raw = socket.create_connection(("127.0.0.1", tls_port), timeout=10)
        with ctx.wrap_socket(raw, server_hostname="localhost") as s:
            s.sendall(b"GET /small.txt HTTP/1.1\r\nHost: localhost\r\n\r\n")
            r = Reader(s).read_response()
            self.assertEqual((r.status, r.body), (200, self.files["small.txt"]))
        # The plain socket redirects to the https socket's port.
        r = request(Remote(plain_port), "GET", "/small.txt", {"Host": "localhost"})
        self.assertEqual(r.status, 301)
        self.assertEqual(r.headers["location"], "https://localhost:%d/small.txt" % tls_port)
        proc.send_signal(signal.SIGTERM)
        self.assertEqual(proc.wait(timeout=15), 0)

    def test_a_passed_descriptor_that_is_not_a_listening_socket(self):
        # LISTEN_FDS=1 naming a datagram socket: one line, exit 1. (systemd-socket-activate
        # would wait for a datagram before starting ringd; the shell sets what it would.)
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as d:
            d.bind(("127.0.0.1", 0))
            out = subprocess.run(
                ["/bin/sh", "-c", 'exec 3<&%d; export LISTEN_PID=$$ LISTEN_FDS=1; exec "$@"' % d.fileno(),
                 "sh", RINGD, "--root", self.root, "--io", BACKEND] + ROOT_FLAGS,
                pass_fds=(d.fileno(),), capture_output=True, text=True, timeout=10)
        self.assertEqual(out.returncode, 1, out.stderr)
        self.assertEqual(out.stderr.strip().splitlines()[-1],
                         "ringd: LISTEN_FDS: descriptor 3 is not a listening stream socket "
                         "(the socket unit needs ListenStream=)")


class SignalsWhileStartingTest(BackendTestCase):
    """Signals that arrive while ringd starts wait until it serves: SIGHUP and SIGUSR1 are then
    a reload and a reopen, SIGQUIT a graceful stop, where their default actions would kill ringd
    or dump its core."""

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        cls.root, cls.files = make_docroot()
        cls.pki = tempfile.mkdtemp(prefix="ringd-pki-")
        make_pki(cls.pki)
        # A start-up that takes a while: a certificate followed by its CA 2,000 times over, each
        # read and parsed before ringd serves (about a millisecond each here).
        with open(os.path.join(cls.pki, "localhost-ec.crt")) as f:
            leaf = f.read()
        with open(os.path.join(cls.pki, "ca.crt")) as f:
            ca = f.read()
        cls.chain = os.path.join(cls.pki, "long-chain.crt")
        with open(cls.chain, "w") as f:
            f.write(leaf + ca * 2000)
        cls.chain_bytes = os.path.getsize(cls.chain)

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.root, ignore_errors=True)
        shutil.rmtree(cls.pki, ignore_errors=True)

    def start_reading_certificates(self):
        """A ringd that has begun to read the long chain (so its main() runs) and not served."""
        proc = subprocess.Popen(
            [RINGD, "--root", self.root, "--listen", "127.0.0.1:0", "--listen-tls", "127.0.0.1:0",
             "--tls-cert", self.chain, "--tls-key", os.path.join(self.pki, "localhost-ec.key"),
             "--shards", "2", "--io", BACKEND] + ROOT_FLAGS, stderr=subprocess.PIPE)
        self.addCleanup(lambda: proc.poll() is None and proc.kill())
        lines = StderrLines(proc)

        def bytes_read():
            with open("/proc/%d/io" % proc.pid) as f:
                return int(re.search(r"^rchar: (\d+)", f.read(), re.M).group(1))

        # The dynamic loader maps libraries rather than read them: a tenth of the chain read is
        # ringd reading it, with nine tenths to go.
        deadline = time.monotonic() + 30
        while bytes_read() < self.chain_bytes // 10:
            self.assertLess(time.monotonic(), deadline)
            self.assertIsNone(proc.poll(), lines.lines)
            time.sleep(0.001)
        self.assertFalse(lines.seen("serving "), "started before the signals: %r" % lines.lines)
        return proc, lines

    def test_reload_and_reopen_signals_wait_until_it_serves(self):
        proc, lines = self.start_reading_certificates()
        sent = 0
        while not lines.seen("serving ") and proc.poll() is None:
            proc.send_signal(signal.SIGHUP if sent % 2 == 0 else signal.SIGUSR1)
            sent += 1
            time.sleep(0.001)
        self.assertIsNone(proc.poll(), "killed after %d signals: %r" % (sent, lines.lines))
        self.assertGreater(sent, 10)
        port = int(re.search(r"serving .* on 127\.0\.0\.1:(\d+)", lines.until("serving ")).group(1))
        lines.until(r"SIGHUP: TLS certificates reloaded")  # the one pending, taken up
        r = request(Remote(port), "GET", "/small.txt")
        self.assertEqual((r.status, r.body), (200, self.files["small.txt"]))
        proc.send_signal(signal.SIGTERM)
        self.assertEqual(proc.wait(timeout=15), 0)

    def test_sigquit_while_starting_is_a_graceful_stop_once_it_serves(self):
        proc, lines = self.start_reading_certificates()
        proc.send_signal(signal.SIGQUIT)
        self.assertEqual(proc.wait(timeout=60), 0, lines.lines)
        lines.until("serving ")
        lines.until("SIGQUIT: finishing responses in flight")


if __name__ == "__main__":
    unittest.main()
