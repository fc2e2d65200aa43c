"""The report: a golden raw.json in, exact Markdown out; charts and --check from raw.json alone."""
import json
import os
import shutil
import tempfile
import unittest

from harness import report

TESTDATA = os.path.join(os.path.dirname(os.path.abspath(__file__)), "testdata")


class ReportTest(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="ringd-report-test-")
        shutil.copy(os.path.join(TESTDATA, "golden-raw.json"), os.path.join(self.dir, "raw.json"))

    def tearDown(self):
        shutil.rmtree(self.dir)

    def test_golden(self):
        report.write(self.dir)
        with open(os.path.join(self.dir, "report.md")) as f:
            got = f.read()
        with open(os.path.join(TESTDATA, "golden-report.md")) as f:
            want = f.read()
        self.maxDiff = None
        self.assertEqual(got, want)

    def test_fraction_of_loopback_only_with_a_loopback_row(self):
        meta, results = report.load_raw(self.dir)
        self.assertIn("| x nginx | fraction of loopback |", report.render(meta, results))
        # The large table gives each server's throughput over loopback's median (3000 MB/s).
        self.assertIn("| nginx | 1900.0 [1800.0-2000.0] | 1 | 0.63 |", report.render(meta, results))
        del results["large"]["loopback"]
        text = report.render(meta, results)
        self.assertIn("## large", text)
        self.assertNotIn("fraction of loopback", text)
        self.assertNotIn("perf/loopback", text)

    def test_mixed_gives_its_bounds_round_by_round(self):
        with open(os.path.join(self.dir, "raw.json")) as f:
            raw = json.load(f)

        def run(run, mb, small_ms, large_ms):
            run = {k: v for k, v in run.items() if k != "failed"}
            return dict(run, bytes_per_s=mb * 1e6, latency_small_us={"count": 900, "p99": small_ms * 1000},
                        latency_large_us={"count": 100, "p99": large_ms * 1000})
        ringd, nginx = raw["results"]["small-keepalive"]["ringd-uring"], raw["results"]["small-keepalive"]["nginx"]
        # Three rounds: ringd's downloads' p99 over nginx's 1.5, 0.5 and 1.0 (median 1.0), its
        # pages' 0.5, 1.0, 2.0, its bytes 1.2x, 1.1x, 0.9x.
        raw["results"] = {"mixed": {
            "ringd-uring": [run(ringd[0], 120, 5, 30), run(ringd[1], 110, 10, 10), run(ringd[2], 90, 40, 40)],
            "nginx": [run(nginx[0], 100, 10, 20), run(nginx[1], 100, 10, 20), run(nginx[2], 100, 20, 40)]}}
        with open(os.path.join(self.dir, "raw.json"), "w") as f:
            json.dump(raw, f)
        text = report.render(*report.load_raw(self.dir))
        self.assertIn("| MB/s x nginx by round | p99 < 1 MiB x nginx by round | p99 >= 1 MiB x nginx by round |",
                      text)
        self.assertIn("| 1.10 [0.90-1.20] | 1.00 [0.50-2.00] | 1.00 [0.50-1.50] |", text)
        self.assertIn("| 1.00 [1.00-1.00] | 1.00 [1.00-1.00] | 1.00 [1.00-1.00] |", text)

    def test_check_accepts_what_write_produces(self):
        report.write(self.dir)
        self.assertEqual(report.check(self.dir), [])

    def test_check_finds_problems(self):
        report.write(self.dir)
        path = os.path.join(self.dir, "report.md")
        with open(path) as f:
            text = f.read()
        with open(path, "w") as f:
            f.write(text.replace("## cold", "## frozen").replace("servers/nginx.conf", "/home/x/servers/nginx.conf"))
        os.unlink(os.path.join(self.dir, "cold.svg"))
        problems = "\n".join(report.check(self.dir))
        self.assertIn("no section for cold", problems)
        self.assertIn("names a path of this machine", problems)
        self.assertIn("cold.svg", problems)

    def test_check_finds_a_folder_too_large_to_check_in(self):
        report.write(self.dir)
        os.makedirs(os.path.join(self.dir, "servers"))
        with open(os.path.join(self.dir, "servers", "ringd-access.log"), "wb") as f:
            f.truncate(report.MAX_RESULTS_BYTES + 1)
        problems = "\n".join(report.check(self.dir))
        self.assertIn("more than 8 MB to check in (largest: servers/ringd-access.log", problems)

    def test_tls_ratios_where_their_peers_ran(self):
        meta, results = report.load_raw(self.dir)
        text = report.render(meta, results)
        # tls-large ran h2o: x h2o and CPU x h2o; tls-handshake-resumed did not: neither.
        large = text[text.index("## tls-large"):]
        self.assertIn("| x nginx | x h2o | fraction of one core's AES-128-GCM | CPU us/request | CPU x nginx |"
                      " CPU x h2o | CPU x haproxy-tls |", large)
        # 414.7 MB/s over 3500 MB/s of AES-128-GCM; CPU 3297.87 over haproxy-tls's 7250.
        self.assertIn("| ringd-bypass | 414.7 [414.7-414.7] | 1.68 | 1.5 | 0.12 | 3297.87 | 0.627 | 0.681 | 0.455 |", large)
        resumed = text[text.index("## tls-handshake-resumed"):text.index("## tls-large")]
        self.assertIn("| x nginx | CPU us/request | CPU x nginx | CPU x haproxy-tls |", resumed)
        self.assertNotIn("x h2o", resumed)
        # Without the openssl speed figure, no fraction column (and --check says why).
        del meta["aes_128_gcm_bytes_per_s"]
        self.assertNotIn("| fraction of one core", report.render(meta, results))

    def _edit_raw(self, edit):
        path = os.path.join(self.dir, "raw.json")
        with open(path) as f:
            raw = json.load(f)
        edit(raw)
        with open(path, "w") as f:
            json.dump(raw, f)
        report.write(self.dir)
        return "\n".join(report.check(self.dir))

    def test_check_tls(self):
        def edit(raw):
            res = raw["results"]
            del res["tls-large"]["nginx"][0]["tls_handshakes"]           # plaintext by mistake
            res["tls-large"]["ringd-plaintext"][0]["tls_handshakes"] = 3  # TLS on the floor
            res["tls-handshake-resumed"]["nginx"][0]["tls_resumed"] = 0  # resumed nothing
            del raw["meta"]["aes_128_gcm_bytes_per_s"]
        problems = self._edit_raw(edit)
        self.assertIn("tls-large/nginx run 1: no TLS handshake counted", problems)
        self.assertIn("tls-large/ringd-plaintext run 1: TLS handshakes on the plaintext floor", problems)
        self.assertIn("tls-handshake-resumed/nginx run 1: no handshake resumed", problems)
        self.assertIn("tls-large: no aes_128_gcm_bytes_per_s", problems)
        self.assertNotIn("ringd-bypass", problems)

    def test_check_tls_skips_wrk_and_failed_runs(self):
        def edit(raw):
            run = raw["results"]["tls-large"]["nginx"][0]
            run["generator"] = "wrk"
            del run["tls_handshakes"]
            raw["results"]["tls-large"]["h2o"][0]["failed"] = "stopped"
            del raw["results"]["tls-large"]["h2o"][0]["tls_handshakes"]
            # A server that could not cope: no handshake, errors counted.
            bad = raw["results"]["tls-large"]["haproxy-tls"][0]
            bad["tls_handshakes"], bad["errors"]["tls"] = 0, 100
        self.assertEqual(self._edit_raw(edit), "")

    def test_http2_tables_and_check(self):
        def edit(raw):
            res = raw["results"]
            res["h2-small"] = {k: [dict(r, generator="h2load", protocol="h2") for r in runs]
                               for k, runs in res["small-keepalive"].items()}
            res["h2-small"]["nginx"][2]["protocol"] = "http/1.1"  # run 2 failed: not checked
            res["h2c-large"] = {"nginx": [dict(r, generator="h2load", protocol="h2c") for r in res["large"]["nginx"]]}
        problems = self._edit_raw(edit)
        self.assertEqual(problems, "h2-small/nginx run 3: spoke http/1.1, not h2")
        with open(os.path.join(self.dir, "report.md")) as f:
            text = f.read()
        small = text[text.index("## h2-small"):text.index("## h2c-large")]
        # CPU per request is the main figure (lower is better), shown once, with requests/s beside it.
        header = next(l for l in small.splitlines() if l.startswith("| server"))
        self.assertTrue(header.startswith("| server | CPU us/request | x nginx | CPU x nginx by round | server CPU % |"),
                        header)
        self.assertEqual(header.count("| CPU us/request |"), 1)
        self.assertIn("| requests/s |", header)
        self.assertIn("(lower is better)", small)

    def test_check_without_raw_json(self):
        os.unlink(os.path.join(self.dir, "raw.json"))
        self.assertTrue(report.check(self.dir)[0].startswith("raw.json"))

    def test_scrub(self):
        self.assertEqual(
            report.scrub("taskset -c 0 /tmp/ringd-perf-bin-x1/ringd-load --port 4321 --paths-file /data/d/paths.txt"),
            "taskset -c 0 ringd-load --port PORT --paths-file DATA/paths.txt")
        self.assertEqual(report.scrub("/tmp/ringd-perf-bin-x1/ringd --root /srv/data --listen 127.0.0.1:8080"),
                         "ringd --root DATA --listen 127.0.0.1:PORT")
        self.assertEqual(report.scrub("nginx -c /work/r/perf/results/b/servers/nginx.conf -p /work/r/perf/results/b/servers"),
                         "nginx -c servers/nginx.conf -p servers")
        self.assertEqual(report.scrub("wrk -t1 http://127.0.0.1:5555/index.html"), "wrk -t1 http://127.0.0.1:PORT/index.html")


if __name__ == "__main__":
    unittest.main()
