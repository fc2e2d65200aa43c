"""HTTP/2 with real clients on every tier: curl (h2 by ALPN over TLS, h2c with prior knowledge),
nghttp, h2load, and Python's h2 for the frames clients will not send. The same requests over
HTTP/1.1 and HTTP/2 get the same status, the same fields and the same body bytes."""
import os
import re
import shutil
import signal
import socket
import ssl
import subprocess
import tempfile
import time
import unittest

import h2.config
import h2.connection
import h2.errors
import h2.events
import h2.settings
import hpack
import hyperframe.frame

from ringd_harness import ADMIN, BackendTestCase, Server, curl, make_docroot, wait_for
from tls_pki import make_pki


class H2Client:
    """A Python h2 client over a plain or TLS socket; validates nothing it sends, so tests can
    send what a conforming client never would."""

    def __init__(self, port, tls_ctx=None, window=None, max_frame=None):
        sock = socket.create_connection(("127.0.0.1", port), timeout=10)
        # As nghttp2, curl and the browsers do: a WINDOW_UPDATE is not held back (Nagle) until
        # the last one is acknowledged, which ringd's kernel may delay by 40 ms.
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        if tls_ctx is not None:
            sock = tls_ctx.wrap_socket(sock, server_hostname="localhost")
            assert sock.selected_alpn_protocol() == "h2", sock.selected_alpn_protocol()
        self.sock = sock
        self.conn = h2.connection.H2Connection(h2.config.H2Configuration(
            client_side=True, header_encoding="utf-8", validate_outbound_headers=False,
            normalize_outbound_headers=False, validate_inbound_headers=False))
        self.conn.initiate_connection()
        settings = {}
        if window is not None:
            settings[h2.settings.SettingCodes.INITIAL_WINDOW_SIZE] = window
        if settings:
            self.conn.update_settings(settings)
        self.flush()
        self.bodies = {}
        self.headers = {}
        self.ended = set()
        self.resets = {}
        self.goaway = None
        self.eof = False
        self.auto_ack = window is None

    def flush(self):
        data = self.conn.data_to_send()
        if data:
            self.sock.sendall(data)

    def request(self, path, method="GET", extra=(), end=True):
        sid = self.conn.get_next_available_stream_id()
        self.conn.send_headers(sid, [(":method", method), (":scheme", "http"), (":path", path),
                                     (":authority", "localhost")] + list(extra), end_stream=end)
        self.flush()
        return sid

    def pump(self, until, timeout=10):
        """Reads and handles frames until `until()` is true, or end of stream; returns until()."""
        self.sock.settimeout(timeout)
        deadline = time.monotonic() + timeout
        while not until() and not self.eof and time.monotonic() < deadline:
            try:
                data = self.sock.recv(65536)
            except (ConnectionResetError, ssl.SSLError):
                data = b""
            except socket.timeout:
                break
            if not data:
                self.eof = True
                break
            for e in self.receive(data):
                if isinstance(e, h2.events.ResponseReceived):
                    self.headers[e.stream_id] = dict(e.headers)
                elif isinstance(e, h2.events.DataReceived):
                    self.bodies[e.stream_id] = self.bodies.get(e.stream_id, b"") + e.data
                    if self.auto_ack:
                        self.conn.acknowledge_received_data(e.flow_controlled_length, e.stream_id)
                elif isinstance(e, h2.events.StreamEnded):
                    self.ended.add(e.stream_id)
                elif isinstance(e, h2.events.StreamReset):
                    self.resets[e.stream_id] = e.error_code
                elif isinstance(e, h2.events.ConnectionTerminated):
                    self.goaway = (e.last_stream_id, e.error_code)
            try:
                self.flush()
            except OSError:
                self.eof = True
        return until()

    def receive(self, data):
        """Python h2's events for the whole frames received so far, fed one frame at a time: it
        closes its connection at any GOAWAY, where RFC 9113 6.8 lets the streams up to the last
        one named go on, so its state machine is put back after one."""
        self.pending = getattr(self, "pending", b"") + data
        events = []
        while len(self.pending) >= 9:
            end = 9 + int.from_bytes(self.pending[:3], "big")
            if len(self.pending) < end:
                break
            frame, self.pending = self.pending[:end], self.pending[end:]
            for e in self.conn.receive_data(frame):
                events.append(e)
                if isinstance(e, h2.events.ConnectionTerminated) and e.error_code == 0:
                    self.conn.state_machine.state = h2.connection.ConnectionState.CLIENT_OPEN
        return events

    def close(self):
        self.sock.close()


# Fields both protocols must carry alike (Date may tick between the two requests; Connection and
# Keep-Alive are HTTP/1.1's own).
SAME_FIELDS = ["content-type", "content-length", "etag", "last-modified", "content-range",
               "content-encoding", "vary", "location", "cache-control", "accept-ranges", "allow",
               "server", "x-test"]


class Http2Test(BackendTestCase):
    FLAGS = ()  # given to every server the class starts
    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        cls.root, cls.files = make_docroot()
        cls.pki = tempfile.mkdtemp(prefix="ringd-h2-tls-")
        make_pki(cls.pki)
        cls.log = os.path.join(cls.pki, "access.log")
        cls.server = cls.start("--access-log", cls.log, "--add-header", "X-Test: yes", *ADMIN)
        cls.ctx = ssl.create_default_context(cafile=os.path.join(cls.pki, "ca.crt"))
        cls.ctx.set_alpn_protocols(["h2", "http/1.1"])

    @classmethod
    def start(cls, *flags):
        p = lambda n: os.path.join(cls.pki, n)
        server = Server(cls.root, "--listen-tls", "127.0.0.1:0", "--tls-cert",
                        p("localhost-ec.crt"), "--tls-key", p("localhost-ec.key"), *cls.FLAGS,
                        *flags)
        assert server.tls_port, server.log
        return server

    @classmethod
    def tearDownClass(cls):
        rc = cls.server.stop()
        shutil.rmtree(cls.root, ignore_errors=True)
        shutil.rmtree(cls.pki, ignore_errors=True)
        assert rc == 0, cls.server.log

    def h2c(self, path):
        return "http://127.0.0.1:%d%s" % (self.server.port, path)

    def h2s(self, path):
        return "https://localhost:%d%s" % (self.server.tls_port, path)

    def curl_tls(self, path, *args):
        return curl(self.h2s(path), "--resolve", "localhost:%d:127.0.0.1" % self.server.tls_port,
                    "--cacert", os.path.join(self.pki, "ca.crt"), *args)

    def test_every_file_byte_for_byte_over_h2c_and_h2(self):
        for name, data in self.files.items():
            if name.startswith("."):
                continue
            for version, status, _, body in (
                    curl(self.h2c("/" + name), "--http2-prior-knowledge"),
                    self.curl_tls("/" + name, "--http2")):
                self.assertEqual((version, status), ("2", 200), name)
                self.assertEqual(body, data, name)

    def test_same_answers_as_http11(self):
        etag = curl(self.h2c("/medium.bin"))[2]["etag"]
        cases = [
            ("/", []), ("/small.txt", []), ("/large.bin", []), ("/empty.txt", []),
            ("/dir/", []), ("/dir", []), ("/nodir/", []), ("/missing", []), ("/.hidden", []),
            ("/escape", []), ("/%2e%2e/etc/passwd", []), ("/link.txt", []),
            ("/app.js", ["-H", "Accept-Encoding: gzip"]),
            ("/medium.bin", ["-H", "Range: bytes=0-99"]),
            ("/large.bin", ["-H", "Range: bytes=-1000"]),
            ("/medium.bin", ["-H", "Range: bytes=0-9,100-109,50000-"]),
            ("/large.bin", ["-H", "Range: bytes=0-9,4000000-4000100"]),
            ("/medium.bin", ["-H", "Range: bytes=999999999-"]),
            ("/medium.bin", ["-H", "If-None-Match: " + etag]),
            ("/medium.bin", ["-H", "If-Match: \"nope\""]),
            ("/large.bin", ["-I"]),
            ("/small.txt", ["-X", "OPTIONS"]),
            ("/small.txt", ["-X", "POST", "--data", "x"]),
            ("/small.txt", ["-X", "DELETE"]),
        ]
        for path, args in cases:
            v1, s1, h1, b1 = curl(self.h2c(path), "--http1.1", *args)
            v2, s2, h2_, b2 = curl(self.h2c(path), "--http2-prior-knowledge", *args)
            v3, s3, h3, b3 = self.curl_tls(path, "--http2", *args)
            what = "%s %s" % (path, args)
            self.assertEqual((v1, v2, v3), ("1.1", "2", "2"), what)
            self.assertEqual(s1, s2, what)
            self.assertEqual(s1, s3, what)
            boundary = lambda b: re.sub(rb"ringd-[0-9a-f]+", b"B", b)
            if "-I" not in args:  # curl -I writes the head where the body would go
                self.assertEqual(boundary(b1), boundary(b2), what)
                self.assertEqual(boundary(b1), boundary(b3), what)
            for field in SAME_FIELDS:
                f = lambda h: re.sub(r"ringd-[0-9a-f]+", "B", h.get(field, ""))
                self.assertEqual(f(h1), f(h2_), "%s: %s" % (what, field))
                self.assertEqual(f(h1), f(h3), "%s: %s" % (what, field))
            self.assertNotIn("connection", h2_, what)
            self.assertNotIn("keep-alive", h2_, what)

    def test_alpn_prefers_h2_and_keeps_http11(self):
        for offer, chosen in (("h2,http/1.1", "h2"), ("http/1.1,h2", "h2"),
                              ("http/1.1", "http/1.1")):
            out = subprocess.run(["openssl", "s_client", "-connect",
                                  "127.0.0.1:%d" % self.server.tls_port, "-alpn", offer,
                                  "-servername", "localhost"], input="", capture_output=True,
                                 text=True, timeout=20).stdout
            self.assertIn("ALPN protocol: " + chosen, out, offer)

    def test_http2_off_speaks_http11_alone(self):
        server = self.start("--http2=false")
        try:
            out = subprocess.run(["openssl", "s_client", "-connect",
                                  "127.0.0.1:%d" % server.tls_port, "-alpn", "h2,http/1.1"],
                                 input="", capture_output=True, text=True, timeout=20).stdout
            self.assertIn("ALPN protocol: http/1.1", out)
            # The preface is then an HTTP/1.1 request of version 2.0: refused.
            s = socket.create_connection(("127.0.0.1", server.port), timeout=5)
            s.sendall(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n")
            self.assertTrue(s.recv(100).startswith(b"HTTP/1.1 505 "))
            s.close()
        finally:
            self.assertEqual(server.stop(), 0)

    def test_upgrade_h2c_is_answered_as_http11(self):
        # RFC 9113 dropped the h2c upgrade: an HTTP/1.1 request asking for it is answered as
        # HTTP/1.1, and the connection stays HTTP/1.1.
        s = socket.create_connection(("127.0.0.1", self.server.port), timeout=10)
        s.sendall(b"GET /small.txt HTTP/1.1\r\nHost: localhost\r\nConnection: Upgrade, "
                  b"HTTP2-Settings\r\nUpgrade: h2c\r\nHTTP2-Settings: AAMAAABkAAQAoAAAAAIAAAAA\r\n\r\n"
                  b"GET /small.txt HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n")
        got = b""
        while True:
            d = s.recv(65536)
            if not d:
                break
            got += d
        s.close()
        self.assertTrue(got.startswith(b"HTTP/1.1 200 OK\r\n"), got[:80])
        self.assertEqual(got.count(b"HTTP/1.1 200 OK\r\n"), 2)
        self.assertNotIn(b"101 Switching", got)

    def test_preface_split_at_every_byte(self):
        preface = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
        for split in range(1, len(preface)):
            c = H2Client.__new__(H2Client)
            sock = socket.create_connection(("127.0.0.1", self.server.port), timeout=10)
            conn = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True))
            conn.initiate_connection()
            data = conn.data_to_send()
            self.assertTrue(data.startswith(preface))
            sock.sendall(data[:split])
            time.sleep(0.002)
            sock.sendall(data[split:])
            c.__dict__.update(sock=sock, conn=conn, bodies={}, headers={}, ended=set(),
                              resets={}, goaway=None, eof=False, auto_ack=True)
            sid = c.request("/small.txt")
            self.assertTrue(c.pump(lambda: sid in c.ended), split)
            self.assertEqual(c.bodies[sid], self.files["small.txt"], split)
            c.close()

    def test_h2load_many_streams_no_error(self):
        for url in (self.h2c("/"), self.h2s("/small.txt")):
            out = subprocess.run(["h2load", "-n", "3000", "-c", "10", "-m", "20", url],
                                 capture_output=True, text=True, timeout=60).stdout
            self.assertIn("3000 succeeded, 0 failed, 0 errored, 0 timeout", out, out)
            self.assertIn("status codes: 3000 2xx", out, out)
        out = subprocess.run(["h2load", "-n", "40", "-c", "2", "-m", "8", self.h2s("/large.bin")],
                             capture_output=True, text=True, timeout=60).stdout
        self.assertIn("40 succeeded, 0 failed, 0 errored, 0 timeout", out, out)

    def test_nghttp_sees_the_settings(self):
        out = subprocess.run(["nghttp", "-nv", self.h2c("/small.txt")], capture_output=True,
                             text=True, timeout=20).stdout
        self.assertIn("[SETTINGS_MAX_CONCURRENT_STREAMS(0x03):100]", out)
        self.assertIn("(0x09):1]", out)  # SETTINGS_NO_RFC7540_PRIORITIES
        self.assertIn("recv DATA frame <length=612, flags=0x01", out)

    def test_many_streams_on_one_connection_interleave(self):
        c = H2Client(self.server.tls_port, self.ctx)
        ids = [c.request(p) for p in ["/large.bin", "/medium.bin", "/small.txt"] * 5]
        self.assertTrue(c.pump(lambda: all(i in c.ended for i in ids), timeout=30))
        for i, p in zip(ids, ["/large.bin", "/medium.bin", "/small.txt"] * 5):
            self.assertEqual(c.bodies.get(i, b""), self.files[p[1:]], p)
        c.close()

    def test_malformed_requests_are_stream_errors_and_the_connection_lives(self):
        c = H2Client(self.server.port)
        bad = [
            c.request("/small.txt", extra=[("connection", "keep-alive")]),
            c.request("/small.txt", extra=[("Upper", "x")]),
            c.request("/small.txt", extra=[("te", "gzip")]),
            c.request("relative"),
            c.request("/small.txt", extra=[(":bogus", "x")]),
        ]
        ok = c.request("/small.txt")
        self.assertTrue(c.pump(lambda: ok in c.ended and all(b in c.resets for b in bad)))
        for b in bad:
            self.assertEqual(c.resets[b], h2.errors.ErrorCodes.PROTOCOL_ERROR, b)
        self.assertEqual(c.bodies[ok], self.files["small.txt"])
        self.assertIsNone(c.goaway)
        c.close()

    def test_content_length_against_data(self):
        c = H2Client(self.server.port)
        sid = c.request("/large.bin", extra=[("content-length", "10")], end=False)
        c.conn.send_data(sid, b"x" * 20, end_stream=False)
        c.flush()
        self.assertTrue(c.pump(lambda: sid in c.resets))
        self.assertEqual(c.resets[sid], h2.errors.ErrorCodes.PROTOCOL_ERROR)
        c.close()

    def test_field_section_past_the_head_limit_is_431(self):
        c = H2Client(self.server.port)
        sid = c.request("/small.txt", extra=[("x-big", "a" * 4000 + str(i)) for i in range(6)])
        self.assertTrue(c.pump(lambda: sid in c.ended))
        self.assertEqual(c.headers[sid][":status"], "431")
        ok = c.request("/small.txt")
        self.assertTrue(c.pump(lambda: ok in c.ended))
        c.close()

    def test_streams_past_the_limit_are_refused(self):
        server = self.start("--http2-max-streams", "2")
        try:
            c = H2Client(server.port, window=0)  # responses wait: their streams stay open
            first = [c.request("/medium.bin"), c.request("/medium.bin")]
            self.assertTrue(c.pump(lambda: all(s in c.headers for s in first), timeout=5))
            # Python's h2 keeps to the server's limit; this client does not.
            c.conn.remote_settings[h2.settings.SettingCodes.MAX_CONCURRENT_STREAMS] = 100
            c.conn.remote_settings.acknowledge()
            third = c.request("/medium.bin")
            # RFC 9113 5.1.2: a stream error; nghttp2 makes it a connection error once the
            # limit is acknowledged. Either way the stream is never served.
            self.assertTrue(c.pump(lambda: third in c.resets or c.goaway is not None, timeout=5))
            self.assertNotIn(third, c.headers)
            if c.goaway is not None:
                self.assertEqual(c.goaway[1], h2.errors.ErrorCodes.PROTOCOL_ERROR)
            else:
                self.assertIn(c.resets[third], (h2.errors.ErrorCodes.REFUSED_STREAM,
                                                h2.errors.ErrorCodes.PROTOCOL_ERROR))
            c.close()
        finally:
            self.assertEqual(server.stop(), 0)

    def test_a_window_held_shut_is_cut_by_the_send_timeout(self):
        server = self.start("--send-timeout-ms", "1000", *ADMIN)
        try:
            c = H2Client(server.port, window=0)
            sid = c.request("/medium.bin")
            self.assertTrue(c.pump(lambda: sid in c.headers, timeout=5))
            began = time.monotonic()
            c.pump(lambda: False, timeout=10)  # until the server closes
            self.assertTrue(c.eof)
            self.assertLess(time.monotonic() - began, 8)
            wait_for(lambda: server.metric("ringd_timeouts_total", kind="send") >= 1, "a send timeout")
            c.close()
        finally:
            self.assertEqual(server.stop(), 0)

    def test_flow_control_stalls_are_counted_by_window(self):
        server = self.start(*ADMIN)
        try:
            stalls = lambda kind: server.metric("ringd_http2_flow_control_stalls_total", kind=kind)
            # Streams open with no window: the response's body waits on the stream's.
            c = H2Client(server.port, window=0)
            sid = c.request("/medium.bin")
            self.assertTrue(c.pump(lambda: sid in c.headers, timeout=5))
            wait_for(lambda: stalls("stream") >= 1, "a stall on a stream's window")
            self.assertEqual(stalls("connection"), 0)
            # A client gone while its window is shut can never open it: the connection ends at
            # once, not at the send timeout (nor, in a drain, at --shutdown-timeout-ms).
            closed = lambda: server.connections().get("open", 0) == 0
            c.close()
            wait_for(closed, "the connection of a client gone with its stream's window shut to end", timeout=5)
            # A large stream window and no WINDOW_UPDATE: the connection's 65,535 bytes run out.
            c = H2Client(server.port, window=1 << 24)
            sid = c.request("/large.bin")
            self.assertTrue(c.pump(lambda: len(c.bodies.get(sid, b"")) >= 65535, timeout=5))
            wait_for(lambda: stalls("connection") >= 1, "a stall on the connection's window")
            self.assertEqual(len(c.bodies[sid]), 65535)
            c.close()
            wait_for(closed, "the connection of a client gone with its connection's window shut to end", timeout=5)
            # And one that only stopped sending (SHUT_WR), its stream's window shut, likewise.
            c = H2Client(server.port, window=0)
            sid = c.request("/medium.bin")
            self.assertTrue(c.pump(lambda: sid in c.headers, timeout=5))
            wait_for(lambda: stalls("stream") >= 2, "a second stall on a stream's window")
            c.sock.shutdown(socket.SHUT_WR)
            wait_for(closed, "the connection of a client that stopped sending with its window shut to end", timeout=5)
            c.close()
        finally:
            self.assertEqual(server.stop(), 0)

    def test_an_idle_connection_hands_its_frame_buffer_back_and_serves_on(self):
        server = self.start(*ADMIN)
        try:
            released = lambda: server.metric("ringd_http2_frame_buffers_released_total")
            held = lambda: server.metric("ringd_http2_library_bytes")
            self.assertEqual(held(), 0)
            c = H2Client(server.port)
            sid = c.request("/index.html")
            self.assertTrue(c.pump(lambda: sid in c.ended, timeout=5))
            self.assertGreater(held(), 16384)  # its session, and the buffer it frames into
            # No stream for a second: the buffer's pages go back, the session stays.
            wait_for(lambda: released() >= 1, "the idle connection's frame buffer released")
            # And the connection frames on, into zeroed pages: a small response and a large one.
            for path in ("/index.html", "/medium.bin"):
                sid = c.request(path)
                self.assertTrue(c.pump(lambda: sid in c.ended, timeout=5))
                self.assertEqual(c.headers[sid][":status"], "200")
                self.assertEqual(c.bodies[sid], self.files[path.lstrip("/")])
            c.close()
            wait_for(lambda: held() == 0, "nghttp2 holding nothing once the connection closed")
        finally:
            self.assertEqual(server.stop(), 0)

    def test_a_file_truncated_under_its_stream_ends_the_connection_never_a_wrong_byte(self):
        # The frames already framed from the file cannot be kept (nghttp2 has counted them
        # against the client's windows): the connection ends, as an HTTP/1.1 one does, and what
        # the client received is the file's.
        root = tempfile.mkdtemp(prefix="ringd-h2-trunc-")
        body = os.urandom(4 << 20)
        with open(os.path.join(root, "shrinks.bin"), "wb") as f:
            f.write(body)
        server = Server(root, *ADMIN)
        try:
            c = H2Client(server.port, window=1 << 24)  # the connection's 65,535 bytes, then wait
            sid = c.request("/shrinks.bin")
            self.assertTrue(c.pump(lambda: len(c.bodies.get(sid, b"")) >= 65535, timeout=5))
            os.truncate(os.path.join(root, "shrinks.bin"), 100000)
            c.auto_ack = True
            c.conn.increment_flow_control_window(1 << 30)
            c.flush()
            c.pump(lambda: False, timeout=10)  # until the server closes
            self.assertTrue(c.eof)
            got = c.bodies.get(sid, b"")
            self.assertLessEqual(len(got), 100000)
            self.assertEqual(got, body[:len(got)])
            self.assertNotIn(sid, c.ended)
            wait_for(lambda: server.metric("ringd_connection_errors_total", kind="truncated") == 1,
                     "the truncation counted")
            c.close()
        finally:
            self.assertEqual(server.stop(), 0)
            shutil.rmtree(root, ignore_errors=True)

    @classmethod
    def sendfile_on(cls):
        """Whether the class's servers send h2c file payloads with sendfile (--http2-sendfile)."""
        return "--http2-sendfile" in cls.FLAGS

    def file_path_bytes(self):
        """File body bytes the loops sent from the file itself: sendfile, splice, or read into
        a body buffer and sent (never an HTTP/2 batch's reads)."""
        return sum(self.server.metric(m) for m in (
            "ringd_body_sendfile_bytes_total", "ringd_body_splice_bytes_total",
            "ringd_body_read_send_bytes_total"))

    def test_h2c_file_payloads_take_the_configured_data_path(self):
        # With --http2-sendfile, h2c payloads from files go out with SendFile (the loop counts
        # them as an HTTP/1.1 body's); without it they are read into the batch, as over TLS
        # always.
        before = self.file_path_bytes()
        version, status, _, body = curl(self.h2c("/large.bin"), "--http2-prior-knowledge")
        self.assertEqual((version, status, body), ("2", 200, self.files["large.bin"]))
        grew = self.file_path_bytes() - before
        if self.sendfile_on():
            self.assertGreaterEqual(grew, len(self.files["large.bin"]))
        else:
            self.assertEqual(grew, 0)
        before = self.file_path_bytes()
        version, status, _, body = self.curl_tls("/large.bin", "--http2")
        self.assertEqual((version, status, body), ("2", 200, self.files["large.bin"]))
        self.assertEqual(self.file_path_bytes() - before, 0)

    def test_h2c_file_bodies_ranges_and_a_reset_share_a_slow_connection(self):
        # One h2c connection whose client opens its windows 16 KiB at a time: large bodies,
        # a range, a multipart range, cached small files and a medium file interleave, and one
        # large body is reset part way; every other body arrives byte for byte, the connection
        # lives on, and the access log counts what left.
        large = self.files["large.bin"]
        c = H2Client(self.server.port, window=16384)
        c.auto_ack = True
        reset = c.request("/large.bin?h2c-reset")
        wanted = {
            c.request("/large.bin?h2c-mix"): (200, large),
            c.request("/large.bin", extra=[("range", "bytes=100-300000")]): (206, large[100:300001]),
            c.request("/medium.bin"): (200, self.files["medium.bin"]),
            c.request("/small.txt"): (200, self.files["small.txt"]),
        }
        multi = c.request("/large.bin", extra=[("range", "bytes=0-99,1000000-1099999")])
        self.assertTrue(c.pump(lambda: len(c.bodies.get(reset, b"")) >= 100000, timeout=20))
        c.conn.reset_stream(reset)
        c.flush()
        self.assertTrue(c.pump(lambda: all(i in c.ended for i in list(wanted) + [multi]),
                               timeout=60))
        for sid, (status, body) in wanted.items():
            self.assertEqual(c.headers[sid][":status"], str(status), sid)
            self.assertEqual(c.bodies.get(sid, b""), body, sid)
        got = c.bodies[multi]
        self.assertEqual(c.headers[multi][":status"], "206")
        self.assertLess(got.index(large[:100]), got.index(large[1000000:1100000]))
        self.assertNotIn(reset, c.ended)
        self.assertLess(len(c.bodies.get(reset, b"")), len(large))
        self.assertEqual(c.bodies.get(reset, b""), large[:len(c.bodies.get(reset, b""))])
        after = c.request("/medium.bin")  # the connection lives on
        self.assertTrue(c.pump(lambda: after in c.ended, timeout=20))
        self.assertEqual(c.bodies[after], self.files["medium.bin"])
        c.close()
        def logged():
            if not os.path.exists(self.log):
                return False
            with open(self.log) as f:
                text = f.read()
            return "h2c-reset" in text and "h2c-mix" in text
        wait_for(logged, "the access log lines")
        with open(self.log) as f:
            text = f.read()
        self.assertRegex(text, r'"GET /large.bin\?h2c-mix HTTP/2.0" 200 %d ' % len(large))
        sent = int(re.search(r'"GET /large.bin\?h2c-reset HTTP/2.0" \d+ (\d+) ', text).group(1))
        self.assertLess(sent, len(large))

    def test_many_h2c_streams_of_file_bodies(self):
        # More streams than a batch has file payloads (8), on a few connections: h2load checks
        # every response's length.
        out = subprocess.run(["h2load", "-n", "200", "-c", "2", "-m", "32",
                              self.h2c("/medium.bin")], capture_output=True, text=True,
                             timeout=60).stdout
        self.assertIn("200 succeeded, 0 failed, 0 errored, 0 timeout", out, out)
        self.assertIn("status codes: 200 2xx", out, out)

    def test_rapid_reset_gets_goaway(self):
        c = H2Client(self.server.port)
        for _ in range(1500):
            sid = c.request("/large.bin")
            c.conn.reset_stream(sid)
        c.flush()
        self.assertTrue(c.pump(lambda: c.goaway is not None, timeout=20) or c.eof)
        c.close()
        self.assertEqual(curl(self.h2c("/small.txt"), "--http2-prior-knowledge")[1], 200)

    def raw_session(self, server=None):
        """A socket that has sent the preface and an empty SETTINGS."""
        s = socket.create_connection(("127.0.0.1", (server or self.server).port), timeout=10)
        s.sendall(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + hyperframe.frame.SettingsFrame(0).serialize())
        return s

    def until_closed(self, s, timeout=10):
        """Reads until the server closes; returns the frames' bytes."""
        s.settimeout(timeout)
        got = b""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                d = s.recv(65536)
            except (ConnectionResetError, socket.timeout):
                break
            if not d:
                break
            got += d
        return got

    def test_continuation_flood_gets_goaway(self):
        s = self.raw_session()
        block = hpack.Encoder().encode([(":method", "GET"), (":scheme", "http"),
                                        (":path", "/"), (":authority", "localhost")])
        frames = hyperframe.frame.HeadersFrame(1, block).serialize()
        for _ in range(1000):
            frames += hyperframe.frame.ContinuationFrame(1, b"").serialize()
        s.sendall(frames)
        got = self.until_closed(s)
        self.assertTrue(any(got[i + 3] == 0x07 for i in self._frame_offsets(got)), "no GOAWAY")
        s.close()

    @staticmethod
    def _frame_offsets(data):
        i = 0
        while i + 9 <= len(data):
            yield i
            i += 9 + int.from_bytes(data[i:i + 3], "big")

    def test_ping_and_settings_floods_end_the_connection_not_the_server(self):
        # Frames whose answers are never read (the attack: CVE-2019-9512, 9515). Past what the
        # sockets hold, the answers wait in nghttp2's queue and past its bound (1,000) the
        # connection ends as a flood; a loop that stops reading while its send is stuck ends it
        # by the send timeout instead (the epoll tier's way: cut between one and two timeouts
        # after its last progress, hence a short one). Either way it ends, without a byte of it
        # read.
        server = self.start("--send-timeout-ms", "500", *ADMIN)
        try:
            for frame in (hyperframe.frame.PingFrame(0, b"12345678"),
                          hyperframe.frame.SettingsFrame(0)):
                s = self.raw_session(server)
                s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
                one = frame.serialize() * 500
                try:
                    for _ in range(4000):  # 2,000,000 frames, more than loopback's buffers hold
                        s.sendall(one)
                except OSError:
                    pass  # closed on us
                wait_for(lambda: server.connections().get("open", 0) == 0,
                         "the %s flood's connection to end" % type(frame).__name__, timeout=30)
                s.close()
            self.assertEqual(curl("http://127.0.0.1:%d/small.txt" % server.port,
                                  "--http2-prior-knowledge")[1], 200)
        finally:
            self.assertEqual(server.stop(), 0)

    def test_access_log_and_metrics_say_http2(self):
        curl(self.h2c("/small.txt?h2c-log"), "--http2-prior-knowledge")
        self.curl_tls("/small.txt?h2-log", "--http2")
        def logged():
            if not os.path.exists(self.log):
                return False
            with open(self.log) as f:
                return "h2-log" in f.read()
        wait_for(logged, "the access log line")
        with open(self.log) as f:
            text = f.read()
        self.assertRegex(text, r'"GET /small.txt\?h2c-log HTTP/2.0" 200 612 ')
        self.assertRegex(text, r'"GET /small.txt\?h2-log HTTP/2.0" 200 612 ')
        self.assertGreaterEqual(self.server.metric("ringd_http2_connections_total"), 2)
        self.assertGreaterEqual(self.server.metric("ringd_http2_streams_total"), 2)

    def test_drain_lets_streams_in_flight_finish(self):
        server = self.start(*ADMIN)
        out = os.path.join(self.pki, "drained.bin")
        for url, args in ((self.h2c_of(server, "/large.bin"), ["--http2-prior-knowledge"]),):
            client = subprocess.Popen(["curl", "-s", "--limit-rate", "2M", "-o", out, "-w",
                                       "%{http_version} %{http_code} %{size_download}", *args,
                                       url], stdout=subprocess.PIPE, text=True)
            wait_for(lambda: os.path.exists(out) and os.path.getsize(out) > 100000,
                     "the download to begin")
            server.proc.send_signal(signal.SIGTERM)
            version, status, size = client.communicate(timeout=30)[0].split()
            self.assertEqual((version, status), ("2", "200"))
            with open(out, "rb") as f:
                self.assertEqual(f.read(), self.files["large.bin"])
        self.assertEqual(server.stop(), 0)

    @staticmethod
    def h2c_of(server, path):
        return "http://127.0.0.1:%d%s" % (server.port, path)

    def test_priorities_urgent_stream_first(self):
        # RFC 9218: a stream of urgency 0 goes before one of urgency 7 asked for first, even
        # when both want the whole connection window.
        c = H2Client(self.server.port)
        late = c.request("/large.bin", extra=[("priority", "u=7")])
        urgent = c.request("/large.bin", extra=[("priority", "u=0")])
        self.assertTrue(c.pump(lambda: urgent in c.ended, timeout=30))
        self.assertLess(len(c.bodies.get(late, b"")), len(self.files["large.bin"]) // 2)
        self.assertTrue(c.pump(lambda: late in c.ended, timeout=30))
        self.assertEqual(c.bodies[late], self.files["large.bin"])
        c.close()

    def test_idle_h2_connections_give_way_to_newcomers(self):
        server = self.start("--max-connections", "4", "--shards", "1", *ADMIN)
        try:
            idle = []
            for _ in range(4):
                c = H2Client(server.port)
                sid = c.request("/small.txt")
                self.assertTrue(c.pump(lambda: sid in c.ended))
                idle.append(c)
            # The fifth finds every slot taken by an idle HTTP/2 connection: one gives way
            # (GOAWAY), and the newcomer is served.
            self.assertEqual(curl(self.h2c_of(server, "/small.txt"))[1], 200)

            def gave_way():  # what has come on each idle connection, until one has its GOAWAY
                for c in idle:
                    c.pump(lambda: c.goaway is not None, timeout=0.02)
                return any(c.goaway is not None for c in idle)
            wait_for(gave_way, "an idle HTTP/2 connection to give way (GOAWAY)")
            for c in idle:
                c.close()
        finally:
            self.assertEqual(server.stop(), 0)

    def test_idle_connection_gets_goaway_at_its_timeout(self):
        server = self.start("--keepalive-timeout-ms", "300")
        try:
            c = H2Client(server.port)
            sid = c.request("/small.txt")
            self.assertTrue(c.pump(lambda: sid in c.ended))
            self.assertTrue(c.pump(lambda: c.goaway is not None, timeout=5))
            self.assertEqual(c.goaway, (sid, h2.errors.ErrorCodes.NO_ERROR))
            c.pump(lambda: False, timeout=3)
            self.assertTrue(c.eof)
            c.close()
        finally:
            self.assertEqual(server.stop(), 0)


class Http2SendfileTest(Http2Test):
    """The tests whose file bodies take the h2c DATA path, with --http2-sendfile (each payload
    sent with sendfile behind its frame header): the default path's suite covers the rest."""
    FLAGS = ("--http2-sendfile",)
    TESTS = (
        "test_every_file_byte_for_byte_over_h2c_and_h2",
        "test_a_window_held_shut_is_cut_by_the_send_timeout",
        "test_flow_control_stalls_are_counted_by_window",
        "test_a_file_truncated_under_its_stream_ends_the_connection_never_a_wrong_byte",
        "test_h2c_file_payloads_take_the_configured_data_path",
        "test_h2c_file_bodies_ranges_and_a_reset_share_a_slow_connection",
        "test_many_h2c_streams_of_file_bodies",
        "test_drain_lets_streams_in_flight_finish",
    )


def load_tests(loader, tests, pattern):
    suite = unittest.TestSuite(loader.loadTestsFromTestCase(Http2Test))
    suite.addTests(Http2SendfileTest(name) for name in Http2SendfileTest.TESTS)
    return suite


if __name__ == "__main__":
    unittest.main()
