"""HTTPS on the real ringd binary, on one io backend (RINGD_IO): real clients (Python's ssl, curl,
openssl s_client) against --listen-tls, with certificates signed by a test CA the test makes with
the openssl command line."""
import email.utils
import json
import os
import shutil
import signal
import socket
import ssl
import subprocess
import tempfile
import threading
import time
import unittest

from ringd_harness import (ADMIN, BackendTestCase, Reader, Server, RINGD, ROOT_FLAGS, admin_get,
                           make_docroot, request, wait_for)
from tls_pki import issue, make_pki, ocsp_response, openssl, stale_ocsp_response


class TlsTest(BackendTestCase):
    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        cls.root, cls.files = make_docroot()
        cls.pki = tempfile.mkdtemp(prefix="ringd-tls-")
        make_pki(cls.pki)
        p = lambda n: os.path.join(cls.pki, n)
        cls.server = Server(cls.root, "--listen-tls", "127.0.0.1:0",
                            "--tls-cert", p("localhost-ec.crt"), "--tls-key", p("localhost-ec.key"),
                            "--tls-cert", p("localhost-rsa.crt"), "--tls-key", p("localhost-rsa.key"),
                            "--tls-cert", p("other-ec.crt"), "--tls-key", p("other-ec.key"),
                            "--header-timeout-ms", "5000")
        assert cls.server.tls_port, cls.server.log

    @classmethod
    def tearDownClass(cls):
        rc = cls.server.stop()
        shutil.rmtree(cls.root, ignore_errors=True)
        shutil.rmtree(cls.pki, ignore_errors=True)
        assert rc == 0, cls.server.log

    def context(self, **kw):
        ctx = ssl.create_default_context(cafile=os.path.join(self.pki, "ca.crt"))
        for k, v in kw.items():
            setattr(ctx, k, v)
        return ctx

    def tls(self, ctx=None, name="localhost", session=None):
        raw = socket.create_connection(("127.0.0.1", self.server.tls_port), timeout=10)
        return (ctx or self.context()).wrap_socket(raw, server_hostname=name, session=session)

    def get(self, s, target, headers="", method="GET"):
        s.sendall(("%s %s HTTP/1.1\r\nHost: localhost\r\n%s\r\n" % (method, target, headers))
                  .encode())
        return Reader(s).read_response(head_request=method == "HEAD")

    def test_get_head_range_and_conditionals(self):
        with self.tls() as s:
            r = self.get(s, "/small.txt")
            self.assertEqual(r.status, 200)
            self.assertEqual(r.body, self.files["small.txt"])
            etag = r.header("etag")
            r = Reader(s)
            s.sendall(b"HEAD /small.txt HTTP/1.1\r\nHost: localhost\r\n\r\n")
            head = r.read_response(head_request=True)
            self.assertEqual(head.status, 200)
            self.assertEqual(head.header("content-length"), str(len(self.files["small.txt"])))
            s.sendall(b"GET /medium.bin HTTP/1.1\r\nHost: localhost\r\nRange: bytes=100-199\r\n\r\n")
            part = r.read_response()
            self.assertEqual(part.status, 206)
            self.assertEqual(part.body, self.files["medium.bin"][100:200])
            s.sendall(("GET /small.txt HTTP/1.1\r\nHost: localhost\r\nIf-None-Match: %s\r\n\r\n"
                       % etag).encode())
            self.assertEqual(r.read_response().status, 304)

    def test_pipelined_requests_and_a_large_body(self):
        with self.tls() as s:
            s.sendall(b"GET /small.txt HTTP/1.1\r\nHost: localhost\r\n\r\n"
                      b"GET /large.bin HTTP/1.1\r\nHost: localhost\r\n\r\n"
                      b"GET /index.html HTTP/1.1\r\nHost: localhost\r\n\r\n")
            r = Reader(s)
            self.assertEqual(r.read_response().body, self.files["small.txt"])
            self.assertEqual(r.read_response().body, self.files["large.bin"])
            self.assertEqual(r.read_response().body, self.files["index.html"])

    def test_curl_verifies_the_chain_and_reads_every_byte(self):
        out = subprocess.run(
            ["curl", "-sS", "--cacert", os.path.join(self.pki, "ca.crt"), "--resolve",
             "localhost:%d:127.0.0.1" % self.server.tls_port,
             "https://localhost:%d/large.bin" % self.server.tls_port,
             "https://localhost:%d/medium.bin" % self.server.tls_port],
            capture_output=True, timeout=60)
        self.assertEqual(out.returncode, 0, out.stderr)
        self.assertEqual(out.stdout, self.files["large.bin"] + self.files["medium.bin"])

    def test_openssl_s_client_verifies_and_gets_a_page(self):
        out = subprocess.run(
            ["openssl", "s_client", "-connect", "127.0.0.1:%d" % self.server.tls_port,
             "-servername", "localhost", "-CAfile", os.path.join(self.pki, "ca.crt"),
             "-verify_return_error", "-ign_eof"],
            input=b"GET /small.txt HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n",
            capture_output=True, timeout=30)
        self.assertIn(b"Verify return code: 0 (ok)", out.stdout)
        self.assertIn(b"HTTP/1.1 200 OK", out.stdout)
        self.assertIn(self.files["small.txt"], out.stdout)

    def test_alpn_and_versions(self):
        ctx = self.context()
        ctx.set_alpn_protocols(["h2", "http/1.1"])
        with self.tls(ctx) as s:
            self.assertEqual(s.selected_alpn_protocol(), "h2")  # --http2, the default
            self.assertEqual(s.version(), "TLSv1.3")
        ctx.set_alpn_protocols(["http/1.1"])
        with self.tls(ctx) as s:
            self.assertEqual(s.selected_alpn_protocol(), "http/1.1")
        ctx = self.context(maximum_version=ssl.TLSVersion.TLSv1_2)
        with self.tls(ctx) as s:
            self.assertEqual(s.version(), "TLSv1.2")
            self.assertIn("GCM", s.cipher()[0] + "CHACHA" if "CHACHA" in s.cipher()[0] else
                          s.cipher()[0])
            self.assertEqual(self.get(s, "/small.txt").status, 200)
        # TLS 1.1 and older are refused with an alert.
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
        ctx.minimum_version = ssl.TLSVersion.MINIMUM_SUPPORTED
        ctx.maximum_version = ssl.TLSVersion.TLSv1_1
        try:
            ctx.set_ciphers("ALL:@SECLEVEL=0")
        except ssl.SSLError:
            pass
        with self.assertRaises((ssl.SSLError, ConnectionResetError)):
            self.tls(ctx).close()

    def test_sni_and_key_type_choose_the_certificate(self):
        def served(name, ctx=None):
            ctx = ctx or self.context()
            with self.tls(ctx, name=name) as s:
                der = s.getpeercert(binary_form=True)
            pem = ssl.DER_cert_to_PEM_cert(der)
            out = subprocess.run(["openssl", "x509", "-noout", "-subject", "-text"],
                                 input=pem.encode(), capture_output=True, timeout=10).stdout
            return out.split(b"\n")[0].decode(), b"id-ecPublicKey" in out

        self.assertEqual(served("localhost"), ("subject=CN = localhost", True))
        self.assertEqual(served("other.test"), ("subject=CN = other.test", True))
        # A client that verifies RSA signatures only (TLS 1.2, RSA suites) gets the RSA one.
        ctx = self.context(maximum_version=ssl.TLSVersion.TLSv1_2)
        ctx.set_ciphers("ECDHE-RSA-AES128-GCM-SHA256")
        self.assertEqual(served("localhost", ctx), ("subject=CN = localhost", False))

    def test_sessions_resume_on_both_versions(self):
        for version in [ssl.TLSVersion.TLSv1_2, ssl.TLSVersion.TLSv1_3]:
            ctx = self.context(maximum_version=version)
            with self.tls(ctx) as s:
                self.assertEqual(self.get(s, "/small.txt").status, 200)  # TLS 1.3: tickets read
                session = s.session
            self.assertTrue(session.has_ticket, version)
            with self.tls(ctx, session=session) as s:
                self.assertTrue(s.session_reused, version)
                self.assertEqual(self.get(s, "/small.txt").status, 200)

    def test_each_resumption_gets_a_new_ticket_that_resumes_in_turn(self):
        """Browsers offer a TLS 1.3 ticket once (RFC 8446 appendix C.4): a resumed connection is
        sent a new ticket, and that one resumes the next connection, link after link."""
        work = tempfile.mkdtemp(prefix="ringd-tickets-")
        try:
            def connect(n, sess_in=None):
                sess_out = os.path.join(work, "ticket%d.pem" % n)
                args = ["openssl", "s_client", "-connect", "127.0.0.1:%d" % self.server.tls_port,
                        "-servername", "localhost", "-CAfile", os.path.join(self.pki, "ca.crt"),
                        "-verify_return_error", "-tls1_3", "-ign_eof", "-sess_out", sess_out]
                if sess_in is not None:
                    args += ["-sess_in", sess_in]
                out = subprocess.run(
                    args, capture_output=True, timeout=30,
                    input=b"GET /small.txt HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n")
                self.assertIn(b"HTTP/1.1 200 OK", out.stdout)
                # s_client writes -sess_out as each ticket arrives: none came, no file.
                self.assertTrue(os.path.exists(sess_out), "connection %d got no ticket" % n)
                reused = b"Reused, TLSv1.3" in out.stdout
                with open(sess_out, "rb") as f:
                    return reused, f.read()

            reused, first = connect(1)
            self.assertFalse(reused)
            reused, second = connect(2, os.path.join(work, "ticket1.pem"))
            self.assertTrue(reused)
            self.assertNotEqual(second, first)
            reused, third = connect(3, os.path.join(work, "ticket2.pem"))
            self.assertTrue(reused, "the ticket a resumption got resumes in turn")
            self.assertNotEqual(third, second)
        finally:
            shutil.rmtree(work, ignore_errors=True)

    def test_tickets_off_means_no_resumption_on_either_version(self):
        p = lambda n: os.path.join(self.pki, n)
        server = Server(self.root, "--listen-tls", "127.0.0.1:0", "--tls-tickets", "0",
                        "--tls-cert", p("localhost-ec.crt"), "--tls-key", p("localhost-ec.key"))
        try:
            for version in [ssl.TLSVersion.TLSv1_2, ssl.TLSVersion.TLSv1_3]:
                ctx = self.context(maximum_version=version)
                raw = socket.create_connection(("127.0.0.1", server.tls_port), timeout=10)
                with ctx.wrap_socket(raw, server_hostname="localhost") as s:
                    self.assertEqual(self.get(s, "/small.txt").status, 200)
                    session = s.session
                self.assertFalse(session.has_ticket, version)
                raw = socket.create_connection(("127.0.0.1", server.tls_port), timeout=10)
                with ctx.wrap_socket(raw, server_hostname="localhost", session=session) as s:
                    self.assertFalse(s.session_reused, version)
                    self.assertEqual(self.get(s, "/small.txt").status, 200)
        finally:
            self.assertEqual(server.stop(), 0, server.log)

    def test_a_closing_response_ends_with_close_notify(self):
        with self.tls() as s:
            r = self.get(s, "/small.txt", "Connection: close\r\n")
            self.assertEqual(r.status, 200)
            # Python's ssl raises SSLEOFError on an end of stream without close_notify.
            self.assertEqual(s.recv(100), b"")

    def test_plain_http_to_the_tls_port_gets_400_and_a_close(self):
        with socket.create_connection(("127.0.0.1", self.server.tls_port), timeout=10) as s:
            s.sendall(b"GET / HTTP/1.1\r\nHost: localhost\r\n\r\n")
            r = Reader(s).read_response()
            self.assertEqual(r.status, 400)
            self.assertIn(b"HTTPS port", r.body)
            # RFC 9110 section 6.6.1: an origin with a clock sends Date, on this answer too.
            date = email.utils.parsedate_to_datetime(r.header("date"))
            self.assertLess(abs(time.time() - date.timestamp()), 5)
            self.assertTrue(Reader(s).at_eof())

    def test_plain_http_to_the_tls_port_is_logged_and_counted(self):
        # As nginx: its 400 is a response like any other, in the access log with its request
        # line and in ringd_requests_total.
        d = tempfile.mkdtemp(prefix="ringd-tls-log-")
        log = os.path.join(d, "access.log")
        p = lambda n: os.path.join(self.pki, n)
        server = Server(self.root, "--listen-tls", "127.0.0.1:0", "--tls-cert",
                        p("localhost-ec.crt"), "--tls-key", p("localhost-ec.key"),
                        "--access-log", log, "--shards", "1", *ADMIN)
        try:
            with socket.create_connection(("127.0.0.1", server.tls_port), timeout=10) as s:
                s.sendall(b"GET /small.txt?plain HTTP/1.1\r\nHost: localhost\r\n\r\n")
                r = Reader(s).read_response()
                self.assertEqual(r.status, 400)
                self.assertIn(b"The plain HTTP request was sent to HTTPS port", r.body)
                self.assertEqual(r.header("content-length"), str(len(r.body)))
                self.assertTrue(Reader(s).at_eof())
            wait_for(lambda: server.metric("ringd_requests_total", code="4xx") == 1,
                     "the 400 to be counted")
            self.assertEqual(server.metric("ringd_requests_total"), 1)
            self.assertEqual(server.metric("ringd_tls_plain_http_total"), 1)
        finally:
            self.assertEqual(server.stop(), 0)
        with open(log) as f:
            lines = f.read().splitlines()
        shutil.rmtree(d, ignore_errors=True)
        self.assertEqual(len(lines), 1, lines)
        self.assertIn('"GET /small.txt?plain HTTP/1.1" 400 ', lines[0])

    def test_tls_to_the_plain_port_is_refused_and_serving_goes_on(self):
        # A real ClientHello: the plaintext parser answers 400 at its first byte (no method
        # holds 0x16), at once, not after --header-timeout-ms (nginx answers 400 at once too).
        out = ssl.MemoryBIO()
        hello = self.context().wrap_bio(ssl.MemoryBIO(), out, server_hostname="localhost")
        with self.assertRaises(ssl.SSLWantReadError):
            hello.do_handshake()
        start = time.monotonic()
        with socket.create_connection(("127.0.0.1", self.server.port), timeout=3) as raw:
            raw.sendall(out.read())
            got = b""
            while True:
                chunk = raw.recv(4096)
                if not chunk:
                    break
                got += chunk
        self.assertTrue(got.startswith(b"HTTP/1.1 400 "), got[:100])
        self.assertLess(time.monotonic() - start, 2)
        with self.tls() as s:
            self.assertEqual(self.get(s, "/small.txt").status, 200)

    def test_garbage_gets_an_alert_and_a_close(self):
        with socket.create_connection(("127.0.0.1", self.server.tls_port), timeout=10) as s:
            s.sendall(b"\x16\x03\x01\x00\x08\x01\x00\x00\x04junk")
            got = b""
            while True:
                chunk = s.recv(100)
                if not chunk:
                    break
                got += chunk
            self.assertEqual(got[:1], b"\x15")  # an alert record, then the close

    def test_a_handshake_that_never_comes_gives_way(self):
        # --header-timeout-ms covers the handshake: the silent client is closed. A server of its
        # own, with 1 s: the class's has 5 s, in which a loaded machine's handshakes finish.
        p = lambda n: os.path.join(self.pki, n)
        server = Server(self.root, "--listen-tls", "127.0.0.1:0", "--tls-cert",
                        p("localhost-ec.crt"), "--tls-key", p("localhost-ec.key"),
                        "--header-timeout-ms", "1000")
        try:
            with socket.create_connection(("127.0.0.1", server.tls_port), timeout=10) as s:
                start = time.monotonic()
                self.assertEqual(s.recv(100), b"")
                self.assertGreaterEqual(time.monotonic() - start, 0.9)  # closed by the timeout
        finally:
            self.assertEqual(server.stop(), 0)

    def test_sighup_reloads_certificates_under_load_without_a_failed_request(self):
        d = tempfile.mkdtemp(prefix="ringd-tls-reload-")
        try:
            for n in ["localhost-ec.crt", "localhost-ec.key"]:
                shutil.copy(os.path.join(self.pki, n), os.path.join(d, n))
            server = Server(self.root, "--listen-tls", "127.0.0.1:0",
                            "--tls-cert", os.path.join(d, "localhost-ec.crt"),
                            "--tls-key", os.path.join(d, "localhost-ec.key"))
            ctx = self.context()

            def serial():
                raw = socket.create_connection(("127.0.0.1", server.tls_port), timeout=10)
                with ctx.wrap_socket(raw, server_hostname="localhost") as s:
                    return s.getpeercert()["serialNumber"]

            failures, done, stop = [], [0], threading.Event()

            def load():  # new connections, full handshakes, each with a request
                while not stop.is_set():
                    try:
                        raw = socket.create_connection(("127.0.0.1", server.tls_port), timeout=10)
                        with ctx.wrap_socket(raw, server_hostname="localhost") as s:
                            s.sendall(b"GET /small.txt HTTP/1.1\r\nHost: localhost\r\n\r\n")
                            if Reader(s).read_response().body != self.files["small.txt"]:
                                failures.append("wrong body")
                        done[0] += 1
                    except Exception as e:  # noqa: BLE001 - every failure is counted
                        failures.append(repr(e))

            before = serial()
            threads = [threading.Thread(target=load) for _ in range(3)]
            for t in threads:
                t.start()
            # A new certificate (same CA and names, another serial), then SIGHUP, three times.
            for i in range(3):
                openssl("x509", "-req", "-in", os.path.join(self.pki, "localhost-ec.csr"),
                        "-CA", "ca.crt", "-CAkey", "ca.key", "-CAcreateserial", "-days", "2",
                        "-extfile", "localhost-ec.ext",
                        "-out", os.path.join(d, "localhost-ec.crt"), cwd=self.pki)
                server.proc.send_signal(signal.SIGHUP)
                deadline = time.time() + 10
                while serial() == before and time.time() < deadline:
                    time.sleep(0.05)
                after = serial()
                self.assertNotEqual(after, before, "reload %d did not take" % i)
                before = after
            # A reload that fails (a key that is not the certificate's) keeps what serves.
            shutil.copy(os.path.join(self.pki, "other-ec.key"), os.path.join(d, "localhost-ec.key"))
            server.proc.send_signal(signal.SIGHUP)
            wait_for(lambda: server.logged("SIGHUP: keeping the certificates in use"),
                     "the failed reload logged")
            self.assertEqual(serial(), before)
            stop.set()
            for t in threads:
                t.join(30)
            self.assertEqual(server.stop(), 0)
            self.assertEqual(failures, [])
            self.assertGreater(done[0], 0)
            self.assertEqual(len([l for l in server.log
                                  if "SIGHUP: TLS certificates reloaded (1)" in l]), 3,
                             server.log)
            self.assertTrue(any("SIGHUP: keeping the certificates in use: --tls-key" in l
                                for l in server.log), server.log)
        finally:
            shutil.rmtree(d, ignore_errors=True)

    def test_metrics_count_handshakes_and_show_certificate_expiry(self):
        p = lambda n: os.path.join(self.pki, n)
        server = Server(self.root, "--listen-tls", "127.0.0.1:0", "--admin-listen", "127.0.0.1:0",
                        "--tls-cert", p("localhost-ec.crt"), "--tls-key", p("localhost-ec.key"))
        try:
            admin = [l for l in server.log if "admin listener on" in l][0].rsplit(":", 1)[1]
            ctx = self.context()
            for _ in range(2):
                raw = socket.create_connection(("127.0.0.1", server.tls_port), timeout=10)
                with ctx.wrap_socket(raw, server_hostname="localhost") as s:
                    s.sendall(b"GET /small.txt HTTP/1.1\r\nHost: localhost\r\n\r\n")
                    Reader(s).read_response()
            with socket.create_connection(("127.0.0.1", server.tls_port), timeout=10) as s:
                s.sendall(b"GET / HTTP/1.1\r\nHost: localhost\r\n\r\n")
                Reader(s).read_response()
            with socket.create_connection(("127.0.0.1", int(admin)), timeout=10) as s:
                s.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
                text = Reader(s).read_response().body.decode()
            total = lambda name: sum(int(l.split()[-1]) for l in text.splitlines()
                                     if l.startswith(name + "{"))
            self.assertEqual(total("ringd_tls_handshakes_total"), 2)
            self.assertEqual(total("ringd_tls_plain_http_total"), 1)
            expiry = [l for l in text.splitlines()
                      if l.startswith("ringd_tls_certificate_expiry_seconds{")]
            self.assertEqual(len(expiry), 1, text)
            self.assertIn("localhost-ec.crt", expiry[0])
            self.assertGreater(int(expiry[0].split()[-1]), time.time())
        finally:
            self.assertEqual(server.stop(), 0)

    def test_a_failed_handshake_is_a_line_in_the_error_log_at_info(self):
        p = lambda n: os.path.join(self.pki, n)
        log = os.path.join(self.pki, "error.log")
        server = Server(self.root, "--listen-tls", "127.0.0.1:0", "--error-log", log,
                        "--error-log-level", "info",
                        "--tls-cert", p("localhost-ec.crt"), "--tls-key", p("localhost-ec.key"))
        try:
            # A handshake record whose ClientHello is garbage.
            with socket.create_connection(("127.0.0.1", server.tls_port), timeout=10) as s:
                s.sendall(b"\x16\x03\x01\x00\x08garbage!")
                s.settimeout(10)
                while s.recv(4096):
                    pass
        finally:
            self.assertEqual(server.stop(), 0)
        with open(log) as f:
            lines = f.read().splitlines()
        self.assertEqual(len(lines), 1, lines)
        self.assertRegex(lines[0], r"^\d{4}/\d{2}/\d{2} \d{2}:\d{2}:\d{2} \[info\] shard [01]: "
                                   r"TLS handshake failed, client: \S+$")

    def test_handshakes_beyond_the_bound_are_closed_at_accept(self):
        p = lambda n: os.path.join(self.pki, n)
        # Not deferred: the stalled clients would reach the shard a second late (limits_test's
        # DeferredAcceptTest); this is what it does with those it holds.
        server = Server(self.root, "--listen-tls", "127.0.0.1:0", "--shards", "1",
                        "--tls-max-handshakes", "2", "--defer-accept=false",
                        "--tls-cert", p("localhost-ec.crt"), "--tls-key", p("localhost-ec.key"))
        ctx = self.context()

        def handshake():
            raw = socket.create_connection(("127.0.0.1", server.tls_port), timeout=10)
            try:
                with ctx.wrap_socket(raw, server_hostname="localhost") as s:
                    s.sendall(b"GET /small.txt HTTP/1.1\r\nHost: localhost\r\n\r\n")
                    return Reader(s).read_response().status == 200
            except (ssl.SSLError, OSError, EOFError):
                return False

        try:
            # Two clients that connect and never say hello hold both handshake places.
            stalled = [socket.create_connection(("127.0.0.1", server.tls_port), timeout=10)
                       for _ in range(2)]
            deadline = time.time() + 10
            refused = False
            while not refused and time.time() < deadline:
                refused = not handshake()
            self.assertTrue(refused, "a third handshake was let in beside two stalled ones")
            stalled[0].close()  # a place frees: handshakes go through again
            ok = False
            while not ok and time.time() < deadline + 10:
                ok = handshake()
            self.assertTrue(ok)
            stalled[1].close()
        finally:
            self.assertEqual(server.stop(), 0)

    def test_redirect_https_sends_plain_requests_to_the_tls_port(self):
        p = lambda n: os.path.join(self.pki, n)
        server = Server(self.root, "--listen-tls", "127.0.0.1:0", "--redirect-https",
                        "--add-header", "Strict-Transport-Security: max-age=31536000",
                        "--tls-cert", p("localhost-ec.crt"), "--tls-key", p("localhost-ec.key"))
        try:
            with server.connect() as s:
                s.sendall(b"GET /small.txt?v=1 HTTP/1.1\r\nHost: localhost:%d\r\n\r\n" % server.port)
                r = Reader(s).read_response()
            self.assertEqual(r.status, 301)
            self.assertEqual(r.header("location"),
                             "https://localhost:%d/small.txt?v=1" % server.tls_port)
            # A resource's OPTIONS (a CORS preflight) is redirected too; the added headers
            # (HSTS here) go out over TLS alone, OPTIONS * included (RFC 6797 section 7.2).
            for target, status in ((b"/small.txt", 301), (b"*", 200)):
                with server.connect() as s:
                    s.sendall(b"OPTIONS %s HTTP/1.1\r\nHost: localhost\r\n\r\n" % target)
                    r = Reader(s).read_response()
                self.assertEqual(r.status, status, target)
                self.assertIsNone(r.header("strict-transport-security"), target)
            out = subprocess.run(["curl", "-sSL", "--cacert", p("ca.crt"),
                                  "http://localhost:%d/small.txt" % server.port],
                                 capture_output=True, timeout=30)
            self.assertEqual(out.returncode, 0, out.stderr)
            self.assertEqual(out.stdout, self.files["small.txt"])  # followed to HTTPS
        finally:
            self.assertEqual(server.stop(), 0)

    def test_bad_certificate_flags_are_one_line(self):
        p = lambda n: os.path.join(self.pki, n)
        for flags, code, says in [
                (["--tls-cert", p("localhost-ec.crt"), "--tls-key", p("other-ec.key")], 1,
                 "is not the key of"),
                (["--tls-cert", p("missing.crt"), "--tls-key", p("other-ec.key")], 1,
                 "cannot read"),
                (["--tls-cert", p("localhost-ec.crt")], 2, "come in pairs"),
                (["--tls-cert", p("localhost-ec.crt"), "--tls-key", p("localhost-ec.key"),
                  "--tls-ocsp", p("localhost-ec.crt")], 1, "holds no DER OCSP response"),
                (["--tls-cert", p("localhost-ec.crt"), "--tls-key", p("localhost-ec.key"),
                  "--tls-ocsp", p("missing.ocsp")], 1, "--tls-ocsp: cannot read"),
                ([], 2, "--listen-tls needs a certificate"),
                (["--tls-cert", p("localhost-ec.crt"), "--tls-key", p("localhost-ec.key"),
                  "--redirect-https"], 2, "--redirect-https needs --listen")]:
            out = subprocess.run([RINGD, "--root", self.root, "--listen-tls", "127.0.0.1:0"] +
                                 flags + ROOT_FLAGS, capture_output=True, text=True, timeout=10)
            self.assertEqual(out.returncode, code, out.stderr)
            lines = out.stderr.strip().splitlines()
            self.assertEqual(len(lines), 1, out.stderr)
            self.assertIn(says, lines[0])

    def s_client_status(self, port):
        """What `openssl s_client -status` prints of the server's OCSP staple."""
        out = subprocess.run(
            ["openssl", "s_client", "-connect", "127.0.0.1:%d" % port, "-servername", "localhost",
             "-CAfile", os.path.join(self.pki, "ca.crt"), "-verify_return_error", "-status"],
            input=b"", capture_output=True, timeout=30)
        self.assertIn(b"Verify return code: 0 (ok)", out.stdout)
        return out.stdout.decode(errors="replace")

    def test_ocsp_response_stapled_from_a_file_and_kept_through_a_failed_reload(self):
        issue(self.pki, "stapled", 3600)
        ocsp_response(self.pki, "stapled", "stapled.ocsp")
        p = lambda n: os.path.join(self.pki, n)
        server = Server(self.root, "--listen-tls", "127.0.0.1:0", "--tls-cert",
                        p("stapled-chain.crt"), "--tls-key", p("stapled.key"), "--tls-ocsp",
                        p("stapled.ocsp"), *ADMIN)
        try:
            out = self.s_client_status(server.tls_port)
            self.assertIn("OCSP Response Status: successful", out)
            self.assertIn("Cert Status: good", out)
            next_update = server.metric("ringd_tls_ocsp_next_update_seconds",
                                        ocsp=p("stapled.ocsp"))
            self.assertGreater(next_update, time.time() + 3600)
            # A reload that finds a broken response keeps the generation in use, staple and all.
            with open(p("stapled.ocsp"), "wb") as f:
                f.write(b"not DER")
            server.proc.send_signal(signal.SIGHUP)
            wait_for(lambda: server.logged("keeping the certificates in use: --tls-ocsp"),
                     what="the failed reload's line")
            self.assertIn("Cert Status: good", self.s_client_status(server.tls_port))
            # Without a staple, a client that asks gets none.
            plain = self.s_client_status(self.server.tls_port)
            self.assertIn("OCSP response: no response sent", plain)
        finally:
            self.assertEqual(server.stop(), 0)

    def test_readyz_fails_once_a_certificate_has_expired_under_tls_expired_refuse(self):
        issue(self.pki, "short", 6)
        p = lambda n: os.path.join(self.pki, n)
        server = Server(self.root, "--listen-tls", "127.0.0.1:0", "--tls-cert", p("short.crt"),
                        "--tls-key", p("short.key"), "--tls-expired=refuse", *ADMIN)
        try:
            port = server.admin_port()
            self.assertEqual(admin_get(port, "/readyz"), (200, "ready\n"))
            status, body = wait_for(lambda: (lambda r: r if r[0] != 200 else None)(
                admin_get(port, "/readyz")), what="/readyz to fail", timeout=20)
            self.assertEqual(status, 503)
            self.assertIn("short.crt' expired", body)
            self.assertEqual(admin_get(port, "/healthz")[0], 200)  # alive, just not ready
        finally:
            self.assertEqual(server.stop(), 0)

    def s_client_serial_and_status(self, port):
        """The serial of the certificate served, and what s_client -status says of its staple."""
        out = self.s_client_status(port)
        with tempfile.NamedTemporaryFile("w", suffix=".pem") as f:
            f.write(out[out.index("-----BEGIN CERTIFICATE-----"):
                        out.index("-----END CERTIFICATE-----") + 25] + "\n")
            f.flush()
            serial = subprocess.run(["openssl", "x509", "-in", f.name, "-noout", "-serial"],
                                    capture_output=True, text=True, check=True).stdout.strip()
        return serial, out

    def test_a_renewal_with_the_old_or_a_stale_staple_reloads_without_it(self):
        """A renewed certificate with the OCSP response fetched for the one before it: SIGHUP
        takes the certificate and leaves the staple out, with a line naming why and a metric
        (never refusing the reload, nor blaming the chain); so does a stale one. A fresh one
        named on a new --tls-ocsp line of the flagfile is stapled at the next SIGHUP."""
        d = tempfile.mkdtemp(prefix="ringd-tls-renew-")
        try:
            issue(self.pki, "renew-a", 3600)
            ocsp_response(self.pki, "renew-a", "renew-a.ocsp")
            issue(self.pki, "renew-b", 7200)  # the renewal: the same CA and names
            ocsp_response(self.pki, "renew-b", "renew-b.ocsp")
            cert, key, staple = (os.path.join(d, n) for n in ("site.crt", "site.key", "site.ocsp"))
            for src, dst in [("renew-a-chain.crt", cert), ("renew-a.key", key),
                             ("renew-a.ocsp", staple)]:
                shutil.copy(os.path.join(self.pki, src), dst)
            flagfile = os.path.join(d, "ringd.conf")
            lines = ["--listen-tls=127.0.0.1:0", "--tls-cert=" + cert, "--tls-key=" + key,
                     "--tls-ocsp=" + staple]
            with open(flagfile, "w") as f:
                f.write("\n".join(lines) + "\n")
            server = Server(self.root, "--flagfile", flagfile, *ADMIN)
            try:
                serial, out = self.s_client_serial_and_status(server.tls_port)
                self.assertIn("Cert Status: good", out)
                self.assertEqual(server.metric("ringd_reload_success"), 1)
                started = server.metric("ringd_reload_timestamp_seconds")
                self.assertGreater(started, 0)
                # The renewal: the new certificate and key over the old, the old staple left.
                shutil.copy(os.path.join(self.pki, "renew-b-chain.crt"), cert)
                shutil.copy(os.path.join(self.pki, "renew-b.key"), key)
                server.proc.send_signal(signal.SIGHUP)
                says = ("--tls-ocsp: '%s' answers for another certificate of the issuer of '%s', "
                        "not for it" % (staple, cert))
                wait_for(lambda: server.logged(says), "the dropped staple's line")
                wait_for(lambda: server.logged("TLS certificates reloaded (1)"), "the reload")
                self.assertFalse([l for l in server.log if "issuer after it" in l or
                                  "keeping the certificates" in l], server.log)
                renewed, out = self.s_client_serial_and_status(server.tls_port)
                self.assertNotEqual(renewed, serial)
                self.assertIn("OCSP response: no response sent", out)
                self.assertEqual(server.metric("ringd_tls_ocsp_dropped", ocsp=staple), 1)
                self.assertEqual(server.metric("ringd_reload_success"), 1)
                # A stale response for the new certificate: dropped too, with its own cause.
                try:
                    stale_ocsp_response(self.pki, "renew-b", "renew-b-stale.ocsp")
                except ImportError as e:
                    raise unittest.SkipTest("no Python cryptography to sign a stale response: %s"
                                            % e)
                shutil.copy(os.path.join(self.pki, "renew-b-stale.ocsp"), staple)
                server.proc.send_signal(signal.SIGHUP)
                wait_for(lambda: server.logged("--tls-ocsp: '%s' is out of date" % staple),
                         "the stale staple's line")
                self.assertIn("OCSP response: no response sent",
                              self.s_client_serial_and_status(server.tls_port)[1])
                self.assertEqual(server.metric("ringd_tls_ocsp_dropped", ocsp=staple), 1)
                # The fresh response under a new name, on a new flagfile line: read at SIGHUP.
                fresh = os.path.join(d, "fresh.ocsp")
                shutil.copy(os.path.join(self.pki, "renew-b.ocsp"), fresh)
                with open(flagfile, "w") as f:
                    f.write("\n".join(lines[:3] + ["--tls-ocsp=" + fresh]) + "\n")
                reloads = sum("TLS certificates reloaded" in l for l in server.log)
                server.proc.send_signal(signal.SIGHUP)
                wait_for(lambda: server.logged("") and sum(
                    "TLS certificates reloaded" in l for l in server.log) > reloads, "the reload")
                out = self.s_client_serial_and_status(server.tls_port)[1]
                self.assertIn("Cert Status: good", out)
                self.assertEqual(server.metric("ringd_tls_ocsp_dropped"), 0)
                self.assertEqual(server.metric("ringd_tls_ocsp_next_update_seconds", ocsp=fresh) > 0,
                                 True)
                self.assertGreaterEqual(server.metric("ringd_reload_timestamp_seconds"), started)
            finally:
                self.assertEqual(server.stop(), 0)
        finally:
            shutil.rmtree(d, ignore_errors=True)

    def test_sighup_reads_the_flagfile_again_and_names_what_needs_a_restart(self):
        """New certificates and origin headers are taken up; what cannot change without a
        restart is named, one line each, and keeps its value; a flagfile that does not parse
        keeps everything as it was, says why, and sets ringd_reload_success to 0 until a reload
        takes."""
        d = tempfile.mkdtemp(prefix="ringd-tls-flagfile-")
        try:
            p = lambda n: os.path.join(self.pki, n)
            flagfile = os.path.join(d, "ringd.conf")
            base = ["--listen-tls=127.0.0.1:0", "--tls-cert=" + p("localhost-ec.crt"),
                    "--tls-key=" + p("localhost-ec.key")]

            def write(extra):
                with open(flagfile, "w") as f:
                    f.write("\n".join(base + extra) + "\n")

            write(["--max-connections=500", "--add-header=X-Generation: one",
                   "--cache-control=*.txt=max-age=60"])
            server = Server(self.root, "--flagfile", flagfile, *ADMIN)
            try:
                reloads = lambda: sum("TLS certificates reloaded" in l for l in server.log)
                r = request(server, "GET", "/small.txt")
                self.assertEqual((r.header("X-Generation"), r.header("Cache-Control")),
                                 ("one", "max-age=60"))
                # A second certificate, new headers, and a flag that needs a restart.
                changed = ["--max-connections=600", "--add-header=X-Generation: two",
                           "--cache-control=*.txt=no-cache", "--error-page=404=/small.txt",
                           "--tls-cert=" + p("other-ec.crt"), "--tls-key=" + p("other-ec.key")]
                write(changed)
                server.proc.send_signal(signal.SIGHUP)
                wait_for(lambda: server.logged("TLS certificates reloaded (2)"), "the reload")
                self.assertTrue(server.logged(
                    "SIGHUP: --max-connections needs a restart: the value in use is kept"))
                self.assertTrue(server.logged("SIGHUP: --add-header, --cache-control, "
                                              "--default-cache-control and --error-page taken up"))
                self.assertFalse([l for l in server.log if "--add-header needs" in l], server.log)
                raw = socket.create_connection(("127.0.0.1", server.tls_port), timeout=10)
                with self.context().wrap_socket(raw, server_hostname="other.test") as s:
                    self.assertEqual(dict(x[0] for x in s.getpeercert()["subject"])["commonName"],
                                     "other.test")
                # Every shard takes the new headers up (two shards: enough connections to see both).
                for _ in range(8):
                    r = request(server, "GET", "/small.txt")
                    self.assertEqual((r.header("X-Generation"), r.header("Cache-Control")),
                                     ("two", "no-cache"))
                    r = request(server, "GET", "/no-such-file")
                    self.assertEqual((r.status, r.body), (404, self.files["small.txt"]))
                self.assertEqual(server.metric("ringd_reload_success"), 1)
                # A flagfile that does not parse: everything stays, and the line says why.
                with open(flagfile, "a") as f:
                    f.write("--no-such-flag=1\n")
                n = reloads()
                server.proc.send_signal(signal.SIGHUP)
                wait_for(lambda: server.logged("SIGHUP: keeping the configuration in use: %s:" %
                                               flagfile), "the refused reload")
                self.assertTrue(server.logged("unknown flag --no-such-flag"))
                self.assertEqual(reloads(), n)
                self.assertEqual(server.metric("ringd_reload_success"), 0)
                r = request(server, "GET", "/small.txt")
                self.assertEqual((r.status, r.header("X-Generation")), (200, "two"))
                # Put right, the same restart line is said again: the value in use was kept.
                write(changed)
                restarts = sum("--max-connections needs a restart" in l for l in server.log)
                server.proc.send_signal(signal.SIGHUP)
                wait_for(lambda: server.logged("") and reloads() > n, "the reload")
                self.assertEqual(
                    sum("--max-connections needs a restart" in l for l in server.log), restarts + 1)
                self.assertEqual(server.metric("ringd_reload_success"), 1)
            finally:
                self.assertEqual(server.stop(), 0)
        finally:
            shutil.rmtree(d, ignore_errors=True)

    def test_a_restart_with_an_expired_certificate_or_stale_staple_keeps_plain_http_up(self):
        """nginx starts with an expired certificate, and so does ringd: a loud line, a metric,
        /readyz 200 with a warning (a fleet keeps the node unless --tls-expired=refuse), and
        plain HTTP served; a stale staple is left out with its own line."""
        issue(self.pki, "expired", -3600, sans="DNS:expired.test", starts_in=-7200)
        issue(self.pki, "stale", 3600)
        try:
            stale_ocsp_response(self.pki, "stale", "stale.ocsp")
            staple = ["--tls-ocsp", os.path.join(self.pki, "stale.ocsp")]
        except ImportError:
            staple = []  # the expired certificate's part still runs
        p = lambda n: os.path.join(self.pki, n)
        server = Server(self.root, "--listen-tls", "127.0.0.1:0",
                        "--tls-cert", p("expired.crt"), "--tls-key", p("expired.key"),
                        "--tls-cert", p("stale-chain.crt"), "--tls-key", p("stale.key"), *staple,
                        *ADMIN)
        try:
            self.assertTrue(server.logged("WARNING: --tls-cert '%s' has expired" % p("expired.crt")),
                            server.log)
            if staple:
                self.assertTrue(server.logged("--tls-ocsp: '%s' is out of date" % staple[1]),
                                server.log)
                self.assertEqual(server.metric("ringd_tls_ocsp_dropped", ocsp=staple[1]), 1)
            r = request(server, "GET", "/small.txt")
            self.assertEqual((r.status, r.body), (200, self.files["small.txt"]))
            self.assertEqual(server.metric("ringd_tls_certificate_expired", file=p("expired.crt")),
                             1)
            self.assertEqual(
                server.metric("ringd_tls_certificate_expired", file=p("stale-chain.crt")), 0)
            status, body = admin_get(server.admin_port(), "/readyz")
            self.assertEqual(status, 200)
            self.assertTrue(body.startswith("ready\nwarning: TLS certificate '%s' expired" %
                                            p("expired.crt")), body)
            # The expired certificate is served, and a client refuses it.
            with self.assertRaises(ssl.SSLCertVerificationError):
                raw = socket.create_connection(("127.0.0.1", server.tls_port), timeout=10)
                with self.context().wrap_socket(raw, server_hostname="expired.test"):
                    pass
        finally:
            self.assertEqual(server.stop(), 0)
        # --tls-expired=refuse: start-up stops, naming the certificate and the flag.
        out = subprocess.run([RINGD, "--root", self.root, "--listen-tls", "127.0.0.1:0",
                              "--tls-cert", p("expired.crt"), "--tls-key", p("expired.key"),
                              "--tls-expired=refuse"] + ROOT_FLAGS,
                             capture_output=True, text=True, timeout=10)
        self.assertEqual(out.returncode, 1, out.stderr)
        self.assertIn("'%s' has expired (--tls-expired=refuse" % p("expired.crt"), out.stderr)

    def test_a_certificate_not_valid_yet_loads_with_a_line(self):
        issue(self.pki, "future", 3 * 86400, starts_in=86400)
        p = lambda n: os.path.join(self.pki, n)
        server = Server(self.root, "--listen-tls", "127.0.0.1:0", "--tls-cert", p("future.crt"),
                        "--tls-key", p("future.key"))
        try:
            says = "--tls-cert '%s' is not valid before " % p("future.crt")
            wait_for(lambda: server.logged(says), "the start-up line")
            server.proc.send_signal(signal.SIGHUP)
            wait_for(lambda: server.logged(says) and sum(says in l for l in server.log) == 2,
                     "the line again after the reload")
        finally:
            self.assertEqual(server.stop(), 0)

    def test_files_the_user_cannot_read_are_named_at_start_up(self):
        if os.geteuid() != 0:
            raise unittest.SkipTest("dropping root needs root; the tests run as uid %d" % os.geteuid())
        # Read as root at start-up; a SIGHUP reads them as the user, and would fail.
        p = lambda n: os.path.join(self.pki, n)
        os.chmod(self.pki, 0o711)  # searchable: only the key's own mode (0600, root's) is in the way
        server = Server(self.root, "--listen-tls", "127.0.0.1:0", "--tls-cert", p("localhost-ec.crt"),
                        "--tls-key", p("localhost-ec.key"), "--user", "nobody")
        try:
            wait_for(lambda: server.logged("--tls-key '%s': nobody can not read it" % p("localhost-ec.key")),
                     "the key's line")
            self.assertFalse([l for l in server.log if "--tls-cert '" in l], server.log)
        finally:
            self.assertEqual(server.stop(), 0)

    def test_access_log_json_names_protocol_cipher_sni_and_resumption(self):
        log = os.path.join(tempfile.mkdtemp(prefix="ringd-tls-log-"), "access.json")
        p = lambda n: os.path.join(self.pki, n)
        server = Server(self.root, "--listen-tls", "127.0.0.1:0", "--tls-cert",
                        p("localhost-ec.crt"), "--tls-key", p("localhost-ec.key"),
                        "--access-log", log, "--access-log-format", "json", "--shards", "1")
        try:
            ctx = self.context()
            for session in [None, "resume"]:
                raw = socket.create_connection(("127.0.0.1", server.tls_port), timeout=10)
                with ctx.wrap_socket(raw, server_hostname="localhost",
                                     session=session and last) as s:
                    self.assertEqual(self.get(s, "/small.txt").status, 200)
                    last = s.session
            with socket.create_connection(("127.0.0.1", server.port), timeout=10) as s:
                s.sendall(b"GET /small.txt HTTP/1.1\r\nHost: localhost\r\n\r\n")
                Reader(s).read_response()
        finally:
            self.assertEqual(server.stop(), 0)
        with open(log) as f:
            records = [json.loads(l) for l in f]
        self.assertEqual(len(records), 3, records)
        full, resumed, plain = records
        self.assertEqual(full["ssl_protocol"], "TLSv1.3")
        self.assertTrue(full["ssl_cipher"].startswith("TLS_"), full)
        self.assertEqual(full["ssl_server_name"], "localhost")
        self.assertFalse(full["ssl_session_reused"])
        self.assertTrue(resumed["ssl_session_reused"], resumed)
        self.assertEqual((plain["ssl_protocol"], plain["ssl_server_name"]), ("", ""))
        shutil.rmtree(os.path.dirname(log), ignore_errors=True)

    def test_handshakes_that_never_finish_give_way_at_the_connection_limit(self):
        # Twice --max-connections in clients that begin a handshake and never finish it, or
        # never begin: they give way to newcomers as idle connections do (after 500 ms). Not
        # deferred, so that those that never begin reach the shard at once.
        p = lambda n: os.path.join(self.pki, n)
        limit = 20
        server = Server(self.root, "--listen-tls", "127.0.0.1:0", "--tls-cert",
                        p("localhost-ec.crt"), "--tls-key", p("localhost-ec.key"),
                        "--max-connections", str(limit), "--shards", "1",
                        "--header-timeout-ms", "60000", "--defer-accept=false", *ADMIN)
        stuck = []
        try:
            for i in range(2 * limit + 40):  # beyond every slot, the reserve's included
                s = socket.create_connection(("127.0.0.1", server.tls_port), timeout=10)
                if i % 2:
                    s.sendall(b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03")  # a ClientHello's start
                stuck.append(s)
            for i in range(3):
                start = time.monotonic()
                raw = socket.create_connection(("127.0.0.1", server.tls_port), timeout=10)
                with self.context().wrap_socket(raw, server_hostname="localhost") as s:
                    r = self.get(s, "/small.txt")
                    self.assertEqual((r.status, r.body), (200, self.files["small.txt"]))
                print("newcomer %d served in %.2f s" % (i, time.monotonic() - start))
            self.assertTrue(Reader(stuck[0]).at_eof(timeout=5))
            self.assertGreaterEqual(server.metric("ringd_connections_silent_reclaimed_total"), 3)
        finally:
            for s in stuck:
                s.close()
            self.assertEqual(server.stop(), 0)


if __name__ == "__main__":
    unittest.main()
