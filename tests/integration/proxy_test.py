"""The PROXY protocol (v1 and v2) on ",proxy" listeners, plaintext and TLS, and --allow/--deny, on
the real ringd binary on one io backend (RINGD_IO). Raw sockets write the headers (a client
address of the test's choosing, whole or a byte at a time), curl sends v1 for HTTP/1.1 and
HTTP/2, and 127.0.0.0/8's many addresses and ::1 stand for clients, balancers and strangers."""
import os
import re
import shutil
import socket
import ssl
import struct
import subprocess
import tempfile
import time
import unittest

from ringd_harness import (ADMIN, BACKEND, DocrootTestCase, Reader, Server, RINGD, ROOT_FLAGS,
                           listening_sockets, logged_client, passed_by_systemd, wait_for)
from tls_pki import make_pki

V2_SIGNATURE = b"\r\n\r\n\x00\r\nQUIT\n"
# The bypass tier cannot ask a connection's peer for its address (a direct descriptor has no fd
# for getpeername): a ",proxy" listener there trusts every peer, and says so (--proxy-from all);
# the socket's own address, which LOCAL and UNKNOWN headers leave standing, is logged as "-".
BYPASS_TRUSTS_ALL = ["--proxy-from", "all"] if BACKEND == "bypass" else []
SOCKET_PEER = "-" if BACKEND == "bypass" else "127.0.0.1"
GET = b"GET /small.txt HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n"


def v1(src, dst="127.0.0.1", sport=40000, dport=80):
    family = "TCP6" if ":" in src else "TCP4"
    return ("PROXY %s %s %s %d %d\r\n" % (family, src, dst, sport, dport)).encode()


def v2(src=None, dst="127.0.0.1", command=1, tlvs=b""):
    """A v2 header: PROXY naming `src` (IPv4 or IPv6), or LOCAL with command=0 and no src."""
    if src is None:
        block, family = b"", 0x00
    elif ":" in src:
        block = (socket.inet_pton(socket.AF_INET6, src) +
                 socket.inet_pton(socket.AF_INET6, dst if ":" in dst else "::1") +
                 struct.pack(">HH", 40000, 443))
        family = 0x21
    else:
        block = (socket.inet_pton(socket.AF_INET, src) + socket.inet_pton(socket.AF_INET, dst) +
                 struct.pack(">HH", 40000, 443))
        family = 0x11
    body = block + tlvs
    return V2_SIGNATURE + bytes([0x20 | command, family]) + struct.pack(">H", len(body)) + body


def connect(port, source="127.0.0.1", host="127.0.0.1", timeout=10):
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    s = socket.socket(family, socket.SOCK_STREAM)
    s.settimeout(timeout)
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    s.bind((source, 0))
    s.connect((host, port))
    return s


def send_bytewise(s, data):
    """One byte per send, each given time to arrive alone: the server sees the header in pieces."""
    for i in range(len(data)):
        s.sendall(data[i:i + 1])
        time.sleep(0.003)


def closed_without_answer(s, timeout=5):
    """Whether the server closed `s` (EOF or reset) having sent nothing."""
    s.settimeout(timeout)
    try:
        return s.recv(65536) == b""
    except ConnectionResetError:
        return True
    except socket.timeout:
        return False


class ProxyTest(DocrootTestCase):
    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        cls.pki = tempfile.mkdtemp(prefix="ringd-proxy-")
        make_pki(cls.pki)
        cls.log = os.path.join(cls.pki, "access.log")
        p = lambda n: os.path.join(cls.pki, n)
        cls.server = Server(cls.root, "--listen-tls", "127.0.0.1:0,proxy",
                            "--tls-cert", p("localhost-ec.crt"), "--tls-key", p("localhost-ec.key"),
                            "--access-log", cls.log, "--header-timeout-ms", "3000", *ADMIN,
                            *BYPASS_TRUSTS_ALL, listen="127.0.0.1:0,proxy")
        assert cls.server.tls_port, cls.server.log

    @classmethod
    def tearDownClass(cls):
        rc = cls.server.stop()
        shutil.rmtree(cls.pki, ignore_errors=True)
        super().tearDownClass()
        assert rc == 0, cls.server.log

    def logged_client(self, marker):
        """The client address of the access log line of the request for `marker` (a query)."""
        return logged_client(self.log, marker)

    def tls(self, sock):
        ctx = ssl.create_default_context(cafile=os.path.join(self.pki, "ca.crt"))
        return ctx.wrap_socket(sock, server_hostname="localhost")

    def get(self, s, marker):
        s.sendall(b"GET /small.txt?%s HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n" %
                  marker.encode())
        r = Reader(s).read_response()
        self.assertEqual((r.status, r.body), (200, self.files["small.txt"]))

    def refused(self, kind):
        return self.server.metric("ringd_proxy_refused_total", kind=kind)

    def test_v1_and_v2_name_the_client_in_the_log(self):
        cases = [("v1-4", v1("203.0.113.9"), "203.0.113.9"),
                 ("v1-6", v1("2001:db8::9", "2001:db8::1"), "2001:db8::9"),
                 ("v2-4", v2("198.51.100.7"), "198.51.100.7"),
                 ("v2-6", v2("2001:db8::7"), "2001:db8::7"),
                 ("v2-tlv", v2("198.51.100.8", tlvs=b"\x01\x00\x02h2\x02\x00\x01t"), "198.51.100.8"),
                 ("v1-unknown", b"PROXY UNKNOWN\r\n", SOCKET_PEER),
                 ("v2-local", v2(None, command=0), SOCKET_PEER)]
        for marker, header, client in cases:
            with self.subTest(marker):
                with connect(self.server.port) as s:
                    s.sendall(header)
                    self.get(s, "plain-" + marker)
                self.assertEqual(self.logged_client("plain-" + marker), client)
                with connect(self.server.tls_port) as raw:
                    raw.sendall(header)
                    with self.tls(raw) as s:
                        self.get(s, "tls-" + marker)
                self.assertEqual(self.logged_client("tls-" + marker), client)

    def test_a_header_split_byte_by_byte_reads_as_one(self):
        for version, header in (("v1", v1("203.0.113.21")), ("v2", v2("203.0.113.22"))):
            with self.subTest(version):
                with connect(self.server.port) as s:
                    send_bytewise(s, header + b"GET /small.txt?split-plain-%s HTTP/1.1\r\n" %
                                  version.encode())
                    s.sendall(b"Host: t\r\nConnection: close\r\n\r\n")
                    r = Reader(s).read_response()
                    self.assertEqual(r.status, 200)
                self.assertEqual(self.logged_client("split-plain-" + version),
                                 "203.0.113.2" + version[1])
                with connect(self.server.tls_port) as raw:
                    send_bytewise(raw, header)
                    with self.tls(raw) as s:
                        self.get(s, "split-tls-" + version)
                self.assertEqual(self.logged_client("split-tls-" + version),
                                 "203.0.113.2" + version[1])
        # The header's last byte and the request in one segment, the rest before it in another.
        header = v1("203.0.113.23")
        with connect(self.server.port) as s:
            s.sendall(header[:-1])
            time.sleep(0.05)
            s.sendall(header[-1:] + b"GET /small.txt?split-tail HTTP/1.1\r\nHost: t\r\n"
                      b"Connection: close\r\n\r\n")
            self.assertEqual(Reader(s).read_response().status, 200)
        self.assertEqual(self.logged_client("split-tail"), "203.0.113.23")

    def test_missing_or_malformed_header_closes_and_is_counted(self):
        missing, malformed = self.refused("missing"), self.refused("malformed")
        bad = [b"PROXY TCP4 203.0.113.9 127.0.0.1 99999 80\r\n",
               b"PROXY TCP4 2001:db8::1 127.0.0.1 1 80\r\n",
               V2_SIGNATURE + b"\x31\x11\x00\x0c" + bytes(12),    # version 3
               V2_SIGNATURE + b"\x21\x21\x00\x0c" + bytes(12)]    # IPv6 in 12 bytes
        for port in (self.server.port, self.server.tls_port):
            with connect(port) as s:  # no header: a request (or a ClientHello) first
                if port == self.server.port:
                    s.sendall(GET)
                else:
                    s.sendall(b"\x16\x03\x01\x00\x05hello")
                self.assertTrue(closed_without_answer(s))
            for header in bad:
                with connect(port) as s:
                    s.sendall(header + GET)
                    self.assertTrue(closed_without_answer(s), header)
        wait_for(lambda: self.refused("missing") >= missing + 2, "2 counted missing")
        wait_for(lambda: self.refused("malformed") >= malformed + 2 * len(bad),
                 "%d counted malformed" % (2 * len(bad)))
        self.assertTrue(wait_for(lambda: self.server.logged("for the PROXY protocol"),
                                 "the refusals' log line"))

    def test_http2_behind_the_header(self):
        # curl sends v1 naming its own socket's addresses (curl 7.88 has no --haproxy-clientip).
        for url, extra in (("http://127.0.0.1:%d/small.txt?h2c" % self.server.port,
                            ["--http2-prior-knowledge"]),
                           ("https://localhost:%d/small.txt?h2tls" % self.server.tls_port,
                            ["--http2", "--cacert", os.path.join(self.pki, "ca.crt"),
                             "--resolve", "localhost:%d:127.0.0.1" % self.server.tls_port])):
            out = subprocess.run(["curl", "-s", "--max-time", "20", "--haproxy-protocol",
                                  "-o", "/dev/null", "-w", "%{http_version} %{http_code}", url] +
                                 extra, capture_output=True, text=True, timeout=30)
            self.assertEqual(out.stdout, "2 200", out.stderr)
        self.assertEqual(self.logged_client("?h2c"), "127.0.0.1")
        self.assertEqual(self.logged_client("?h2tls"), "127.0.0.1")
        # Python's raw sockets: the h2c preface right behind a v2 header naming another client.
        with connect(self.server.port) as s:
            s.sendall(v2("203.0.113.44") + b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" +
                      b"\x00\x00\x00\x04\x00\x00\x00\x00\x00")  # an empty SETTINGS
            head = s.recv(9)
            self.assertEqual(len(head), 9)
            self.assertEqual(head[3], 0x04, "the server's SETTINGS come first")


class UntrustedPeerTest(DocrootTestCase):
    """--proxy-from: only the balancer's address may send a header."""

    def test_a_peer_not_in_proxy_from_is_closed_at_accept(self):
        if BACKEND == "bypass":
            self.skipTest("bypass refuses ,proxy (BypassRefusesTest)")
        server = Server(self.root, "--proxy-from", "127.0.0.2", "--access-log", "/dev/null",
                        *ADMIN, listen="127.0.0.1:0,proxy")
        try:
            with connect(server.port, source="127.0.0.3") as s:
                s.sendall(v1("203.0.113.9") + GET)
                self.assertTrue(closed_without_answer(s))
            wait_for(lambda: server.metric("ringd_proxy_refused_total", kind="untrusted") == 1,
                     "the untrusted peer counted")
            with connect(server.port, source="127.0.0.2") as s:
                s.sendall(v1("203.0.113.9") + GET)
                self.assertEqual(Reader(s).read_response().status, 200)
            wait_for(lambda: server.logged("last refused by address: 127.0.0.3"),
                     "the refusal's log line")
        finally:
            self.assertEqual(server.stop(), 0)


class AllowDenyTest(DocrootTestCase):
    """--allow/--deny as nginx judges them: in order, the first match deciding."""

    def start(self, *flags, listen="127.0.0.1:0"):
        if BACKEND == "bypass":
            self.skipTest("bypass refuses --allow/--deny (BypassRefusesTest)")
        server = Server(self.root, "--listen", "[::1]:0", *flags, *ADMIN, listen=listen)
        self.addCleanup(lambda: self.assertEqual(server.stop(), 0))
        for line in server.log:
            m = re.search(r"\[::1\]:(\d+)", line)
            if m:
                server.port6 = int(m.group(1))
        return server

    def served(self, port, source, host="127.0.0.1", header=b""):
        with connect(port, source=source, host=host) as s:
            s.sendall(header + GET)
            try:
                return Reader(s).read_response().status == 200
            except (EOFError, ConnectionResetError, OSError):
                return False

    def test_ipv4_and_ipv6_first_match_wins(self):
        server = self.start("--deny", "127.0.0.3", "--allow", "127.0.0.0/8", "--deny", "::1")
        self.assertTrue(self.served(server.port, "127.0.0.2"))
        self.assertFalse(self.served(server.port, "127.0.0.3"))
        self.assertTrue(self.served(server.port, "127.0.0.4"))
        self.assertFalse(self.served(server.port6, "::1", host="::1"))
        wait_for(lambda: server.metric("ringd_clients_denied_total") == 2, "2 denied")

    def test_no_rule_matching_allows_and_deny_all_refuses(self):
        server = self.start("--allow", "127.0.0.2", "--allow", "::1/128", "--deny", "all")
        self.assertTrue(self.served(server.port, "127.0.0.2"))
        self.assertFalse(self.served(server.port, "127.0.0.5"))
        self.assertTrue(self.served(server.port6, "::1", host="::1"))
        server2 = self.start("--deny", "127.0.0.9")
        self.assertTrue(self.served(server2.port, "127.0.0.5"))  # matched nothing: allowed
        self.assertTrue(self.served(server2.port6, "::1", host="::1"))

    def test_the_proxy_header_names_the_client_judged(self):
        server = self.start("--deny", "203.0.113.0/24", "--deny", "2001:db8::/32",
                            listen="127.0.0.1:0,proxy")
        self.assertTrue(self.served(server.port, "127.0.0.1", header=v1("198.51.100.1")))
        self.assertFalse(self.served(server.port, "127.0.0.1", header=v1("203.0.113.5")))
        self.assertFalse(self.served(server.port, "127.0.0.1", header=v2("2001:db8::5")))
        self.assertTrue(self.served(server.port, "127.0.0.1", header=v2("2001:db9::5")))
        wait_for(lambda: server.metric("ringd_clients_denied_total") == 2, "2 denied")


class AllowDenyTlsTest(DocrootTestCase):
    """--allow/--deny on TLS listeners: judged at accept on a plain one, at the PROXY header on a
    ",proxy" one; either way before any handshake."""

    def test_refused_before_the_handshake(self):
        if BACKEND == "bypass":
            self.skipTest("bypass refuses --allow/--deny (BypassRefusesTest)")
        pki = tempfile.mkdtemp(prefix="ringd-proxy-tls-")
        self.addCleanup(shutil.rmtree, pki, True)
        make_pki(pki)
        p = lambda n: os.path.join(pki, n)
        ctx = ssl.create_default_context(cafile=p("ca.crt"))
        server = Server(self.root, "--listen-tls", "127.0.0.1:0",
                        "--listen-tls", "127.0.0.2:0,proxy",
                        "--tls-cert", p("localhost-ec.crt"), "--tls-key", p("localhost-ec.key"),
                        "--deny", "127.0.0.3", "--deny", "203.0.113.0/24", *ADMIN, listen=None)
        self.addCleanup(lambda: self.assertEqual(server.stop(), 0))
        ports = {}
        for line in server.log:
            for host, port in re.findall(r"https (127\.0\.0\.[12]):(\d+)", line):
                ports[host] = int(port)

        def handshake(port, source, header=b"", host="127.0.0.1"):
            with connect(port, source=source, host=host) as raw:
                raw.sendall(header)
                try:
                    with ctx.wrap_socket(raw, server_hostname="localhost") as s:
                        self.get_ok(s)
                        return True
                except (ssl.SSLError, ConnectionResetError, OSError):
                    return False

        self.assertTrue(handshake(ports["127.0.0.1"], "127.0.0.2"))
        self.assertFalse(handshake(ports["127.0.0.1"], "127.0.0.3"))
        self.assertTrue(handshake(ports["127.0.0.2"], "127.0.0.1", v2("198.51.100.3"),
                                  host="127.0.0.2"))
        self.assertFalse(handshake(ports["127.0.0.2"], "127.0.0.1", v2("203.0.113.3"),
                                   host="127.0.0.2"))
        wait_for(lambda: server.metric("ringd_clients_denied_total") == 2, "2 denied")
        self.assertEqual(server.metric("ringd_tls_handshakes_total"), 2)

    def get_ok(self, s):
        s.sendall(GET)
        self.assertEqual(Reader(s).read_response().status, 200)


class PassedSocketsTest(DocrootTestCase):
    """Sockets systemd passes read a PROXY header when their FileDescriptorName says so: `proxy`
    (plain HTTP) and `https-proxy` (HTTPS), as --listen ADDR,proxy and --listen-tls ADDR,proxy."""

    def test_sockets_named_proxy_read_the_header(self):
        d = tempfile.mkdtemp(prefix="ringd-passed-")
        self.addCleanup(shutil.rmtree, d, True)
        make_pki(d)
        listeners = listening_sockets(3)
        self.addCleanup(lambda: [l.close() for l in listeners])
        fds = [l.fileno() for l in listeners]
        plain_port, proxy_port, tls_proxy_port = (l.getsockname()[1] for l in listeners)
        log = os.path.join(d, "access.log")
        stderr_path = os.path.join(d, "stderr")
        with open(stderr_path, "w") as stderr:
            proc = subprocess.Popen(
                passed_by_systemd(fds, ["ringd.socket", "proxy", "https-proxy"]) +
                [RINGD, "--root", self.root, "--io", BACKEND,
                 "--shards", "2", "--access-log", log,
                 "--tls-cert", os.path.join(d, "localhost-ec.crt"),
                 "--tls-key", os.path.join(d, "localhost-ec.key")] + ROOT_FLAGS +
                BYPASS_TRUSTS_ALL, pass_fds=fds, stderr=stderr)
        self.addCleanup(lambda: proc.poll() is None and proc.kill())
        def stderr_text():
            with open(stderr_path) as f:
                return f.read()
        wait_for(lambda: "serving " in stderr_text() or proc.poll() is not None, "serving")
        text = stderr_text()
        self.assertIn("127.0.0.1:%d,proxy" % proxy_port, text)
        self.assertIn("https 127.0.0.1:%d,proxy" % tls_proxy_port, text)
        for l in listeners:
            l.close()  # ringd holds them now

        def get(s, marker):
            s.sendall(b"GET /small.txt?%s HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n" %
                      marker.encode())
            return Reader(s).read_response().status

        with connect(proxy_port) as s:
            s.sendall(v1("203.0.113.61"))
            self.assertEqual(get(s, "passed-proxy"), 200)
        self.assertEqual(logged_client(log, "passed-proxy"), "203.0.113.61")
        with connect(proxy_port) as s:  # no header: closed, as on a ,proxy listener
            s.sendall(GET)
            self.assertTrue(closed_without_answer(s))
        with connect(plain_port) as s:  # the socket without the name reads none
            self.assertEqual(get(s, "passed-plain"), 200)
        self.assertEqual(logged_client(log, "passed-plain"), SOCKET_PEER)
        ctx = ssl.create_default_context(cafile=os.path.join(d, "ca.crt"))
        raw = connect(tls_proxy_port)
        raw.sendall(v2("203.0.113.62"))
        with ctx.wrap_socket(raw, server_hostname="localhost") as s:
            self.assertEqual(get(s, "passed-tls"), 200)
        self.assertEqual(logged_client(log, "passed-tls"), "203.0.113.62")
        proc.terminate()
        self.assertEqual(proc.wait(timeout=15), 0)

    def test_refused_on_bypass_without_trusting_every_peer(self):
        if BACKEND != "bypass":
            self.skipTest("bypass only")
        l = listening_sockets(1, backlog=16)[0]
        self.addCleanup(l.close)
        out = subprocess.run(passed_by_systemd([l.fileno()], ["proxy"]) +
                             [RINGD, "--root", self.root, "--io", "bypass"] + ROOT_FLAGS,
                             pass_fds=[l.fileno()],
                             capture_output=True, text=True, timeout=20)
        self.assertEqual(out.returncode, 2, out.stderr)
        self.assertIn("sockets named proxy or https-proxy (LISTEN_FDNAMES) without --proxy-from "
                      "all need a tier that names clients", out.stderr)


class BypassRefusesTest(DocrootTestCase):
    """The bypass tier cannot ask a connection's peer: the flags that need it are refused in one
    line (",proxy" is served there with --proxy-from all: ProxyTest), and --io=auto picks a tier
    that can."""

    def test_refused_on_bypass_and_auto_avoids_it(self):
        if BACKEND != "bypass":
            self.skipTest("bypass only")
        for flags in (["--allow", "127.0.0.1"], ["--listen", "127.0.0.1:0,proxy"],
                      ["--listen", "127.0.0.1:0,proxy", "--proxy-from", "127.0.0.1"]):
            out = subprocess.run([RINGD, "--root", self.root, "--io", "bypass"] + ROOT_FLAGS +
                                 flags, capture_output=True, text=True, timeout=20)
            self.assertNotEqual(out.returncode, 0)
            self.assertIn("needs a tier that has it", out.stderr)
        server = Server(self.root, "--deny", "127.0.0.9", backend="auto")
        try:
            self.assertTrue(any("io backend" in l for l in server.log), server.log)
            self.assertFalse(any("io backend bypass" in l for l in server.log), server.log)
        finally:
            self.assertEqual(server.stop(), 0)


if __name__ == "__main__":
    unittest.main()
