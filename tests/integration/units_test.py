"""deploy/systemd: the units parse (systemd-analyze verify), and ringd.service's system-call
filter, rebuilt as a seccomp allow-list from systemd's own group definitions, lets ringd serve on
the bypass tier (io_uring allowed), not silently on epoll. No systemd PID 1 is needed.

The filter is SystemCallFilter= as systemd applies it: the union of the allow lines, minus the
union of the ~ lines, every other call failing with EPERM (SystemCallErrorNumber=EPERM).
"""
import os
import re
import shutil
import subprocess
import tempfile
import unittest

from ringd_harness import RINGD, ROOT_FLAGS, BackendTestCase, Server, make_docroot, request

HELPER = os.environ.get("RINGD_WRAP", "")  # //tests:syscall_allow_exec
UNITS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "deploy", "systemd")
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
