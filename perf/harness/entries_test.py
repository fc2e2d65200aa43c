"""Scenario and Peer entries: load commands, --quick scaling, configs."""
import os
import shutil
import tempfile
import unittest
from dataclasses import replace
from types import SimpleNamespace

from harness.peers import PEERS, Ctx, variants_once
from harness.scenarios import SCENARIOS, Load
from harness.tls import TlsFiles


class ScenarioTest(unittest.TestCase):
    def test_load_command(self):
        cmd = SCENARIOS["small-close"].load.command("ringd-load", 9, "/d", 5, "0")
        self.assertEqual(" ".join(cmd), "taskset -c 0 ringd-load --port 9 --connections 1000 --duration-s 5"
                                        " --close --path /index.html")

    def test_quick_scales_rate_and_idle(self):
        main, background = SCENARIOS["cold"].loads(quick=True)
        self.assertEqual(main.rate, 500)
        self.assertEqual(background.connections, 16)
        self.assertEqual(SCENARIOS["idle-10k"].loads(quick=True)[0].idle, 1000)
        self.assertEqual(SCENARIOS["idle-10k"].loads(quick=False)[0].idle, 10000)

    def test_idle_fresh_measures_from_a_cold_start(self):
        fresh, warmed = SCENARIOS["idle-fresh"], SCENARIOS["idle-10k"]
        self.assertFalse(fresh.warm)
        self.assertTrue(warmed.warm)
        self.assertTrue(fresh.fresh_server)
        self.assertEqual(fresh.loads(quick=False)[0].idle, 9000)
        self.assertNotIn("--idle-setup", fresh.load.command("ringd-load", 9, "/d", 4, "0"))

    def test_idle_fresh_burst_opens_every_connection_at_once(self):
        burst = SCENARIOS["idle-fresh-burst"]
        self.assertFalse(burst.warm)
        self.assertTrue(burst.fresh_server)
        cmd = burst.load.command("ringd-load", 9, "/d", 4, "0")
        self.assertEqual(cmd[cmd.index("--idle") + 1:cmd.index("--idle") + 6],
                         ["9000", "--idle-setup", "0", "--idle-settle-s", "3"])

    def test_tls_idle_reads_once_the_record_buffers_are_given_back(self):
        # A TLS connection keeps its record buffers 2 s after its last exchange (TlsLoop's
        # kTrimIdleMs): the memory is read after 3 s idle.
        cmd = SCENARIOS["tls-idle"].load.command("ringd-load", 9, "/d", 4, "0", tls=True)
        self.assertEqual(cmd[cmd.index("--idle-settle-s") + 1], "3")

    def test_paths_glob_and_wrk(self):
        root = tempfile.mkdtemp()
        try:
            os.mkdir(os.path.join(root, "4mb"))
            for f in ("b.bin", "a.bin"):
                open(os.path.join(root, "4mb", f), "w").close()
            load = SCENARIOS["large"].load
            self.assertEqual(load.url_paths(root), ["/4mb/a.bin", "/4mb/b.bin"])
            self.assertEqual(load.wrk_command(7, root, 0.4, "0")[-1], "http://127.0.0.1:7/4mb/a.bin")
            self.assertIn("-d1s", load.wrk_command(7, root, 0.4, "0"))
        finally:
            shutil.rmtree(root)

    def test_large_read_is_large_with_every_byte_read(self):
        large, read = SCENARIOS["large"].load, SCENARIOS["large-read"].load
        self.assertTrue(large.bulk)
        self.assertEqual(read, replace(large, bulk=False))
        self.assertNotIn("--bulk", replace(read, paths_glob=None).command("load", 7, "/d", 1, "0"))

    def test_the_flood_runs_only_when_the_measured_client_waits(self):
        flood = SCENARIOS["tls-handshake-flood"].loads(quick=False)[1]
        self.assertTrue(flood.hello_flood)
        self.assertEqual(" ".join(flood.command("hello_flood", 9, "/d", 4, "0")),
                         "chrt --idle 0 taskset -c 0 hello_flood --port 9 --connections 100 --duration-s 4")

    def test_headers_and_the_compress_scenario(self):
        s = SCENARIOS["compress"]
        cmd = s.load.command("ringd-load", 9, "/d", 5, "0")
        self.assertEqual(cmd[cmd.index("--header") + 1], "Accept-Encoding: gzip")
        self.assertTrue(s.opt_in)
        for name in s.servers:
            self.assertTrue(PEERS[name].runs_in("compress"), name)

    def test_warm_up_is_closed_loop(self):
        self.assertEqual(Load(10, rate=5, idle=7).warm(), Load(10, rate=0, idle=0, bulk=True))

    def test_cold_on_the_slow_disks_is_the_cold_load(self):
        cold = SCENARIOS["cold"]
        for profile in ("nvme", "hdd"):
            s = SCENARIOS["cold-" + profile]
            self.assertTrue(s.opt_in)
            self.assertEqual((s.load, s.metric), (cold.load, cold.metric))
            self.assertEqual(s.background, replace(cold.background, uniform=True))
            root = tempfile.mkdtemp()
            try:
                os.mkdir(os.path.join(root, "cold"))
                open(os.path.join(root, "cold", "file-0.bin"), "w").close()
                self.assertIn("--uniform", s.background.command("ringd-load", 9, root, 5, "0"))
            finally:
                shutil.rmtree(root)
            self.assertIn("disk_bytes_per_s", [c.key for c in s.columns])
            self.assertEqual(s.hooks().profile.name, profile)
            for peer in ("nginx-aio", "ringd-uring", "ringd-bypass", "ringd-epoll"):
                self.assertTrue(PEERS[peer].runs_in(s.name), peer)
            self.assertFalse(PEERS["h2o"].runs_in(s.name))

    def test_every_entry_is_consistent(self):
        for s in SCENARIOS.values():
            self.assertTrue(s.what and s.seed, s.name)
            for k in s.quick:
                self.assertTrue(hasattr(s.load, k), s.name)


class Http2Test(unittest.TestCase):
    def test_h2load_commands(self):
        small = SCENARIOS["h2-small"]
        self.assertTrue(small.http2 and small.tls)
        self.assertEqual(" ".join(small.load.h2load_command(9, "/d", 4, "0", tls=True)),
                         "taskset -c 0 h2load -t1 -c100 -m10 -D4000ms --warm-up-time=1000ms --npn-list=h2"
                         " --tls13-ciphers=TLS_AES_128_GCM_SHA256 --groups=X25519 https://127.0.0.1:9/index.html")
        # h2c: prior knowledge, which is what h2load does with an http:// URL.
        self.assertEqual(" ".join(SCENARIOS["h2c-small"].load.h2load_command(9, "/d", 0.3, "0", warm_up_s=0)),
                         "taskset -c 0 h2load -t1 -c100 -m10 -D300ms --warm-up-time=0ms http://127.0.0.1:9/index.html")
        self.assertFalse(SCENARIOS["h2c-small"].tls)
        self.assertFalse(SCENARIOS["small-keepalive"].http2)
        root = tempfile.mkdtemp()
        try:
            os.mkdir(os.path.join(root, "4mb"))
            for f in ("b.bin", "a.bin"):
                open(os.path.join(root, "4mb", f), "w").close()
            cmd = SCENARIOS["h2-large"].load.h2load_command(9, root, 4, "0", tls=True)
            self.assertIn("-c10", cmd)
            self.assertIn("-m1", cmd)
            self.assertEqual(cmd[-2:], ["https://127.0.0.1:9/4mb/a.bin", "https://127.0.0.1:9/4mb/b.bin"])
        finally:
            shutil.rmtree(root)

    def test_idle_connections_are_held_by_h2idle_around_h2load(self):
        s = SCENARIOS["h2-idle"]
        self.assertTrue(s.fresh_server and s.tls)
        cmd = s.load.h2load_command(9, "/d", 4, "0", tls=True)
        self.assertEqual(cmd[:3], ["taskset", "-c", "0"])
        self.assertTrue(cmd[3].endswith("/perf/harness/h2idle.py"))
        self.assertEqual(cmd[4:cmd.index("--")],
                         ["--port", "9", "--idle", "2000", "--path", "/index.html", "--tls", "--settle-s", "3"])
        self.assertEqual(cmd[cmd.index("--") + 1:], replace(s.load, idle=0).h2load_command(9, "/d", 4, "0", tls=True))
        self.assertNotIn("--tls", SCENARIOS["h2c-idle"].load.h2load_command(9, "/d", 4, "0"))
        self.assertEqual(s.loads(quick=True)[0].idle, 200)

    def test_page_loads_are_h2load_runs_of_the_page_and_its_assets(self):
        cmd = SCENARIOS["h2-page"].load.h2load_command(9, "/d", 4, "0", tls=True)
        self.assertEqual(cmd[:3], ["taskset", "-c", "0"])
        self.assertTrue(cmd[3].endswith("/perf/harness/h2page.py"))
        self.assertEqual(cmd[4:], ["--duration-s", "4", "--port", "9", "--tls", "--root", "/d", "--page",
                                   "/index.html", "--assets", "assets", "--count", "100"])
        self.assertNotIn("--tls", SCENARIOS["h2c-page"].load.h2load_command(9, "/d", 4, "0"))
        self.assertEqual(SCENARIOS["h2-page"].loads(quick=False)[0].page_assets, 100)

    def test_quick_runs_one_of_them(self):
        quick = [n for n, s in SCENARIOS.items() if s.http2 and not s.quick_skip and not s.opt_in]
        self.assertEqual(quick, ["h2-small"])
        self.assertEqual([n for n, s in SCENARIOS.items() if s.http2],
                         ["h2-small", "h2c-small", "h2-large", "h2c-large", "h2-page", "h2c-page",
                          "h2-idle", "h2c-idle"])

    def test_who_takes_part(self):
        for name in ("h2-small", "h2c-small", "h2-large", "h2c-large", "h2-page", "h2c-page", "h2-idle",
                     "h2c-idle"):
            s = SCENARIOS[name]
            for peer in ("ringd-bypass", "ringd-uring", "ringd-epoll", "nginx", "h2o", "lighttpd"):
                self.assertTrue(PEERS[peer].takes_part(s), (name, peer))
                self.assertIsNone(PEERS[peer].why_not(s))
            self.assertTrue(PEERS["haproxy-h2"].takes_part(s), name)
            self.assertIsNone(PEERS["haproxy-h2"].why_not(s))
            for peer in ("ceiling", "loopback", "haproxy-tls", "fleet-1"):
                self.assertFalse(PEERS[peer].takes_part(s), (name, peer))
                self.assertTrue(PEERS[peer].why_not(s), (name, peer))  # a reason to log, not silence
        self.assertIsNone(PEERS["ceiling"].why_not(SCENARIOS["small-keepalive"]))
        self.assertFalse(PEERS["haproxy-h2"].takes_part(SCENARIOS["small-keepalive"]))
        self.assertEqual(PEERS["haproxy-h2"].scenarios, frozenset(n for n, s in SCENARIOS.items() if s.http2))
        self.assertEqual(PEERS["nginx-twin"].why_not(SCENARIOS["h2-small"]), "serves no TLS here")

    def test_nginx_speaks_http2_only_where_asked(self):
        d = tempfile.mkdtemp()
        try:
            def listen(tls, http2):
                ctx = Ctx({}, "/data", 8080, 1, d, tls, http2)
                PEERS["nginx"].command(ctx)
                with open(os.path.join(d, "nginx.conf")) as f:
                    return [l.strip() for l in f if l.strip().startswith("listen")]
            tls = TlsFiles("/c.pem", "/k.pem", "/h.pem")
            self.assertEqual(listen(None, False), ["listen 127.0.0.1:8080 backlog=4096;"])
            self.assertEqual(listen(None, True), ["listen 127.0.0.1:8080 backlog=4096 http2;"])
            self.assertEqual(listen(tls, False), ["listen 127.0.0.1:8080 backlog=4096 ssl;"])
            self.assertEqual(listen(tls, True), ["listen 127.0.0.1:8080 backlog=4096 ssl http2;"])
        finally:
            shutil.rmtree(d)


class PeerTest(unittest.TestCase):
    def test_runs_in(self):
        self.assertFalse(PEERS["ceiling"].runs_in("large"))
        self.assertTrue(PEERS["nginx-aio"].runs_in("cold"))
        self.assertFalse(PEERS["h2o"].runs_in("cold"))
        self.assertTrue(PEERS["ringd-uring"].runs_in("cold"))

    def test_loopback(self):
        self.assertEqual([s for s in SCENARIOS if PEERS["loopback"].runs_in(s)], ["large"])
        self.assertTrue(PEERS[SCENARIOS["large"].reference].runs_in("large"))
        root = tempfile.mkdtemp()
        try:
            os.mkdir(os.path.join(root, "4mb"))
            for f in ("file-1.bin", "file-0.bin"):
                open(os.path.join(root, "4mb", f), "w").close()
            ctx = Ctx({"loopback": "/b/loopback"}, root, 8080, 1, root)
            self.assertEqual(PEERS["loopback"].command(ctx),
                             ["/b/loopback", "--port", "8080", "--root", root, "--file", "4mb/file-0.bin"])
        finally:
            shutil.rmtree(root)

    def test_configs(self):
        d = tempfile.mkdtemp()
        try:
            ctx = Ctx({"ringd": "/b/ringd", "ceiling": "/b/ceiling"}, "/data", 8080, 2, d)
            self.assertEqual(PEERS["nginx-aio"].command(ctx), ["nginx", "-c", d + "/nginx-aio.conf", "-p", d])
            with open(os.path.join(d, "nginx-aio.conf")) as f:
                conf = f.read()
            self.assertIn("worker_processes 2;", conf)
            self.assertIn("aio threads;", conf)
            self.assertIn("listen 127.0.0.1:8080 backlog=4096;", conf)
            PEERS["lighttpd"].command(ctx)
            with open(os.path.join(d, "lighttpd.conf")) as f:
                self.assertIn("server.max-worker = 2", f.read())
            self.assertEqual(PEERS["ringd-epoll"].command(ctx)[:8],
                             ["/b/ringd", "--root", "/data", "--listen", "127.0.0.1:8080", "--shards", "2", "--io"])
        finally:
            shutil.rmtree(d)

    def test_ringd_peers_give_each_flag_once(self):
        # ringd refuses a flag that takes one value given twice: a peer's own --max-connections
        # stands in for the harness's default.
        lists = {"--listen", "--listen-tls", "--tls-cert", "--tls-key", "--tls-ocsp", "--io-mask",
                 "--add-header", "--error-page", "--cache-control"}
        d = tempfile.mkdtemp()
        try:
            ctx = Ctx({"ringd": "/b/ringd"}, "/data", 8080, 2, d)
            for name, peer in PEERS.items():
                if not name.startswith("ringd"):
                    continue
                cmd = peer.command(ctx)
                flags = [a.split("=", 1)[0] for a in cmd if a.startswith("--")]
                twice = {f for f in flags if flags.count(f) > 1} - lists
                self.assertFalse(twice, (name, cmd))
            cmd = PEERS["ringd-bypass"].command(ctx)
            self.assertEqual(cmd[cmd.index("--max-connections") + 1], "15000")
        finally:
            shutil.rmtree(d)

    def test_observability_variants(self):
        d = tempfile.mkdtemp()
        try:
            ctx = Ctx({"ringd": "/b/ringd"}, "/data", 8080, 1, d)
            self.assertEqual(PEERS["ringd-bypass-log"].command(ctx)[-2:],
                             ["--access-log", d + "/ringd-bypass-log-access.log"])
            self.assertEqual(PEERS["ringd-bypass-metrics"].command(ctx)[-2:], ["--admin-listen", "127.0.0.1:0"])
            PEERS["nginx-log"].command(ctx)
            with open(os.path.join(d, "nginx-log.conf")) as f:
                self.assertIn("access_log %s/nginx-log-access.log combined;" % d, f.read())
            PEERS["nginx"].command(ctx)
            with open(os.path.join(d, "nginx.conf")) as f:
                self.assertIn("access_log off;", f.read())
            for name in ("ringd-bypass-log", "ringd-bypass-metrics", "nginx-log"):
                self.assertTrue(PEERS[name].runs_in("small-keepalive"))
                self.assertFalse(PEERS[name].runs_in("large"))
        finally:
            shutil.rmtree(d)



class QuickTest(unittest.TestCase):
    def test_variants_run_once_and_the_rest_everywhere(self):
        ran = {}
        names = ["ringd-bypass", "nginx", "nginx-twin", "ringd-bypass-twin", "h2o"]
        first = variants_once([PEERS[n] for n in names], "small-keepalive", ran)
        self.assertEqual([p.name for p in first], names)
        self.assertEqual(ran, {"nginx-twin": "small-keepalive", "ringd-bypass-twin": "small-keepalive"})
        again = variants_once([PEERS[n] for n in names + ["ringd-bypass-turn2m"]], "large", ran)
        # the twins ran in small-keepalive: left out here
        self.assertEqual([p.name for p in again], ["ringd-bypass", "nginx", "h2o", "ringd-bypass-turn2m"])
        self.assertEqual(ran["ringd-bypass-turn2m"], "large")
        self.assertEqual(ran["nginx-twin"], "small-keepalive")

    def test_every_default_scenario_keeps_a_ringd_and_nginx_or_its_stand_in(self):
        # What --quick runs of each scenario still has the rows its report divides by.
        ran = {}
        for name, s in SCENARIOS.items():
            if s.opt_in or s.quick_skip:
                continue
            peers = variants_once([p for p in PEERS.values() if p.takes_part(s)], name, ran)
            self.assertTrue(any(p.name.startswith("ringd") or p.name.startswith("fleet") for p in peers), name)
            if "nginx" in [p.name for p in PEERS.values() if p.takes_part(s)]:
                self.assertIn("nginx", [p.name for p in peers], name)

    def test_half_second_runs_but_cold_gives_nginx_two_seconds(self):
        # nginx without aio answers cold's hot requests only between cold reads: in half a second
        # it answered none, and the report was not well formed.
        quick = SimpleNamespace(duration=0.5)  # what perf/run --quick sets
        self.assertEqual(SCENARIOS["small-keepalive"].duration(quick), 0.5)
        self.assertEqual(SCENARIOS["cold"].duration(quick), 2)
        self.assertEqual(SCENARIOS["cold"].duration(SimpleNamespace(duration=5)), 5)


class SitesTest(unittest.TestCase):
    def test_both_servers_get_100_sites_a_limit_and_an_allow_list(self):
        d = tempfile.mkdtemp()
        try:
            ctx = Ctx({"ringd": "/b/ringd"}, "/data", 8080, 1, d)
            cmd = PEERS["ringd-uring-sites"].command(ctx)
            self.assertEqual(cmd[cmd.index("--io") + 1], "uring")
            self.assertEqual(cmd[cmd.index("--limit-req") + 1], "1000000r/s,burst=1000000")
            self.assertEqual(cmd[cmd.index("--allow") + 1], "127.0.0.0/8")
            with open(cmd[cmd.index("--flagfile") + 1]) as f:
                flags = f.read().splitlines()
            self.assertEqual(flags[100:102], ["[site site50.example.org]", "--root=/data"])
            self.assertEqual(len(flags), 200)
            PEERS["nginx-sites"].command(ctx)
            with open(os.path.join(d, "nginx-sites.conf")) as f:
                conf = f.read()
            self.assertEqual(conf.count("server_name site"), 100)
            self.assertEqual(conf.count("limit_req zone=perf burst=1000000 nodelay; allow 127.0.0.0/8; deny all;"), 100)
            self.assertIn("server_name site50.example.org; root /data;", conf)
            self.assertIn("listen 127.0.0.1:8080;", conf)
        finally:
            shutil.rmtree(d)
        s = SCENARIOS["sites"]
        self.assertEqual(s.load.headers, ("Host: site50.example.org",))
        self.assertIn("--header", s.load.command("ringd-load", 9, "/d", 1, "0"))
        wrk = s.load.wrk_command(9, "/d", 1, "0")
        self.assertEqual(wrk[wrk.index("-H") + 1], "Host: site50.example.org")
        self.assertTrue(s.opt_in)


if __name__ == "__main__":
    unittest.main()
