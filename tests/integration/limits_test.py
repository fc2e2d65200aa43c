"""Bursts, limits, timeouts and drains on the real ringd binary, on one io backend (RINGD_IO).

Each test here checks that ringd, at a limit, drops no input silently, does not spin, and lets go
of the connections it should.
"""
import os
import resource
import shutil
import signal
import socket
import time
import unittest

from ringd_harness import (ADMIN, BACKEND, BackendTestCase, DocrootTestCase, Reader, Server,
                           make_docroot, raw, request, sends_stalled, server_has_read, wait_for)


def get(name, extra=b""):
    return b"GET /" + name.encode() + b" HTTP/1.1\r\nHost: t\r\n" + extra + b"\r\n"


def closed_by_server(sock):
    """Whether the server has ended this connection (end of stream or a reset is waiting),
    without waiting; the socket must have nothing else unread."""
    sock.setblocking(False)
    try:
        return sock.recv(1) == b""
    except BlockingIOError:
        return False
    except ConnectionResetError:
        return True


class BurstTest(BackendTestCase):
    """More input at once than one input buffer holds: every request answered, in order."""

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        cls.root, cls.files = make_docroot()
        cls.server = Server(cls.root)

    @classmethod
    def tearDownClass(cls):
        rc = cls.server.stop()
        shutil.rmtree(cls.root, ignore_errors=True)
        assert rc == 0, "ringd exited %s: %s" % (rc, "\n".join(cls.server.log))

    def read_all(self, sock, names):
        reader = Reader(sock)
        for i, n in enumerate(names):
            r = reader.read_response()
            self.assertEqual(r.status, 200, "response %d (%s)" % (i, n))
            self.assertEqual(r.body, self.files[n], "response %d (%s)" % (i, n))
        return reader

    def test_900_pipelined_requests_in_one_write(self):
        # 36 KB of requests, several times what one receive delivers and more than an input
        # buffer holds; the first ones wait for file lookups while the rest arrive.
        names = ["small.txt", "index.html", "app.js", "medium.bin"] * 225
        with self.server.connect() as s:
            s.sendall(b"".join(get(n) for n in names))
            self.read_all(s, names)

    def test_uncached_files_pipelined_behind_a_slow_reader(self):
        # Each response is large, so the receive pauses while they go out; the client reads
        # nothing until every request is written.
        names = ["medium.bin"] * 200
        with self.server.connect() as s:
            s.sendall(b"".join(get(n) for n in names))
            self.read_all(s, names)

    def test_body_in_the_same_write_is_skipped(self):
        # The first file is not cached yet: the body arrives while its lookup is under way.
        body = b"b" * 30000  # below --max-discarded-body: read and dropped
        head = b"GET /nodir/file.txt HTTP/1.1\r\nHost: t\r\nContent-Length: 30000\r\n\r\n"
        with self.server.connect() as s:
            s.sendall(head + body + get("index.html") + get("small.txt"))
            self.read_all(s, ["nodir/file.txt", "index.html", "small.txt"])

    def test_oversized_head_gets_431_before_the_close(self):
        data = b"GET /small.txt HTTP/1.1\r\nHost: t\r\nX-Big: " + b"a" * 70000 + b"\r\n\r\n"
        status, _ = raw(self.server, data)
        self.assertEqual(status, 431)

    def test_empty_lines_then_a_head_at_the_limit_is_431_not_a_crash(self):
        # 8 bytes of empty lines (which the parser skips) before a partial head of exactly
        # --max-request-head: the input buffer still has room for one more delivery, the answer
        # is 431, and the server stays up.
        head = b"GET / HTTP/1.1\r\n"
        while len(head) < 16384 - 80:
            head += b"X-Pad: " + b"a" * 60 + b"\r\n"
        head += b"X-L: " + b"b" * (16384 - len(head) - 7) + b"\r\n"
        self.assertEqual(len(head), 16384)
        with self.server.connect() as s:
            s.sendall(b"\r\n" * 4 + head)
            wait_for(lambda: server_has_read(s), "the server to read the head")  # then a delivery
            s.sendall(b"c" * 8192)
            status = Reader(s).read_response().status
        self.assertEqual(status, 431)
        self.assertIsNone(self.server.proc.poll(), "the server died")
        self.assertEqual(request(self.server, "GET", "/small.txt").status, 200)

    def test_oversized_body_gets_413_before_the_close(self):
        data = b"PUT /small.txt HTTP/1.1\r\nHost: t\r\nContent-Length: 100000\r\n\r\n" + b"x" * 100000
        status, out = raw(self.server, data)
        self.assertEqual(status, 413, out[:200])
        data = b"GET /small.txt HTTP/1.1\r\nHost: t\r\nContent-Length: 100000\r\n\r\n" + b"x" * 100000
        status, out = raw(self.server, data)
        self.assertEqual(status, 413, out[:200])


class SmallInputBufferTest(BackendTestCase):
    """A receive buffer larger than the largest head: leftovers are never clipped."""

    def test_pipelined_input_with_a_large_receive_buffer(self):
        root, files = make_docroot()
        server = Server(root, "--recv-buffer-size", "65536", "--max-request-head", "1024",
                        "--max-request-line", "512")
        try:
            names = ["small.txt", "index.html", "medium.bin", "app.js"] * 200  # ~28 KB at once
            with server.connect() as s:
                s.sendall(b"".join(get(n) for n in names))
                reader = Reader(s)
                for i, n in enumerate(names):
                    r = reader.read_response()
                    self.assertEqual((r.status, r.body), (200, files[n]), "response %d" % i)
        finally:
            self.assertEqual(server.stop(), 0)
            shutil.rmtree(root, ignore_errors=True)


class FileCacheLimitsTest(DocrootTestCase):

    def test_open_file_cache_valid_ms_0_revalidates_every_request(self):
        server = Server(self.root, "--open-file-cache-valid-ms", "0", "--shards", "1", *ADMIN)
        try:
            with server.connect(timeout=5) as s:
                reader = Reader(s)
                for name, want in [("small.txt", "small.txt"), ("dir/", "dir/index.html"),
                                   ("large.bin", "large.bin"), ("app.js", "app.js")] * 10:
                    s.sendall(get(name))
                    r = reader.read_response()
                    self.assertEqual((r.status, r.body), (200, self.files[want]), name)
            # The negative means something once the server has closed that connection; then a
            # second passes with the shard idle: operations started and callbacks run, counted
            # (not CPU time, which a loaded machine stretches), stay at its housekeeping tick's.
            wait_for(lambda: server.connections().get("open", 0) == 0, "the connection closed")
            work = lambda: (server.metric("ringd_io_operations_total") +
                            server.metric("ringd_io_completions_total"))
            before = work()
            time.sleep(1)
            self.assertLess(work() - before, 50, "the shard must not spin")
            # A change is seen by the very next request.
            with open(self.root + "/changing.txt", "wb") as f:
                f.write(b"one")
            self.assertEqual(request(server, "GET", "/changing.txt").body, b"one")
            with open(self.root + "/changing.txt", "wb") as f:
                f.write(b"two!")
            self.assertEqual(request(server, "GET", "/changing.txt").body, b"two!")
        finally:
            self.assertEqual(server.stop(), 0)

    def test_out_of_descriptors_for_a_file_is_503(self):
        if BACKEND == "bypass":
            self.skipTest("bypass: connections live in the ring's file table and use no "
                          "descriptors; its size is checked against RLIMIT_NOFILE at start-up")
        limit = lambda: resource.setrlimit(resource.RLIMIT_NOFILE, (64, 64))
        server = Server(self.root, "--shards", "1", preexec_fn=limit)
        socks = []
        try:
            first = server.connect()
            first.sendall(get("small.txt"))
            reader = Reader(first)
            self.assertEqual(reader.read_response().status, 200)
            # A request in progress (a partial head), so this connection is not idle: idle ones
            # give their descriptors to newcomers when accepting runs out of them.
            first.sendall(b"GET /medium.bin HTTP/1.1\r\n")
            for _ in range(80):  # every descriptor the server has left goes to a connection
                socks.append(server.connect())
            fds = "/proc/%d/fd" % server.proc.pid
            wait_for(lambda: len(os.listdir(fds)) >= 64, "the server to run out of descriptors")
            first.settimeout(5)
            first.sendall(b"Host: t\r\n\r\n")  # not cached: its open fails with EMFILE
            r = reader.read_response()
            self.assertEqual(r.status, 503)
            # With "Connection: close": ringd ends the connection, and the client closes its end
            # as a real one does (one that never did would have ringd linger 5 s for it at exit).
            self.assertEqual(r.header("connection"), "close")
            self.assertTrue(reader.at_eof(5))
            first.close()
            for s in socks:
                s.close()
            socks = []
            # Accepted once descriptors are free again (the accept retries; the request waits).
            self.assertEqual(request(server, "GET", "/medium.bin").body, self.files["medium.bin"])
        finally:
            for s in socks:
                s.close()
            self.assertEqual(server.stop(), 0)


class ConnectionLimitsTest(DocrootTestCase):

    def test_idle_keepalive_connections_give_way_at_the_limit(self):
        server = Server(self.root, "--max-connections", "20", "--shards", "1")
        idle = []
        try:
            for _ in range(20):
                s = server.connect()
                s.sendall(get("small.txt"))
                Reader(s).read_response()
                idle.append(s)
            # Each newcomer is served at once (and stays); the longest-idle connections are
            # closed for them.
            for i in range(10):
                s = server.connect(timeout=3)
                idle.append(s)
                s.sendall(get("small.txt"))
                self.assertEqual(Reader(s).read_response().body, self.files["small.txt"])
            for s in idle[:10]:
                self.assertTrue(Reader(s).at_eof(timeout=3))
            for s in idle[10:]:  # the more recent ones, newcomers included, still serve
                s.settimeout(3)
                s.sendall(get("index.html"))
                self.assertEqual(Reader(s).read_response().body, self.files["index.html"])
        finally:
            for s in idle:
                s.close()
            self.assertEqual(server.stop(), 0)

    def test_twice_the_limit_in_idle_clients_then_newcomers_all_served(self):
        # Clients that make one request and then sit idle, never reading again (a FIN
        # goes unnoticed, so they never close), twice --max-connections of them, then newcomers.
        # Each is served at once: the longest-idle connections give way, and a connection that
        # gave way holds its slot only while a newcomer does not need it. Nobody in the middle
        # of a request or a response loses anything.
        limit = 200
        server = Server(self.root, "--max-connections", str(limit), "--shards", "1",
                        "--header-timeout-ms", "60000")
        idle = []
        try:
            # Mid-request: a head that is half sent, completed after the flood.
            mid_request = server.connect()
            mid_request.sendall(b"GET /medium.bin HTTP/1.1\r\n")
            # Mid-response: a large body to a client that reads nothing until after the flood.
            mid_response = socket.socket()
            mid_response.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 8192)
            mid_response.settimeout(10)
            mid_response.connect(("127.0.0.1", server.port))
            mid_response.sendall(get("large.bin"))
            slow = []
            for i in range(2 * limit + 20):  # the last 20 are the newcomers
                start = time.monotonic()
                try:
                    s = server.connect(timeout=3)
                    idle.append(s)
                    s.sendall(get("small.txt"))
                    body = Reader(s).read_response().body
                except OSError as e:
                    self.fail("client %d of %d not served: %r" % (i, 2 * limit + 20, e))
                self.assertEqual(body, self.files["small.txt"], "client %d" % i)
                if time.monotonic() - start > 1:
                    slow.append((i, round(time.monotonic() - start, 2)))
            # Reported, not asserted (a loaded machine may stall any one client): the target is
            # every client within a second, and perf/idle_flood measures it.
            if slow:
                print("clients served after more than 1 s: %s" % slow)
            mid_request.settimeout(10)
            mid_request.sendall(b"Host: t\r\n\r\n")
            self.assertEqual(Reader(mid_request).read_response().body, self.files["medium.bin"])
            r = Reader(mid_response).read_response()
            self.assertEqual((r.status, r.body), (200, self.files["large.bin"]))
            # The longest-idle clients gave way: at least as many as there were clients over the
            # limit (each of the two busy ones holds a connection too).
            closed = [closed_by_server(s) for s in idle]
            self.assertGreaterEqual(sum(closed), len(idle) + 2 - limit)
            self.assertTrue(closed[0], "the longest-idle client is the first to give way")
            mid_request.close()
            mid_response.close()
        finally:
            for s in idle:
                s.close()
            self.assertEqual(server.stop(), 0)

    def test_silent_connections_give_way_at_the_limit_and_a_half_sent_head_does_not(self):
        # Twice the limit in clients that connect and say nothing (as a flood of TLS handshakes
        # that never finish looks to the shard): after every idle connection, those silent for
        # Shard::kSilentGiveWayMs give way to newcomers. One with half a head never does.
        # Not deferred (--defer-accept would hand the silent ones over a second late, all at
        # once: DeferredAcceptTest); this is what the shard does with those it holds.
        limit = 20
        server = Server(self.root, "--max-connections", str(limit), "--shards", "1",
                        "--header-timeout-ms", "60000", "--defer-accept=false", *ADMIN)
        silent = []
        try:
            mid_request = server.connect()
            mid_request.sendall(b"GET /small.txt HTTP/1.1\r\n")
            wait_for(lambda: server_has_read(mid_request), what="the half-sent head read")
            for _ in range(2 * limit + 40):  # beyond every slot, the reserve's included
                silent.append(socket.create_connection(("127.0.0.1", server.port), timeout=10))
            for i in range(3):
                start = time.monotonic()
                s = server.connect(timeout=10)
                silent.append(s)
                s.sendall(get("small.txt"))
                self.assertEqual(Reader(s).read_response().body, self.files["small.txt"],
                                 "newcomer %d" % i)
                print("newcomer %d served in %.2f s" % (i, time.monotonic() - start))
            mid_request.settimeout(10)
            mid_request.sendall(b"Host: t\r\n\r\n")
            self.assertEqual(Reader(mid_request).read_response().body, self.files["small.txt"])
            # The oldest silent clients were the ones closed.
            self.assertTrue(Reader(silent[0]).at_eof(timeout=5))
            self.assertGreaterEqual(server.metric("ringd_connections_silent_reclaimed_total"), 3)
            mid_request.close()
        finally:
            for s in silent:
                s.close()
            self.assertEqual(server.stop(), 0)

    def test_a_burst_past_the_limit_waits_for_slots_and_is_never_refused(self):
        # The limit taken by idle clients, then three times as many newcomers at once: io_uring's
        # multishot accept hands the whole backlog over in one go, far more than the reserve's
        # slots, and epoll takes 64 a turn. Every newcomer is answered; none is reset.
        import selectors
        limit = 100
        server = Server(self.root, "--max-connections", str(limit), "--shards", "1")
        idle, burst = [], []
        sel = selectors.DefaultSelector()
        try:
            for _ in range(limit):
                s = server.connect()
                idle.append(s)
                s.sendall(get("small.txt"))
                Reader(s).read_response()
            for _ in range(3 * limit):
                s = socket.socket()
                s.setblocking(False)
                s.connect_ex(("127.0.0.1", server.port))
                burst.append(s)
                sel.register(s, selectors.EVENT_WRITE, [b"", False])
            answered, lost = 0, []
            deadline = time.monotonic() + 20
            while sel.get_map() and time.monotonic() < deadline:
                for key, _ in sel.select(timeout=1):
                    s, state = key.fileobj, key.data
                    try:
                        if not state[1]:
                            s.send(get("small.txt"))  # connected: a short send always fits
                            state[1] = True
                            sel.modify(s, selectors.EVENT_READ, state)
                            continue
                        chunk = s.recv(65536)
                    except (BlockingIOError, InterruptedError):
                        continue
                    except OSError as e:
                        chunk = repr(e).encode()
                    if chunk and not chunk.startswith(b"ConnectionResetError"):
                        state[0] += chunk
                        head, sep, body = state[0].partition(b"\r\n\r\n")
                        if sep and body == self.files["small.txt"]:
                            sel.unregister(s)
                            answered += 1
                        continue
                    sel.unregister(s)
                    lost.append(state[0][:80] or chunk[:80])
            self.assertEqual(lost, [], "newcomers reset or closed unanswered")
            self.assertEqual(answered, len(burst), "newcomers still waiting after 20 s")
        finally:
            sel.close()
            for s in idle + burst:
                s.close()
            self.assertEqual(server.stop(), 0)

    def test_a_half_close_mid_response_behind_part_of_a_head_closes_after_the_response(self):
        # The client pipelines part of a second head behind its request, then half-closes while
        # the response is still on its way: that head can never be finished, and no receive is
        # left to notice a timeout other than the header timeout's. The connection closes once
        # the response is out, not a header timeout later.
        server = Server(self.root, "--header-timeout-ms", "60000", "--shards", "1")
        try:
            s = socket.socket()
            s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 8192)  # the body waits on us
            s.settimeout(10)
            s.connect(("127.0.0.1", server.port))
            s.sendall(get("large.bin") + b"GET /small.txt HTTP/1.1\r\nHo")
            wait_for(lambda: server_has_read(s), what="the request and the partial head read")
            s.shutdown(socket.SHUT_WR)
            # The server sees the FIN while the body still waits for this client to read: wait
            # until its sends to us have stalled (the FIN went before, on loopback at once). A
            # server slower than this would see it after the response: the test would then pass
            # without showing anything, never fail.
            wait_for(lambda: sends_stalled([s]), "the body to wait for this client")
            reader = Reader(s)
            r = reader.read_response()
            self.assertEqual((r.status, r.body), (200, self.files["large.bin"]))
            try:
                closed = reader.at_eof(timeout=10)
            except socket.timeout:
                closed = False
            self.assertTrue(closed, "the connection is held after the response")
            s.close()
        finally:
            self.assertEqual(server.stop(), 0)

    def test_stalled_request_body_is_dropped_after_its_own_timeout(self):
        server = Server(self.root, "--discard-body-timeout-ms", "300")
        try:
            with server.connect() as s:
                s.sendall(b"GET /small.txt HTTP/1.1\r\nHost: t\r\nContent-Length: 1000\r\n\r\n"
                          + b"x" * 10)
                reader = Reader(s)
                self.assertEqual(reader.read_response().status, 200)
                start = time.time()
                self.assertTrue(reader.at_eof(timeout=10))
                self.assertLess(time.time() - start, 3)  # not the 75 s keep-alive timeout
            with server.connect() as s:  # a body that does complete leaves a kept-alive connection
                s.sendall(b"GET /small.txt HTTP/1.1\r\nHost: t\r\nContent-Length: 10\r\n\r\n")
                reader = Reader(s)
                self.assertEqual(reader.read_response().status, 200)
                s.sendall(b"x" * 10)
                # A negative, bounded: once the server has read the whole body, the 300 ms
                # discard timeout must not end the connection; 0.8 s of quiet shows it did not.
                wait_for(lambda: server_has_read(s), "the body read")
                time.sleep(0.8)
                s.sendall(get("index.html"))
                self.assertEqual(reader.read_response().body, self.files["index.html"])
        finally:
            self.assertEqual(server.stop(), 0)


class DeferredAcceptTest(DocrootTestCase):
    """--defer-accept: the kernel hands a connection over with its first bytes, so its accept and
    its request wake the shard once; one that says nothing is handed over when the kernel's
    second is up, and served as any other. Off by default: accepted at the handshake."""

    def test_a_connection_reaches_the_shard_with_its_first_bytes_or_after_a_second(self):
        server = Server(self.root, "--shards", "1", "--defer-accept", *ADMIN)
        accepted = lambda: server.metric("ringd_connections_accepted_total")
        quiet, silent = None, None
        try:
            before = accepted()
            quiet = server.connect()
            time.sleep(0.3)  # well inside the kernel's second
            self.assertEqual(accepted(), before, "accepted before a byte came")
            quiet.sendall(get("small.txt"))
            self.assertEqual(Reader(quiet).read_response().body, self.files["small.txt"])
            self.assertEqual(accepted(), before + 1)
            start = time.monotonic()
            silent = server.connect()
            wait_for(lambda: accepted() == before + 2, timeout=8, what="the silent client accepted")
            waited = time.monotonic() - start
            self.assertGreaterEqual(waited, 0.8, "a silent client was accepted before the kernel's second")
            silent.sendall(get("small.txt"))
            self.assertEqual(Reader(silent).read_response().body, self.files["small.txt"])
        finally:
            for s in (quiet, silent):
                if s is not None:
                    s.close()
            self.assertEqual(server.stop(), 0)

    def test_off_by_default_accepts_a_silent_client_at_once(self):
        server = Server(self.root, "--shards", "1", *ADMIN)
        s = None
        try:
            before = server.metric("ringd_connections_accepted_total")
            start = time.monotonic()
            s = server.connect()
            wait_for(lambda: server.metric("ringd_connections_accepted_total") == before + 1,
                     what="the silent client accepted")
            self.assertLess(time.monotonic() - start, 0.8)
        finally:
            if s is not None:
                s.close()
            self.assertEqual(server.stop(), 0)


class RequestLimitsTest(DocrootTestCase):
    """The request limits mean what --help says, at both sides of each: a
    request line of --max-request-line bytes (CRLF not counted) is served and one byte more is
    414; a head of --max-request-head bytes (its blank line included) is served and one more is
    431; --max-headers fields are served and one more is 431. A request target is limited by the
    request line alone: no separate limit applies to its path."""

    def status(self, server, data):
        return raw(server, data)[0]

    def check_limits(self, server, line, head, fields):
        close = b"Connection: close\r\n"

        def line_of(n):  # the request line, n bytes
            start, end = b"GET /small.txt?", b" HTTP/1.1"
            return start + b"q" * (n - len(start) - len(end)) + end

        self.assertEqual(self.status(server, line_of(line) + b"\r\nHost: t\r\n" + close + b"\r\n"), 200)
        self.assertEqual(self.status(server, line_of(line + 1) + b"\r\nHost: t\r\n" + close + b"\r\n"), 414)

        def head_of(n):  # the head, n bytes with its blank line
            start = b"GET /small.txt HTTP/1.1\r\nHost: t\r\n" + close + b"X-Pad: "
            return start + b"p" * (n - len(start) - 4) + b"\r\n\r\n"

        self.assertEqual(self.status(server, head_of(head)), 200)
        self.assertEqual(self.status(server, head_of(head + 1)), 431)

        def fields_of(n):  # n header fields, Host and Connection among them
            extra = b"".join(b"X-%d: v\r\n" % i for i in range(n - 2))
            return b"GET /small.txt HTTP/1.1\r\nHost: t\r\n" + close + extra + b"\r\n"

        self.assertEqual(self.status(server, fields_of(fields)), 200)
        self.assertEqual(self.status(server, fields_of(fields + 1)), 431)

    def test_the_defaults_mean_what_help_says(self):
        server = Server(self.root)
        try:
            self.check_limits(server, 8192, 16384, 64)
            # A path far longer than any file's, within the request line: no such file, not 414.
            status = self.status(server, b"GET /" + b"a" * 5000 + b" HTTP/1.1\r\nHost: t\r\n"
                                         b"Connection: close\r\n\r\n")
            self.assertEqual(status, 404)
        finally:
            self.assertEqual(server.stop(), 0)

    def test_limits_set_by_flags_mean_what_they_say(self):
        server = Server(self.root, "--max-request-line", "1000", "--max-request-head", "2000",
                        "--max-headers", "10")
        try:
            self.check_limits(server, 1000, 2000, 10)
        finally:
            self.assertEqual(server.stop(), 0)

    def test_an_empty_host_is_400(self):
        # RFC 9112 section 3.2: an empty Host is what a client sends for a target URI without an
        # authority, and an http URI always has one; ringd rejects it as nginx does
        # (server/http/request_parser.cc says why). Absolute-form carries its own authority.
        server = Server(self.root)
        try:
            self.assertEqual(self.status(server, b"GET /small.txt HTTP/1.1\r\nHost:\r\n\r\n"), 400)
            self.assertEqual(self.status(server, b"GET /small.txt HTTP/1.1\r\nHost: \r\n\r\n"), 400)
            self.assertEqual(self.status(server, b"GET http://t/small.txt HTTP/1.1\r\nHost:\r\n"
                                                 b"Connection: close\r\n\r\n"), 200)
        finally:
            self.assertEqual(server.stop(), 0)


class SendQueueTest(DocrootTestCase):
    """--send-order=srpt: long bodies wait for a send slot, least remaining first, and never
    without bound (docs/ARCHITECTURE.md, the send queue)."""

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        # 8 MiB: more than the socket buffers of a client with an 8 KiB window hold.
        cls.huge = bytes(range(256)) * (32 * 1024)
        with open(cls.root + "/huge.bin", "wb") as f:
            f.write(cls.huge)

    def stalled_downloads(self, server, n, holding=False):
        """n connections that ask for huge.bin and read nothing: each holds a send slot (with
        `holding`, each has one: wait until every send is stuck on its full window)."""
        socks = []
        for _ in range(n):
            s = socket.socket()
            s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 8192)  # a small window
            s.settimeout(10)
            s.connect(("127.0.0.1", server.port))
            s.sendall(get("huge.bin"))
            socks.append(s)
        wait_for(lambda: server.connections()["sending"] == n, "%d downloads under way" % n)
        # A download keeps its slot only once its send cannot finish (the kernel's send buffer
        # full); before that a slot may be free between two of its chunks.
        if holding:
            wait_for(lambda: sends_stalled(socks), "%d downloads stalled" % n)
        return socks

    def finish(self, socks):
        # All at once: with one slot and no hold or aging bound to speak of, the download that
        # has the slot finishes before the next starts, whichever the client reads first.
        import threading
        results = [None] * len(socks)

        def read(i):
            s = socks[i]
            try:
                s.settimeout(60)  # a download may wait for the one ahead of it to finish
                data = bytearray()
                while b"\r\n\r\n" not in data or len(data) < data.index(b"\r\n\r\n") + 4 + len(self.huge):
                    chunk = s.recv(1 << 20)
                    if not chunk:
                        break
                    data += chunk
                head, _, body = bytes(data).partition(b"\r\n\r\n")
                results[i] = (int(head.split(b" ")[1]), body == self.huge)
            except Exception as e:  # reported below, on the test's thread
                results[i] = e
            s.close()
        threads = [threading.Thread(target=read, args=(i,)) for i in range(len(socks))]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        self.assertEqual(results, [(200, True)] * len(socks))

    def timed_get(self, server, name):
        start = time.time()
        with server.connect(timeout=10) as s:
            s.sendall(get(name))
            r = Reader(s).read_response()
        self.assertEqual(r.status, 200)
        self.assertEqual(r.body, self.files[name])
        return time.time() - start

    def test_a_slot_held_by_a_slow_client_stops_counting(self):
        # One slot, taken by clients that read nothing: the next body still goes, after
        # --send-slot-hold-ms, long before the aging bound (a minute here) would let it.
        server = Server(self.root, "--send-order", "srpt", "--shards", "1", "--send-slots", "1", "--send-short-bytes", "0",
                        "--send-slot-hold-ms", "20", "--send-max-wait-ms", "60000", *ADMIN)
        try:
            stalled = self.stalled_downloads(server, 3)
            self.assertLess(self.timed_get(server, "medium.bin"), 5)
            self.assertLess(self.timed_get(server, "large.bin"), 5)
            self.finish(stalled)
        finally:
            self.assertEqual(server.stop(), 0)

    def test_the_aging_bound_lets_a_waiting_body_go(self):
        # Slots held by clients that read nothing, and never given up (--send-slot-hold-ms of a
        # minute): a waiting body goes after --send-max-wait-ms, over the slot budget.
        server = Server(self.root, "--send-order", "srpt", "--shards", "1", "--send-slots", "2", "--send-short-bytes", "0",
                        "--send-slot-hold-ms", "60000", "--send-max-wait-ms", "300", *ADMIN)
        try:
            stalled = self.stalled_downloads(server, 2, holding=True)
            took = self.timed_get(server, "medium.bin")
            self.assertGreaterEqual(took, 0.25)  # it did wait for the bound
            self.assertLess(took, 5)
            self.finish(stalled)
        finally:
            self.assertEqual(server.stop(), 0)

    def test_short_responses_never_wait(self):
        server = Server(self.root, "--send-order", "srpt", "--shards", "1", "--send-slots", "1",
                        "--send-slot-hold-ms", "60000", "--send-max-wait-ms", "60000", *ADMIN)
        try:
            stalled = self.stalled_downloads(server, 2)
            self.assertLess(self.timed_get(server, "medium.bin"), 5)  # 100 KiB < 256 KiB
            self.assertLess(self.timed_get(server, "small.txt"), 5)
            self.finish(stalled)
        finally:
            self.assertEqual(server.stop(), 0)

    def test_many_downloads_through_one_slot_all_whole(self):
        # Ranges and whole files, pipelined on a few connections, through one slot: every body
        # byte for byte, in order.
        server = Server(self.root, "--send-order", "srpt", "--shards", "1", "--send-slots", "1", "--send-short-bytes", "0")
        try:
            socks = [server.connect() for _ in range(6)]
            reqs = [get("large.bin"), get("medium.bin"), get("large.bin", b"Range: bytes=1000-2999999\r\n"),
                    get("medium.bin", b"Range: bytes=0-9,500-599\r\n")]
            for s in socks:
                s.sendall(b"".join(reqs))
            large = self.files["large.bin"]
            for s in socks:
                reader = Reader(s)
                self.assertEqual(reader.read_response().body, large)
                self.assertEqual(reader.read_response().body, self.files["medium.bin"])
                r = reader.read_response()
                self.assertEqual((r.status, r.body), (206, large[1000:3000000]))
                r = reader.read_response()
                self.assertEqual(r.status, 206)
                self.assertIn(b"multipart/byteranges", r.headers["content-type"].encode())
                s.close()
        finally:
            self.assertEqual(server.stop(), 0)


class ShortConnectionsTest(BackendTestCase):
    def test_thousands_of_close_requests_all_answered_whole(self):
        # Many connections each sending one `Connection: close` request, 500 at a time: every
        # one gets its whole response, then EOF. (On the bypass tier a shutdown that runs after
        # its slot has been closed and reused must not reach the connection now in that slot.)
        import selectors
        root, files = make_docroot()
        server = Server(root)
        want = files["index.html"]
        req = b"GET /index.html HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n"
        sel = selectors.DefaultSelector()
        started = done = 0
        bad = []
        total, parallel = 6000, 500

        def start():
            nonlocal started
            s = socket.create_connection(("127.0.0.1", server.port), timeout=5)
            s.sendall(req)
            s.setblocking(False)
            sel.register(s, selectors.EVENT_READ, [b""])
            started += 1

        try:
            deadline = time.time() + 60
            while started < min(parallel, total):
                start()
            while done < total and time.time() < deadline:
                for key, _ in sel.select(timeout=5):
                    s, buf = key.fileobj, key.data
                    try:
                        chunk = s.recv(65536)
                    except (BlockingIOError, InterruptedError):
                        continue
                    except ConnectionResetError:
                        chunk = None
                    if chunk:
                        buf[0] += chunk
                        continue
                    sel.unregister(s)
                    s.close()
                    done += 1
                    head, _, body = buf[0].partition(b"\r\n\r\n")
                    if not head.startswith(b"HTTP/1.1 200 ") or body != want:
                        bad.append(buf[0][:80])
                    if started < total:
                        start()
            self.assertEqual(done, total, "responses still missing after 60 s")
            self.assertEqual(bad, [], "%d of %d responses cut short" % (len(bad), total))
        finally:
            for key in list(sel.get_map().values()):
                key.fileobj.close()
            self.assertEqual(server.stop(), 0)
            shutil.rmtree(root, ignore_errors=True)


class DrainTest(DocrootTestCase):

    def test_draining_server_refuses_newcomers_at_once(self):
        server = Server(self.root, "--shutdown-timeout-ms", "5000", *ADMIN)
        slow = server.connect()
        try:
            slow.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
            slow.sendall(get("large.bin"))  # not read: the drain waits for it
            wait_for(lambda: server.connections()["sending"] == 1, "the download under way")
            server.proc.send_signal(signal.SIGTERM)
            wait_for(server.draining, "the drain to begin")
            self.assertIsNone(server.proc.poll(), "still draining the slow download")
            start = time.time()
            with self.assertRaises((ConnectionRefusedError, ConnectionResetError)):
                s = socket.create_connection(("127.0.0.1", server.port), timeout=3)
                s.sendall(get("small.txt"))
                if s.recv(1) == b"":
                    raise ConnectionResetError("closed without a response")
            self.assertLess(time.time() - start, 1.5)
        finally:
            slow.close()
            self.assertEqual(server.stop(), 0)

    def test_idle_server_stops_promptly(self):
        server = Server(self.root)
        request(server, "GET", "/small.txt")
        start = time.time()
        self.assertEqual(server.stop(), 0)
        self.assertLess(time.time() - start, 0.5)


if __name__ == "__main__":
    unittest.main()
