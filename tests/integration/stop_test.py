"""Graceful stops and long downloads, with curl reading at a limited rate: SIGQUIT lets a download
that keeps moving finish however long past --shutdown-timeout-ms it takes (nginx's graceful
QUIT), over HTTP/1.1 and HTTP/2; SIGTERM cuts it at --shutdown-timeout-ms and the stop line
counts it; the access log's $body_bytes_sent for a cut HTTP/1.1 download is what the client
received, over HTTP and HTTPS."""
import os
import re
import shutil
import signal
import subprocess
import tempfile
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


if __name__ == "__main__":
    unittest.main()
