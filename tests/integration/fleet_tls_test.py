"""HTTPS fleets behind HAProxy, with the shipped deploy/haproxy/ringd-fleet-tls-passthrough.cfg and
ringd-fleet-tls-reencrypt.cfg, each read and rewritten for addresses, ports and paths only: three
ringd nodes serving HTTPS alone (no --listen) on their own loopback addresses, certificates from
test CAs made with openssl, real clients (Python's ssl, curl).

Passthrough: the client sees ringd's certificate; each name (SNI) lands on one node, a ClientHello
in two segments included; what is not TLS reaches no node. Re-encrypt: the client sees HAProxy's
certificate and may speak HTTP/2 to it, the nodes see TLS from HAProxy (they serve nothing else),
each path lands on one node, and HAProxy reuses its connections to them. Both: `haproxy -c` passes
without a warning; the health checks take a stopped node out and bring it back when it serves
again, and keep out a node whose certificate does not verify."""
import os
import re
import shutil
import socket
import ssl
import subprocess
import tempfile
import unittest
import urllib.request

from ringd_harness import BACKEND, BackendTestCase, Reader, Server, make_docroot, server_has_read, wait_for
from tls_pki import issue, make_pki

HERE = os.path.dirname(os.path.abspath(__file__))
NODES = ["127.0.0.2", "127.0.0.3", "127.0.0.4"]
# The nodes' listeners read the PROXY header HAProxy sends (from 127.0.0.1, in the default
# --proxy-from); the bypass tier cannot ask a peer for its address, and trusts every peer.
TRUST = ["--proxy-from", "all"] if BACKEND == "bypass" else []
DAY = 86400


def shipped(name):
    for candidate in [os.path.join(HERE, "../../deploy/haproxy", name),
                      os.path.join(os.environ.get("TEST_SRCDIR", ""), "ringd/deploy/haproxy", name)]:
        if os.path.exists(candidate):
            return candidate
    raise unittest.SkipTest("deploy/haproxy/%s not found" % name)


def substitute(text, old, new):
    """`text` with every `old` replaced; fails if there is none (the shipped file changed)."""
    if old not in text:
        raise AssertionError("the shipped configuration no longer has %r" % old)
    return text.replace(old, new)


class Node:
    """One ringd of the fleet: HTTPS only, on its own loopback address, with an admin listener."""

    def __init__(self, root, index, host, admin_port, cert, key, tls_port=0, proxy=False,
                 log=None):
        self.index, self.host, self.cert, self.key = index, host, cert, key
        self.proxy, self.log = proxy, log
        self.server = Server(root, "--shards", "1",
                             "--listen-tls", "%s:%d%s" % (host, tls_port, ",proxy" if proxy else ""),
                             *(TRUST if proxy else []),
                             *(["--access-log", log] if log else []),
                             "--tls-cert", cert, "--tls-key", key,
                             "--admin-listen", "%s:%d" % (host, admin_port),
                             "--add-header", "X-Node: node%d" % index, listen=None)
        self.tls_port = self.server.tls_port
        self.admin_port = self.server.admin_port()

    def metric(self, name):
        """The sum over shards of one of its /metrics counters."""
        with urllib.request.urlopen("http://%s:%d/metrics" % (self.host, self.admin_port),
                                    timeout=10) as r:
            text = r.read().decode()
        return sum(float(v) for v in re.findall(r"^%s(?:\{[^}]*\})? (\S+)$" % name, text, re.M))

    def stop(self):
        if self.server.proc.poll() is None:
            self.server.stop()


class FleetTlsCase:
    """Three nodes and HAProxy running the shipped file CONFIG, rewritten by rewrite(); the tests
    both files pass. Mixed into a BackendTestCase per file."""
    CONFIG = None
    PROXY = False  # the shipped file sends the PROXY protocol to the nodes (send-proxy-v2)

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        # (/usr/sbin is not on the PATH Bazel gives tests.) tools/setup installs it: missing is
        # a failure, not a skip.
        cls.haproxy_bin = shutil.which("haproxy") or shutil.which("haproxy", path="/usr/sbin")
        if cls.haproxy_bin is None:
            raise RuntimeError("haproxy is not installed: run tools/setup")
        cls.shipped = shipped(cls.CONFIG)
        cls.root, cls.files = make_docroot()
        cls.pki = tempfile.mkdtemp(prefix="ringd-fleet-tls-pki-")
        cls.make_certificates()

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.root, ignore_errors=True)
        shutil.rmtree(cls.pki, ignore_errors=True)

    @classmethod
    def pki_dir(cls, name):
        d = os.path.join(cls.pki, name)
        os.mkdir(d)
        make_pki(d)
        return d

    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="ringd-fleet-tls-")
        self.addCleanup(shutil.rmtree, self.dir, True)
        # The shipped file checks every node's admin listener on one port (`http-check connect
        # port 9090`): the first node's, from the kernel, is every node's (each has its own
        # address). Each node's HTTPS port is the kernel's.
        self.nodes = []
        admin_port = 0
        for i, host in enumerate(NODES):
            # Each node's own copy of the certificate and key, which a test may replace (SIGHUP).
            files = []
            for src, ext in zip(self.node_certificate(), ("crt", "key")):
                files.append(os.path.join(self.dir, "node%d.%s" % (i + 1, ext)))
                shutil.copyfile(src, files[-1])
            node = Node(self.root, i + 1, host, admin_port, *files, proxy=self.PROXY,
                        log=os.path.join(self.dir, "node%d.log" % (i + 1)))
            admin_port = node.admin_port
            self.nodes.append(node)
            # Stopped even when setUp fails below (tearDown then does not run).
            self.addCleanup(self.stop_node, i)
        # HAProxy's frontend: a socket bound here (port 0) and handed over (fd@), not a port
        # guessed free that another process may take first.
        front = socket.socket()
        front.bind(("127.0.0.1", 0))
        front.listen(128)
        self.front = front.getsockname()[1]
        self.config = os.path.join(self.dir, "haproxy.cfg")
        with open(self.config, "w") as f:
            f.write(self.render("fd@%d" % front.fileno()))
        self.haproxy_log = os.path.join(self.dir, "haproxy.log")
        with open(self.haproxy_log, "w") as log:
            self.haproxy = subprocess.Popen([self.haproxy_bin, "-db", "-f", self.config],
                                            stdout=log, stderr=log, pass_fds=(front.fileno(),))
        front.close()  # HAProxy's copy listens
        self.addCleanup(self.stop_haproxy)
        # Every node seen up: each answers for some key.
        wait_for(lambda: len({self.node_for(k, timeout=2) for k in range(30)} - {None}) == 3,
                 "HAProxy to reach all three nodes")

    def render(self, bind):
        """The shipped file, its frontend bound to `bind`, its nodes ours."""
        with open(self.shipped) as f:
            cfg = f.read()
        cfg = substitute(cfg, "bind 0.0.0.0:443", "bind " + bind)
        cfg = substitute(cfg, "http-check connect port 9090",
                         "http-check connect port %d" % self.nodes[0].admin_port)
        for i, node in enumerate(self.nodes):
            cfg = substitute(cfg, "10.0.0.1%d:8443" % (i + 1), "%s:%d" % (node.host, node.tls_port))
        return self.rewrite(cfg)

    def stop_haproxy(self):
        self.haproxy.terminate()
        try:
            self.haproxy.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.haproxy.kill()

    def stop_node(self, i):
        self.nodes[i].stop()

    def restart_node(self, i):
        """Node i again, on the same addresses and ports."""
        old = self.nodes[i]
        old.stop()
        self.nodes[i] = Node(self.root, old.index, old.host, old.admin_port, old.cert, old.key,
                             proxy=old.proxy, log=old.log,
                             tls_port=old.tls_port)

    def log_says(self, pattern):
        with open(self.haproxy_log) as f:
            return re.search(pattern, f.read())

    def node_for(self, k, timeout=5):
        """The X-Node of a request for key k (a name or a path), None if it failed."""
        try:
            r = self.get(k, timeout=timeout)
        except (OSError, EOFError):
            return None
        return r.header("x-node") if r.status == 200 else None

    def test_haproxy_check_passes_without_a_warning(self):
        # (-c binds nothing, but needs a descriptor behind fd@: the address instead.)
        path = os.path.join(self.dir, "check.cfg")
        with open(path, "w") as f:
            f.write(self.render("127.0.0.1:%d" % self.front))
        out = subprocess.run([self.haproxy_bin, "-c", "-f", path], capture_output=True,
                             text=True, timeout=60)
        self.assertEqual(out.returncode, 0, out.stdout + out.stderr)
        self.assertIn("Configuration file is valid", out.stdout + out.stderr)
        self.assertNotRegex(out.stdout + out.stderr, r"WARNING|ALERT")

    def test_health_checks_take_a_stopped_node_out_and_bring_it_back(self):
        where = {k: self.node_for(k) for k in range(30)}
        self.assertNotIn(None, where.values())
        self.nodes[1].stop()
        wait_for(lambda: self.log_says(r"Server ringd/node2 is DOWN"), "HAProxy to mark node2 down")
        for k in range(30):  # node2's keys go to the others; nothing fails
            self.assertIn(self.node_for(k), {"node1", "node3"})
        self.restart_node(1)
        wait_for(lambda: self.log_says(r"Server ringd/node2 is UP"), "HAProxy to mark node2 up")
        # Consistent hashing: node2's keys, and only they, come back to it. A connection that
        # fails on the node just started (a loaded machine) goes to another (redispatch), so the
        # map may take a moment to settle.
        now = {}
        wait_for(lambda: now.update({k: self.node_for(k) for k in range(30)}) or now == where,
                 "node2's keys to come back to it")
        self.assertEqual(now, where)

    def test_a_node_whose_certificate_does_not_verify_stays_out(self):
        # node3 restarted with a certificate from the right CA for the wrong name: HAProxy takes
        # it out while it is stopped, and its checks' TLS step, which verifies chain and name,
        # keeps it out. (Restarted, not reloaded with SIGHUP: HAProxy would resume its TLS
        # sessions with the running node, under ringd's ticket keys, and see no certificate.)
        node = self.nodes[2]
        node.stop()
        wait_for(lambda: self.log_says(r"Server ringd/node3 is DOWN"), "HAProxy to mark node3 down")
        for src, dst in zip(self.misnamed_certificate(), (node.cert, node.key)):
            shutil.copyfile(src, dst)
        self.restart_node(2)
        # More checks refused by HAProxy than `rise` successes would need.
        wait_for(lambda: self.nodes[2].metric("ringd_tls_handshake_failures_total") >= 4,
                 "HAProxy's checks to refuse node3's certificate")
        self.assertFalse(self.log_says(r"Server ringd/node3 is UP"))
        for k in range(30):
            self.assertIn(self.node_for(k), {"node1", "node2"})


class PassthroughTest(FleetTlsCase, BackendTestCase):
    CONFIG = "ringd-fleet-tls-passthrough.cfg"
    PROXY = True

    @classmethod
    def make_certificates(cls):
        # The site's certificate, as from a public CA: HAProxy's checks verify it against
        # @system-ca in the shipped file, against this CA here.
        cls.site = cls.pki_dir("site")
        issue(cls.site, "www", DAY, sans="DNS:www.example.org,DNS:*.example.org")

    def node_certificate(self):
        return os.path.join(self.site, "www.crt"), os.path.join(self.site, "www.key")

    def misnamed_certificate(self):
        return os.path.join(self.site, "other-ec.crt"), os.path.join(self.site, "other-ec.key")

    def rewrite(self, cfg):
        return substitute(cfg, "ca-file @system-ca", "ca-file %s/ca.crt" % self.site)

    def tls(self, name="www.example.org", timeout=5):
        ctx = ssl.create_default_context(cafile=os.path.join(self.site, "ca.crt"))
        raw = socket.create_connection(("127.0.0.1", self.front), timeout=timeout)
        return ctx.wrap_socket(raw, server_hostname=name)

    def get(self, k, timeout=5, path="/small.txt"):
        """A request for `path` through HAProxy, TLS with the name s<k>.example.org (SNI)."""
        with self.tls("s%d.example.org" % k if isinstance(k, int) else k, timeout) as s:
            s.sendall(b"GET %s HTTP/1.1\r\nHost: www.example.org\r\nConnection: close\r\n\r\n"
                      % path.encode())
            return Reader(s).read_response()

    def test_the_client_sees_ringds_certificate(self):
        with self.tls() as s:
            with open(os.path.join(self.site, "www.crt")) as f:
                self.assertEqual(s.getpeercert(binary_form=True), ssl.PEM_cert_to_DER_cert(f.read()))
            s.sendall(b"GET /large.bin HTTP/1.1\r\nHost: www.example.org\r\n\r\n")
            r = Reader(s).read_response()
            self.assertEqual((r.status, r.body), (200, self.files["large.bin"]))
            self.assertRegex(r.header("x-node"), r"^node[123]$")
        out = subprocess.run(["curl", "-sS", "-D", "-", "--cacert", os.path.join(self.site, "ca.crt"),
                              "--resolve", "www.example.org:%d:127.0.0.1" % self.front,
                              "https://www.example.org:%d/medium.bin" % self.front],
                             capture_output=True, timeout=60)
        self.assertEqual(out.returncode, 0, out.stderr)
        head, _, body = out.stdout.partition(b"\r\n\r\n")
        self.assertIn(b"x-node: node", head.lower())
        self.assertEqual(body, self.files["medium.bin"])

    def test_the_clients_address_reaches_the_nodes_log(self):
        ctx = ssl.create_default_context(cafile=os.path.join(self.site, "ca.crt"))
        raw = socket.create_connection(("127.0.0.1", self.front), timeout=10,
                                       source_address=("127.0.0.78", 0))
        with ctx.wrap_socket(raw, server_hostname="www.example.org") as s:
            s.sendall(b"GET /small.txt?from-client HTTP/1.1\r\nHost: www.example.org\r\n"
                      b"Connection: close\r\n\r\n")
            r = Reader(s).read_response()
        self.assertEqual(r.status, 200)
        log = self.nodes[int(r.header("x-node")[len("node"):]) - 1].log

        def line():
            with open(log) as f:
                return next((l for l in f if "from-client" in l), None)
        self.assertTrue(wait_for(line, "the request in the node's access log").startswith("127.0.0.78 "))

    def test_each_name_lands_on_one_node(self):
        where = {}
        for _ in range(3):
            for k in range(40):
                r = self.get(k)
                self.assertEqual((r.status, r.body), (200, self.files["small.txt"]))
                self.assertEqual(where.setdefault(k, r.header("x-node")), r.header("x-node"),
                                 "s%d.example.org moved" % k)
        self.assertEqual(len(set(where.values())), 3, "the hash uses every node")

    def split_hello_node(self, name):
        """The X-Node of a request over TLS for `name` whose ClientHello is sent in two
        segments, a pause between them (as a large hello, post-quantum key shares and all, may
        arrive)."""
        ctx = ssl.create_default_context(cafile=os.path.join(self.site, "ca.crt"))
        into, out = ssl.MemoryBIO(), ssl.MemoryBIO()
        tls = ctx.wrap_bio(into, out, server_hostname=name)
        with socket.create_connection(("127.0.0.1", self.front), timeout=10) as s:
            with self.assertRaises(ssl.SSLWantReadError):
                tls.do_handshake()
            hello = out.read()
            s.sendall(hello[:40])
            # Two segments: the second goes once HAProxy has read the first.
            wait_for(lambda: server_has_read(s), "HAProxy to read the first 40 bytes")
            s.sendall(hello[40:])

            def pump(step):
                while True:
                    try:
                        return step()
                    except ssl.SSLWantReadError:
                        s.sendall(out.read())
                        data = s.recv(65536)
                        if not data:
                            raise EOFError("closed during the exchange")
                        into.write(data)

            pump(tls.do_handshake)
            tls.write(b"GET /small.txt HTTP/1.1\r\nHost: www.example.org\r\n\r\n")
            s.sendall(out.read())
            head = b""
            while b"\r\n\r\n" not in head:
                head += pump(lambda: tls.read(65536))
        m = re.search(rb"\r\nx-node: (\S+)\r\n", head, re.I)
        return m.group(1).decode() if m else None

    def test_a_hello_in_two_segments_is_hashed_by_its_name_too(self):
        for k in range(10):
            self.assertEqual(self.split_hello_node("s%d.example.org" % k), self.node_for(k),
                             "s%d.example.org" % k)

    def test_what_is_not_tls_never_reaches_a_node(self):
        with socket.create_connection(("127.0.0.1", self.front), timeout=10) as s:
            s.sendall(b"GET /small.txt HTTP/1.1\r\nHost: www.example.org\r\n\r\n")
            self.assertEqual(Reader(s).at_eof(timeout=10), True)
        for node in self.nodes:  # (ringd would have answered it 400 and counted it)
            self.assertEqual(node.metric("ringd_tls_plain_http_total"), 0)


class ReencryptTest(FleetTlsCase, BackendTestCase):
    CONFIG = "ringd-fleet-tls-reencrypt.cfg"

    @classmethod
    def make_certificates(cls):
        # HAProxy's certificate (what clients see) from one CA, the nodes' from the fleet's own.
        cls.edge = cls.pki_dir("edge")
        issue(cls.edge, "www", DAY, sans="DNS:www.example.org")
        with open(os.path.join(cls.edge, "www.pem"), "w") as pem:
            for part in ("www.crt", "www.key"):
                with open(os.path.join(cls.edge, part)) as f:
                    pem.write(f.read())
        cls.fleet = cls.pki_dir("fleet")
        issue(cls.fleet, "origin", DAY, sans="DNS:origin.ringd.internal")

    def node_certificate(self):
        return os.path.join(self.fleet, "origin.crt"), os.path.join(self.fleet, "origin.key")

    def misnamed_certificate(self):
        return os.path.join(self.fleet, "other-ec.crt"), os.path.join(self.fleet, "other-ec.key")

    def rewrite(self, cfg):
        cfg = substitute(cfg, "/etc/haproxy/certs/www.example.org.pem",
                         os.path.join(self.edge, "www.pem"))
        return substitute(cfg, "/etc/ringd/tls/fleet-ca.pem", os.path.join(self.fleet, "ca.crt"))

    def tls(self, alpn=("http/1.1",), timeout=5):
        ctx = ssl.create_default_context(cafile=os.path.join(self.edge, "ca.crt"))
        ctx.set_alpn_protocols(list(alpn))
        raw = socket.create_connection(("127.0.0.1", self.front), timeout=timeout)
        return ctx.wrap_socket(raw, server_hostname="www.example.org")

    def get(self, k, timeout=5):
        """A request through HAProxy for /small.txt?k=<k>."""
        with self.tls(timeout=timeout) as s:
            s.sendall(b"GET /small.txt?k=%d HTTP/1.1\r\nHost: www.example.org\r\n"
                      b"Connection: close\r\n\r\n" % k)
            return Reader(s).read_response()

    def test_the_client_sees_haproxys_certificate_and_the_nodes_see_tls(self):
        with self.tls(alpn=("h2", "http/1.1")) as s:
            with open(os.path.join(self.edge, "www.crt")) as f:
                self.assertEqual(s.getpeercert(binary_form=True), ssl.PEM_cert_to_DER_cert(f.read()))
            self.assertEqual(s.selected_alpn_protocol(), "h2")
        # The nodes serve HTTPS alone, so what reached them came over TLS; their handshakes with
        # HAProxy all verified and completed.
        out = subprocess.run(["curl", "-sS", "--http1.1", "-D", "-",
                              "--cacert", os.path.join(self.edge, "ca.crt"),
                              "--resolve", "www.example.org:%d:127.0.0.1" % self.front,
                              "https://www.example.org:%d/large.bin" % self.front],
                             capture_output=True, timeout=60)
        self.assertEqual(out.returncode, 0, out.stderr)
        head, _, body = out.stdout.partition(b"\r\n\r\n")
        self.assertIn(b"x-node: node", head.lower())
        self.assertEqual(body, self.files["large.bin"])
        for node in self.nodes:
            self.assertGreater(node.metric("ringd_tls_handshakes_total"), 0)
            self.assertEqual(node.metric("ringd_tls_handshake_failures_total"), 0)

    def test_each_path_lands_on_one_node(self):
        where = {}
        for _ in range(3):
            for k in range(40):
                r = self.get(k)
                self.assertEqual((r.status, r.body), (200, self.files["small.txt"]))
                self.assertEqual(where.setdefault(k, r.header("x-node")), r.header("x-node"),
                                 "path %d moved" % k)
        self.assertEqual(len(set(where.values())), 3, "the hash uses every node")

    def test_haproxy_reuses_its_connections_to_the_nodes(self):
        # 40 clients one after another, each on a connection of its own, all for one path: one
        # node serves them all. The health checks make handshakes on every node meanwhile, as
        # many on each; beyond those, the serving node makes hardly any.
        owner = int(self.get(0).header("x-node")[len("node"):]) - 1
        before = [n.metric("ringd_tls_handshakes_total") for n in self.nodes]
        for _ in range(40):
            self.assertEqual(self.get(0).status, 200)
        grew = [n.metric("ringd_tls_handshakes_total") - b for n, b in zip(self.nodes, before)]
        checks = max(g for i, g in enumerate(grew) if i != owner)
        self.assertLess(grew[owner] - checks, 10, "handshakes per node: %s" % grew)


if __name__ == "__main__":
    unittest.main()
