"""The access log, the error log, the admin listener and what reads them, against the real ringd
on one io backend: every line in nginx's combined format (GoAccess parses them all), JSON lines,
rotation under load with SIGUSR1 losing nothing that was not counted, a stuck log that drops and
counts instead of stalling, the error log's line for each cause with its rate limit and reopen,
/metrics through `promtool check metrics` and a real Prometheus server, /healthz and /readyz
through a drain, /debug/shards, and one-line start-up errors."""
import http.client
import json
import os
import re
import shutil
import signal
import socket
import struct
import subprocess
import tempfile
import threading
import time
import unittest
import urllib.request

from ringd_harness import (RINGD, ROOT_FLAGS, BACKEND, BackendTestCase, Reader, Server, admin_get,
                           listening_ports, make_docroot, metric_sum, request, wait_for)

# nginx's combined format: $remote_addr - $remote_user [$time_local] "$request" $status
# $body_bytes_sent "$http_referer" "$http_user_agent"
COMBINED = re.compile(r'^(\S+) - - \[(\d{2}/[A-Z][a-z]{2}/\d{4}:\d{2}:\d{2}:\d{2} [+-]\d{4})\] '
                      r'"((?:[^"\\]|\\x[0-9A-F]{2})*)" (\d{3}) (\d+) "((?:[^"\\]|\\x[0-9A-F]{2})*)" '
                      r'"((?:[^"\\]|\\x[0-9A-F]{2})*)"$')


# The bypass tier's connections are direct descriptors with no process fd, so getpeername(2)
# cannot name the client: its lines say "-" (a known gap, docs/OPERATIONS.md). Every other tier
# logs the address.
REMOTE_ADDR = "-" if BACKEND == "bypass" else "127.0.0.1"


def require_binary(binary, package):
    """The path of `binary`; a skip only where Debian has no `package` for this machine, a
    failure where tools/setup should have installed it."""
    path = shutil.which(binary, path=os.environ.get("PATH", "") + ":/usr/sbin:/sbin")
    if path:
        return path
    try:
        policy = subprocess.run(["apt-cache", "policy", package], capture_output=True, text=True,
                                timeout=30).stdout
    except (OSError, subprocess.TimeoutExpired):
        policy = ""
    if "Candidate:" not in policy or "Candidate: (none)" in policy:
        raise unittest.SkipTest("%s: Debian package %s does not exist for this platform" % (binary, package))
    raise AssertionError("%s is missing but package %s exists: run tools/setup" % (binary, package))


def admin_port(server):
    for line in server.log:
        m = re.search(r"admin listener on 127\.0\.0\.1:(\d+)", line)
        if m:
            return int(m.group(1))
    raise AssertionError("no admin listener line in %s" % server.log)


class KeepAliveLoad:
    """Threads sending keep-alive GETs until stopped; counts the responses each received."""

    def __init__(self, server, connections=4, paths=("/small.txt", "/index.html", "/missing")):
        self.server = server
        self.paths = paths
        self.stop_flag = threading.Event()
        self.counts = [0] * connections
        self.errors = []
        self.threads = [threading.Thread(target=self._run, args=(i,)) for i in range(connections)]
        for t in self.threads:
            t.start()

    def _run(self, i):
        n = 0
        s = None
        try:
            while not self.stop_flag.is_set():
                if s is None:
                    s = self.server.connect()
                    r = Reader(s)
                path = self.paths[n % len(self.paths)]
                s.sendall(b"GET %s HTTP/1.1\r\nHost: t\r\nUser-Agent: load/%d\r\n\r\n" % (path.encode(), i))
                resp = r.read_response()
                n += 1
                self.counts[i] = n
                if resp.header("connection") == "close":  # --max-requests-per-connection
                    s.close()
                    s = None
        except Exception as e:  # reported by stop()
            self.errors.append(repr(e))
        finally:
            if s is not None:
                s.close()

    def stop(self):
        self.stop_flag.set()
        for t in self.threads:
            t.join(30)
        if self.errors:
            raise AssertionError("load failed: %s" % self.errors)
        return sum(self.counts)


def count_lines(*paths):
    n = 0
    for p in paths:
        if os.path.exists(p):
            with open(p, "rb") as f:
                n += f.read().count(b"\n")
    return n


class ObservabilityTest(BackendTestCase):
    def setUp(self):
        self.root, self.files = make_docroot()
        self.tmp = tempfile.mkdtemp(prefix="ringd-obs-")
        self.log = os.path.join(self.tmp, "access.log")
        self.servers = []

    def tearDown(self):
        for s in self.servers:
            if s.proc.poll() is None:
                s.proc.kill()
                s.proc.wait()
        shutil.rmtree(self.root, ignore_errors=True)
        shutil.rmtree(self.tmp, ignore_errors=True)

    def start(self, *flags):
        s = Server(self.root, *flags)
        self.servers.append(s)
        return s

    # --- the access log ---------------------------------------------------------------------

    def make_mixed_requests(self, server):
        """Requests of every kind; returns [(method, target, status, body bytes)]."""
        made = []

        def one(method, target, headers=None, expect=None):
            r = request(server, method, target, headers)
            if expect is not None:
                self.assertEqual(r.status, expect, target)
            made.append((method, target, r.status, len(r.body)))
            return r

        one("GET", "/index.html", {"User-Agent": 'Mozilla/5.0 (X11; "quoted")', "Referer": "http://example.com/a"}, 200)
        one("GET", "/small.txt", None, 200)
        one("GET", "/medium.bin", None, 200)
        one("GET", "/large.bin", {"Range": "bytes=0-99"}, 206)
        one("HEAD", "/large.bin", None, 200)
        one("GET", "/missing", None, 404)
        one("GET", "/dir", None, 301)
        one("GET", "/app.js", {"Accept-Encoding": "gzip"}, 200)
        etag = one("GET", "/small.txt").header("etag")
        one("GET", "/small.txt", {"If-None-Match": etag}, 304)
        one("GET", "/%C3%A9t%C3%A9?q=a%22b", None, 404)
        one("DELETE", "/index.html", None, 405)
        for _ in range(20):
            one("GET", "/index.html", {"User-Agent": "curl/7.88.1"}, 200)
        return made

    def test_combined_log_is_nginx_combined_and_goaccess_counts_every_request(self):
        goaccess = require_binary("goaccess", "goaccess")
        server = self.start("--access-log", self.log)
        made = self.make_mixed_requests(server)
        # A request the parser rejects is logged too, with the line as sent.
        with server.connect() as s:
            s.sendall(b"BAD\x01REQUEST / HTTP/1.1\r\nHost: t\r\n\r\n")
            self.assertEqual(Reader(s).read_response().status, 400)
        made.append(("BAD\x01REQUEST", "/", 400, None))
        self.assertEqual(server.stop(), 0)  # the writer flushes everything before exit
        with open(self.log, "rb") as f:
            lines = f.read().decode("ascii").splitlines()
        self.assertEqual(len(lines), len(made), "\n".join(lines))
        # Each shard's lines are in order; the two shards' batches interleave in the file.
        logged = []
        for line in lines:
            m = COMBINED.match(line)
            self.assertIsNotNone(m, line)
            addr, when, req, st, sent, referer, agent = m.groups()
            self.assertEqual(addr, REMOTE_ADDR)
            logged.append((req, int(st), int(sent)))
        expected = [(("%s %s HTTP/1.1" % (method, target)).replace("\x01", "\\x01"), status,
                     0 if method == "HEAD" else body) for method, target, status, body in made]
        self.assertEqual(sorted(x[:2] for x in logged), sorted(x[:2] for x in expected))
        self.assertEqual(sorted(x for x in logged if x[1] != 400),
                         sorted(x for x in expected if x[1] != 400))
        self.assertIn(REMOTE_ADDR + ' - - [', lines[0])
        self.assertTrue(any(l.endswith('"GET /index.html HTTP/1.1" 200 611 "http://example.com/a" '
                                       '"Mozilla/5.0 (X11; \\x22quoted\\x22)"') for l in lines), lines)
        self.assertTrue(any(l.endswith('"HEAD /large.bin HTTP/1.1" 200 0 "-" "-"') for l in lines), lines)
        self.assertTrue(any(re.search(r'"BAD\\x01REQUEST / HTTP/1.1" 400 \d+ "-" "-"$', l)
                            for l in lines), lines)
        # GoAccess with the stock COMBINED format parses every line and counts every request.
        if REMOTE_ADDR == "-":
            self.skipTest("bypass tier: no client address to log (a direct descriptor has no fd "
                          "for getpeername), and GoAccess rejects a line without one")
        report = os.path.join(self.tmp, "report.json")
        env = dict(os.environ, HOME=self.tmp)
        out = subprocess.run([goaccess, self.log, "--log-format=COMBINED", "--no-global-config",
                              "-o", report], capture_output=True, text=True, timeout=60, env=env)
        self.assertEqual(out.returncode, 0, out.stdout + out.stderr)
        with open(report) as f:
            general = json.load(f)["general"]
        self.assertEqual(general["total_requests"], len(made), general)
        self.assertEqual(general["valid_requests"], len(made), general)
        self.assertEqual(general["failed_requests"], 0, general)

    def test_json_log_has_the_fields_and_more(self):
        server = self.start("--access-log", self.log, "--access-log-format", "json")
        made = self.make_mixed_requests(server)
        self.assertEqual(server.stop(), 0)
        with open(self.log, "rb") as f:
            raw = f.read()
        records = [json.loads(l) for l in raw.decode("utf-8").splitlines()]
        self.assertEqual(len(records), len(made))
        # Each shard's lines are in order; the two shards' batches interleave in the file.
        key = lambda r: (r["request"], r["status"], r["body_bytes_sent"], r["http_user_agent"])
        records.sort(key=key)
        made.sort(key=lambda m: ("%s %s HTTP/1.1" % (m[0], m[1]), m[2], 0 if m[0] == "HEAD" else m[3]))
        shards = set()
        for rec, (method, target, status, body) in zip(records, made):
            self.assertEqual(rec["request"], "%s %s HTTP/1.1" % (method, target))
            self.assertEqual(rec["status"], status)
            self.assertEqual(rec["remote_addr"], REMOTE_ADDR)
            self.assertEqual(rec["io"], BACKEND if BACKEND != "auto" else rec["io"])
            self.assertIn(rec["shard"], (0, 1))
            shards.add(rec["shard"])
            self.assertGreaterEqual(rec["bytes_sent"], rec["body_bytes_sent"])
            self.assertGreaterEqual(rec["request_time_us"], 0)
            self.assertRegex(rec["time"], r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}[+-]\d{2}:\d{2}$")
            if method != "HEAD":
                self.assertEqual(rec["body_bytes_sent"], body)
        first = [r for r in records if r["http_referer"]]
        self.assertEqual(len(first), 1)
        self.assertEqual(first[0]["http_user_agent"], 'Mozilla/5.0 (X11; "quoted")')
        self.assertEqual(first[0]["http_referer"], "http://example.com/a")
        self.assertEqual(first[0]["request"], "GET /index.html HTTP/1.1")

    def test_rotation_under_load_loses_nothing_uncounted(self):
        server = self.start("--access-log", self.log, "--admin-listen", "127.0.0.1:0")
        port = admin_port(server)
        load = KeepAliveLoad(server)
        rotated = []
        # Each file gets lines written under load before it is rotated (the writer flushes every
        # 100 ms, and reopens after SIGUSR1 at its next flush): states, not times.
        for i in (1, 2):
            wait_for(lambda: count_lines(self.log) >= 150, "150 lines in the log before rotation %d" % i)
            dest = "%s.%d" % (self.log, i)
            os.rename(self.log, dest)  # logrotate's default: rename, then signal
            rotated.append(dest)
            server.proc.send_signal(signal.SIGUSR1)
        wait_for(lambda: count_lines(self.log) >= 150, "150 lines in the reopened log")
        made = load.stop()
        status, text = admin_get(port, "/metrics")
        self.assertEqual(status, 200)
        dropped = metric_sum(text, "ringd_access_log_dropped_lines_total")
        queued = metric_sum(text, "ringd_access_log_lines_total")
        self.assertEqual(server.stop(), 0)
        self.assertGreater(made, 300)
        self.assertEqual(queued + dropped, made)
        for path in rotated + [self.log]:
            self.assertGreater(count_lines(path), 0, "%s is empty: no rotation happened" % path)
        self.assertEqual(count_lines(self.log, *rotated) + dropped, made)
        for path in rotated + [self.log]:
            with open(path) as f:
                for line in f:
                    self.assertRegex(line.rstrip("\n"), COMBINED)

    def test_a_log_that_cannot_keep_up_drops_and_counts_but_never_stalls_serving(self):
        # A FIFO that nobody reads stands in for a disk that stopped: the writer blocks in write(2).
        fifo = os.path.join(self.tmp, "fifo")
        os.mkfifo(fifo)
        reader = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)
        try:
            server = self.start("--access-log", fifo, "--access-log-buffer-bytes", "65536",
                                "--admin-listen", "127.0.0.1:0")
            port = admin_port(server)
            load = KeepAliveLoad(server, connections=2)
            wait_for(lambda: metric_sum(admin_get(port, "/metrics")[1],
                                        "ringd_access_log_dropped_lines_total"),
                     "a line dropped", timeout=20)
            made = load.stop()  # every request was answered while the log was stuck
            text = admin_get(port, "/metrics")[1]
            dropped = metric_sum(text, "ringd_access_log_dropped_lines_total")
            # Now drain the FIFO; stopping flushes what is still queued.
            os.set_blocking(reader, True)
            got = bytearray()
            done = threading.Event()

            def drain():
                while True:
                    chunk = os.read(reader, 1 << 16)
                    if not chunk:
                        break
                    got.extend(chunk)
                done.set()

            t = threading.Thread(target=drain)
            t.start()
            self.assertEqual(server.stop(), 0)
            t.join(30)
            self.assertTrue(done.is_set())
            self.assertEqual(got.count(b"\n") + dropped, made)
            # One line on stderr says so (at most one a minute while it lasts).
            notes = [l for l in server.log if "lines dropped" in l]
            self.assertEqual(len(notes), 1, server.log)
        finally:
            os.close(reader)

    def test_the_shipped_logrotate_snippet_rotates_without_losing_a_line(self):
        logrotate = require_binary("logrotate", "logrotate")
        server = self.start("--access-log", self.log)
        for _ in range(10):
            self.assertEqual(request(server, "GET", "/small.txt").status, 200)
        # The writer flushes every 100 ms (notifempty skips an empty log).
        wait_for(lambda: count_lines(self.log) >= 10, "the 10 lines flushed")
        snippet = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "deploy",
                               "logrotate", "ringd")
        with open(snippet) as f:
            conf = f.read()
        self.assertIn("/var/log/ringd/access.log {", conf)
        self.assertIn("$(pidof ringd)", conf)
        # This server only: other ringd processes on the machine are none of this test's business.
        conf = conf.replace("/var/log/ringd/access.log", self.log).replace(
            "$(pidof ringd)", "%d" % server.proc.pid)
        conf_path = os.path.join(self.tmp, "logrotate.conf")
        with open(conf_path, "w") as f:
            f.write(conf)
        out = subprocess.run([logrotate, "--force", "--state", os.path.join(self.tmp, "state"), conf_path],
                             capture_output=True, text=True, timeout=30)
        self.assertEqual(out.returncode, 0, out.stdout + out.stderr)
        self.assertTrue(os.path.exists(self.log + ".1"), os.listdir(self.tmp))
        # The writer reopens after its next flush (a request gives it one).
        wait_for(lambda: request(server, "GET", "/index.html") and os.path.exists(self.log),
                 "the log reopened")
        for _ in range(10):
            self.assertEqual(request(server, "GET", "/index.html").status, 200)
        self.assertEqual(server.stop(), 0)
        with open(self.log + ".1") as f:
            old = f.read()
        with open(self.log) as f:
            new = f.read()
        self.assertEqual(old.count('"GET /small.txt HTTP/1.1" 200'), 10)
        self.assertEqual(new.count('"GET /small.txt'), 0)
        self.assertGreaterEqual(new.count('"GET /index.html HTTP/1.1" 200'), 10)
        self.assertEqual((old + new).count("\n"), 10 + (old + new).count("/index.html"))

    # --- the admin listener -----------------------------------------------------------------

    def test_metrics_pass_promtool_and_count_what_was_served(self):
        promtool = require_binary("promtool", "prometheus")
        server = self.start("--admin-listen", "127.0.0.1:0")
        port = admin_port(server)
        made = self.make_mixed_requests(server)
        idle = server.connect()  # one idle keep-alive connection, held open
        idle.sendall(b"GET /small.txt HTTP/1.1\r\nHost: t\r\n\r\n")
        Reader(idle).read_response()
        # The server notices the clients' closes asynchronously: wait until only `idle` is open.
        def only_idle_open():
            status, text = admin_get(port, "/metrics")
            self.assertEqual(status, 200)
            return text if metric_sum(text, "ringd_connections_open") == 1 else None
        text = wait_for(only_idle_open, "only the idle connection open", timeout=5)
        check = subprocess.run([promtool, "check", "metrics"], input=text, capture_output=True,
                               text=True, timeout=60)
        self.assertEqual(check.returncode, 0, check.stdout + check.stderr)
        self.assertEqual(check.stdout + check.stderr, "")  # not even a lint warning
        self.assertEqual(metric_sum(text, "ringd_requests_total"), len(made) + 1)
        self.assertEqual(metric_sum(text, "ringd_requests_total", code="2xx", body="cached"), 25)
        self.assertEqual(metric_sum(text, "ringd_requests_total", code="4xx", body="inline"), 3)
        self.assertEqual(metric_sum(text, "ringd_requests_total", code="3xx"), 2)
        self.assertGreaterEqual(metric_sum(text, "ringd_requests_total", code="2xx", body="file"), 2)
        self.assertEqual(metric_sum(text, "ringd_request_duration_seconds_count"), len(made) + 1)
        self.assertEqual(metric_sum(text, "ringd_connections_open"), 1)
        self.assertEqual(metric_sum(text, "ringd_connections_idle"), 1)
        self.assertEqual(metric_sum(text, "ringd_connections_accepted_total"), len(made) + 1)
        self.assertGreater(metric_sum(text, "ringd_response_bytes_total"), 100 * 1024)
        # File bodies (medium.bin and up) went out by sendfile or splice: the bypass tier
        # sendfiles cached pages on an fd installed for the socket where the kernel can install
        # one (ringd --probe: fd install), and splices everything otherwise; epoll never splices.
        body_bytes = (metric_sum(text, "ringd_body_sendfile_bytes_total") +
                      metric_sum(text, "ringd_body_splice_bytes_total"))
        self.assertGreaterEqual(body_bytes, 100 * 1024)
        if BACKEND == "bypass":
            probe = subprocess.run([RINGD, "--probe"], capture_output=True, text=True,
                                   timeout=10).stdout
            sendfile_bytes = metric_sum(text, "ringd_body_sendfile_bytes_total")
            if "fd install: ok" in probe:
                self.assertGreater(sendfile_bytes, 0)
            else:
                self.assertEqual(sendfile_bytes, 0)
        if BACKEND == "epoll":
            self.assertEqual(metric_sum(text, "ringd_body_splice_bytes_total"), 0)
        self.assertGreater(metric_sum(text, "ringd_file_cache_hits_total"), 0)
        self.assertEqual(metric_sum(text, "ringd_shard_up"), 2)
        self.assertEqual(metric_sum(text, "ringd_info", backend=BACKEND if BACKEND != "auto" else "epoll"), 1)
        idle.close()
        # The same numbers as JSON, per shard.
        status, body = admin_get(port, "/debug/shards")
        self.assertEqual(status, 200)
        debug = json.loads(body)
        self.assertEqual(len(debug["shards"]), 2)
        self.assertEqual(sum(s["requests"] for s in debug["shards"]), len(made) + 1)
        for s in debug["shards"]:
            self.assertTrue(s["up"])
            self.assertEqual(set(s["connections"]), {"reading", "waiting_file", "sending", "ending_recv",
                                                     "lingering", "closing", "h2", "idle", "open"})
            self.assertEqual(set(s["pools"]), {"connections", "exchanges", "input_buffers",
                                               "content_buffers", "pipes", "listings"})
            self.assertEqual(s["pools"]["listings"], {"in_use": 0, "capacity": 0})  # no --autoindex
            self.assertGreater(s["pools"]["connections"]["capacity"], 0)
        self.assertGreater(sum(s["cache_entries"] for s in debug["shards"]), 0)
        # Anything else is 404, and the admin port serves no files.
        self.assertEqual(admin_get(port, "/index.html")[0], 404)
        self.assertEqual(server.stop(), 0)

    def test_idle_input_buffers_and_exchanges_go_back_to_the_kernel(self):
        # A head that comes in two pieces is kept in an input buffer until it is whole; once
        # answered, the buffer is free, and a second later unused its pages go back.
        server = self.start("--admin-listen", "127.0.0.1:0")
        released = lambda: server.metric("ringd_pool_released_total", kind="input_buffers")
        exchanges = lambda: server.metric("ringd_pool_released_total", kind="exchanges")
        before = released()
        heads = []
        for i in range(4):
            s = socket.create_connection(("127.0.0.1", server.port))
            s.sendall(b"GET /small.txt HTTP/1.1\r\nHost: a\r\n")
            heads.append(s)
        held = lambda: sum(s["pools"]["input_buffers"]["in_use"]
                           for s in server.debug_shards()["shards"])
        wait_for(lambda: held() == 4, "four half heads held in input buffers")
        for s in heads:
            s.sendall(b"\r\n")
            self.assertIn(b" 200 ", s.recv(65536))
        wait_for(lambda: held() == 0, "the input buffers free again")
        wait_for(lambda: released() >= before + 4, "the four input buffers released")
        # Answered one after another, the requests took turns with an exchange or two.
        wait_for(lambda: exchanges() >= 1, "an exchange released")
        # The connections serve on: a released buffer is taken again, zeroed, for the next head.
        for s in heads:
            s.sendall(b"GET /small.txt HTTP/1.1\r\nHost: a\r\n")
        wait_for(lambda: held() == 4, "four half heads held again")
        for s in heads:
            s.sendall(b"\r\n")
            reply = s.recv(65536)
            self.assertIn(b" 200 ", reply)
            self.assertTrue(reply.endswith(self.files["small.txt"]))
            s.close()
        self.assertEqual(server.stop(), 0)

    def test_the_stop_line_counts_requests_as_ringd_requests_total_does(self):
        server = self.start("--admin-listen", "127.0.0.1:0")
        port = admin_port(server)
        for _ in range(3):
            self.assertEqual(request(server, "GET", "/index.html").status, 200)
        bad = server.connect()  # unparseable: answered 400, and counted as a request
        bad.sendall(b"GET /index.html HTTP/1.1\r\nBad Header\r\n\r\n")
        self.assertEqual(Reader(bad).read_response().status, 400)
        bad.close()
        text = wait_for(lambda: (lambda t: t if metric_sum(t, "ringd_requests_total") == 4 else None)(
            admin_get(port, "/metrics")[1]), "four requests counted", timeout=5)
        self.assertEqual(metric_sum(text, "ringd_requests_total", code="4xx"), 1)
        self.assertEqual(server.stop(), 0)
        stopped = [l for l in server.log if "stopped after" in l]
        self.assertEqual(len(stopped), 1, server.log)
        self.assertRegex(stopped[0], r" 4 requests$")

    def test_readyz_turns_503_when_the_drain_begins_while_healthz_stays_200(self):
        server = self.start("--admin-listen", "127.0.0.1:0", "--shutdown-timeout-ms", "5000")
        port = admin_port(server)
        self.assertEqual(admin_get(port, "/healthz"), (200, "ok\n"))
        self.assertEqual(admin_get(port, "/readyz"), (200, "ready\n"))
        # A response in flight that the client does not read keeps the drain going.
        slow = server.connect()
        slow.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        slow.sendall(b"GET /large.bin HTTP/1.1\r\nHost: t\r\n\r\n")
        slow.recv(100)
        server.proc.send_signal(signal.SIGTERM)
        got = wait_for(lambda: (lambda r: r if r[0] == 503 else None)(admin_get(port, "/readyz")),
                       "/readyz to answer 503", timeout=3)
        self.assertEqual(got, (503, "draining\n"))
        self.assertEqual(admin_get(port, "/healthz"), (200, "ok\n"))  # it still serves
        self.assertEqual(metric_sum(admin_get(port, "/metrics")[1], "ringd_draining"), 1)
        self.assertIsNone(server.proc.poll())
        slow.close()
        self.assertEqual(server.stop(), 0)

    def test_silent_admin_connections_delay_no_health_check(self):
        # HAProxy's check in deploy/ gives /readyz 2 s; connections that say nothing must not
        # queue it behind their own 2 s each.
        server = self.start("--admin-listen", "127.0.0.1:0")
        port = admin_port(server)
        silent = [socket.create_connection(("127.0.0.1", port)) for _ in range(5)]
        try:
            start = time.monotonic()
            self.assertEqual(admin_get(port, "/readyz", timeout=15), (200, "ready\n"))
            self.assertLess(time.monotonic() - start, 1.0)
        finally:
            for s in silent:
                s.close()
        self.assertEqual(server.stop(), 0)

    def test_a_real_prometheus_scrapes_ringd_requests_total(self):
        prometheus = require_binary("prometheus", "prometheus")
        server = self.start("--admin-listen", "127.0.0.1:0")
        port = admin_port(server)
        made = self.make_mixed_requests(server)
        data = os.path.join(self.tmp, "prometheus-data")
        config = os.path.join(self.tmp, "prometheus.yml")
        with open(config, "w") as f:
            f.write("global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\n"
                    "scrape_configs:\n  - job_name: ringd\n    static_configs:\n"
                    "      - targets: ['127.0.0.1:%d']\n" % port)
        prom_log = open(os.path.join(self.tmp, "prometheus.log"), "w")
        prom = subprocess.Popen([prometheus, "--config.file", config, "--storage.tsdb.path", data,
                                 "--web.listen-address", "127.0.0.1:0"],
                                stdout=prom_log, stderr=subprocess.STDOUT)
        try:
            # Port 0, and the port it got read back from the kernel: no guess to lose a race.
            web = wait_for(lambda: prom.poll() is not None or listening_ports(prom.pid),
                           "Prometheus to listen", timeout=30)
            self.assertIsNone(prom.poll(), "Prometheus exited")
            (web,) = web
            query = "http://127.0.0.1:%d/api/v1/query?query=sum(ringd_requests_total)" % web
            deadline = time.time() + 60
            value = None
            while time.time() < deadline and value != len(made):
                time.sleep(0.5)
                try:
                    with urllib.request.urlopen(query, timeout=5) as r:
                        result = json.load(r)["data"]["result"]
                except (OSError, ValueError):
                    continue
                if result:
                    value = float(result[0]["value"][1])
            if value != len(made):
                with open(os.path.join(self.tmp, "prometheus.log")) as f:
                    self.fail("Prometheus saw %s, not %d; its log:\n%s" % (value, len(made), f.read()[-3000:]))
            with urllib.request.urlopen("http://127.0.0.1:%d/api/v1/targets" % web, timeout=5) as r:
                targets = json.load(r)["data"]["activeTargets"]
            self.assertEqual([t["health"] for t in targets], ["up"])
        finally:
            prom.terminate()
            try:
                prom.wait(timeout=20)
            except subprocess.TimeoutExpired:
                prom.kill()
                prom.wait()
            prom_log.close()
        self.assertEqual(server.stop(), 0)

    # --- start-up errors --------------------------------------------------------------------

    def run_ringd(self, *flags):
        return subprocess.run([RINGD, "--root", self.root, "--listen", "127.0.0.1:0", "--io", BACKEND]
                              + ROOT_FLAGS + list(flags), capture_output=True, text=True, timeout=20)

    def test_an_admin_port_in_use_is_one_line_and_a_non_zero_exit(self):
        with socket.socket() as busy:
            busy.bind(("127.0.0.1", 0))
            busy.listen()
            port = busy.getsockname()[1]
            out = self.run_ringd("--admin-listen", "127.0.0.1:%d" % port)
        self.assertEqual(out.returncode, 1)
        errors = [l for l in out.stderr.splitlines() if "admin" in l]
        self.assertEqual(errors, ["ringd: --admin-listen: cannot listen on 127.0.0.1:%d: Address already in use" % port])

    # --- the error log ----------------------------------------------------------------------

    def error_causes(self):
        """Files that make each cause: one only root may read and a directory without an index
        (make_docroot's `escape` is the symlink leaving the root)."""
        with open(os.path.join(self.root, "root-only.txt"), "wb") as f:
            f.write(b"secret")
        os.chmod(os.path.join(self.root, "root-only.txt"), 0o600)
        os.mkdir(os.path.join(self.root, "no-index"))
        os.chmod(os.path.join(self.root, "no-index"), 0o755)

    def error_lines(self, path):
        with open(path, "rb") as f:
            return f.read().decode("ascii").splitlines()

    def test_error_log_says_why_each_error_happened(self):
        if os.geteuid() != 0:
            self.skipTest("a file only root may read needs root to make; the tests run as uid %d"
                          % os.geteuid())
        self.error_causes()
        path = os.path.join(self.tmp, "error.log")
        # Served as nobody, so that root's file is refused; opened as root at start-up.
        server = self.start("--error-log", path, "--error-log-level", "info", "--user", "nobody")
        for target, status in (("/root-only.txt", 403), ("/no-index/", 403), ("/missing-file", 404),
                               ("/escape", 404), ("/index.html", 200)):
            self.assertEqual(request(server, "GET", target).status, status, target)
        self.assertEqual(server.stop(), 0)  # the writer writes out every queued line
        lines = self.error_lines(path)
        self.assertEqual(len(lines), 4, lines)
        head = r'^\d{4}/\d{2}/\d{2} \d{2}:\d{2}:\d{2} \[%s\] shard [01]: '
        tail = r', client: %s, request: "GET %s HTTP/1.1"$'
        expected = [
            ("error", r'"root-only.txt" failed \(13: Permission denied\): permission denied, '
                      r'status 403', "/root-only.txt"),
            ("error", r'"no-index/index.html" failed \(2: No such file or directory\): directory '
                      r'without an index, status 403', "/no-index/"),
            ("info", r'"missing-file" failed \(2: No such file or directory\): no such file, '
                     r'status 404', "/missing-file"),
            # openat2's RESOLVE_BENEATH refuses it on every tier.
            ("info", r'"escape" failed \(18: Invalid cross-device link, a symlink leaving the '
                     r'root\): no such file, status 404', "/escape"),
        ]
        for level, cause, target in expected:
            pattern = (head % level) + cause + (tail % (re.escape(REMOTE_ADDR), re.escape(target)))
            self.assertTrue(any(re.match(pattern, l) for l in lines), "%s\n%s" % (pattern, lines))

    def test_error_log_says_when_a_client_resets_at_info(self):
        path = os.path.join(self.tmp, "error.log")
        server = self.start("--error-log", path, "--error-log-level", "info")
        with server.connect() as s:
            s.sendall(b"GET /small.txt HTTP/1.1\r\nHost: t\r\n\r\n")
            self.assertEqual(Reader(s).read_response().status, 200)
            # An RST rather than a FIN: the server's next receive fails.
            s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        wait_for(lambda: count_lines(path) == 1, "the reset's line")
        self.assertEqual(server.stop(), 0)
        line = self.error_lines(path)[0]
        self.assertRegex(line, r"\[info\] shard [01]: recv\(\) failed \(104: Connection reset by "
                               r"peer\), client: %s$" % re.escape(REMOTE_ADDR))

    def test_error_log_goes_to_stderr_at_level_error_by_default(self):
        self.error_causes()
        server = self.start()
        self.assertEqual(request(server, "GET", "/missing-file").status, 404)  # info: not written
        self.assertEqual(request(server, "GET", "/no-index/").status, 403)
        # At level error the client is asked of the socket when the line is written.
        wait_for(lambda: server.logged("directory without an index, status 403, client: %s, "
                                       'request: "GET /no-index/ HTTP/1.1"' % REMOTE_ADDR),
                 "the 403's line on stderr")
        self.assertFalse(server.logged("missing-file"), server.log)
        self.assertEqual(server.stop(), 0)

    def test_error_log_rate_limits_a_burst_and_says_what_it_suppressed(self):
        path = os.path.join(self.tmp, "error.log")
        server = self.start("--error-log", path, "--error-log-level", "info")
        started = time.monotonic()
        conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=10)
        # 999 and then one more on the same connection: ringd closes a connection after 1,000
        # requests, as nginx's keepalive_requests.
        for _ in range(999):
            conn.request("GET", "/not-there")
            r = conn.getresponse()
            r.read()
            self.assertEqual(r.status, 404)
        seconds = time.monotonic() - started
        # The cause's next line, in a later second, first says how many were suppressed.
        time.sleep(1.1)
        conn.request("GET", "/not-there")
        conn.getresponse().read()
        conn.close()
        self.assertEqual(server.stop(), 0)
        lines = self.error_lines(path)
        written = [l for l in lines if '"not-there" failed' in l]
        suppressed = [int(m.group(1)) for m in
                      (re.search(r"\[info\] shard [01]: no such file: (\d+) more lines suppressed "
                                 r"\(at most 10 a second per cause\)$", l) for l in lines) if m]
        # One connection, one shard: at most 10 lines for each second the burst touched.
        self.assertLessEqual(len(written), 10 * (int(seconds) + 2) + 1, lines)
        self.assertGreaterEqual(len(suppressed), 1, lines)
        self.assertEqual(len(written) + sum(suppressed), 1000, lines)

    def test_error_log_is_reopened_on_sigusr1(self):
        self.error_causes()
        path = os.path.join(self.tmp, "error.log")
        server = self.start("--error-log", path, "--access-log", self.log)
        self.assertEqual(request(server, "GET", "/no-index/").status, 403)
        wait_for(lambda: count_lines(path) == 1, "the first line in the error log")
        os.rename(path, path + ".1")
        server.proc.send_signal(signal.SIGUSR1)
        wait_for(lambda: os.path.exists(path), "the error log reopened")
        self.assertEqual(request(server, "GET", "/no-index/").status, 403)
        self.assertEqual(server.stop(), 0)
        self.assertEqual(count_lines(path + ".1"), 1)
        lines = self.error_lines(path)
        self.assertEqual(len(lines), 1, lines)
        self.assertIn("directory without an index, status 403", lines[0])

    def test_a_bad_access_log_path_is_one_line_and_a_non_zero_exit(self):
        out = self.run_ringd("--access-log", os.path.join(self.tmp, "no/such/dir/access.log"))
        self.assertEqual(out.returncode, 1)
        self.assertIn("ringd: --access-log: cannot open '%s/no/such/dir/access.log' for appending: "
                      "No such file or directory" % self.tmp, out.stderr.splitlines())


if __name__ == "__main__":
    unittest.main()
