"""The TLS scenarios' pieces: the certificate, `openssl speed`'s figure, the peers' TLS configs
and load commands, and which peers take part."""
import os
import shutil
import subprocess
import tempfile
import unittest

from harness import tls
from harness.peers import PEERS, Ctx
from harness.report import scrub
from harness.scenarios import SCENARIOS

TESTDATA = os.path.join(os.path.dirname(os.path.abspath(__file__)), "testdata")
FILES = tls.TlsFiles("/r/tls/cert.pem", "/r/tls/key.pem", "/r/tls/haproxy.pem")


class SpeedTest(unittest.TestCase):
    def test_machine_readable_output(self):
        with open(os.path.join(TESTDATA, "openssl-speed.txt")) as f:
            self.assertAlmostEqual(tls.parse_speed(f.read()), 2315176228.57)

    def test_several_sizes_pick_16_kib(self):
        text = "+H:16:1024:16384\n+F:25:AES-128-GCM:100.0:200.0:300.5\n"
        self.assertEqual(tls.parse_speed(text), 300.5)
        self.assertEqual(tls.parse_speed(text, block=1024), 200.0)

    def test_nothing_to_read(self):
        for text in (None, "", "speed: unknown option\n", "+H:16384\n", "+H:16\n+F:25:AES-128-GCM:1.0\n",
                     "+H:16384\n+F:25:AES-128-GCM:fast\n", "+H:16384\n+F:25:AES-128-GCM:0\n"):
            self.assertIsNone(tls.parse_speed(text), repr(text))

    def test_command_is_pinned_and_machine_readable(self):
        self.assertEqual(" ".join(tls.speed_command("1", 3)),
                         "taskset -c 1 openssl speed -evp aes-128-gcm -bytes 16384 -seconds 3 -mr")


@unittest.skipIf(shutil.which("openssl") is None, "no openssl command")
class CertificateTest(unittest.TestCase):
    def test_ecdsa_p256_for_localhost_and_keys_removed(self):
        d = tempfile.mkdtemp()
        try:
            files = tls.make_certificate(os.path.join(d, "tls"))
            text = subprocess.run(["openssl", "x509", "-in", files.cert, "-noout", "-text"], check=True,
                                  capture_output=True, text=True).stdout
            self.assertIn("id-ecPublicKey", text)
            self.assertIn("prime256v1", text)
            self.assertIn("DNS:localhost, IP Address:127.0.0.1", text)
            with open(files.pem) as f:
                pem = f.read()
            self.assertIn("BEGIN CERTIFICATE", pem)
            self.assertIn("PRIVATE KEY", pem)
            tls.remove_keys(os.path.join(d, "tls"))
            self.assertEqual(os.listdir(os.path.join(d, "tls")), ["cert.pem"])
        finally:
            shutil.rmtree(d)


class PeersTest(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.mkdtemp()

    def tearDown(self):
        shutil.rmtree(self.dir)

    def ctx(self, files=FILES):
        return Ctx({"ringd": "/b/ringd"}, "/data", 8443, 1, self.dir, files)

    def config(self, name, files=FILES):
        PEERS[name].command(self.ctx(files))
        with open(os.path.join(self.dir, PEERS[name].config_name)) as f:
            return f.read()

    def test_configs_serve_the_runs_certificate(self):
        nginx = self.config("nginx")
        self.assertIn("listen 127.0.0.1:8443 backlog=4096 ssl;", nginx)
        self.assertIn("ssl_certificate /r/tls/cert.pem;", nginx)
        self.assertIn("ssl_certificate_key /r/tls/key.pem;", nginx)
        h2o = self.config("h2o")
        self.assertIn("  port: 8443\n  ssl:\n    certificate-file: /r/tls/cert.pem\n    key-file: /r/tls/key.pem", h2o)
        lighttpd = self.config("lighttpd")
        self.assertIn('server.modules += ("mod_openssl")', lighttpd)
        self.assertIn('ssl.pemfile = "/r/tls/cert.pem"', lighttpd)
        self.assertIn('ssl.privkey = "/r/tls/key.pem"', lighttpd)

    def test_plaintext_configs_have_no_tls(self):
        for name in ("nginx", "h2o", "lighttpd"):
            text = self.config(name, files=None)
            self.assertNotIn("ssl", text, name)
        self.assertIn("listen 127.0.0.1:8443 backlog=4096;", self.config("nginx", files=None))

    def test_ringd_listens_for_tls(self):
        cmd = " ".join(PEERS["ringd-bypass"].command(self.ctx()))
        self.assertIn("--listen-tls 127.0.0.1:8443 --tls-cert /r/tls/cert.pem --tls-key /r/tls/key.pem", cmd)
        self.assertNotIn("--listen ", cmd)
        plain = " ".join(PEERS["ringd-bypass"].command(self.ctx(files=None)))
        self.assertIn("--listen 127.0.0.1:8443", plain)
        self.assertNotIn("tls", plain)

    def test_haproxy_terminates_tls_in_front_of_plaintext_ringd(self):
        cmd = PEERS["haproxy-tls"].command(self.ctx())
        self.assertIn("--tls-pem", cmd)
        self.assertEqual(cmd[cmd.index("--tls-pem") + 1], "/r/tls/haproxy.pem")
        self.assertNotIn("--listen-tls", cmd)  # the node behind it: plaintext
        self.assertEqual(scrub(" ".join(cmd)).count("tls/haproxy.pem"), 1)
        self.assertNotIn("/r/", scrub(" ".join(cmd)))

    def test_haproxy_h2_offers_h2_by_alpn(self):
        cmd = PEERS["haproxy-h2"].command(self.ctx())
        self.assertEqual(cmd[cmd.index("--alpn") + 1], "h2,http/1.1")
        self.assertNotIn("--alpn", PEERS["haproxy-h2"].command(self.ctx(files=None)))  # h2c: prior knowledge
        self.assertNotIn("--alpn", PEERS["haproxy-tls"].command(self.ctx()))

    def test_scrub_hides_the_runs_folder(self):
        self.assertEqual(scrub("ringd --tls-cert /work/x/perf/results/r/tls/cert.pem --tls-key /tmp/o/tls/key.pem"),
                         "ringd --tls-cert tls/cert.pem --tls-key tls/key.pem")


class ScenariosTest(unittest.TestCase):
    def test_who_takes_part(self):
        for name in ("tls-keepalive", "tls-handshake", "tls-handshake-resumed", "tls-large", "tls-idle"):
            s = SCENARIOS[name]
            self.assertTrue(s.tls)
            taking = sorted(p.name for p in PEERS.values() if p.takes_part(s))
            # Two tickets per full handshake (ringd sends one) only where full handshakes are.
            tickets2 = ["ringd-bypass-tickets2"] if name == "tls-handshake" else []
            self.assertEqual(taking, ["h2o", "haproxy-tls", "lighttpd", "nginx", "ringd-bypass"] + tickets2 +
                             ["ringd-epoll", "ringd-plaintext", "ringd-uring"], name)
            self.assertTrue(PEERS["nginx"].serves_tls(s))
            self.assertTrue(PEERS["haproxy-tls"].serves_tls(s))
            self.assertFalse(PEERS["ringd-plaintext"].serves_tls(s))
        # Outside them, nothing changes: the floor and HAProxy's TLS sit the others out.
        plain = SCENARIOS["small-keepalive"]
        self.assertFalse(PEERS["nginx"].serves_tls(plain))
        self.assertFalse(PEERS["ringd-plaintext"].takes_part(plain))
        self.assertFalse(PEERS["haproxy-tls"].takes_part(plain))
        self.assertFalse(PEERS["ceiling"].takes_part(SCENARIOS["tls-keepalive"]))

    def test_load_commands(self):
        s = SCENARIOS["tls-handshake-resumed"]
        self.assertEqual(" ".join(s.load.command("ringd-load", 9, "/d", 5, "0", tls=True)),
                         "taskset -c 0 ringd-load --port 9 --connections 100 --duration-s 5 --close --tls"
                         " --tls-resume --path /index.html")
        full = SCENARIOS["tls-handshake"].load.command("ringd-load", 9, "/d", 5, "0", tls=True)
        self.assertNotIn("--tls-resume", full)
        # The floor takes the same load in plaintext.
        self.assertNotIn("--tls", " ".join(s.load.command("ringd-load", 9, "/d", 5, "0")))
        root = tempfile.mkdtemp()
        try:
            os.mkdir(os.path.join(root, "4mb"))
            open(os.path.join(root, "4mb", "a.bin"), "w").close()
            # Bodies over TLS are decrypted: never --bulk, the warm-up's included.
            warm = SCENARIOS["tls-large"].load.warm()
            self.assertNotIn("--bulk", warm.command("ringd-load", 9, root, 1, "0", tls=True))
            self.assertIn("--bulk", warm.command("ringd-load", 9, root, 1, "0"))
            self.assertEqual(SCENARIOS["tls-large"].load.wrk_command(7, root, 1, "0", tls=True)[-1],
                             "https://127.0.0.1:7/4mb/a.bin")
        finally:
            shutil.rmtree(root)

    def test_quick_keeps_a_short_tls_scenario(self):
        quick = [n for n, s in SCENARIOS.items() if s.tls and not s.quick_skip and not s.opt_in]
        self.assertEqual(quick, ["tls-keepalive", "tls-handshake-resumed", "h2-small"])
        self.assertEqual(SCENARIOS["tls-idle"].loads(quick=True)[0].idle, 500)


if __name__ == "__main__":
    unittest.main()
