"""deploy/systemd: the units parse (systemd-analyze verify), and ringd.service's system-call
filter, rebuilt as a seccomp allow-list from systemd's own group definitions, lets ringd serve on
the bypass tier (io_uring allowed), not silently on epoll. The HTTPS drop-in
(ringd.service.d/tls.conf) verifies with the unit, and its capabilities are what an unprivileged
ringd needs to serve HTTPS on port 443 with the flags deploy/debian/ringd.conf shows (without
them it cannot bind). No systemd PID 1 is needed.

The filter is SystemCallFilter= as systemd applies it: the union of the allow lines, minus the
union of the ~ lines, every other call failing with EPERM (SystemCallErrorNumber=EPERM).
"""
import os
import re
import shlex
import shutil
import socket
import ssl
import subprocess
import tempfile
import unittest

from ringd_harness import RINGD, ROOT_FLAGS, BackendTestCase, Reader, Server, make_docroot, request
from tls_pki import make_pki

HELPER = os.environ.get("RINGD_WRAP", "")  # //tests:syscall_allow_exec
UNITS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "deploy", "systemd")
DROPIN = os.path.join(UNITS, "ringd.service.d", "tls.conf")
CONF = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "deploy", "debian",
                    "ringd.conf")
IO_URING = {"io_uring_setup", "io_uring_enter", "io_uring_register"}


def analyze():
    path = shutil.which("systemd-analyze")
    if path is None:
        raise AssertionError("systemd-analyze is missing (tools/setup installs systemd)")
    return path


_groups = {}


def expand(item):
    """The system calls a SystemCallFilter= item names, groups expanded (recursively)."""
    if not item.startswith("@"):
        return {item}
    if item not in _groups:
        out = subprocess.run([analyze(), "syscall-filter", "--no-pager", item], capture_output=True,
                             text=True, timeout=30)
        if out.returncode != 0:
            raise AssertionError("systemd-analyze does not know %s: %s" % (item, out.stderr))
        names = set()
        for line in out.stdout.splitlines()[1:]:
            word = line.strip()
            if not word or word.startswith("#"):
                continue
            names |= expand(word)
        _groups[item] = names
    return _groups[item]


def dropin_capabilities():
    """The capabilities the HTTPS drop-in grants, as setpriv names them (net_bind_service)."""
    caps = {}
    with open(DROPIN) as f:
        for line in f:
            m = re.match(r"(CapabilityBoundingSet|AmbientCapabilities)=(.*)", line.strip())
            if m:
                caps.setdefault(m.group(1), set()).update(
                    c.lower()[len("cap_"):] for c in m.group(2).split())
    if caps.get("CapabilityBoundingSet") != caps.get("AmbientCapabilities"):
        raise AssertionError("the drop-in's bounding set and ambient set differ: %s" % caps)
    return sorted(caps.get("AmbientCapabilities", ()))


def service_filter():
    """(allowed, denied) system calls of ringd.service's SystemCallFilter= lines."""
    allowed, denied = set(), set()
    with open(os.path.join(UNITS, "ringd.service")) as f:
        for line in f:
            m = re.match(r"SystemCallFilter=(~?)(.*)", line.strip())
            if not m:
                continue
            names = set()
            for item in m.group(2).split():
                names |= expand(item)
            (denied if m.group(1) else allowed).update(names)
    return allowed, denied


class UnitsTest(BackendTestCase):
    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        if not HELPER:
            raise RuntimeError("RINGD_WRAP is not set to syscall_allow_exec")
        cls.root, cls.files = make_docroot()
        cls.tmp = tempfile.mkdtemp(prefix="ringd-units-")

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.root, ignore_errors=True)
        shutil.rmtree(cls.tmp, ignore_errors=True)

    def write_list(self, names):
        path = os.path.join(self.tmp, "allowed-%d" % len(names))
        with open(path, "w") as f:
            f.write("\n".join(sorted(names)) + "\n")
        return path

    def test_units_verify(self):
        # verify wants ExecStart's binary to exist: point it at the one under test.
        for name in ("ringd.socket", "ringd.service"):
            with open(os.path.join(UNITS, name)) as f:
                text = f.read().replace("/usr/sbin/ringd", RINGD)
            with open(os.path.join(self.tmp, name), "w") as f:
                f.write(text)
        out = subprocess.run([analyze(), "verify", "--man=no",
                              os.path.join(self.tmp, "ringd.socket"),
                              os.path.join(self.tmp, "ringd.service")],
                             capture_output=True, text=True, timeout=60)
        self.assertEqual(out.returncode, 0, out.stdout + out.stderr)
        self.assertNotIn("Unknown", out.stderr)

    def test_reload_checks_the_configuration_first(self):
        # systemd runs ExecReload= lines in order and stops at one that fails: `ringd -t` with
        # ExecStart's flags comes first, so a configuration that would not start fails the reload
        # before any signal, and ringd keeps serving as it was.
        with open(os.path.join(UNITS, "ringd.service")) as f:
            unit = f.read()
        start = shlex.split(re.search(r"^ExecStart=(.*)$", unit, re.M).group(1))
        reload = [shlex.split(l) for l in re.findall(r"^ExecReload=(.*)$", unit, re.M)]
        self.assertEqual(reload[0], [start[0], "-t"] + start[1:])
        self.assertEqual([r[0] for r in reload[1:]], ["/bin/kill", "/bin/kill"])
        # The shipped ringd.conf, its root pointed at a directory here, passes the check; with a
        # quote left open, the check fails naming the line, and the reload stops there.
        with open(CONF) as f:
            shipped = f.read()
        self.assertIn("--root=/usr/share/ringd/www\n", shipped)
        conf = os.path.join(self.tmp, "ringd.conf")
        self.assertIn("--access-log=/var/log/ringd/access.log\n", shipped)
        with open(conf, "w") as f:
            f.write(shipped.replace("--root=/usr/share/ringd/www", "--root=" + self.root)
                    .replace("/var/log/ringd/", self.tmp + "/"))
        check = [RINGD] + [a.replace("/etc/ringd/ringd.conf", conf) for a in reload[0][1:]]
        out = subprocess.run(check + ROOT_FLAGS, capture_output=True, text=True, timeout=30)
        self.assertEqual(out.returncode, 0, out.stderr)
        self.assertEqual(out.stderr.strip().splitlines()[-1], "ringd: configuration ok")
        with open(conf, "a") as f:
            f.write("--add-header='X-Frame-Options: DENY\n")
        out = subprocess.run(check + ROOT_FLAGS, capture_output=True, text=True, timeout=30)
        self.assertEqual(out.returncode, 1, out.stderr)
        self.assertIn("%s:%d: a ' quote is not closed" % (conf, len(shipped.splitlines()) + 1),
                      out.stderr)

    def test_the_tls_dropin_verifies_with_the_units(self):
        d = os.path.join(self.tmp, "dropin")
        os.makedirs(os.path.join(d, "ringd.service.d"))
        for name in ("ringd.socket", "ringd.service"):
            with open(os.path.join(UNITS, name)) as f:
                text = f.read().replace("/usr/sbin/ringd", RINGD)
            with open(os.path.join(d, name), "w") as f:
                f.write(text)
        shutil.copy(DROPIN, os.path.join(d, "ringd.service.d", "tls.conf"))
        out = subprocess.run([analyze(), "verify", "--man=no", os.path.join(d, "ringd.socket"),
                              os.path.join(d, "ringd.service")],
                             capture_output=True, text=True, timeout=60)
        self.assertEqual(out.returncode, 0, out.stdout + out.stderr)
        self.assertNotIn("Unknown", out.stderr)
        self.assertEqual(dropin_capabilities(), ["net_bind_service"])

    def test_the_https_socket_and_its_dropin_verify_with_the_units(self):
        d = os.path.join(self.tmp, "https-socket")
        os.makedirs(os.path.join(d, "ringd.service.d"))
        for name in ("ringd.socket", "ringd-https.socket", "ringd.service"):
            with open(os.path.join(UNITS, name)) as f:
                text = f.read().replace("/usr/sbin/ringd", RINGD)
            with open(os.path.join(d, name), "w") as f:
                f.write(text)
        shutil.copy(os.path.join(UNITS, "ringd.service.d", "https-socket.conf"),
                    os.path.join(d, "ringd.service.d", "https-socket.conf"))
        out = subprocess.run([analyze(), "verify", "--man=no", os.path.join(d, "ringd.socket"),
                              os.path.join(d, "ringd-https.socket"),
                              os.path.join(d, "ringd.service")],
                             capture_output=True, text=True, timeout=60)
        self.assertEqual(out.returncode, 0, out.stdout + out.stderr)
        self.assertNotIn("Unknown", out.stderr)
        with open(os.path.join(UNITS, "ringd-https.socket")) as f:
            self.assertIn("FileDescriptorName=https\n", f.read())  # what ringd looks for

    def test_the_tls_dropin_lets_an_unprivileged_ringd_serve_https_on_443(self):
        # As ringd.service runs it: a user of its own (nobody here), the unit's system-call
        # filter, the drop-in's capabilities and nothing else, the HTTPS flags of ringd.conf
        # (paths and address replaced), a key readable through its group only. On 127.0.0.5, so
        # that a server on the host's port 443 is not in the way. The epoll tier: the rings'
        # registered buffers need the unit's LimitMEMLOCK=infinity, which this test cannot grant.
        setpriv = shutil.which("setpriv")
        if setpriv is None or os.geteuid() != 0:
            self.skipTest("needs root and setpriv (util-linux) to run ringd as another user")
        probe = socket.socket()
        try:
            probe.bind(("127.0.0.5", 443))
        except OSError as e:
            self.skipTest("127.0.0.5:443 is taken here: %s" % e)
        finally:
            probe.close()
        pki = os.path.join(self.tmp, "pki")
        os.mkdir(pki)
        make_pki(pki)
        os.chmod(self.tmp, 0o755)
        os.chmod(pki, 0o755)
        os.chown(os.path.join(pki, "localhost-ec.key"), 0, 65534)
        os.chmod(os.path.join(pki, "localhost-ec.key"), 0o640)
        flags = []
        with open(CONF) as f:
            for line in f:
                m = re.match(r"#(--(?:listen-tls|tls-cert|tls-key)=.*)", line.strip())
                if m:
                    flags.append(m.group(1))
        self.assertEqual([f.split("=")[0] for f in flags], ["--listen-tls", "--tls-cert", "--tls-key"])
        flagfile = os.path.join(self.tmp, "tls.conf")
        with open(flagfile, "w") as f:
            f.write("\n".join(flags).replace("0.0.0.0:443", "127.0.0.5:443")
                    .replace("/etc/ringd/tls/example.org.pem", os.path.join(pki, "localhost-ec.crt"))
                    .replace("/etc/ringd/tls/example.org.key", os.path.join(pki, "localhost-ec.key")))
        # Copies the user can run (Bazel's tree is under root's home).
        ringd = shutil.copy(RINGD, os.path.join(self.tmp, "ringd"))
        allowed, denied = service_filter()
        seccomp = [shutil.copy(HELPER, os.path.join(self.tmp, "syscall_allow_exec")),
                   self.write_list(allowed - denied)]

        def as_nobody(caps):
            keep = "-all" + "".join(",+" + c for c in caps)
            return [setpriv, "--reuid=65534", "--regid=65534", "--clear-groups",
                    "--bounding-set=" + keep, "--inh-caps=" + keep, "--ambient-caps=" + keep]

        with self.assertRaisesRegex(RuntimeError, r"cannot listen on 127\.0\.0\.5:443: Permission denied"):
            Server(self.root, "--flagfile=" + flagfile, backend="epoll", listen=None,
                   wrap=as_nobody([]) + seccomp, binary=ringd)
        server = Server(self.root, "--flagfile=" + flagfile, backend="epoll", listen=None,
                        wrap=as_nobody(dropin_capabilities()) + seccomp, binary=ringd)
        try:
            self.assertEqual(server.tls_port, 443)
            ctx = ssl.create_default_context(cafile=os.path.join(pki, "ca.crt"))
            with ctx.wrap_socket(socket.create_connection(("127.0.0.5", 443), timeout=10),
                                 server_hostname="localhost") as s:
                s.sendall(b"GET /small.txt HTTP/1.1\r\nHost: localhost\r\n\r\n")
                r = Reader(s).read_response()
            self.assertEqual((r.status, r.body), (200, self.files["small.txt"]))
            with open("/proc/%d/status" % server.proc.pid) as f:
                status = dict(line.split(":\t", 1) for line in f.read().splitlines() if ":\t" in line)
            self.assertEqual(status["Uid"].split()[0], "65534")
            self.assertEqual(int(status["CapEff"], 16), 1 << 10)  # CAP_NET_BIND_SERVICE alone
        finally:
            self.assertEqual(server.stop(), 0)

    def test_the_service_filter_keeps_io_uring(self):
        allowed, denied = service_filter()
        self.assertTrue(IO_URING <= allowed, IO_URING - allowed)
        self.assertFalse(IO_URING & denied)
        self.assertIn("setuid", denied)  # the deny list is real: @privileged is in it
        server = Server(self.root, "--shards", "2", backend="auto",
                        wrap=[HELPER, self.write_list(allowed - denied)])
        try:
            self.assertTrue(any("io backend bypass" in l for l in server.log), server.log)
            r = request(server, "GET", "/small.txt")
            self.assertEqual((r.status, r.body), (200, self.files["small.txt"]))
            r = request(server, "GET", "/large.bin")  # spliced through the ring
            self.assertEqual(r.body, self.files["large.bin"])
            r = request(server, "GET", "/large.bin", {"Range": "bytes=10-19"})
            self.assertEqual((r.status, r.body), (206, self.files["large.bin"][10:20]))
        finally:
            self.assertEqual(server.stop(), 0)

    def test_the_helper_really_filters(self):
        # The same list without io_uring: ringd must notice and fall back to epoll.
        allowed, denied = service_filter()
        server = Server(self.root, "--shards", "2", backend="auto",
                        wrap=[HELPER, self.write_list(allowed - denied - IO_URING)])
        try:
            self.assertTrue(any("io backend epoll" in l for l in server.log), server.log)
            self.assertEqual(request(server, "GET", "/small.txt").status, 200)
        finally:
            self.assertEqual(server.stop(), 0)


if __name__ == "__main__":
    unittest.main()
