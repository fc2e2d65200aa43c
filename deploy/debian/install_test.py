"""The package in a fresh Debian 12 root, as an operator meets it.

debootstrap makes a minimal bookworm root (cached as a tarball outside the repository, in
$RINGD_TEST_CACHE or /var/cache/ringd-tests, so later runs only unpack it); the mirror is the one
apt's own sources on this machine name, read at test time. In that root:

- `apt-get install ./ringd_*.deb` pulls the dependencies from Debian, creates the ringd system
  user, enables the units without starting anything (no systemd runs in a chroot);
- the service's ExecStart line, run as the packaged user with a socket passed the way
  ringd.socket passes it (systemd-socket-activate), serves the default page over loopback;
- a misspelled flag in /etc/ringd/ringd.conf stops the start with the file, the line and the
  flag;
- an upgrade to a package with a higher version keeps an edited ringd.conf, and where systemd
  runs (faked: /run/systemd/system and stubs that write down what they are asked) restarts
  ringd.service only, never ringd.socket, whose sockets hold new connections meanwhile;
- `apt-get purge` stops the units, removes the user and group, and leaves nothing behind but
  what Debian policy allows.

Skipped, with the reason, where this cannot run: not root, no debootstrap, no mounts, no mirror.

    install_test.py RINGD_DEB
"""
import fcntl
import glob
import os
import re
import resource
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import unittest
import urllib.request

os.environ["PATH"] = "/usr/sbin:/usr/bin:/sbin:/bin"
DEB = os.path.abspath(sys.argv.pop(1)) if len(sys.argv) > 1 else ""
CACHE = os.environ.get("RINGD_TEST_CACHE", "/var/cache/ringd-tests")
SUITE = "bookworm"


def apt_mirrors():
    """(uri, suites) of every enabled 'deb' source on this machine, one-line and deb822 formats."""
    found = []
    for path in ["/etc/apt/sources.list"] + sorted(glob.glob("/etc/apt/sources.list.d/*.list")):
        if not os.path.exists(path):
            continue
        with open(path) as f:
            text = f.read()
        for line in text.splitlines():
            line = re.sub(r"\[[^]]*\]", "", line.split("#", 1)[0]).split()
            if len(line) >= 3 and line[0] == "deb":
                found.append((line[1], [line[2]]))
    for path in sorted(glob.glob("/etc/apt/sources.list.d/*.sources")):
        with open(path) as f:
            text = f.read()
        for stanza in text.split("\n\n"):
            fields = {}
            for line in stanza.splitlines():
                if line.startswith("#") or ":" not in line or line[0].isspace():
                    continue
                key, value = line.split(":", 1)
                fields[key.strip().lower()] = value.split()
            if "deb" not in fields.get("types", []) or fields.get("enabled", ["yes"]) == ["no"]:
                continue
            for uri in fields.get("uris", []):
                found.append((uri, fields.get("suites", [])))
    return found


def debian_mirror():
    """Debian's main archive as apt here names it (the entry that carries bookworm itself)."""
    for uri, suites in apt_mirrors():
        if SUITE in suites and "security" not in uri:
            return uri.rstrip("/")
    return None


def sources_lines(mirror):
    """sources.list for the root: bookworm, its updates and security, as apt here has them."""
    lines = ["deb %s %s main" % (mirror, SUITE)]
    for uri, suites in apt_mirrors():
        for suite in suites:
            if suite in (SUITE + "-updates", SUITE + "-security"):
                lines.append("deb %s %s main" % (uri.rstrip("/"), suite))
    return "\n".join(dict.fromkeys(lines)) + "\n"


def run(args, **kw):
    kw.setdefault("check", True)
    kw.setdefault("capture_output", True)
    kw.setdefault("text", True)
    try:
        return subprocess.run(args, **kw)
    except subprocess.CalledProcessError as e:
        raise AssertionError("%s failed (%d):\n%s%s" % (shlex.join(args), e.returncode,
                                                        e.stdout, e.stderr)) from None


def cached_root_tarball(mirror):
    """A minbase bookworm root with apt's lists, made once by debootstrap and kept as a tarball."""
    key = re.sub(r"[^A-Za-z0-9]+", "_", mirror)
    tarball = os.path.join(CACHE, "debootstrap-%s-minbase-%s.tar.zst" % (SUITE, key))
    os.makedirs(CACHE, exist_ok=True)
    with open(os.path.join(CACHE, ".lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # another run may be making it
        if os.path.exists(tarball):
            return tarball
        build = tempfile.mkdtemp(prefix="debootstrap-", dir=CACHE)
        try:
            root = os.path.join(build, "root")
            run(["debootstrap", "--variant=minbase", SUITE, root, mirror], timeout=1200)
            with open(os.path.join(root, "etc/apt/sources.list"), "w") as f:
                f.write(sources_lines(mirror))
            run(["chroot", root, "apt-get", "update", "-qq"], timeout=600)
            run(["chroot", root, "apt-get", "clean"])
            run(["tar", "--zstd", "-cf", tarball + ".part", "--numeric-owner", "--xattrs",
                 "-C", root, "."], timeout=600)
            os.rename(tarball + ".part", tarball)
        finally:
            shutil.rmtree(build, ignore_errors=True)
    return tarball


def read(path):
    with open(path) as f:
        return f.read()


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def repack(deb, version, dest, edit=None):
    """deb with its Version set to `version` (and `edit(dir)` applied): a later package."""
    work = tempfile.mkdtemp()
    try:
        run(["dpkg-deb", "-R", deb, work])
        control = os.path.join(work, "DEBIAN/control")
        text = re.sub(r"^Version: .*$", "Version: " + version, read(control), flags=re.M)
        with open(control, "w") as f:
            f.write(text)
        if edit:
            edit(work)
        run(["dpkg-deb", "--root-owner-group", "-b", work, dest])
    finally:
        shutil.rmtree(work, ignore_errors=True)


# apt runs dpkg, hence the maintainer scripts, with this PATH: the stubs of fake_systemd first.
STUBS_FIRST = "-oDPkg::Path=/usr/local/sbin:/usr/sbin:/usr/bin:/sbin:/bin"

# What may remain after a purge (and autoremove of what the install pulled in): the records and
# logs of dpkg and apt, and the backups adduser's tools keep of the user databases.
ALLOWED_AFTER_PURGE = [
    r"var/lib/dpkg/.*", r"var/lib/apt/.*", r"var/cache/apt/.*",
    r"var/log/apt/.*", r"var/log/dpkg\.log", r"var/log/alternatives\.log",
    r"etc/(passwd|group|shadow|gshadow)-",
]


class InstallTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.root = None
        cls.mounted = []
        if os.geteuid() != 0:
            raise unittest.SkipTest("needs root (debootstrap, chroot, mounts)")
        if not shutil.which("debootstrap"):
            raise unittest.SkipTest("debootstrap is not installed (tools/setup installs it)")
        if not shutil.which("systemd-socket-activate"):
            raise unittest.SkipTest("systemd-socket-activate is not installed (package systemd)")
        mirror = debian_mirror()
        if mirror is None:
            raise unittest.SkipTest("apt's sources here name no Debian %s mirror" % SUITE)
        try:
            urllib.request.urlopen("%s/dists/%s/Release" % (mirror, SUITE), timeout=15).close()
        except OSError as e:
            raise unittest.SkipTest("the Debian mirror %s is unreachable: %s" % (mirror, e))
        tarball = cached_root_tarball(mirror)
        cls.root = tempfile.mkdtemp(prefix="ringd-root-",
                                    dir=os.environ.get("TEST_TMPDIR", "/tmp"))
        run(["tar", "--zstd", "-xf", tarball, "--numeric-owner", "--xattrs", "-C", cls.root],
            timeout=300)
        proc = os.path.join(cls.root, "proc")
        out = subprocess.run(["mount", "-t", "proc", "proc", proc], capture_output=True,
                             text=True)
        if out.returncode != 0:
            shutil.rmtree(cls.root, ignore_errors=True)
            cls.root = None
            raise unittest.SkipTest("cannot mount /proc in the root: " + out.stderr.strip())
        cls.mounted.append(proc)
        # apt's downloads (ringd's dependencies) are kept with the cached root as well.
        archives = os.path.join(CACHE, "apt-archives")
        os.makedirs(os.path.join(archives, "partial"), exist_ok=True)
        target = os.path.join(cls.root, "var/cache/apt/archives")
        run(["mount", "--bind", archives, target])
        cls.mounted.append(target)
        cls.chroot(["apt-get", "update", "-qq"], timeout=600)
        # The unit's LimitMEMLOCK=infinity and LimitNOFILE=1048576. Where the hard limits are
        # lower and cannot be raised (root without CAP_SYS_RESOURCE, as in some containers), the
        # user cannot register the rings' buffers (about 24 MiB per shard): ringd then runs on
        # the epoll tier, which registers none, and the test says so.
        nofile = min(1048576, resource.getrlimit(resource.RLIMIT_NOFILE)[1])
        cls.limits = ["prlimit", "--memlock=unlimited", "--nofile=%d" % nofile]
        cls.extra_flags = []
        if subprocess.run(cls.limits + ["true"], capture_output=True).returncode != 0:
            hard = resource.getrlimit(resource.RLIMIT_MEMLOCK)[1]
            cls.limits = ["prlimit", "--nofile=%d" % nofile]
            cls.extra_flags = ["--io=epoll"]
            print("install_test: RLIMIT_MEMLOCK's hard limit here is %d KiB and cannot be raised "
                  "to the unit's infinity: ExecStart runs with --io=epoll" % (hard // 1024),
                  file=sys.stderr)

    @classmethod
    def tearDownClass(cls):
        for path in reversed(cls.mounted):
            subprocess.run(["umount", path])
        if cls.root is not None:
            mounts = read("/proc/self/mountinfo")
            if cls.root in mounts:  # never delete through a mount still there
                raise AssertionError("still mounted beneath %s; not removing it" % cls.root)
            shutil.rmtree(cls.root, ignore_errors=True)

    @classmethod
    def chroot(cls, args, **kw):
        env = {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "DEBIAN_FRONTEND": "noninteractive",
               "LC_ALL": "C"}
        return run(["chroot", cls.root] + args, env=env, **kw)

    def fake_systemd(self):
        """/run/systemd/system, and systemctl and deb-systemd-invoke stubs in /usr/local/sbin
        that append their arguments to a file: what the maintainer scripts ask of systemd."""
        os.makedirs(self.path("/run/systemd/system"), exist_ok=True)
        calls = "/run/systemd-calls"
        for stub in ("systemctl", "deb-systemd-invoke"):
            with open(self.path("/usr/local/sbin/" + stub), "w") as f:
                f.write('#!/bin/sh\necho "%s $*" >> %s\n' % (stub, calls))
            os.chmod(self.path("/usr/local/sbin/" + stub), 0o755)
        return calls

    def calls(self, calls):
        """The calls written down since the last look."""
        path = self.path(calls)
        if not os.path.exists(path):
            return []
        lines = read(path).splitlines()
        os.remove(path)
        return lines

    def path(self, p):
        return os.path.join(self.root, p.lstrip("/"))

    def files(self):
        """Every path in the root but the pseudo and scratch file systems."""
        out = set()
        for dirpath, dirnames, filenames in os.walk(self.root):
            rel = os.path.relpath(dirpath, self.root)
            if rel in ("proc", "dev", "tmp", "run", "sys"):
                dirnames[:] = []
                continue
            for name in dirnames + filenames:
                out.add(os.path.normpath(os.path.join(rel, name)))
        return out

    def exec_start(self):
        """ringd.service's ExecStart= as an argv."""
        unit = read(self.path("/lib/systemd/system/ringd.service"))
        line = re.search(r"^ExecStart=(.*)$", unit, re.M).group(1)
        self.assertNotIn("$", line)  # nothing from an environment file
        return shlex.split(line)

    def start_unit(self):
        """ExecStart, as the unit's User= and Group=, with the unit's limits, on a socket passed
        the way ringd.socket passes one: systemd-socket-activate binds it and starts the command
        on the first connection. Returns (process, port, its stderr lines as they come)."""
        unit = read(self.path("/lib/systemd/system/ringd.service"))
        user = re.search(r"^User=(\S+)$", unit, re.M).group(1)
        group = re.search(r"^Group=(\S+)$", unit, re.M).group(1)
        port = free_port()
        args = self.limits + ["systemd-socket-activate", "-l", "127.0.0.1:%d" % port, "chroot",
                              "--userspec=%s:%s" % (user, group), self.root]
        args += self.exec_start() + self.extra_flags
        proc = subprocess.Popen(args, stderr=subprocess.PIPE, text=True,
                                env={"PATH": "/usr/sbin:/usr/bin:/sbin:/bin"})
        self.addCleanup(lambda: proc.poll() is None and proc.kill())
        lines = []
        reader = threading.Thread(target=lambda: lines.extend(proc.stderr), daemon=True)
        reader.start()
        proc.reader = reader
        deadline = time.time() + 20
        while not any("Listening on" in l for l in lines):
            if time.time() > deadline or proc.poll() is not None:
                self.fail("systemd-socket-activate did not listen:\n" + "".join(lines))
            time.sleep(0.05)
        return proc, port, lines

    def stop(self, proc, lines):
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=30)
        proc.reader.join(timeout=10)
        proc.stderr.close()
        self.assertEqual(proc.returncode, 0, "".join(lines))

    def get(self, port, path="/"):
        with urllib.request.urlopen("http://127.0.0.1:%d%s" % (port, path), timeout=10) as r:
            return r.status, dict(r.headers), r.read()

    def curl(self, port, path="/"):
        out = run(["curl", "-sS", "-o", "-", "-w", "\n%{http_code}",
                   "http://127.0.0.1:%d%s" % (port, path)], timeout=30)
        body, _, code = out.stdout.rpartition("\n")
        return int(code), body

    def test_install_serve_upgrade_purge(self):
        before = self.files()
        shutil.copy(DEB, self.path("/tmp/ringd.deb"))
        self.chroot(["apt-get", "install", "-y", "-q", "/tmp/ringd.deb"], timeout=600)
        version = self.chroot(["dpkg-query", "-W", "-f=${Version}", "ringd"]).stdout

        # The user and group, a system account that cannot log in.
        pw = self.chroot(["getent", "passwd", "ringd"]).stdout.strip().split(":")
        self.assertLess(int(pw[2]), 1000, pw)
        self.assertEqual(pw[5], "/nonexistent")
        self.assertTrue(pw[6].endswith("nologin"), pw)
        self.chroot(["getent", "group", "ringd"])
        # Enabled without systemd: the links exist, nothing was started.
        self.assertEqual(os.readlink(self.path("/etc/systemd/system/sockets.target.wants/ringd.socket")),
                         "/lib/systemd/system/ringd.socket")
        self.assertTrue(os.path.islink(self.path("/etc/systemd/system/multi-user.target.wants/ringd.service")))
        exe = self.path("/usr/sbin/ringd")
        for pid in os.listdir("/proc"):
            if pid.isdigit():
                try:
                    self.assertNotEqual(os.readlink("/proc/%s/exe" % pid), exe)
                except OSError:
                    pass
        st = os.stat(self.path("/var/log/ringd"))
        self.assertEqual(oct(st.st_mode & 0o7777), "0o750")
        # The version: the package's, and the commit.
        line = self.chroot(["ringd", "--version"]).stdout.strip()
        m = re.fullmatch(r"ringd (\S+) \(commit (\S+)\)", line)
        self.assertIsNotNone(m, line)
        self.assertEqual(version, m.group(1) if m.group(1)[0].isdigit() else "0~" + m.group(1))
        self.assertTrue(os.path.exists(self.path("/usr/share/man/man8/ringd.8.gz")))

        # The unit's ExecStart serves the default page, as the ringd user.
        proc, port, lines = self.start_unit()
        try:
            code, body = self.curl(port)  # the first connection starts ringd; it answers it
            self.assertEqual(code, 200, "".join(lines))
            self.assertEqual(body, read(self.path("/usr/share/ringd/www/index.html")))
            self.assertIn("ringd works", body)
        finally:
            self.stop(proc, lines)
        # The start-up line names the version and the commit.
        serving = [l for l in lines if l.startswith("ringd: serving ")]
        self.assertEqual(len(serving), 1, lines)
        self.assertTrue(serving[0].rstrip().endswith("(ringd %s, commit %s)" % m.groups()), serving)
        self.assertTrue(any("listening on 1 socket passed by systemd" in l for l in lines), lines)
        log = self.path("/var/log/ringd/access.log")
        self.assertIn('"GET / HTTP/1.1" 200', read(log))
        self.assertEqual(self.chroot(["stat", "-c", "%U", "/var/log/ringd/access.log"]).stdout.strip(),
                         "ringd")

        # A misspelled flag in ringd.conf stops the start: the file, the line, the flag.
        conf = self.path("/etc/ringd/ringd.conf")
        original = read(conf)
        with open(conf, "a") as f:
            f.write("--shard=2\n")
        bad_line = len(original.splitlines()) + 1
        out = subprocess.run(["chroot", "--userspec=ringd:ringd", self.root] + self.exec_start(),
                             capture_output=True, text=True, timeout=30)
        self.assertEqual(out.returncode, 2, out.stderr)
        self.assertEqual(out.stderr.strip(), "ringd: /etc/ringd/ringd.conf:%d: unknown flag --shard "
                         "(see --help)" % bad_line)

        # An edit, then an upgrade to a later package: the edit stays, and is what ringd reads.
        edited = original + "\n# edited by the operator\n--default-cache-control=no-cache\n"
        with open(conf, "w") as f:
            f.write(edited)

        def new_page(work):
            with open(os.path.join(work, "usr/share/ringd/www/index.html"), "a") as f:
                f.write("<!-- the upgrade -->\n")
        repack(DEB, version + "+upgrade1", self.path("/tmp/ringd-upgrade.deb"), new_page)
        # From here on the maintainer scripts see a running systemd (/run/systemd/system) whose
        # systemctl and deb-systemd-invoke only write down what they are asked.
        calls = self.fake_systemd()
        out = self.chroot(["apt-get", "install", "-y", "-q", STUBS_FIRST, "/tmp/ringd-upgrade.deb"],
                          timeout=600)
        # The upgrade restarts the service only: ringd.socket keeps its sockets, none refused.
        self.assertEqual(self.calls(calls), ["systemctl --system daemon-reload",
                                             "deb-systemd-invoke restart ringd.service"])
        self.assertEqual(self.chroot(["dpkg-query", "-W", "-f=${Version}", "ringd"]).stdout,
                         version + "+upgrade1")
        self.assertEqual(read(conf), edited)
        self.assertEqual(glob.glob(conf + ".dpkg-*") + glob.glob(conf + ".ucf-*"), [], out.stdout)
        self.assertEqual(self.chroot(["getent", "passwd", "ringd"]).stdout.strip().split(":"), pw)
        proc, port, lines = self.start_unit()
        try:
            status, headers, body = self.get(port)
            self.assertEqual(status, 200)
            self.assertIn(b"the upgrade", body)
            self.assertEqual(headers.get("Cache-Control"), "no-cache")  # the edited conf
        finally:
            self.stop(proc, lines)

        # Purge (and the dependencies it pulled in): nothing left but what policy allows.
        self.chroot(["apt-get", "purge", "-y", "-q", STUBS_FIRST, "ringd"], timeout=300)
        # Removal stops the units (ringd-https.socket too, which an administrator may have
        # enabled); the rest are daemon-reloads (ours and deb-systemd-helper's).
        purge_calls = self.calls(calls)
        self.assertEqual(purge_calls[0], "deb-systemd-invoke stop ringd.service ringd.socket ringd-https.socket")
        self.assertLessEqual(set(purge_calls[1:]), {"systemctl --system daemon-reload",
                                                    "systemctl daemon-reload"}, purge_calls)
        for stub in ("systemctl", "deb-systemd-invoke"):
            os.remove(self.path("/usr/local/sbin/" + stub))
        self.chroot(["apt-get", "autoremove", "--purge", "-y", "-q"], timeout=300)
        self.assertNotEqual(self.chroot(["getent", "passwd", "ringd"], check=False).returncode, 0)
        self.assertNotEqual(self.chroot(["getent", "group", "ringd"], check=False).returncode, 0)
        after = self.files()
        allowed = sorted(p for p in after - before
                         if any(re.fullmatch(a, p) for a in ALLOWED_AFTER_PURGE))
        print("install_test: new after the purge, as policy allows:\n  " + "\n  ".join(allowed),
              file=sys.stderr)
        left = sorted(p for p in after - before
                      if not any(re.fullmatch(a, p) for a in ALLOWED_AFTER_PURGE))
        self.assertEqual(left, [])
        gone = sorted(p for p in before - after
                      if not any(re.fullmatch(a, p) for a in ALLOWED_AFTER_PURGE))
        self.assertEqual(gone, [])


if __name__ == "__main__":
    if not DEB:
        sys.exit("usage: install_test.py RINGD_DEB")
    unittest.main(verbosity=2)
