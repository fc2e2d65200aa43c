"""--autoindex (nginx's autoindex), on every tier, over HTTP/1.1 and HTTP/2 (h2c with prior
knowledge):

- a directory without an index is listed: HTML (names escaped for HTML and in their links,
  percent-encoded: `<`, `"`, spaces, bytes that are not UTF-8), or JSON that parses, with sizes
  and times, sorted by name; every link fetches its file;
- dot files are hidden, and shown with --serve-dot-files; a directory with an index is served
  its index; without --autoindex it is 403 as before; a directory ringd may not read is 403;
- the body is streamed: chunked over HTTP/1.1 (to the close over HTTP/1.0), DATA over HTTP/2;
  HEAD has the head alone;
- a directory of 100,000 entries is listed in full, in order, over both protocols and in both
  formats; past --autoindex-max-entries it is cut with a last line that says so;
- while clients that read slowly (an HTTP/1.1 socket not read, an HTTP/2 stream whose window is
  not opened) hold big listings part way, the same shard answers another client, and their
  listings finish whole once they read;
- clients that leave before or during their listing leave nothing behind: the shard's listing
  slots and connections come back (/debug/shards), and all of its slots can be taken again.
"""
import json
import os
import re
import shutil
import socket
import struct
import subprocess
import tempfile
import unittest
import urllib.parse

from ringd_harness import (ADMIN, BackendTestCase, Reader, Server, request, sends_stalled,
                           wait_for)

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


class H2Stream:
    """A bare HTTP/2 client (h2c, prior knowledge) of one GET whose flow-control windows are
    opened only when the test says: the server can send it 65,535 bytes of DATA, then waits."""

    def __init__(self, server, path):
        self.sock = server.connect()
        self.buf = b""
        self.data = []
        self.got = 0
        self.ended = False
        self.status_byte = None
        self.sock.sendall(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + self.frame(4, 0, 0, b""))
        # :method GET, :scheme http (static table), :path and :authority (literal, not indexed).
        block = b"\x82\x86\x04" + bytes([len(path)]) + path.encode() + b"\x01\x01t"
        self.sock.sendall(self.frame(1, 0x5, 1, block))  # END_STREAM | END_HEADERS

    @staticmethod
    def frame(kind, flags, stream, payload):
        return len(payload).to_bytes(3, "big") + bytes([kind, flags]) + \
            stream.to_bytes(4, "big") + payload

    def read_frame(self):
        while len(self.buf) < 9 or len(self.buf) < 9 + int.from_bytes(self.buf[:3], "big"):
            chunk = self.sock.recv(1 << 20)
            if not chunk:
                raise EOFError("connection closed")
            self.buf += chunk
        n = int.from_bytes(self.buf[:3], "big")
        kind, flags = self.buf[3], self.buf[4]
        stream = int.from_bytes(self.buf[5:9], "big") & 0x7FFFFFFF
        payload, self.buf = self.buf[9:9 + n], self.buf[9 + n:]
        if kind == 4 and not flags & 1:  # SETTINGS: acknowledged
            self.sock.sendall(self.frame(4, 1, 0, b""))
        elif kind == 1 and stream == 1:  # the response's HEADERS: :status 200 is index 8
            self.status_byte = payload[0]
        elif kind == 0 and stream == 1:
            self.data.append(payload)
            self.got += len(payload)
            self.ended = bool(flags & 1)
        elif kind == 3 and stream == 1:  # RST_STREAM
            raise AssertionError("stream reset: %r" % payload)

    def read_until(self, condition):
        self.sock.settimeout(30)
        while not condition():
            self.read_frame()

    def cancel(self):
        """RST_STREAM (CANCEL) for the stream; the connection stays."""
        self.sock.sendall(self.frame(3, 0, 1, (8).to_bytes(4, "big")))

    def open_windows(self):
        inc = (2 ** 31 - 1 - 65535).to_bytes(4, "big")
        self.sock.sendall(self.frame(8, 0, 0, inc) + self.frame(8, 0, 1, inc))

    def body(self):
        self.read_until(lambda: self.ended)
        return b"".join(self.data)


def listings(server):
    """The shard's listing slots in use (--shards 1), from /debug/shards."""
    return server.debug_shards()["shards"][0]["pools"]["listings"]["in_use"]


def slow_socket(server, target):
    """An HTTP/1.1 client of `target` that reads the response head, then nothing more. Its
    receive buffer is bounded (a few hundred KiB, and the server's send buffer a few MiB, well
    below a listing of 100,000 entries), yet above loopback's segment size, so that reading it
    later is not slowed by a window smaller than a segment."""
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 256 << 10)
    s.settimeout(10)
    s.connect(("127.0.0.1", server.port))
    s.sendall(("GET %s HTTP/1.1\r\nHost: t\r\n\r\n" % target).encode())
    reader = Reader(s)
    status, _, headers = reader.read_head()
    return s, reader, status, headers


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
        self.assertEqual(r.header("transfer-encoding"), "chunked")  # streamed
        self.assertIsNone(r.header("content-length"))
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
        # HEAD: the head a GET has, no body: the next response on the connection follows it.
        with server.connect() as s:
            s.sendall(b"HEAD /pub/ HTTP/1.1\r\nHost: t\r\n\r\nGET /pub/a%20b.txt HTTP/1.1\r\n"
                      b"Host: t\r\n\r\n")
            reader = Reader(s)
            head = reader.read_response(head_request=True)
            self.assertEqual((head.status, head.header("transfer-encoding")), (200, "chunked"))
            self.assertEqual(reader.read_response().body, b"spaces")
        # HTTP/1.0: no chunked coding; the body ends with the connection.
        old = request(server, "GET", "/pub/", version="HTTP/1.0")
        self.assertEqual((old.status, old.header("connection")), (200, "close"))
        self.assertIsNone(old.header("transfer-encoding"))
        self.assertEqual(old.body, r.body)
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

    def check_big_json(self, body):
        entries = json.loads(body)
        self.assertEqual(len(entries), BIG)
        self.assertEqual([e["name"] for e in entries], ["f%06d" % i for i in range(BIG)])
        self.assertTrue(all(e["size"] == 0 and e["type"] == "file" for e in entries))

    def check_big_html(self, body):
        names = re.findall(r'<tr><td><a href="(f\d{6})">', body.decode())
        self.assertEqual(names, ["f%06d" % i for i in range(BIG)])
        self.assertTrue(body.endswith(b"</html>\r\n"))
        self.assertNotIn(b"Listing cut", body)

    def test_a_directory_of_100000_entries_is_listed_in_full(self):
        server = self.start("--autoindex", "--autoindex-format", "json", "--shards", "1")
        r = request(server, "GET", "/big/")
        self.assertEqual((r.status, r.header("transfer-encoding")), (200, "chunked"))
        self.check_big_json(r.body)
        status, body = curl_h2(server, "/big/")
        self.assertEqual(status, 200)
        self.check_big_json(body)
        html_server = self.start("--autoindex", "--shards", "1")
        r = request(html_server, "GET", "/big/")
        self.assertEqual(r.status, 200)
        self.check_big_html(r.body)
        status, body = curl_h2(html_server, "/big/")
        self.assertEqual(status, 200)
        self.check_big_html(body)

    def test_past_max_entries_the_listing_is_cut_and_says_so(self):
        server = self.start("--autoindex", "--autoindex-format", "json",
                            "--autoindex-max-entries", "1000")
        entries = json.loads(request(server, "GET", "/big/").body)
        self.assertEqual(entries[-1], {"type": "truncated", "shown": 1000, "entries": BIG})
        self.assertEqual([e["name"] for e in entries[:-1]], ["f%06d" % i for i in range(1000)])
        html_server = self.start("--autoindex", "--autoindex-max-entries", "1000")
        status, body = curl_h2(html_server, "/big/")
        self.assertEqual(status, 200)
        self.assertIn("<p>Listing cut: the first 1000 of %d entries, by name.</p>" % BIG,
                      body.decode())
        # A directory within the bound is whole.
        self.assertNotIn(b"Listing cut", request(html_server, "GET", "/pub/").body)

    def test_the_shard_serves_others_while_slow_clients_hold_big_listings(self):
        server = self.start("--autoindex", "--autoindex-format", "json", "--shards", "1", *ADMIN)
        # An HTTP/1.1 client that reads nothing past the head, and an HTTP/2 stream whose
        # windows stay shut: both listings are under way, the server's sends stalled.
        s, reader, status, headers = slow_socket(server, "/big/")
        self.addCleanup(s.close)
        self.assertEqual((status, headers.get("transfer-encoding")), (200, "chunked"))
        h2 = H2Stream(server, "/big/")
        self.addCleanup(h2.sock.close)
        h2.read_until(lambda: h2.got >= 65535)  # the initial window, all of it
        self.assertEqual(h2.status_byte, 0x88)  # :status 200
        self.assertFalse(h2.ended)
        wait_for(lambda: sends_stalled([s]), "the HTTP/1.1 listing's send to stall")
        # The same shard answers another client at once, both listings still held.
        self.assertEqual(listings(server), 2)
        small = request(server, "GET", "/withindex/index.html")
        self.assertEqual((small.status, small.body), (200, b"<p>index</p>"))
        status, body = curl_h2(server, "/pub/a%20b.txt")
        self.assertEqual((status, body), (200, b"spaces"))
        self.assertEqual(listings(server), 2)
        self.assertEqual(server.connections()["sending"], 1)  # the HTTP/1.1 listing
        # Once they read, both listings come whole.
        s.settimeout(60)
        self.check_big_json(reader.read_chunked())
        h2.open_windows()
        self.check_big_json(h2.body())
        wait_for(lambda: listings(server) == 0, "the listing slots to come back")

    def test_a_listing_waiting_behind_others_is_not_cut(self):
        # The lister makes one listing at a time: the last of four big ones waits for the others'
        # directory reads before its status, far past a send timeout this short. That wait is the
        # shard's, not the client's: each gets its head (HTTP/1.1 and HTTP/2 alike).
        server = self.start("--autoindex", "--shards", "1", "--send-timeout-ms", "20", *ADMIN)
        socks = []
        for _ in range(3):
            s = socket.create_connection(("127.0.0.1", server.port))
            self.addCleanup(s.close)
            s.sendall(b"GET /big/ HTTP/1.1\r\nHost: t\r\n\r\n")
            socks.append(s)
        h2 = H2Stream(server, "/big/")
        self.addCleanup(h2.sock.close)
        for s in socks:
            s.settimeout(30)
            status, _, headers = Reader(s).read_head()
            self.assertEqual((status, headers.get("transfer-encoding")), (200, "chunked"))
        h2.read_until(lambda: h2.status_byte is not None)
        self.assertEqual(h2.status_byte, 0x88)  # :status 200
        # Their clients read no further: each send stalls, and is cut at the timeout.
        wait_for(lambda: listings(server) == 0, "the stalled listings to be cut", timeout=30)

    def test_clients_that_leave_leave_nothing_behind(self):
        # A client gone with its stream waiting for its window (it can open it no more) is cut
        # when no byte has moved for --send-timeout-ms, as any stalled send.
        server = self.start("--autoindex", "--shards", "1", "--send-timeout-ms", "1000", *ADMIN)
        linger = struct.pack("ii", 1, 0)  # close with a reset
        for i in range(12):
            with server.connect() as s:
                s.sendall(b"GET /big/ HTTP/1.1\r\nHost: t\r\n\r\n")
                if i % 3 != 0:  # some leave before their listing begins, most part way through
                    Reader(s).read_head()
                    s.recv(1000)
                if i % 2 == 0:
                    s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, linger)
        for i in range(6):
            h2 = H2Stream(server, "/big/")
            if i % 3:
                h2.read_until(lambda: h2.got > 0)
            if i % 3 == 2:  # the stream cancelled, the connection kept a while
                h2.cancel()
                h2.sock.sendall(h2.frame(6, 0, 0, b"12345678"))  # PING: answered after it
                h2.sock.settimeout(30)
                while b"\x00\x00\x08\x06\x01" not in h2.buf:
                    h2.buf += h2.sock.recv(1 << 20)
            if i % 2 == 0:
                h2.sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, linger)
            h2.sock.close()
        wait_for(lambda: listings(server) == 0 and server.connections()["open"] == 0,
                 "the listings and connections of the clients that left to end", timeout=30)
        # Every slot can be taken again: four listings held at once, the fifth refused (503).
        held = [slow_socket(server, "/big/") for _ in range(4)]
        self.assertEqual([h[2] for h in held], [200] * 4)
        self.assertEqual(listings(server), 4)
        self.assertEqual(request(server, "GET", "/pub/").status, 503)
        for h in held:
            h[0].close()
        wait_for(lambda: listings(server) == 0, "the held listings' slots to come back",
                 timeout=30)
        self.assertEqual(request(server, "GET", "/pub/").status, 200)
        self.assertEqual(server.stop(), 0, server.log)


if __name__ == "__main__":
    unittest.main()
