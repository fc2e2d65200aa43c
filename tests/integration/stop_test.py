"""Graceful stops and long downloads, with curl reading at a limited rate: SIGQUIT lets a download
that keeps moving finish however long past --shutdown-timeout-ms it takes (nginx's graceful
QUIT), over HTTP/1.1 and HTTP/2; SIGTERM cuts it at --shutdown-timeout-ms and the stop line
counts it; the access log's $body_bytes_sent for a cut download is what the client received,
over HTTP and HTTPS, HTTP/1.1 and HTTP/2."""
import os
import re
import shutil
import signal
import socket
import struct
import subprocess
import tempfile
import time
import unittest

from ringd_harness import BackendTestCase, Server, wait_for
from tls_pki import make_pki

SIZE = 24 << 20  # 6 s at curl's 4 MiB/s: far past the drain bounds below
RATE = "4M"


class StopTest(BackendTestCase):
    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        cls.tmp = tempfile.mkdtemp(prefix="ringd-stop-")
        cls.root = os.path.join(cls.tmp, "www")
        os.mkdir(cls.root)
        block = bytes(range(256)) * 4096
        with open(os.path.join(cls.root, "big.bin"), "wb") as f:
            for _ in range(SIZE // len(block)):
                f.write(block)
        cls.pki = os.path.join(cls.tmp, "pki")
        os.mkdir(cls.pki)
        make_pki(cls.pki)

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.tmp, ignore_errors=True)

    def start(self, *flags, tls=False):
        self.log_path = os.path.join(self.tmp, "access-%s.log" % self.id().rsplit(".", 1)[1])
        flags = list(flags) + ["--access-log", self.log_path]
        if tls:
            p = lambda name: os.path.join(self.pki, name)
            return Server(self.root, "--listen-tls", "127.0.0.1:0", "--tls-cert",
                          p("localhost-ec.crt"), "--tls-key", p("localhost-ec.key"), *flags,
                          listen=None)
        return Server(self.root, *flags)

    def download(self, server, tls=False, http2=False):
        """curl fetching big.bin at RATE into a file (HTTP/1.1 unless `http2`: curl would take
        h2 by ALPN); returns (process, the file's path) once the first MiB has arrived."""
        out = os.path.join(self.tmp, "got")
        if os.path.exists(out):
            os.unlink(out)
        url = "%s://localhost:%d/big.bin" % ("https" if tls else "http", server.port)
        args = ["curl", "-sS", "--http2" if http2 else "--http1.1", "--limit-rate", RATE, "-o",
                out, "--resolve", "localhost:%d:127.0.0.1" % server.port, url]
        if tls:
            args[1:1] = ["--cacert", os.path.join(self.pki, "ca.crt")]
        curl = subprocess.Popen(args, stderr=subprocess.PIPE, text=True)
        self.addCleanup(lambda: curl.poll() is None and curl.kill())
        wait_for(lambda: os.path.exists(out) and os.path.getsize(out) >= 1 << 20,
                 "the first MiB of the download", timeout=30)
        return curl, out

    def logged_body_bytes(self):
        with open(self.log_path) as f:
            lines = [l for l in f if "GET /big.bin " in l]
        self.assertEqual(len(lines), 1, lines)
        m = re.search(r'" (\d{3}) (\d+) ', lines[0])
        self.assertIsNotNone(m, lines[0])
        self.assertEqual(m.group(1), "200")
        return int(m.group(2))

    def test_quit_waits_for_a_download_that_keeps_moving(self):
        server = self.start("--shutdown-timeout-ms", "500")
        curl, out = self.download(server)
        server.proc.send_signal(signal.SIGQUIT)
        self.assertEqual(curl.wait(timeout=120), 0, curl.stderr.read())
        self.assertEqual(os.path.getsize(out), SIZE)
        self.assertEqual(server.stop(timeout=30), 0)
        self.assertTrue(any("SIGQUIT: finishing responses in flight, each as long as it keeps "
                            "moving" in l for l in server.log), server.log)
        stopped = [l for l in server.log if "stopped after" in l]
        self.assertEqual(len(stopped), 1, server.log)
        self.assertNotIn("cut", stopped[0])
        self.assertEqual(self.logged_body_bytes(), SIZE)

    def test_quit_waits_for_an_http2_download_over_https(self):
        server = self.start("--shutdown-timeout-ms", "500", tls=True)
        curl, out = self.download(server, tls=True, http2=True)
        server.proc.send_signal(signal.SIGQUIT)
        self.assertEqual(curl.wait(timeout=120), 0, curl.stderr.read())
        self.assertEqual(os.path.getsize(out), SIZE)
        self.assertEqual(server.stop(timeout=30), 0)
        stopped = [l for l in server.log if "stopped after" in l]
        self.assertEqual(len(stopped), 1, server.log)
        self.assertNotIn("cut", stopped[0])

    def test_term_cuts_a_download_at_the_bound_and_says_so(self):
        server = self.start("--shutdown-timeout-ms", "1000")
        curl, out = self.download(server)
        self.assertEqual(server.stop(signal.SIGTERM, timeout=30), 0)
        self.assertEqual(curl.wait(timeout=60), 18, "curl: partial file expected")
        received = os.path.getsize(out)
        self.assertLess(received, SIZE)
        stopped = [l for l in server.log if "stopped after" in l]
        self.assertEqual(len(stopped), 1, server.log)
        self.assertTrue(stopped[0].endswith(
            "; 1 response still sending cut at --shutdown-timeout-ms"), stopped[0])
        self.assertEqual(self.logged_body_bytes(), received)

    def test_term_after_quit_bounds_the_wait(self):
        server = self.start("--shutdown-timeout-ms", "500")
        curl, out = self.download(server)
        server.proc.send_signal(signal.SIGQUIT)
        wait_for(lambda: server.logged("SIGQUIT: finishing"), "the SIGQUIT drain", timeout=10)
        self.assertEqual(server.stop(signal.SIGTERM, timeout=30), 0)
        self.assertNotEqual(curl.wait(timeout=60), 0)
        self.assertLess(os.path.getsize(out), SIZE)
        self.assertTrue(any("SIGTERM: responses still in flight end within 500 ms" in l
                            for l in server.log), server.log)

    def test_a_cut_https_download_logs_the_bytes_the_client_received(self):
        server = self.start("--shutdown-timeout-ms", "1000", tls=True)
        curl, out = self.download(server, tls=True)
        self.assertEqual(server.stop(signal.SIGTERM, timeout=30), 0)
        self.assertNotEqual(curl.wait(timeout=60), 0)
        received = os.path.getsize(out)
        self.assertLess(received, SIZE)
        self.assertEqual(self.logged_body_bytes(), received)

    def test_a_cut_http2_download_logs_the_payload_the_client_received(self):
        # h2c by prior knowledge from a client that opens its windows wide, asks for big.bin and
        # reads nothing until the drain's deadline has cut the stream: everything the kernel
        # took then arrives (no byte of ours is left unread to turn the close into a reset), and
        # the DATA payload of the stream, its last frame's partial one included, is what left.
        server = self.start("--shutdown-timeout-ms", "1000")

        def frame(kind, flags, stream, payload):
            return struct.pack(">I", len(payload))[1:] + bytes([kind, flags]) + \
                struct.pack(">I", stream) + payload

        def literal(name, value):  # HPACK: literal without indexing, new name, no Huffman
            return bytes([0, len(name)]) + name + bytes([len(value)]) + value

        fields = b"".join(literal(n, v) for n, v in [
            (b":method", b"GET"), (b":scheme", b"http"), (b":path", b"/big.bin"),
            (b":authority", b"localhost")])
        big = (1 << 31) - 1
        with socket.create_connection(("127.0.0.1", server.port), timeout=30) as c:
            c.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1 << 16)
            c.sendall(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" +
                      frame(4, 0, 0, struct.pack(">HI", 4, big)) +  # INITIAL_WINDOW_SIZE
                      frame(8, 0, 0, struct.pack(">I", big - 65535)) +  # the connection's
                      frame(1, 0x5, 1, fields) +  # HEADERS, END_STREAM | END_HEADERS
                      frame(4, 1, 0, b""))  # ACK of the server's SETTINGS (sent blind)
            time.sleep(0.5)  # the server fills the socket's buffers
            self.assertEqual(server.stop(signal.SIGTERM, timeout=30), 0)
            data = b""
            while True:
                chunk = c.recv(1 << 20)
                if not chunk:
                    break
                data += chunk
        payload, at = 0, 0
        while at + 9 <= len(data):
            length = int.from_bytes(data[at:at + 3], "big")
            kind, stream = data[at + 3], int.from_bytes(data[at + 5:at + 9], "big") & 0x7fffffff
            if kind == 0 and stream == 1:  # DATA (ringd pads nothing)
                payload += min(length, len(data) - at - 9)
            at += 9 + length
        self.assertGreater(payload, 0)
        self.assertLess(payload, SIZE)
        self.assertTrue(any("cut at --shutdown-timeout-ms" in l for l in server.log), server.log)
        self.assertEqual(self.logged_body_bytes(), payload)


if __name__ == "__main__":
    unittest.main()
