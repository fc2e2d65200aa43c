"""--compress (nginx's gzip on, and Brotli and zstd beside it), on every tier, over HTTP/1.1,
HTTP/2 (h2c with prior knowledge) and HTTPS (h2 and HTTP/1.1 by ALPN):

- each coding (gzip, br, zstd), decoded with Python's zlib, brotli and zstandard, is the file
  byte for byte; the first request for a variant gets the file as it is (Vary: Accept-Encoding)
  while the variant is made off the shard, and the requests after it get the variant;
- the client's Accept-Encoding q-values choose the coding: q=0, `*`, identity;q=0, ties (br,
  then zstd, then gzip), no header;
- only --compress-types between --compress-min-bytes and --compress-max-bytes; off by default;
  a precompressed sibling still wins for the coding it is;
- a file changed while its variant is cached is never answered with the old variant;
- the cache's byte bound (--compress-cache-bytes) holds under many files, evicting;
- concurrent first requests compress the file once (the metrics count one compression);
- HEAD, If-None-Match (304 per variant, with the weak per-coding ETag) and Range (ignored on a
  variant: the whole variant, 200) per variant.
"""
import os
import random
import shutil
import subprocess
import tempfile
import threading
import unittest
import zlib

import brotli
import zstandard

from ringd_harness import ADMIN, BackendTestCase, Server, request, wait_for

DECODE = {
    "gzip": lambda b: zlib.decompress(b, 16 + zlib.MAX_WBITS),
    "br": brotli.decompress,
    "zstd": lambda b: zstandard.ZstdDecompressor().decompress(b, max_output_size=64 << 20),
}


def text(n, seed):
    """`n` bytes of compressible text (words, not a repeated line)."""
    rng = random.Random(seed)
    words = [bytes(rng.choice(b"abcdefghijklmnopqrstuvwxyz") for _ in range(rng.randint(2, 9)))
             for _ in range(400)]
    out = bytearray()
    while len(out) < n:
        out += rng.choice(words) + (b"\n" if rng.random() < 0.1 else b" ")
    return bytes(out[:n])


def curl_h2(server, target, *args, tls=None, version="2"):
    """(headers dict, body) of one HTTP/2 request with curl: h2c with prior knowledge, or h2 by
    ALPN when `tls` is the CA file (or HTTP/1.1 over TLS, with version "1.1")."""
    if tls:
        url = "https://localhost:%d%s" % (server.tls_port, target)
        how = ["--http2" if version == "2" else "--http1.1", "--cacert", tls,
               "--resolve", "localhost:%d:127.0.0.1" % server.tls_port]
    else:
        url = "http://127.0.0.1:%d%s" % (server.port, target)
        how = ["--http2-prior-knowledge"]
    with tempfile.NamedTemporaryFile() as head:
        out = subprocess.run(["curl", "-s", "--max-time", "30", *how, "-D", head.name, "-o", "-",
                              *args, url], capture_output=True, timeout=60, check=True)
        lines = open(head.name, "rb").read().decode("latin-1").split("\r\n")
    assert lines[0].startswith("HTTP/%s " % version), lines
    headers = {":status": lines[0].split()[1]}
    for line in lines[1:]:
        if ":" in line:
            k, v = line.split(":", 1)
            headers[k.strip().lower()] = v.strip()
    return headers, out.stdout


class CompressTest(BackendTestCase):
    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        cls.root = tempfile.mkdtemp(prefix="ringd-compress-")
        os.chmod(cls.root, 0o755)
        cls.files = {}

        def write(name, data):
            with open(os.path.join(cls.root, name), "wb") as f:
                f.write(data)
            cls.files[name] = data

        write("app.js", text(50000, 1))
        write("style.css", text(20000, 2))
        write("data.json", text(30000, 3))
        write("tiny.txt", b"short text\n")
        write("photo.png", text(30000, 4))  # compressible bytes, but not a compressible type
        write("big.txt", text(300000, 5))
        write("sib.js", text(40000, 6))
        write("sib.js.gz", zlib.compress(cls.files["sib.js"], 9)[:100])  # its own bytes: told apart
        os.makedirs(os.path.join(cls.root, "many"))
        for i in range(60):
            write("many/f%02d.txt" % i, text(16384, 100 + i))

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.root, ignore_errors=True)

    def start(self, *flags):
        server = Server(self.root, "--compress", "--shards", "1", *ADMIN, *flags)
        self.addCleanup(lambda: server.proc.poll() is not None or server.stop())
        return server

    def made(self, server, target, coding, headers=None):
        """The response once the `coding` variant of `target` is made: the first request starts
        it (answered as the file is), then requests until one gets it."""
        h = {"Accept-Encoding": coding}
        h.update(headers or {})
        first = request(server, "GET", target, h)
        self.assertEqual(first.status, 200)
        self.assertIsNone(first.header("Content-Encoding"))
        self.assertEqual(first.body, self.files[target.lstrip("/")])
        self.assertEqual(first.header("Vary"), "Accept-Encoding")
        got = {}

        def ready():
            got["r"] = request(server, "GET", target, h)
            return got["r"].header("Content-Encoding") == coding
        wait_for(ready, "the %s variant of %s" % (coding, target))
        return got["r"]

    def test_each_coding_is_the_file_byte_for_byte(self):
        server = self.start()
        for coding in ("gzip", "br", "zstd"):
            r = self.made(server, "/app.js", coding)
            self.assertEqual(r.status, 200)
            self.assertEqual(r.header("Vary"), "Accept-Encoding")
            self.assertEqual(int(r.header("Content-Length")), len(r.body))
            self.assertLess(len(r.body), len(self.files["app.js"]) // 2)
            self.assertEqual(DECODE[coding](r.body), self.files["app.js"], coding)
            self.assertTrue(r.header("ETag").startswith('W/"'), r.header("ETag"))
            self.assertTrue(r.header("ETag").endswith('-%s"' % coding), r.header("ETag"))
            self.assertIsNone(r.header("Accept-Ranges"))
            self.assertIsNotNone(r.header("Last-Modified"))
        # The file as it is: strong ETag, and still Vary.
        plain = request(server, "GET", "/app.js")
        self.assertEqual(plain.body, self.files["app.js"])
        self.assertIsNone(plain.header("Content-Encoding"))
        self.assertFalse(plain.header("ETag").startswith("W/"))
        self.assertEqual(plain.header("Vary"), "Accept-Encoding")
        self.assertEqual(server.metric("ringd_compress_made_total"), 3)
        self.assertGreaterEqual(server.metric("ringd_compress_hits_total"), 3)
        self.assertGreater(server.metric("ringd_compress_bytes_saved_total"), 3 * 25000)
        # The variant of a large file too.
        r = self.made(server, "/big.txt", "zstd")
        self.assertEqual(DECODE["zstd"](r.body), self.files["big.txt"])

    def test_q_values_choose_the_coding(self):
        server = self.start()
        for coding in ("gzip", "br", "zstd"):
            self.made(server, "/style.css", coding)
        cases = [
            ("gzip, br, zstd", "br"),  # a tie: br, then zstd, then gzip
            ("gzip, zstd", "zstd"),
            ("gzip;q=0.5, br;q=0.4", "gzip"),
            ("br;q=0, gzip", "gzip"),
            ("zstd;q=1, br;q=0.999", "zstd"),
            ("*", "br"),
            ("*;q=0.5, gzip", "gzip"),
            ("*;q=0.2, br;q=0", "zstd"),
            ("identity;q=0, gzip", "gzip"),
            ("identity", None),
            ("gzip;q=0, br;q=0, zstd;q=0", None),
            ("deflate, compress", None),
            ("", None),
            ("GZIP;Q=0.9", "gzip"),
        ]
        for header, want in cases:
            r = request(server, "GET", "/style.css", {"Accept-Encoding": header})
            self.assertEqual(r.header("Content-Encoding"), want, header)
            self.assertEqual(r.header("Vary"), "Accept-Encoding", header)
            body = DECODE[want](r.body) if want else r.body
            self.assertEqual(body, self.files["style.css"], header)
        r = request(server, "GET", "/style.css")  # no Accept-Encoding at all
        self.assertIsNone(r.header("Content-Encoding"))
        self.assertEqual(r.body, self.files["style.css"])

    def test_types_and_sizes_and_the_default(self):
        server = self.start("--compress-max-bytes", "100000", "--compress-min-bytes", "64")
        for target in ("/tiny.txt", "/photo.png", "/big.txt"):
            for _ in range(3):  # nothing is made for the next requests either
                r = request(server, "GET", target, {"Accept-Encoding": "gzip"})
                self.assertEqual(r.status, 200)
                self.assertIsNone(r.header("Content-Encoding"), target)
                self.assertIsNone(r.header("Vary"), target)
                self.assertEqual(r.body, self.files[target[1:]])
        self.assertEqual(server.metric("ringd_compress_misses_total"), 0)
        # --compress-types names them.
        server.stop()
        server = self.start("--compress-types", "image/png, text/css")
        self.assertEqual(DECODE["br"](self.made(server, "/photo.png", "br").body),
                         self.files["photo.png"])
        r = request(server, "GET", "/app.js", {"Accept-Encoding": "br"})
        self.assertIsNone(r.header("Vary"))
        # Off by default.
        server.stop()
        plain = Server(self.root)
        self.addCleanup(lambda: plain.proc.poll() is not None or plain.stop())
        for _ in range(3):
            r = request(plain, "GET", "/app.js", {"Accept-Encoding": "gzip, br, zstd"})
            self.assertIsNone(r.header("Content-Encoding"))
            self.assertIsNone(r.header("Vary"))
            self.assertEqual(r.body, self.files["app.js"])

    def test_a_sibling_wins_for_its_coding(self):
        server = self.start()
        for _ in range(3):
            r = request(server, "GET", "/sib.js", {"Accept-Encoding": "gzip"})
            self.assertEqual(r.header("Content-Encoding"), "gzip")
            self.assertEqual(r.body, self.files["sib.js.gz"])  # the sibling, not a variant
            self.assertFalse(r.header("ETag").startswith("W/"))
        r = self.made(server, "/sib.js", "br")
        self.assertEqual(DECODE["br"](r.body), self.files["sib.js"])

    def test_a_changed_file_is_never_served_its_old_variant(self):
        server = self.start("--open-file-cache-valid-ms", "0")
        path = os.path.join(self.root, "changing.txt")
        old = text(40000, 7)
        with open(path, "wb") as f:
            f.write(old)
        self.files["changing.txt"] = old
        self.addCleanup(lambda: os.path.exists(path) and os.unlink(path))
        self.assertEqual(DECODE["gzip"](self.made(server, "/changing.txt", "gzip").body), old)
        # Rewritten in place (same inode), same size: only the modification time tells.
        new = text(40000, 8)
        with open(path, "r+b") as f:
            f.write(new)
        st = os.stat(path)
        os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns + 1500000000))
        self.files["changing.txt"] = new
        r = self.made(server, "/changing.txt", "gzip")
        self.assertEqual(DECODE["gzip"](r.body), new)
        self.assertGreaterEqual(server.metric("ringd_compress_dropped_total", kind="changed"), 1)
        # Every answer from now on is the new file, whichever way it comes.
        for _ in range(5):
            r = request(server, "GET", "/changing.txt", {"Accept-Encoding": "gzip"})
            body = DECODE["gzip"](r.body) if r.header("Content-Encoding") else r.body
            self.assertEqual(body, new)

    def test_the_cache_holds_its_byte_bound(self):
        bound = 65536
        server = self.start("--compress-cache-bytes", str(bound))
        names = ["many/f%02d.txt" % i for i in range(60)]
        for name in names:
            r = self.made(server, "/" + name, "gzip")
            self.assertEqual(DECODE["gzip"](r.body), self.files[name])
            self.assertLessEqual(server.metric("ringd_compress_cache_bytes"), bound)
        # 60 variants of some 6 KiB each do not fit in 64 KiB: the oldest went.
        self.assertGreater(server.metric("ringd_compress_dropped_total", kind="evicted"), 0)
        entries = server.metric("ringd_compress_cache_entries")
        self.assertGreater(entries, 0)
        self.assertLess(entries, 60)
        # An evicted variant is made again when asked for, and is still right.
        r = self.made(server, "/" + names[0], "gzip")
        self.assertEqual(DECODE["gzip"](r.body), self.files[names[0]])
        self.assertLessEqual(server.metric("ringd_compress_cache_bytes"), bound)

    def test_concurrent_first_requests_compress_once(self):
        server = self.start()
        n = 24
        results = [None] * n
        barrier = threading.Barrier(n)

        def get(i):
            barrier.wait()
            results[i] = request(server, "GET", "/data.json", {"Accept-Encoding": "zstd"})
        threads = [threading.Thread(target=get, args=(i,)) for i in range(n)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        for r in results:
            self.assertEqual(r.status, 200)
            body = DECODE["zstd"](r.body) if r.header("Content-Encoding") else r.body
            self.assertEqual(body, self.files["data.json"])
        wait_for(lambda: server.metric("ringd_compress_made_total") == 1, "the one compression")
        r = request(server, "GET", "/data.json", {"Accept-Encoding": "zstd"})
        self.assertEqual(r.header("Content-Encoding"), "zstd")
        self.assertEqual(DECODE["zstd"](r.body), self.files["data.json"])
        self.assertEqual(server.metric("ringd_compress_made_total"), 1)
        misses = server.metric("ringd_compress_misses_total")
        hits = server.metric("ringd_compress_hits_total")
        self.assertGreaterEqual(misses, 1)
        self.assertEqual(misses + hits, n + 1)

    def test_head_304_and_range_per_variant(self):
        server = self.start()
        full = self.made(server, "/app.js", "gzip")
        etag = full.header("ETag")
        ae = {"Accept-Encoding": "gzip"}
        head = request(server, "HEAD", "/app.js", ae)
        self.assertEqual(head.status, 200)
        self.assertEqual(head.body, b"")
        self.assertEqual(head.header("Content-Encoding"), "gzip")
        self.assertEqual(head.header("Content-Length"), full.header("Content-Length"))
        self.assertEqual(head.header("ETag"), etag)
        # 304 for the variant's own tag; the file's tag does not match the variant.
        r = request(server, "GET", "/app.js", dict(ae, **{"If-None-Match": etag}))
        self.assertEqual(r.status, 304)
        self.assertEqual(r.header("ETag"), etag)
        self.assertEqual(r.header("Vary"), "Accept-Encoding")
        self.assertEqual(r.body, b"")
        plain_tag = request(server, "GET", "/app.js").header("ETag")
        r = request(server, "GET", "/app.js", dict(ae, **{"If-None-Match": plain_tag}))
        self.assertEqual(r.status, 200)
        self.assertEqual(DECODE["gzip"](r.body), self.files["app.js"])
        # The variant's tag does not match the file's other codings, nor the file itself.
        r = request(server, "GET", "/app.js", {"If-None-Match": etag})
        self.assertEqual(r.status, 200)
        self.assertEqual(r.body, self.files["app.js"])
        r = request(server, "HEAD", "/app.js", dict(ae, **{"If-None-Match": etag}))
        self.assertEqual(r.status, 304)
        # Range on a variant: ignored, the whole variant (as nginx's gzip).
        r = request(server, "GET", "/app.js", dict(ae, Range="bytes=0-99"))
        self.assertEqual(r.status, 200)
        self.assertIsNone(r.header("Content-Range"))
        self.assertEqual(DECODE["gzip"](r.body), self.files["app.js"])
        # Without the coding, Range is served from the file as always.
        r = request(server, "GET", "/app.js", {"Range": "bytes=0-99"})
        self.assertEqual(r.status, 206)
        self.assertEqual(r.body, self.files["app.js"][:100])
        # If-Match compares strongly: a weak tag never matches (412).
        r = request(server, "GET", "/app.js", dict(ae, **{"If-Match": etag}))
        self.assertEqual(r.status, 412)

    def test_revalidating_a_variant_not_made(self):
        """A client that kept a variant from before a restart (or an eviction) revalidates it:
        304 without the variant being made again."""
        server = self.start()
        plain_tag = request(server, "GET", "/style.css").header("ETag")
        tag = 'W/' + plain_tag[:-1] + '-br"'
        r = request(server, "GET", "/style.css", {"Accept-Encoding": "br", "If-None-Match": tag})
        self.assertEqual(r.status, 304)
        self.assertEqual(r.header("ETag"), tag)
        self.assertEqual(r.header("Vary"), "Accept-Encoding")
        self.assertEqual(server.metric("ringd_compress_made_total"), 0)
        self.assertEqual(server.metric("ringd_compress_misses_total"), 0)

    def test_http2_each_coding(self):
        server = self.start()
        for coding in ("gzip", "br", "zstd"):
            first, body = curl_h2(server, "/data.json", "-H", "Accept-Encoding: " + coding)
            self.assertEqual(first[":status"], "200")
            self.assertEqual(first.get("vary"), "Accept-Encoding")
            got = {}

            def ready():
                got["h"], got["b"] = curl_h2(server, "/data.json", "-H",
                                             "Accept-Encoding: " + coding)
                return got["h"].get("content-encoding") == coding
            wait_for(ready, "the %s variant over h2c" % coding)
            self.assertEqual(DECODE[coding](got["b"]), self.files["data.json"])
            self.assertEqual(int(got["h"]["content-length"]), len(got["b"]))
            # HEAD (curl -I prints the head where the body would be).
            h, _ = curl_h2(server, "/data.json", "-I", "-H", "Accept-Encoding: " + coding)
            self.assertEqual(h.get("content-encoding"), coding)
            self.assertEqual(h.get("content-length"), got["h"]["content-length"])
            h, b = curl_h2(server, "/data.json", "-H", "Accept-Encoding: " + coding,
                           "-H", "If-None-Match: " + got["h"]["etag"])
            self.assertEqual(h[":status"], "304")

    def test_https_h2_and_http11(self):
        import tls_pki
        d = tempfile.mkdtemp(prefix="ringd-compress-pki-")
        self.addCleanup(shutil.rmtree, d, True)
        tls_pki.make_pki(d)
        server = self.start("--listen-tls", "127.0.0.1:0",
                            "--tls-cert", os.path.join(d, "localhost-ec.crt"),
                            "--tls-key", os.path.join(d, "localhost-ec.key"))
        ca = os.path.join(d, "ca.crt")
        got = {}

        def ready():
            got["h"], got["b"] = curl_h2(server, "/style.css", "-H", "Accept-Encoding: br",
                                         tls=ca)
            return got["h"].get("content-encoding") == "br"
        wait_for(ready, "the br variant over h2")
        self.assertEqual(DECODE["br"](got["b"]), self.files["style.css"])
        # HTTP/1.1 over TLS: the same variant.
        h, b = curl_h2(server, "/style.css", "-H", "Accept-Encoding: br", tls=ca, version="1.1")
        self.assertEqual(h.get("content-encoding"), "br")
        self.assertEqual(DECODE["br"](b), self.files["style.css"])


if __name__ == "__main__":
    unittest.main()
