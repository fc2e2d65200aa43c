"""--fallback (nginx's `try_files $uri $uri/ /index.html`), on every tier, over HTTP/1.1 and
HTTP/2 (h2c with prior knowledge):

- a path that names nothing (a single-page app's route, with or without a trailing slash or a
  query) is the fallback file with 200, its own type and validators, and HEAD, Range and
  If-None-Match answer for it as for the file itself;
- files and directories that exist are served as they are (a directory's index, its redirect, a
  directory without an index 403), and dot files and forbidden files keep their 404 and 403;
- the access log names the request the client sent, not the fallback;
- a fallback file that is missing is a warning at start-up and under `ringd -t`, and every path
  that names nothing is then 404.
"""
import os
import shutil
import subprocess
import tempfile
import time
import unittest

from ringd_harness import BACKEND, RINGD, ROOT_FLAGS, DocrootTestCase, Server, request
from ringd_harness import curl as harness_curl

SPA_PATHS = ["/app/route", "/app/route/", "/deep/a/b/c?tab=2", "/small.txt/nested",
             "/%C3%A9t%C3%A9"]


def curl(server, target, *args):
    """(HTTP version, status, lowercased headers, body) of one h2c request with curl."""
    return harness_curl("http://127.0.0.1:%d%s" % (server.port, target),
                        "--http2-prior-knowledge", *args)


class TryFilesTest(DocrootTestCase):
    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        cls.log_dir = tempfile.mkdtemp(prefix="ringd-try-log-")
        with open(os.path.join(cls.root, "forbidden.txt"), "wb") as f:
            f.write(b"no")
        os.chmod(os.path.join(cls.root, "forbidden.txt"), 0o000)

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.log_dir, ignore_errors=True)
        super().tearDownClass()

    def start(self, *flags):
        server = Server(self.root, *flags)
        self.addCleanup(lambda: server.proc.poll() is not None or server.stop())
        return server

    def test_a_missing_path_is_the_fallback_over_http1(self):
        log = os.path.join(self.log_dir, "http1.log")
        server = self.start("--fallback", "/index.html", "--access-log", log)
        index = self.files["index.html"]
        etag = request(server, "GET", "/index.html").header("etag")
        for path in SPA_PATHS:
            r = request(server, "GET", path)
            self.assertEqual((r.status, r.body), (200, index), path)
            self.assertEqual(r.header("content-type"), "text/html; charset=utf-8", path)
            self.assertEqual(r.header("etag"), etag, path)
        # HEAD, Range and If-None-Match answer for the fallback as for the file.
        head = request(server, "HEAD", "/app/route")
        self.assertEqual((head.status, head.body), (200, b""))
        self.assertEqual(head.header("content-length"), str(len(index)))
        part = request(server, "GET", "/app/route", {"Range": "bytes=2-11"})
        self.assertEqual((part.status, part.body), (206, index[2:12]))
        self.assertEqual(part.header("content-range"), "bytes 2-11/%d" % len(index))
        self.assertEqual(request(server, "GET", "/app/route", {"If-None-Match": etag}).status, 304)
        # What exists is served as it is.
        self.assertEqual(request(server, "GET", "/small.txt").body, self.files["small.txt"])
        self.assertEqual(request(server, "GET", "/dir/").body, self.files["dir/index.html"])
        moved = request(server, "GET", "/dir")
        self.assertEqual((moved.status, moved.header("location")), (301, "/dir/"))
        self.assertEqual(request(server, "GET", "/nodir/").status, 403)
        # Dot files and forbidden files keep their answers.
        self.assertEqual(request(server, "GET", "/.hidden").status, 404)
        self.assertEqual(request(server, "GET", "/.git/HEAD").status, 404)
        if os.geteuid() != 0:  # root reads a mode-000 file
            self.assertEqual(request(server, "GET", "/forbidden.txt").status, 403)
        # The access log names the request the client sent.
        self.assertEqual(server.stop(), 0, server.log)
        with open(log) as f:
            lines = f.read().splitlines()
        self.assertTrue(any('"GET /app/route HTTP/1.1" 200 %d ' % len(index) in l for l in lines),
                        lines)
        self.assertTrue(any('"GET /app/route HTTP/1.1" 206 10 ' in l for l in lines), lines)

    def test_a_missing_path_is_the_fallback_over_http2(self):
        server = self.start("--fallback", "/index.html")
        index = self.files["index.html"]
        etag = curl(server, "/index.html")[2]["etag"]
        for path in SPA_PATHS:
            version, status, headers, body = curl(server, path)
            self.assertEqual((version, status, body), ("2", 200, index), path)
            self.assertEqual(headers["etag"], etag, path)
        version, status, headers, _ = curl(server, "/app/route", "-I")  # -o gets the head too
        self.assertEqual((version, status), ("2", 200))
        self.assertEqual(headers["content-length"], str(len(index)))
        version, status, headers, body = curl(server, "/app/route", "-r", "2-11")
        self.assertEqual((status, body), (206, index[2:12]))
        self.assertEqual(curl(server, "/app/route", "-H", "If-None-Match: " + etag)[1], 304)
        self.assertEqual(curl(server, "/small.txt")[3], self.files["small.txt"])
        self.assertEqual(curl(server, "/dir/")[3], self.files["dir/index.html"])
        self.assertEqual(curl(server, "/dir")[1], 301)
        self.assertEqual(curl(server, "/nodir/")[1], 403)
        self.assertEqual(curl(server, "/.hidden")[1], 404)

    def test_a_missing_fallback_file_is_a_warning_and_404(self):
        missing = "--fallback /spa/index.html: cannot read '%s/spa/index.html'" % self.root
        out = subprocess.run([RINGD, "-t", "--root", self.root, "--io", BACKEND,
                              "--fallback", "/spa/index.html"] + ROOT_FLAGS,
                             capture_output=True, text=True, timeout=30)
        self.assertEqual(out.returncode, 0, out.stderr)
        lines = out.stderr.strip().splitlines()
        self.assertEqual(lines[-1], "ringd: configuration ok")
        self.assertTrue([l for l in lines if l.startswith("ringd: " + missing)], lines)
        server = self.start("--fallback", "/spa/index.html")
        self.assertTrue([l for l in server.log if l.startswith("ringd: " + missing)], server.log)
        self.assertEqual(request(server, "GET", "/app/route").status, 404)
        self.assertEqual(curl(server, "/app/route")[1], 404)
        self.assertEqual(request(server, "GET", "/small.txt").body, self.files["small.txt"])
        # The file appears: it is served from then on (once the cache has looked again).
        os.makedirs(os.path.join(self.root, "spa"), exist_ok=True)
        with open(os.path.join(self.root, "spa", "index.html"), "wb") as f:
            f.write(b"<p>spa</p>")
        try:
            for _ in range(100):
                r = request(server, "GET", "/app/route")
                if r.status == 200:
                    break
                time.sleep(0.05)
            self.assertEqual((r.status, r.body), (200, b"<p>spa</p>"))
        finally:
            shutil.rmtree(os.path.join(self.root, "spa"), ignore_errors=True)

    def test_the_flag_takes_a_plain_path(self):
        out = subprocess.run([RINGD, "-t", "--root", self.root, "--fallback", "index.html"],
                             capture_output=True, text=True, timeout=30)
        self.assertEqual(out.returncode, 1, out.stderr)
        self.assertIn("--fallback: 'index.html' is not a plain path beneath the root",
                      out.stderr)


if __name__ == "__main__":
    unittest.main()
