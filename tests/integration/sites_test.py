"""Virtual hosts (--site) on every tier: two sites with their own roots, index files, error pages,
added headers and certificates beside the default site (the top-level flags); chosen by Host over
HTTP/1.1, by :authority over h2 and h2c, with the TLS server name choosing the certificate and a
host of another site than it answered 421; wildcards and aliases; --unknown-site=421 and close;
a site's --allow/--deny (403 to a client they refuse, the connection kept)."""
import json
import os
import re
import shutil
import signal
import socket
import ssl
import subprocess
import tempfile
import threading
import unittest

from ringd_harness import (ADMIN, BACKEND, RINGD, ROOT_FLAGS, BackendTestCase, admin_get, Reader, Server, curl, make_docroot, raw, request,
                           wait_for)
from tls_pki import issue, make_pki


def write(root, rel, data):
    path = os.path.join(root, rel)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "wb") as f:
        f.write(data)


def read(path):
    if not os.path.exists(path):
        return b""
    with open(path, "rb") as f:
        return f.read()


def site_root(prefix, files):
    root = tempfile.mkdtemp(prefix=prefix)
    os.chmod(root, 0o755)
    for rel, data in files.items():
        write(root, rel, data)
    return root


class SitesTest(BackendTestCase):
    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        cls.root, cls.files = make_docroot()
        cls.root_a = site_root("ringd-site-a-", {
            "index.html": b"site A index\n",
            "a.txt": b"only in A\n",
            "errors/404.html": b"A's own 404 page\n",
        })
        cls.root_b = site_root("ringd-site-b-", {
            "home.html": b"site B home\n",
            "index.html": b"B's index.html, not its index\n",
            "b.txt": b"only in B\n",
        })
        cls.pki = tempfile.mkdtemp(prefix="ringd-sites-pki-")
        make_pki(cls.pki)
        issue(cls.pki, "a", 3600, sans="DNS:a.test,DNS:www.a.test")
        issue(cls.pki, "b", 3600, sans="DNS:*.b.test")
        cls.ca = os.path.join(cls.pki, "ca.crt")
        p = lambda n: os.path.join(cls.pki, n)
        cls.flagfile = os.path.join(cls.pki, "sites.conf")
        with open(cls.flagfile, "w") as f:
            f.write("# two sites beside the default one\n"
                    "[site a.test www.a.test]\n"
                    "--root=%s\n"
                    "--tls-cert=%s\n--tls-key=%s\n"
                    "--add-header=X-Site: a\n"
                    "--cache-control=*.txt=public, max-age=600\n"
                    "--error-page=404=/errors/404.html\n"
                    "\n"
                    "[site *.b.test]\n"
                    "--root %s\n"
                    "--index=home.html\n"
                    "--tls-cert=%s\n--tls-key=%s\n"
                    % (cls.root_a, p("a.crt"), p("a.key"), cls.root_b, p("b.crt"), p("b.key")))
        cls.log = os.path.join(cls.pki, "access.log")
        cls.server = Server(cls.root, "--listen-tls", "127.0.0.1:0",
                            "--tls-cert", p("localhost-ec.crt"), "--tls-key", p("localhost-ec.key"),
                            "--add-header", "X-Default: yes", "--cache-control", "*.txt=max-age=5",
                            "--access-log", cls.log,
                            *ADMIN, "--flagfile", cls.flagfile)
        assert cls.server.tls_port, cls.server.log

    @classmethod
    def tearDownClass(cls):
        cls.server.stop()
        for d in (cls.root, cls.root_a, cls.root_b, cls.pki):
            shutil.rmtree(d, ignore_errors=True)

    def get(self, host, path="/", server=None):
        return request(server or self.server, "GET", path, {"Host": host})

    # HTTP/1.1, plaintext.

    def test_host_chooses_the_site(self):
        self.assertEqual(self.get("a.test").body, b"site A index\n")
        self.assertEqual(self.get("a.test", "/a.txt").body, b"only in A\n")
        self.assertEqual(self.get("www.a.test", "/a.txt").body, b"only in A\n")  # an alias
        self.assertEqual(self.get("x.b.test", "/b.txt").body, b"only in B\n")  # the wildcard
        self.assertEqual(self.get("deep.x.b.test", "/b.txt").body, b"only in B\n")
        self.assertEqual(self.get("localhost", "/small.txt").body, self.files["small.txt"])
        # Each site sees its own root only.
        self.assertEqual(self.get("a.test", "/b.txt").status, 404)
        self.assertEqual(self.get("x.b.test", "/a.txt").status, 404)
        self.assertEqual(self.get("a.test", "/small.txt").status, 404)

    def test_host_is_matched_as_nginx_does(self):
        for host in ("A.TEST", "a.test:8080", "a.test.", "Www.A.Test.:443"):
            r = self.get(host, "/a.txt")
            self.assertEqual((r.status, r.body), (200, b"only in A\n"), host)
        # *.b.test is not b.test; two trailing dots are not one.
        self.assertEqual(self.get("b.test", "/small.txt").body, self.files["small.txt"])
        self.assertEqual(self.get("a.test..", "/small.txt").body, self.files["small.txt"])
        # An absolute-form target names the host, whatever Host says (RFC 9112 section 3.2.2).
        r = request(self.server, "GET", "http://a.test/a.txt", {"Host": "x.b.test"})
        self.assertEqual(r.body, b"only in A\n")

    def test_unknown_or_missing_host_is_the_default_site(self):
        self.assertEqual(self.get("nowhere.test", "/small.txt").body, self.files["small.txt"])
        self.assertEqual(self.get("127.0.0.1", "/small.txt").body, self.files["small.txt"])
        r = request(self.server, "GET", "/small.txt", version="HTTP/1.0")  # no Host at all
        self.assertEqual((r.status, r.body), (200, self.files["small.txt"]))

    def test_each_site_has_its_index_error_pages_and_headers(self):
        b = self.get("x.b.test")
        self.assertEqual(b.body, b"site B home\n")  # --index=home.html
        a = self.get("a.test", "/missing")
        self.assertEqual((a.status, a.body), (404, b"A's own 404 page\n"))
        self.assertEqual(self.get("a.test", "/a.txt").header("x-site"), "a")
        self.assertIsNone(self.get("a.test", "/a.txt").header("x-default"))
        self.assertEqual(self.get("a.test", "/a.txt").header("cache-control"), "public, max-age=600")
        self.assertEqual(self.get("x.b.test", "/b.txt").header("cache-control"), "max-age=5")
        self.assertEqual(self.get("nowhere.test", "/small.txt").header("cache-control"), "max-age=5")
        # A site without origin flags of its own has the top level's (nginx's inheritance).
        self.assertEqual(b.header("x-default"), "yes")
        self.assertIsNone(b.header("x-site"))
        d = self.get("nowhere.test", "/missing")
        self.assertEqual(d.status, 404)
        self.assertNotIn(b"A's own", d.body)

    def test_keep_alive_connection_moves_between_sites(self):
        with self.server.connect() as s:
            reader = Reader(s)
            for host, body in [("a.test", b"only in A\n"), ("x.b.test", b"only in B\n"),
                               ("a.test", b"only in A\n")]:
                path = "/a.txt" if host == "a.test" else "/b.txt"
                s.sendall(("GET %s HTTP/1.1\r\nHost: %s\r\n\r\n" % (path, host)).encode())
                self.assertEqual(reader.read_response().body, body)

    def test_access_log_names_the_site(self):
        self.get("www.a.test", "/a.txt?logged-a")
        self.get("nowhere.test", "/small.txt?logged-default")
        wait_for(lambda: b"logged-default" in read(self.log), "the access log lines")
        lines = read(self.log).decode().splitlines()
        a = [l for l in lines if "logged-a" in l][0]
        d = [l for l in lines if "logged-default" in l][0]
        self.assertTrue(a.endswith(' "a.test"'), a)
        self.assertTrue(d.endswith(' "-"'), d)

    def test_metrics_count_each_configured_site(self):
        count = lambda site: self.server.metric("ringd_site_requests_total", site=site)
        a, default = count("a.test"), count("-")
        lookups = lambda: (self.server.metric("ringd_file_cache_hits_total") +
                           self.server.metric("ringd_file_cache_misses_total"))
        before = lookups()
        for _ in range(3):
            self.get("x.b.test", "/b.txt")  # site B's cache
        wait_for(lambda: lookups() >= before + 3, "the sites' caches in the cache metrics")
        self.get("a.test", "/a.txt")
        self.get("WWW.a.test", "/a.txt")
        self.get("never-configured.test", "/small.txt")
        wait_for(lambda: count("a.test") == a + 2 and count("-") == default + 1,
                 "the site counters")
        # Bounded by the configuration: hosts clients send make no series of their own.
        _, text = admin_get(self.server.admin_port(), "/metrics")
        series = [l for l in text.splitlines() if l.startswith("ringd_site_requests_total{")]
        self.assertEqual(sorted(l.split("}")[0] for l in series),
                         ['ringd_site_requests_total{site="*.b.test"',
                          'ringd_site_requests_total{site="-"',
                          'ringd_site_requests_total{site="a.test"'])

    # HTTPS: the server name chooses the certificate; Host must name the same site.

    def tls(self, sni, alpn=None):
        ctx = ssl.create_default_context(cafile=self.ca)
        if alpn:
            ctx.set_alpn_protocols(alpn)
        sock = socket.create_connection(("127.0.0.1", self.server.tls_port), timeout=10)
        return ctx.wrap_socket(sock, server_hostname=sni)

    def tls_get(self, sni, host, path):
        with self.tls(sni) as s:
            s.sendall(("GET %s HTTP/1.1\r\nHost: %s\r\n\r\n" % (path, host)).encode())
            return Reader(s).read_response()

    def test_sni_chooses_the_certificate_and_host_the_site(self):
        # The handshakes verify each certificate against the name asked for.
        self.assertEqual(self.tls_get("a.test", "a.test", "/a.txt").body, b"only in A\n")
        self.assertEqual(self.tls_get("www.a.test", "a.test", "/a.txt").body, b"only in A\n")
        self.assertEqual(self.tls_get("img.b.test", "img.b.test:443", "/b.txt").body,
                         b"only in B\n")
        self.assertEqual(self.tls_get("localhost", "localhost", "/small.txt").body,
                         self.files["small.txt"])

    def test_host_of_another_site_than_sni_is_421(self):
        r = self.tls_get("a.test", "x.b.test", "/b.txt")
        self.assertEqual(r.status, 421)
        self.assertEqual(self.tls_get("localhost", "a.test", "/a.txt").status, 421)
        self.assertEqual(self.tls_get("a.test", "localhost", "/small.txt").status, 421)
        # The connection lives on: the same one answers its own site's request after a 421.
        with self.tls("a.test") as s:
            reader = Reader(s)
            s.sendall(b"GET /b.txt HTTP/1.1\r\nHost: x.b.test\r\n\r\n"
                      b"GET /a.txt HTTP/1.1\r\nHost: a.test\r\n\r\n")
            self.assertEqual(reader.read_response().status, 421)
            self.assertEqual(reader.read_response().body, b"only in A\n")

    # HTTP/2: :authority chooses the site (h2 by ALPN, h2c with prior knowledge).

    def test_h2_authority_chooses_the_site(self):
        tls, port = self.server.tls_port, self.server.port
        for host, path, body, x_site in [("a.test", "/a.txt", b"only in A\n", "a"),
                                         ("x.b.test", "/", b"site B home\n", None)]:
            v, status, headers, got = curl("https://%s:%d%s" % (host, tls, path), "--http2",
                                           "--cacert", self.ca, "--resolve",
                                           "%s:%d:127.0.0.1" % (host, tls))
            self.assertEqual((v, status, got, headers.get("x-site")), ("2", 200, body, x_site))
            v, status, headers, got = curl("http://%s:%d%s" % (host, port, path),
                                           "--http2-prior-knowledge", "--resolve",
                                           "%s:%d:127.0.0.1" % (host, port))
            self.assertEqual((v, status, got, headers.get("x-site")), ("2", 200, body, x_site))
        v, status, headers, got = curl("http://a.test:%d/missing" % port, "--http2-prior-knowledge",
                                       "--resolve", "a.test:%d:127.0.0.1" % port)
        self.assertEqual((v, status, got), ("2", 404, b"A's own 404 page\n"))
        # SNI a.test, :authority of site B: 421 on the stream.
        v, status, _, _ = curl("https://a.test:%d/b.txt" % tls, "--http2", "--cacert", self.ca,
                               "--resolve", "a.test:%d:127.0.0.1" % tls, "-H", "Host: x.b.test")
        self.assertEqual((v, status), ("2", 421))


def ipv6_loopback():
    """Whether this machine can listen on [::1] (a container may have no IPv6)."""
    try:
        with socket.socket(socket.AF_INET6, socket.SOCK_STREAM) as s:
            s.bind(("::1", 0))
        return True
    except OSError:
        return False


class SiteRulesClient:
    """A client whose address is chosen: the bypass tier cannot ask a connection's peer, so there
    every listener is ,proxy with --proxy-from all and a PROXY header names the client."""
    bypass = BACKEND == "bypass"
    port6 = None

    def connect(self, source, port=None):
        """A connection whose client is `source`: bound to it, or (bypass) named by a PROXY
        header."""
        six = ":" in source
        if self.bypass:
            s = socket.create_connection(("127.0.0.1", port or self.server.port), timeout=10)
            s.sendall(("PROXY %s %s %s 40000 80\r\n" % ("TCP6" if six else "TCP4", source,
                                                         "::1" if six else "127.0.0.1")).encode())
            return s
        s = socket.socket(socket.AF_INET6 if six else socket.AF_INET, socket.SOCK_STREAM)
        s.settimeout(10)
        s.bind((source, 0))
        s.connect((source if six else "127.0.0.1",
                   self.port6 if six else (port or self.server.port)))
        return s

    def statuses(self, source, hosts):
        """The statuses of GET requests to `hosts`, in order, on one keep-alive connection."""
        with self.connect(source) as s:
            reader = Reader(s)
            out = []
            for host, path in hosts:
                s.sendall(("GET %s HTTP/1.1\r\nHost: %s\r\n\r\n" % (path, host)).encode())
                r = reader.read_response()
                out.append((r.status, r.body if r.status == 200 else None))
            return out


class SiteRulesTest(SiteRulesClient, BackendTestCase):
    """--allow/--deny inside a site: that site's requests from a client its rules refuse are
    answered 403 (nginx's allow/deny in a server block), the keep-alive connection kept, over
    HTTP/1.1 and h2c; another site is unaffected. The client binds its source address (127.0.0.2
    or 127.0.0.3: all of 127.0.0.0/8 is loopback). The bypass tier cannot ask a connection's
    peer: there every listener is ,proxy with --proxy-from all, and a PROXY header names the
    same client."""

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        cls.root, cls.files = make_docroot()
        cls.root_a = site_root("ringd-site-a-", {"a.txt": b"only in A\n"})
        cls.root_b = site_root("ringd-site-b-", {"b.txt": b"only in B\n"})
        cls.dir = tempfile.mkdtemp(prefix="ringd-site-rules-")
        make_pki(cls.dir)
        cls.flagfile = os.path.join(cls.dir, "sites.conf")
        with open(cls.flagfile, "w") as f:
            f.write("[site a.test]\n--root=%s\n--allow=127.0.0.2\n--allow=::1\n--deny=all\n"
                    "[site b.test]\n--root=%s\n" % (cls.root_a, cls.root_b))
        cls.log = os.path.join(cls.dir, "access.log")
        cls.ipv6 = ipv6_loopback()
        listen = "127.0.0.1:0,proxy" if cls.bypass else "127.0.0.1:0"
        extra = ["--listen-tls", listen, "--tls-cert", os.path.join(cls.dir, "localhost-ec.crt"),
                 "--tls-key", os.path.join(cls.dir, "localhost-ec.key")]
        if cls.bypass:
            extra += ["--proxy-from", "all"]
        if cls.ipv6 and not cls.bypass:
            extra += ["--listen", "[::1]:0"]
        cls.server = Server(cls.root, *extra, "--access-log", cls.log, *ADMIN, "--flagfile",
                            cls.flagfile, listen=listen)
        for line in cls.server.log:
            m = re.search(r"\[::1\]:(\d+)", line)
            if m:
                cls.port6 = int(m.group(1))

    @classmethod
    def tearDownClass(cls):
        cls.server.stop()
        for d in (cls.root, cls.root_a, cls.root_b, cls.dir):
            shutil.rmtree(d, ignore_errors=True)

    def test_http1_site_refuses_a_client_its_rules_deny(self):
        before = self.server.metric("ringd_site_clients_denied_total")
        ok_a, ok_b = (200, b"only in A\n"), (200, b"only in B\n")
        self.assertEqual(self.statuses("127.0.0.2", [("a.test", "/a.txt"), ("b.test", "/b.txt")]),
                         [ok_a, ok_b])
        # Refused by a.test's rules: 403, and the same connection goes on to the other sites.
        self.assertEqual(self.statuses("127.0.0.3", [("a.test", "/a.txt"), ("b.test", "/b.txt"),
                                                     ("a.test", "/a.txt"),
                                                     ("other.test", "/small.txt")]),
                         [(403, None), ok_b, (403, None), (200, self.files["small.txt"])])
        wait_for(lambda: self.server.metric("ringd_site_clients_denied_total") == before + 2,
                 "2 more refused by a site's rules")
        # The access log has the refusal, with the client judged and the site.
        wait_for(lambda: any("127.0.0.3" in l and '"GET /a.txt HTTP/1.1" 403' in l
                             for l in read(self.log).decode().splitlines()),
                 "the 403 in the access log")

    def test_https(self):
        ctx = ssl.create_default_context(cafile=os.path.join(self.dir, "ca.crt"))
        ctx.check_hostname = False  # the default site's certificate serves every name here
        for source, status in (("127.0.0.2", 200), ("127.0.0.3", 403)):
            with ctx.wrap_socket(self.connect(source, self.server.tls_port),
                                 server_hostname="a.test") as s:
                reader = Reader(s)
                for _ in range(2):  # the connection stays after a 403
                    s.sendall(b"GET /a.txt HTTP/1.1\r\nHost: a.test\r\n\r\n")
                    self.assertEqual(reader.read_response().status, status)

    def test_ipv6(self):
        if not self.ipv6:
            self.skipTest("no IPv6 loopback here: cannot listen on [::1]")
        self.assertEqual(self.statuses("::1", [("a.test", "/a.txt")]), [(200, b"only in A\n")])
        if self.bypass:  # a PROXY header may name any address: one a.test's deny all refuses
            self.assertEqual(self.statuses("2001:db8::5", [("a.test", "/a.txt")]), [(403, None)])

    def test_h2c_stream_is_refused_and_the_connection_stays(self):
        import h2.config
        import h2.connection
        import h2.events

        def streams(source):
            with self.connect(source) as sock:
                c = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True))
                c.initiate_connection()
                for sid, host, path in ((1, "a.test", "/a.txt"), (3, "b.test", "/b.txt"),
                                        (5, "a.test", "/a.txt")):
                    c.send_headers(sid, [(":method", "GET"), (":path", path),
                                         (":scheme", "http"), (":authority", host)],
                                   end_stream=True)
                sock.sendall(c.data_to_send())
                got, ended = {}, set()
                while len(ended) < 3:
                    data = sock.recv(65536)
                    self.assertTrue(data, "the connection closed")
                    for e in c.receive_data(data):
                        if isinstance(e, h2.events.ResponseReceived):
                            got[e.stream_id] = int(dict(e.headers)[b":status"])
                        elif isinstance(e, h2.events.StreamEnded):
                            ended.add(e.stream_id)
                        elif isinstance(e, h2.events.ConnectionTerminated):
                            self.fail("GOAWAY")
                    sock.sendall(c.data_to_send())
                return got

        self.assertEqual(streams("127.0.0.2"), {1: 200, 3: 200, 5: 200})
        self.assertEqual(streams("127.0.0.3"), {1: 403, 3: 200, 5: 403})


class SiteRulesServerTest(SiteRulesClient, BackendTestCase):
    """A server of its own per test: the client --real-ip-from names is the one a site judges;
    SIGHUP re-reads a site's rules."""

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        cls.root, cls.files = make_docroot()
        cls.root_a = site_root("ringd-site-a-", {"a.txt": b"only in A\n"})

    @classmethod
    def tearDownClass(cls):
        for d in (cls.root, cls.root_a):
            shutil.rmtree(d, ignore_errors=True)

    def start(self, rules, *flags):
        self.dir = tempfile.mkdtemp(prefix="ringd-site-rules-")
        self.addCleanup(shutil.rmtree, self.dir, True)
        self.flagfile = os.path.join(self.dir, "sites.conf")
        self.write_site(rules)
        listen = "127.0.0.1:0,proxy" if self.bypass else "127.0.0.1:0"
        extra = ["--proxy-from", "all"] if self.bypass else []
        self.server = Server(self.root, *extra, *flags, *ADMIN, "--flagfile", self.flagfile,
                             listen=listen)
        self.addCleanup(lambda: self.assertEqual(self.server.stop(), 0))

    def write_site(self, rules):
        with open(self.flagfile, "w") as f:
            f.write("[site a.test]\n--root=%s\n%s" % (self.root_a,
                                                      "".join(r + "\n" for r in rules)))

    def test_real_ip_from_names_the_client_judged(self):
        self.start(["--deny=203.0.113.0/24"], "--real-ip-from", "127.0.0.1")
        def status(forwarded):
            with self.connect("127.0.0.1") as s:
                s.sendall(("GET /a.txt HTTP/1.1\r\nHost: a.test\r\nX-Forwarded-For: %s\r\n"
                           "\r\n" % forwarded).encode())
                return Reader(s).read_response().status
        self.assertEqual(status("203.0.113.5"), 403)
        self.assertEqual(status("198.51.100.5"), 200)
        self.assertEqual(status("203.0.113.5, 198.51.100.5"), 200)  # the last one is the client

    def test_sighup_rereads_a_sites_rules(self):
        self.start(["--deny=127.0.0.3"])
        self.assertEqual(self.statuses("127.0.0.3", [("a.test", "/a.txt")]), [(403, None)])
        self.write_site(["--deny=127.0.0.4"])
        self.server.proc.send_signal(signal.SIGHUP)
        wait_for(lambda: self.statuses("127.0.0.3", [("a.test", "/a.txt")])[0][0] == 200 and
                 self.statuses("127.0.0.4", [("a.test", "/a.txt")])[0][0] == 403,
                 "the new rules served")

    def test_first_site_rules_at_a_reload_need_a_restart(self):
        self.start([])
        self.write_site(["--deny=127.0.0.3"])
        self.server.proc.send_signal(signal.SIGHUP)
        wait_for(lambda: self.server.logged("--allow/--deny in a --site needs a restart"),
                 "the reload refused")
        self.assertEqual(self.statuses("127.0.0.3", [("a.test", "/a.txt")]),
                         [(200, b"only in A\n")])


class SiteListingsTest(BackendTestCase):
    """--autoindex per site: a site that lists its directories (in its own format) beside one
    that does not, and the default site's own choice; a reload that asks for the first listing
    when the process started without one is refused."""

    def setUp(self):
        self.dirs = [site_root("ringd-site-list-%s-" % n, {"pub/one.txt": b"1\n", "pub/two.txt": b"2\n"})
                     for n in ("top", "a", "b")]
        self.conf = tempfile.mkdtemp(prefix="ringd-site-list-conf-")
        self.addCleanup(lambda: [shutil.rmtree(d, ignore_errors=True) for d in self.dirs + [self.conf]])

    def flagfile(self, a_flags):
        path = os.path.join(self.conf, "sites.conf")
        with open(path, "w") as f:
            f.write("[site a.test]\n--root=%s\n%s[site b.test]\n--root=%s\n"
                    % (self.dirs[1], "".join(l + "\n" for l in a_flags), self.dirs[2]))
        return path

    def test_a_site_lists_its_directories_in_its_own_format(self):
        server = Server(self.dirs[0], "--autoindex",
                        "--flagfile", self.flagfile(["--autoindex", "--autoindex-format=json"]))
        try:
            a = request(server, "GET", "/pub/", {"Host": "a.test"})
            self.assertEqual(a.status, 200)
            self.assertEqual(a.headers.get("content-type"), "application/json")
            self.assertEqual([e["name"] for e in json.loads(a.body)], ["one.txt", "two.txt"])
            # b.test gives no --autoindex: the top level's (on, HTML).
            b = request(server, "GET", "/pub/", {"Host": "b.test"})
            self.assertEqual(b.status, 200)
            self.assertTrue(b.headers.get("content-type", "").startswith("text/html"))
            self.assertIn(b'href="one.txt"', b.body)
            # Over h2c the site's stream gets its own listing too.
            v, status, headers, body = curl("http://a.test:%d/pub/" % server.port,
                                            "--http2-prior-knowledge", "--resolve",
                                            "a.test:%d:127.0.0.1" % server.port)
            self.assertEqual((v, status, headers.get("content-type")), ("2", 200, "application/json"))
            self.assertEqual(len(json.loads(body)), 2)
        finally:
            self.assertEqual(server.stop(), 0)

    def test_only_the_site_that_asks_lists(self):
        server = Server(self.dirs[0], "--flagfile", self.flagfile(["--autoindex"]))
        try:
            self.assertEqual(request(server, "GET", "/pub/", {"Host": "a.test"}).status, 200)
            self.assertEqual(request(server, "GET", "/pub/", {"Host": "b.test"}).status, 403)
            self.assertEqual(request(server, "GET", "/pub/", {"Host": "other"}).status, 403)
        finally:
            self.assertEqual(server.stop(), 0)

    def test_the_first_listing_at_a_reload_needs_a_restart(self):
        server = Server(self.dirs[0], "--flagfile", self.flagfile([]))
        try:
            self.flagfile(["--autoindex"])
            server.proc.send_signal(signal.SIGHUP)
            wait_for(lambda: server.logged("--autoindex in a --site needs a restart"), "the reload refused")
            self.assertEqual(request(server, "GET", "/pub/", {"Host": "a.test"}).status, 403)
        finally:
            self.assertEqual(server.stop(), 0)


class SiteRulesBypassTest(BackendTestCase):
    """The bypass tier cannot ask a connection's peer: a site's --allow/--deny is refused there in
    one line unless every listener is ,proxy with --proxy-from all."""

    def test_refused_without_every_listener_proxy_and_trusting_all(self):
        if BACKEND != "bypass":
            self.skipTest("bypass only")
        root, _ = make_docroot()
        self.addCleanup(shutil.rmtree, root, True)
        site = ["--site=a.test", "--root", root, "--deny", "127.0.0.3"]
        for listen in (["--listen", "127.0.0.1:0"],
                       ["--listen", "127.0.0.1:0,proxy", "--listen", "127.0.0.1:0"]):
            out = subprocess.run([RINGD, "--root", root, "--io", "bypass", "--proxy-from", "all"] +
                                 ROOT_FLAGS + listen + site, capture_output=True, text=True,
                                 timeout=20)
            self.assertNotEqual(out.returncode, 0)
            self.assertIn("--allow/--deny in a --site without every listener ,proxy", out.stderr)
            self.assertEqual(len(out.stderr.strip().splitlines()), 1, out.stderr)


class UnknownSiteTest(BackendTestCase):
    """--unknown-site=421 and close: a request whose host names no site is not the default's."""

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        cls.root, cls.files = make_docroot()
        cls.root_a = site_root("ringd-site-a-", {"a.txt": b"only in A\n"})

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.root, ignore_errors=True)
        shutil.rmtree(cls.root_a, ignore_errors=True)

    def test_421(self):
        server = Server(self.root, "--unknown-site=421", "--site=a.test", "--root", self.root_a)
        try:
            r = request(server, "GET", "/small.txt", {"Host": "nowhere.test"})
            self.assertEqual(r.status, 421)
            self.assertEqual(request(server, "GET", "/small.txt", version="HTTP/1.0").status, 421)
            self.assertEqual(request(server, "GET", "/a.txt", {"Host": "a.test"}).body,
                             b"only in A\n")
            v, status, _, _ = curl("http://127.0.0.1:%d/small.txt" % server.port,
                                   "--http2-prior-knowledge")
            self.assertEqual((v, status), ("2", 421))
        finally:
            self.assertEqual(server.stop(), 0)

    def test_close(self):
        server = Server(self.root, "--unknown-site=close", "--site=a.test", "--root", self.root_a)
        try:
            status, out = raw(server, b"GET /small.txt HTTP/1.1\r\nHost: nowhere.test\r\n\r\n"
                                      b"GET /small.txt HTTP/1.1\r\nHost: a.test\r\n\r\n")
            self.assertEqual(status, 421)
            self.assertEqual(out.count(b"HTTP/1.1 "), 1, out)  # closed after the first
            self.assertIn(b"Connection: close", out)
            self.assertEqual(request(server, "GET", "/a.txt", {"Host": "a.test"}).body,
                             b"only in A\n")
            # HTTP/2: the stream is answered 421, then GOAWAY ends the connection.
            import h2.config
            import h2.connection
            import h2.events
            with server.connect() as sock:
                c = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True))
                c.initiate_connection()
                c.send_headers(1, [(":method", "GET"), (":path", "/small.txt"),
                                   (":scheme", "http"), (":authority", "nowhere.test")],
                               end_stream=True)
                sock.sendall(c.data_to_send())
                status, goaway = None, False
                while not goaway:
                    data = sock.recv(65536)
                    if not data:
                        break
                    for e in c.receive_data(data):
                        if isinstance(e, h2.events.ResponseReceived):
                            status = dict(e.headers)[b":status"]
                        goaway |= isinstance(e, h2.events.ConnectionTerminated)
                self.assertEqual((status, goaway), (b"421", True))
        finally:
            self.assertEqual(server.stop(), 0)


class SitesReloadTest(BackendTestCase):
    """SIGHUP re-reads the sites: a new site (with its certificate) is served from the shards'
    next turn while connections stay open and their requests keep being answered; a site whose
    root cannot be opened keeps the sites in use."""

    def setUp(self):
        self.root, self.files = make_docroot()
        self.big = bytes((i * 7 + 3) & 0xFF for i in range(256)) * (32 * 1024)  # 8 MiB
        self.root_a = site_root("ringd-site-a-", {"a.txt": b"only in A\n", "big.bin": self.big})
        self.root_c = site_root("ringd-site-c-", {"c.txt": b"only in C\n"})
        self.pki = tempfile.mkdtemp(prefix="ringd-sites-pki-")
        make_pki(self.pki)
        issue(self.pki, "a", 3600, sans="DNS:a.test")
        issue(self.pki, "c", 3600, sans="DNS:c.test")
        self.flagfile = os.path.join(self.pki, "sites.conf")

    def tearDown(self):
        for d in (self.root, self.root_a, self.root_c, self.pki):
            shutil.rmtree(d, ignore_errors=True)

    def write_sites(self, *sites):
        with open(self.flagfile, "w") as f:
            for name, root, cert in sites:
                f.write("[site %s]\n--root=%s\n" % (name, root))
                if cert:
                    f.write("--tls-cert=%s\n--tls-key=%s\n" % (
                        os.path.join(self.pki, cert + ".crt"), os.path.join(self.pki, cert + ".key")))

    def tls_get(self, server, sni, path):
        ctx = ssl.create_default_context(cafile=os.path.join(self.pki, "ca.crt"))
        with socket.create_connection(("127.0.0.1", server.tls_port), timeout=10) as raw_sock:
            with ctx.wrap_socket(raw_sock, server_hostname=sni) as s:
                s.sendall(("GET %s HTTP/1.1\r\nHost: %s\r\n\r\n" % (path, sni)).encode())
                return Reader(s).read_response()

    def test_sighup_adds_a_site_while_a_client_keeps_requesting(self):
        self.write_sites(("a.test", self.root_a, "a"))
        p = lambda n: os.path.join(self.pki, n)
        server = Server(self.root, "--listen-tls", "127.0.0.1:0", "--tls-cert",
                        p("localhost-ec.crt"), "--tls-key", p("localhost-ec.key"),
                        # the client's one connection lasts the whole test
                        "--max-requests-per-connection", "100000000",
                        "--flagfile", self.flagfile)
        stop = threading.Event()
        answered, failed = [0], []

        def keep_requesting():
            # One keep-alive connection, asking site A and the default site in turn.
            try:
                with server.connect() as s:
                    reader = Reader(s)
                    while not stop.is_set():
                        s.sendall(b"GET /a.txt HTTP/1.1\r\nHost: a.test\r\n\r\n"
                                  b"GET /small.txt HTTP/1.1\r\nHost: c.test\r\n\r\n")
                        a, d = reader.read_response(), reader.read_response()
                        if (a.status, a.body) != (200, b"only in A\n"):
                            failed.append(("a.test", a.status, a.body))
                        # c.test is the default site's until the reload, then site C's.
                        if d.status not in (200, 404):
                            failed.append(("c.test", d.status, d.body))
                        answered[0] += 2
            except Exception as e:  # a closed or reset connection is a failed request
                failed.append(repr(e))

        client = threading.Thread(target=keep_requesting)
        client.start()
        try:
            get = lambda host, path: request(server, "GET", path, {"Host": host})
            self.assertEqual(get("c.test", "/small.txt").body, self.files["small.txt"])
            self.assertEqual(get("c.test", "/c.txt").status, 404)
            wait_for(lambda: answered[0] >= 20, "requests before the reload")
            self.write_sites(("a.test", self.root_a, "a"), ("c.test", self.root_c, "c"))
            server.proc.send_signal(signal.SIGHUP)
            wait_for(lambda: server.logged("SIGHUP: sites taken up (2)"), "the reload")
            wait_for(lambda: get("c.test", "/c.txt").body == b"only in C\n", "site C")
            self.assertEqual(get("c.test", "/small.txt").status, 404)
            # Its certificate came with it: the handshake verifies c.test.
            self.assertEqual(self.tls_get(server, "c.test", "/c.txt").body, b"only in C\n")
            before = answered[0]
            wait_for(lambda: answered[0] >= before + 20, "requests after the reload")
            # A site whose root cannot be opened: the sites in use stay.
            self.write_sites(("a.test", self.root_a, "a"), ("c.test", self.root_c, "c"),
                             ("d.test", os.path.join(self.pki, "gone"), None))
            server.proc.send_signal(signal.SIGHUP)
            wait_for(lambda: server.logged("SIGHUP: keeping the configuration in use: --site "
                                           "d.test: --root: cannot"), "the refused reload")
            self.assertEqual(get("c.test", "/c.txt").body, b"only in C\n")
        finally:
            stop.set()
            client.join(timeout=30)
        self.assertEqual(failed, [])
        self.assertGreater(answered[0], 40)
        self.assertEqual(server.stop(), 0, server.log)


    def test_a_response_under_way_finishes_on_a_site_a_reload_removed(self):
        self.write_sites(("a.test", self.root_a, None))
        server = Server(self.root, "--flagfile", self.flagfile)
        try:
            with server.connect() as s:
                s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 16384)
                s.sendall(b"GET /big.bin HTTP/1.1\r\nHost: a.test\r\n\r\n")
                reader = Reader(s)
                status, _, headers = reader.read_head()
                self.assertEqual((status, int(headers["content-length"])), (200, len(self.big)))
                got = reader.read_exact(65536)
                # The body is still going out when site A leaves (and site C comes).
                self.write_sites(("c.test", self.root_c, None))
                server.proc.send_signal(signal.SIGHUP)
                wait_for(lambda: server.logged("SIGHUP: sites taken up (1)"), "the reload")
                wait_for(lambda: request(server, "GET", "/c.txt", {"Host": "c.test"}).status == 200,
                         "site C")
                self.assertEqual(request(server, "GET", "/a.txt", {"Host": "a.test"}).status, 404)
                got += reader.read_exact(len(self.big) - len(got))
                self.assertEqual(got, self.big)
                # The connection lives on, now in the new generation: a.test is the default's.
                s.sendall(b"GET /small.txt HTTP/1.1\r\nHost: a.test\r\n\r\n")
                self.assertEqual(reader.read_response().body, self.files["small.txt"])
        finally:
            self.assertEqual(server.stop(), 0, server.log)


class SiteRootAndCheckTest(BackendTestCase):
    """A site's root follows a rename as --root does; `ringd -t` says a bad site in one line."""

    def setUp(self):
        self.root, self.files = make_docroot()
        self.deploy = tempfile.mkdtemp(prefix="ringd-site-deploy-")
        for release in ("r1", "r2"):
            write(self.deploy, release + "/version.txt", release.encode())
        os.symlink("r1", os.path.join(self.deploy, "current"))

    def tearDown(self):
        shutil.rmtree(self.root, ignore_errors=True)
        shutil.rmtree(self.deploy, ignore_errors=True)

    def test_site_root_follows_a_rename(self):
        server = Server(self.root, "--site=a.test", "--root", os.path.join(self.deploy, "current"))
        try:
            version = lambda: request(server, "GET", "/version.txt", {"Host": "a.test"}).body
            self.assertEqual(version(), b"r1")
            tmp = os.path.join(self.deploy, "current.new")
            os.symlink("r2", tmp)
            os.rename(tmp, os.path.join(self.deploy, "current"))  # ln -sfn r2 current.new; mv -T
            wait_for(lambda: version() == b"r2", "the site's new release")
            said = "--site a.test: --root %s names another directory now" % os.path.join(
                self.deploy, "current")
            self.assertTrue(server.logged(said), server.log)
            # The default site's root stays where it was.
            self.assertEqual(request(server, "GET", "/small.txt").body, self.files["small.txt"])
        finally:
            self.assertEqual(server.stop(), 0, server.log)

    def test_check_config_reports_a_bad_site(self):
        flagfile = os.path.join(self.deploy, "bad.conf")
        with open(flagfile, "w") as f:
            f.write("--root=%s\n[site a.test]\n--index=index.htm\n" % self.root)
        for flags, says in [
                (["--flagfile", flagfile], "bad.conf:3: --site a.test: needs --root"),
                (["--root", self.root, "--site=a.test", "--root=/nonexistent-ringd"],
                 "--site a.test: --root: cannot use '/nonexistent-ringd'"),
                (["--root", self.root, "--site=a.test,b..test", "--root", self.root],
                 "'b..test' is not a site name")]:
            run = lambda *check: subprocess.run([RINGD, *check, "--io", BACKEND, *ROOT_FLAGS,
                                                 *flags], capture_output=True, text=True,
                                                timeout=30)
            out = run()  # one line, exit status 2
            self.assertEqual(out.returncode, 2, (flags, out.stderr))
            self.assertEqual(len(out.stderr.strip().splitlines()), 1, out.stderr)
            self.assertIn(says, out.stderr)
            out = run("-t")  # the problem, then -t's verdict
            self.assertNotEqual(out.returncode, 0, out.stderr)
            self.assertEqual(out.stderr.strip().splitlines(),
                             [out.stderr.splitlines()[0], "ringd: configuration test failed"])
            self.assertIn(says, out.stderr.splitlines()[0])


if __name__ == "__main__":
    unittest.main()
