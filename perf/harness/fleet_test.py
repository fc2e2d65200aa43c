"""The fleet scenario's pieces: the HAProxy config made from the shipped file, its peers and
scenario entry, the per-component CPU split, and the report's view of the launcher."""
import os
import subprocess
import time
import shutil
import tempfile
import unittest
from types import SimpleNamespace

from harness import fleet, procfs
from harness.peers import PEERS, Ctx
from harness.report import scrub
from harness.result import Result, failed
from harness.scenarios import SCENARIOS, AssetPaths
from harness.stats import summarize_runs


class ConfigTest(unittest.TestCase):
    def setUp(self):
        with open(fleet.SHIPPED) as f:
            self.shipped = f.read()

    def test_shipped_file_with_our_addresses(self):
        cfg = fleet.config(self.shipped, 8080, ["127.0.0.2:7000", "127.0.0.3:7000"], 9100)
        lines = [l.strip() for l in cfg.splitlines()]
        self.assertEqual([l for l in lines if l.startswith("server ")],
                         ["server node1 127.0.0.2:7000", "server node2 127.0.0.3:7000"])
        self.assertIn("default-server check port 9100 inter 200ms fall 1 rise 2 send-proxy-v2", lines)
        # What the scenario measures is the shipped policy itself.
        for kept in ("balance uri whole", "hash-type consistent", "option httpchk GET /readyz",
                     "retries 3", "option redispatch 1"):
            self.assertIn(kept, lines)
        # No address of the example left in what HAProxy reads (its comments may name them).
        self.assertNotIn("10.0.0.", "\n".join(l for l in lines if not l.startswith("#")))
        self.assertEqual([l for l in lines if l.startswith("bind ")], ["bind 127.0.0.1:8080"])
        # The server lines stay where the shipped ones were: inside the backend, at its end.
        self.assertGreater(lines.index("server node1 127.0.0.2:7000"), lines.index("backend ringd"))

    def test_tls_and_alpn_on_the_bind(self):
        bind = lambda cfg: [l.strip() for l in cfg.splitlines() if l.strip().startswith("bind ")]
        nodes = ["127.0.0.2:7000"]
        self.assertEqual(bind(fleet.config(self.shipped, 8443, nodes, 9100, "/c/h.pem")),
                         ["bind 127.0.0.1:8443 ssl crt /c/h.pem"])
        self.assertEqual(bind(fleet.config(self.shipped, 8443, nodes, 9100, "/c/h.pem", "h2,http/1.1")),
                         ["bind 127.0.0.1:8443 ssl crt /c/h.pem alpn h2,http/1.1"])
        # In plaintext HAProxy takes h2c by its preface on any HTTP bind: nothing to add.
        self.assertEqual(bind(fleet.config(self.shipped, 8080, nodes, 9100, None, "h2,http/1.1")),
                         ["bind 127.0.0.1:8080"])

    def test_a_changed_shape_is_an_error(self):
        with self.assertRaises(ValueError):
            fleet.config(self.shipped.replace("server node", "# server node"), 1, ["127.0.0.2:2"], 3)
        with self.assertRaises(ValueError):
            fleet.config(self.shipped.replace("check port 9090", "check"), 1, ["127.0.0.2:2"], 3)

    def test_addresses_and_ports(self):
        self.assertEqual(fleet.node_hosts(2), ["127.0.0.2", "127.0.0.3"])
        port = fleet.common_port(["127.0.0.2", "127.0.0.3"])
        self.assertTrue(fleet._bindable("127.0.0.2", port) and fleet._bindable("127.0.0.3", port))
        self.assertNotEqual(fleet.common_port(["127.0.0.2"], avoid=(port,)), port)


class EntriesTest(unittest.TestCase):
    def test_who_takes_part(self):
        s = SCENARIOS["fleet"]
        self.assertEqual(sorted(n for n, p in PEERS.items() if p.runs_in("fleet") and s.takes(n)),
                         ["fleet-1", "fleet-2", "ringd-bypass"])
        self.assertEqual([n for n in SCENARIOS if PEERS["fleet-2"].runs_in(n)], ["fleet"])
        self.assertTrue(SCENARIOS["small-keepalive"].takes("nginx"))
        self.assertTrue(PEERS[s.reference].runs_in("fleet"))
        for c in s.columns:  # every column reads a figure a fleet run has
            self.assertTrue(c.key.startswith(("cpu_us_per_request_", "client_cpu")), c.key)

    def test_launcher_command(self):
        ctx = Ctx({"ringd": "/b/ringd"}, "/data", 8080, 1, "/out/servers")
        cmd = PEERS["fleet-2"].command(ctx)
        self.assertTrue(os.path.samefile(cmd[0], fleet.__file__))
        self.assertTrue(os.access(cmd[0], os.X_OK), "perf/harness/fleet.py must be executable")
        self.assertEqual(cmd[1:13], ["--nodes", "2", "--ringd", "/b/ringd", "--root", "/data", "--port", "8080",
                                     "--shards", "1", "--confdir", "/out/servers"])
        self.assertEqual(cmd[13:16], ["--", "--io", "bypass"])
        shown = scrub(" ".join(cmd).replace("/b/ringd", "/tmp/ringd-perf-bin-x1/ringd"))
        self.assertTrue(shown.startswith("perf/harness/fleet.py --nodes 2 --ringd ringd --root DATA --port PORT"),
                        shown)
        self.assertIn("--confdir servers", shown)

    def test_asset_paths(self):
        root = tempfile.mkdtemp()
        try:
            os.mkdir(os.path.join(root, "assets"))
            for n in ("b.css", "a.js", "a.js.gz"):
                open(os.path.join(root, "assets", n), "w").close()
            self.assertEqual(AssetPaths().setup(SimpleNamespace(data=root)), root)
            with open(os.path.join(root, SCENARIOS["fleet"].load.paths_file)) as f:
                self.assertEqual(f.read(), "/assets/a.js\n/assets/a.js.gz\n/assets/b.css\n")
        finally:
            shutil.rmtree(root)


class ComponentsTest(unittest.TestCase):
    def test_cpu_by_name(self):
        # A sleeping process: its CPU time does not move between the two readings (this one's
        # would, by a tick now and then).
        sleeper = subprocess.Popen(["sleep", "60"])
        try:
            # Until the child has exec'd sleep, /proc names it after this process.
            deadline = time.monotonic() + 10
            while time.monotonic() < deadline:
                with open("/proc/%d/comm" % sleeper.pid) as f:
                    if f.read().strip() == "sleep":
                        break
                time.sleep(0.01)
            by = procfs.cpu_ticks_by_name([sleeper.pid, 2 ** 22 + 1])
            self.assertEqual(list(by), ["sleep"])
            self.assertEqual(by["sleep"], procfs.cpu_ticks([sleeper.pid]))
        finally:
            sleeper.kill()
            sleeper.wait()

    def test_figures_and_summaries(self):
        r = Result(requests=10, rps=100.0, cpu_us_per_request=50.0, client_cpu_us_per_request=12.5,
                   cpu_us_per_request_by={"haproxy": 38.0, "ringd": 12.0})
        f = r.figures()
        self.assertEqual((f["cpu_us_per_request_haproxy"], f["cpu_us_per_request_ringd"]), (38.0, 12.0))
        self.assertEqual(f["client_cpu_us_per_request"], 12.5)
        back = Result.from_dict(r.to_dict())
        self.assertEqual(back.cpu_us_per_request_by, {"haproxy": 38.0, "ringd": 12.0})
        # A failed first run lacks the components; the summary still has them from the others.
        s = summarize_runs([failed("stopped"), r])
        self.assertEqual(s["cpu_us_per_request_haproxy"]["median"], 38.0)
        self.assertEqual(s["cpu_us_per_request_haproxy"]["n"], 1)


if __name__ == "__main__":
    unittest.main()
