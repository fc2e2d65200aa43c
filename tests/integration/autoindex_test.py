"""--autoindex (nginx's autoindex), on every tier, over HTTP/1.1 and HTTP/2 (h2c with prior
knowledge):

- a directory without an index is listed: HTML (names escaped for HTML and in their links,
  percent-encoded: `<`, `"`, spaces, bytes that are not UTF-8), or JSON that parses, with sizes
  and times, sorted by name; every link fetches its file;
- dot files are hidden, and shown with --serve-dot-files; a directory with an index is served
  its index; without --autoindex it is 403 as before; a directory ringd may not read is 403;
- a directory of 100,000 entries is listed (the shard keeps serving meanwhile), cut at a bound
  with a last line that says so;
- HEAD has the listing's length and no body;
- clients that leave while their listing is made leave nothing behind.
"""
import json
import os
import shutil
import subprocess
import tempfile
import threading
import time
import unittest
import urllib.parse

from ringd_harness import BackendTestCase, Server, request

BIG = 100000


def curl_h2(server, target, *args):
    """(status, body) of one h2c request with curl."""
    out = subprocess.run(["curl", "-s", "--http2-prior-knowledge", "--max-time", "30", "-o", "-",
                          "-w", "\n%{http_version} %{http_code}", *args,
                          "http://127.0.0.1:%d%s" % (server.port, target)],
                         capture_output=True, timeout=60)
    body, _, tail = out.stdout.rpartition(b"\n")
    version, status = tail.decode().split()
    assert version == "2", tail
    return int(status), body


class AutoindexTest(BackendTestCase):
    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        cls.root = tempfile.mkdtemp(prefix="ringd-autoindex-")
        os.chmod(cls.root, 0o755)
        pub = os.path.join(cls.root, "pub")
        os.makedirs(os.path.join(pub, "sub dir"))
        cls.names = {
            b"a b.txt": b"spaces",
            b"<x>\".html": b"markup",
            b"caf\xe9.txt": b"latin-1",
            "\u00e9t\u00e9.txt".encode(): b"utf-8",
            b"z&q=1?#.txt": b"url characters",
            b".hidden": b"dot file",
        }
        for name, data in cls.names.items():
            with open(os.path.join(pub.encode(), name), "wb") as f:
                f.write(data)
        os.makedirs(os.path.join(cls.root, "withindex"))
        with open(os.path.join(cls.root, "withindex", "index.html"), "wb") as f:
            f.write(b"<p>index</p>")
        os.makedirs(os.path.join(cls.root, "locked"))
        os.chmod(os.path.join(cls.root, "locked"), 0)
        big = os.path.join(cls.root, "big")
        os.makedirs(big)
        # Hard links to a few empty files (ext4 allows 65,000 links to one): a name costs a
        # directory entry, not an inode, which on a slow disk is 1 s for all of them, not 13.
        cls.sources = tempfile.mkdtemp(prefix="ringd-autoindex-src-", dir=os.path.dirname(cls.root))
        for i in range(BIG):
            source = os.path.join(cls.sources, "empty%d" % (i // 50000))
            if i % 50000 == 0:
                open(source, "wb").close()
            os.link(source, os.path.join(big, "f%06d" % i))

    @classmethod
    def tearDownClass(cls):
        os.chmod(os.path.join(cls.root, "locked"), 0o755)
        shutil.rmtree(cls.root, ignore_errors=True)
        shutil.rmtree(cls.sources, ignore_errors=True)

    def start(self, *flags):
        server = Server(self.root, *flags)
        self.addCleanup(lambda: server.proc.poll() is not None or server.stop())
        return server

    def test_html_listing_escapes_sorts_and_links(self):
        server = self.start("--autoindex")
        r = request(server, "GET", "/pub/")
        self.assertEqual(r.status, 200)
        self.assertEqual(r.header("content-type"), "text/html; charset=utf-8")
        self.assertEqual(int(r.header("content-length")), len(r.body))
        html = r.body.decode("utf-8")  # valid UTF-8 even where a name is not
        self.assertIn("<title>Index of /pub/</title>", html)
        self.assertIn('<a href="%3Cx%3E%22.html">&lt;x&gt;&quot;.html</a>', html)
        self.assertIn('<a href="a%20b.txt">a b.txt</a>', html)
        self.assertIn('<a href="caf%E9.txt">caf\ufffd.txt</a>', html)
        self.assertIn('<a href="%C3%A9t%C3%A9.txt">\u00e9t\u00e9.txt</a>', html)
        self.assertIn('<a href="sub%20dir/">sub dir/</a>', html)
        self.assertNotIn("hidden", html)
        self.assertNotIn("<x>", html)
        hrefs = [h for h in (part.split('"', 1)[0] for part in html.split('<a href="')[1:])
                 if h != "../"]
        names = [urllib.parse.unquote_to_bytes(h.rstrip("/")) for h in hrefs]
        self.assertEqual(names, sorted(names))
        self.assertEqual(len(names), 6)
        # Every link fetches its file, as a browser would resolve it.
        for href in hrefs:
            if href.endswith("/"):
                continue
            got = request(server, "GET", "/pub/" + href)
            self.assertEqual(got.status, 200, href)
            self.assertEqual(got.body, self.names[urllib.parse.unquote_to_bytes(href)], href)
        # Sizes and times.
        self.assertIn("<td>6</td>", html)  # "spaces"
        self.assertIn(" GMT</td>", html)
        # HEAD: the length, no body.
        head = request(server, "HEAD", "/pub/")
        self.assertEqual((head.status, head.body), (200, b""))
        self.assertEqual(head.header("content-length"), r.header("content-length"))
        # A directory with an index is served its index; one ringd may not read is 403.
        self.assertEqual(request(server, "GET", "/withindex/").body, b"<p>index</p>")
        if os.geteuid() != 0:
            self.assertEqual(request(server, "GET", "/locked/").status, 403)
        self.assertEqual(request(server, "GET", "/pub").status, 301)
        # Over HTTP/2: the same body.
        status, body = curl_h2(server, "/pub/")
        self.assertEqual((status, body), (200, r.body))

    def test_json_listing_parses(self):
        server = self.start("--autoindex", "--autoindex-format", "json")
        r = request(server, "GET", "/pub/")
        self.assertEqual(r.status, 200)
        self.assertEqual(r.header("content-type"), "application/json")
        entries = json.loads(r.body)
        by_name = {e["name"]: e for e in entries}
        self.assertEqual(sorted(by_name), sorted(["<x>\".html", "a b.txt", "caf\ufffd.txt",
                                                  "\u00e9t\u00e9.txt", "z&q=1?#.txt",
                                                  "sub dir"]))
        self.assertEqual(by_name["a b.txt"]["size"], 6)
        self.assertEqual(by_name["a b.txt"]["type"], "file")
        self.assertEqual(by_name["a b.txt"]["url"], "a%20b.txt")
        self.assertEqual(by_name["sub dir"]["type"], "directory")
        self.assertEqual(by_name["sub dir"]["url"], "sub%20dir/")
        self.assertNotIn("size", by_name["sub dir"])
        self.assertTrue(by_name["caf\ufffd.txt"]["mtime"].endswith(" GMT"))
        urls = [urllib.parse.unquote_to_bytes(e["url"].rstrip("/")) for e in entries]
        self.assertEqual(urls, sorted(urls))
        for e in entries:
            if e["type"] == "file":
                got = request(server, "GET", "/pub/" + e["url"])
                self.assertEqual(got.body, self.names[urllib.parse.unquote_to_bytes(e["url"])])
        status, body = curl_h2(server, "/pub/")
        self.assertEqual(json.loads(body), entries)

    def test_dot_files_as_serve_dot_files_says(self):
        server = self.start("--autoindex", "--serve-dot-files")
        html = request(server, "GET", "/pub/").body.decode()
        self.assertIn('<a href=".hidden">.hidden</a>', html)

    def test_off_by_default(self):
        server = self.start()
        self.assertEqual(request(server, "GET", "/pub/").status, 403)

    def test_a_huge_directory_is_cut_and_says_so(self):
        server = self.start("--autoindex", "--autoindex-format", "json", "--shards", "1")
        # While the listing is made, the shard keeps answering.
        answered = []

        def others():
            deadline = time.time() + 5
            while time.time() < deadline and len(answered) < 20:
                answered.append(request(server, "GET", "/withindex/index.html").status)

        t = threading.Thread(target=others)
        t.start()
        r = request(server, "GET", "/big/")
        t.join()
        self.assertEqual(r.status, 200)
        self.assertTrue(answered and all(s == 200 for s in answered), answered)
        entries = json.loads(r.body)
        last = entries[-1]
        self.assertEqual(last["type"], "truncated")
        self.assertEqual(last["entries"], BIG)
        shown = entries[:-1]
        self.assertEqual(last["shown"], len(shown))
        self.assertGreater(len(shown), 1000)
        self.assertLessEqual(len(shown), 10000)
        self.assertEqual([e["name"] for e in shown], ["f%06d" % i for i in range(len(shown))])
        self.assertLessEqual(len(r.body), 1 << 20)
        # HTML says it in a last line; over HTTP/2 too.
        html_server = self.start("--autoindex")
        status, body = curl_h2(html_server, "/big/")
        self.assertEqual(status, 200)
        self.assertRegex(body.decode(), r"<p>Listing cut: the first \d+ of %d entries, by name.</p>"
                         % BIG)

    def test_clients_that_leave_while_their_listing_is_made(self):
        # The thread finishes each listing alone, and its slot comes back: more listings than
        # the shard's slots, each left at once, then every one answered again, and a clean stop.
        server = self.start("--autoindex", "--shards", "1")
        for _ in range(12):
            with server.connect() as s:
                s.sendall(b"GET /big/ HTTP/1.1\r\nHost: t\r\n\r\n")
        for _ in range(6):
            subprocess.run(["curl", "-s", "--http2-prior-knowledge", "--max-time", "0.05",
                            "-o", "/dev/null", "http://127.0.0.1:%d/big/" % server.port],
                           timeout=30)
        # The thread finishes what it had begun alone, and the slots come back.
        deadline = time.time() + 20
        while request(server, "GET", "/big/").status != 200 and time.time() < deadline:
            time.sleep(0.1)
        # Several at once, past the 4 slots: each is the listing, or 503 while all are taken.
        results = []

        def one():
            results.append(request(server, "GET", "/pub/").status)

        threads = [threading.Thread(target=one) for _ in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        self.assertTrue(set(results) <= {200, 503} and 200 in results, results)
        self.assertEqual(request(server, "GET", "/pub/").status, 200)
        self.assertEqual(server.stop(), 0, server.log)


if __name__ == "__main__":
    unittest.main()
