"""A fleet behind HAProxy, with the shipped deploy/haproxy/ringd-fleet.cfg: three ringd nodes on
their own loopback addresses, consistent hashing of the URI, health from /readyz, the client's
address sent in a PROXY protocol v2 header. Every path lands on one node; a node killed under load
costs no request; a node draining leaves the pool (readyz) before its connections close; the
client's address, not HAProxy's, reaches the node's access log."""
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import threading
import time
import unittest

from ringd_harness import BACKEND, BackendTestCase, Reader, Server, make_docroot, wait_for

HERE = os.path.dirname(os.path.abspath(__file__))
SHIPPED = None
for candidate in [os.path.join(HERE, "../../deploy/haproxy/ringd-fleet.cfg"),
                  os.path.join(os.environ.get("TEST_SRCDIR", ""), "ringd/deploy/haproxy/ringd-fleet.cfg")]:
    if os.path.exists(candidate):
        SHIPPED = candidate
        break
NODES = ["127.0.0.2", "127.0.0.3", "127.0.0.4"]
CLIENT = "127.0.0.77"  # the client's own source address, which HAProxy names to the nodes
# HAProxy connects from 127.0.0.1, in the default --proxy-from (loopback). The bypass tier cannot
# ask a peer for its address: there the nodes trust every peer (--proxy-from all).
TRUST = ["--proxy-from", "all"] if BACKEND == "bypass" else []


def get(port, target, timeout=5, method="GET", source=None):
    """(status, X-Node, body) of one request through the frontend on a fresh connection (from
    the address `source`, if given)."""
    with socket.create_connection(("127.0.0.1", port), timeout=timeout,
                                  source_address=(source, 0) if source else None) as s:
        s.sendall(b"%s %s HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n" %
                  (method.encode(), target.encode()))
        r = Reader(s).read_response(head_request=(method == "HEAD"))
        return r.status, r.header("x-node"), r.body


class FleetTest(BackendTestCase):
    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        # (/usr/sbin is not on the PATH Bazel gives tests.) tools/setup installs it: missing is
        # a failure, not a skip.
        cls.haproxy_bin = shutil.which("haproxy") or shutil.which("haproxy", path="/usr/sbin")
        if cls.haproxy_bin is None:
            raise RuntimeError("haproxy is not installed: run tools/setup")
        if SHIPPED is None:
            raise unittest.SkipTest("deploy/haproxy/ringd-fleet.cfg not found")
        cls.root, cls.files = make_docroot()
        # Larger than every buffer between the node and a client that does not read (the
        # node's and HAProxy's sockets, HAProxy's buffers): a node serving it keeps draining.
        cls.huge = bytes(range(256)) * (48 << 12)  # 48 MiB
        with open(os.path.join(cls.root, "huge.bin"), "wb") as f:
            f.write(cls.huge)

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.root, ignore_errors=True)

    def setUp(self):
        # Each node on its own address, its ports the kernel's (port 0, read back from its log).
        self.logs = tempfile.mkdtemp(prefix="ringd-fleet-logs-")
        self.addCleanup(shutil.rmtree, self.logs, True)
        self.nodes = []
        for i, host in enumerate(NODES):
            # A drain deadline no download here comes near: the drain test waits for its download
            # to end and then for the node to exit, states, not a race with a deadline. (A loaded
            # machine may take longer than a short deadline to read the 48 MiB, and the node
            # would cut the rest.)
            self.nodes.append(Server(self.root, "--shards", "1", "--shutdown-timeout-ms", "600000",
                                     "--admin-listen", "%s:0" % host,
                                     "--add-header", "X-Node: node%d" % (i + 1),
                                     "--access-log", os.path.join(self.logs, "node%d.log" % (i + 1)),
                                     *TRUST, listen="%s:0,proxy" % host))
            # Stopped even when setUp fails below (tearDown then does not run).
            self.addCleanup(self.stop_node, self.nodes[-1])
        # HAProxy's frontend: a socket bound here (port 0) and handed over (fd@), not a port
        # guessed free that another process may take first.
        front = socket.socket()
        front.bind(("127.0.0.1", 0))
        front.listen(128)
        self.front = front.getsockname()[1]
        with open(SHIPPED) as f:
            cfg = f.read()
        cfg = cfg.replace("0.0.0.0:80", "fd@%d" % front.fileno())
        cfg = cfg.replace("check port 9090", "check")  # each server's own admin port, below
        for i, (host, node) in enumerate(zip(NODES, self.nodes)):
            cfg = cfg.replace("10.0.0.1%d:8080" % (i + 1),
                              "%s:%d port %d" % (host, node.port, node.admin_port()))
        self.dir = tempfile.mkdtemp(prefix="ringd-fleet-")
        path = os.path.join(self.dir, "haproxy.cfg")
        with open(path, "w") as f:
            f.write(cfg)
        self.haproxy = subprocess.Popen([self.haproxy_bin, "-db", "-f", path], stdout=subprocess.DEVNULL,
                                        stderr=subprocess.DEVNULL, pass_fds=(front.fileno(),))
        front.close()  # HAProxy's copy listens
        self.addCleanup(self.stop_haproxy)
        deadline = time.time() + 10  # every node seen up: each answers for some path
        seen = set()
        while time.time() < deadline and len(seen) < 3:
            for k in range(30):
                try:
                    status, node, _ = get(self.front, "/small.txt?k=%d" % k, timeout=2)
                    if status == 200:
                        seen.add(node)
                except OSError:
                    pass
            time.sleep(0.1)
        self.assertEqual(len(seen), 3, "HAProxy did not reach all three nodes")

    def stop_haproxy(self):
        self.haproxy.terminate()
        try:
            self.haproxy.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.haproxy.kill()
        shutil.rmtree(self.dir, ignore_errors=True)

    @staticmethod
    def stop_node(node):
        if node.proc.poll() is None:
            node.stop()

    def test_every_path_lands_on_one_node(self):
        where = {}
        for _ in range(3):
            for k in range(40):
                status, node, body = get(self.front, "/small.txt?k=%d" % k)
                self.assertEqual((status, body), (200, self.files["small.txt"]))
                self.assertEqual(where.setdefault(k, node), node, "path %d moved" % k)
        self.assertEqual(len(set(where.values())), 3, "the hash uses every node")

    def test_the_clients_address_reaches_the_nodes_log(self):
        status, node, _ = get(self.front, "/small.txt?from-client", source=CLIENT)
        self.assertEqual(status, 200)
        log = os.path.join(self.logs, "%s.log" % node)

        def line():
            with open(log) as f:
                return next((l for l in f if "from-client" in l), None)
        self.assertTrue(wait_for(line, "the request in %s's access log" % node).startswith(CLIENT + " "))

    def test_a_node_killed_under_load_costs_no_request(self):
        failures, ok = [], [0]
        stop = threading.Event()

        def client(t):
            k = t
            while not stop.is_set():
                k += 4
                try:
                    status, _, body = get(self.front, "/small.txt?k=%d" % (k % 60))
                    if (status, body) != (200, self.files["small.txt"]):
                        failures.append(status)
                    else:
                        ok[0] += 1
                except OSError as e:
                    failures.append(repr(e))

        threads = [threading.Thread(target=client, args=(t,)) for t in range(4)]
        for t in threads:
            t.start()
        made = lambda: ok[0] + len(failures)
        before = made()
        wait_for(lambda: made() >= before + 25, "requests before the kill", timeout=30)
        self.nodes[1].proc.kill()  # no drain: connections refused from here on
        self.nodes[1].proc.wait()
        after = made()
        wait_for(lambda: made() >= after + 50, "requests after the kill", timeout=30)
        stop.set()
        for t in threads:
            t.join()
        self.assertEqual(failures, [], "%d of %d requests failed" % (len(failures), len(failures) + ok[0]))
        self.assertGreater(ok[0], 50)

    def test_a_draining_node_leaves_the_pool_before_its_connections_close(self):
        # A download the client does not read yet, from the node that serves huge.bin, then
        # SIGTERM to that node: its /readyz turns 503 at once, HAProxy moves that path to another
        # node while this one still drains, and the download in progress still completes.
        with socket.create_connection(("127.0.0.1", self.front), timeout=10) as slow:
            slow.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 65536)
            slow.sendall(b"GET /huge.bin HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n")
            reader = Reader(slow)
            status, _, headers = reader.read_head()
            self.assertEqual(status, 200)
            owner = int(headers["x-node"][len("node"):]) - 1
            self.nodes[owner].proc.send_signal(signal.SIGTERM)
            signalled = time.time()
            moved = None
            deadline = time.time() + 3
            while time.time() < deadline:
                _, node, _ = get(self.front, "/huge.bin", method="HEAD")
                if node != headers["x-node"]:
                    moved = node
                    break
                time.sleep(0.05)
            self.assertIsNotNone(moved, "the draining node still got new requests after 3 s")
            self.assertIsNone(self.nodes[owner].proc.poll(), "the node exited before its download ended")
            # (Read in linear time: Reader.read_exact. The node ends the download at its drain
            # deadline, so a failure here says how far it got and when.)
            try:
                body = reader.read_exact(int(headers["content-length"]))
            except EOFError:
                self.fail("the download ended after %d of %s bytes, %.1f s after SIGTERM" %
                          (len(reader.buf), headers["content-length"], time.time() - signalled))
            self.assertTrue(body == self.huge, "the download in progress came out wrong")
        self.assertEqual(self.nodes[owner].proc.wait(timeout=10), 0)


if __name__ == "__main__":
    unittest.main()
