"""The configuration as an operator writes it, read by the real ringd binary:

- a flagfile quoted as a shell quotes, with comments after a '#': the served response carries
  the added header without its quotes, and / finds its index despite the comment;
- a quote left open, and a flag that takes one value given twice (in the flagfile, on the
  command line, or both): one line naming the file and line or the flag, exit status 2;
- `ringd -t` / `--check-config`: `ringd: configuration ok` and exit 0 for a configuration that
  starts (without binding: its address may be in use), each problem and exit 1 for one that
  does not (a flagfile's mistake with its file and line, a missing root, a bad certificate);
- sizes the machine cannot give (connections beyond RLIMIT_NOFILE, more shards than CPUs): a
  warning naming both numbers, at start-up and under -t, and ringd serves all the same.
"""
import os
import resource
import shutil
import subprocess
import tempfile
import unittest

from ringd_harness import BACKEND, RINGD, ROOT_FLAGS, BackendTestCase, Server, make_docroot, request


def run(*flags, timeout=30, preexec_fn=None):
    """ringd with `flags` (it is not meant to serve); the finished process."""
    return subprocess.run([RINGD] + list(flags), capture_output=True, text=True, timeout=timeout,
                          preexec_fn=preexec_fn)


def nofile(limit):
    """A preexec_fn: RLIMIT_NOFILE soft and hard at `limit` (lowering needs no privilege)."""
    return lambda: resource.setrlimit(resource.RLIMIT_NOFILE, (limit, limit))


class ConfigTestCase(BackendTestCase):
    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        cls.root, cls.files = make_docroot()
        cls.dir = tempfile.mkdtemp(prefix="ringd-config-")

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.root, ignore_errors=True)
        shutil.rmtree(cls.dir, ignore_errors=True)

    def flagfile(self, name, text):
        path = os.path.join(self.dir, name)
        with open(path, "w") as f:
            f.write(text)
        return path


class FlagfileTest(ConfigTestCase):
    def test_quotes_and_comments_read_as_a_shell_reads_them(self):
        conf = self.flagfile("quoted.conf", (
            "# ringd.conf as the docs show it\n"
            "--add-header='X-Quoted: yes'\n"
            "--add-header=\"X-Double: a \\\"b\\\"\"   # a comment after a value\n"
            "--cache-control=\"*.txt=public, max-age=60\"\n"
            "--index=index.html   # comment\n"
            "--add-header=X-Build:#42\n"))
        server = Server(self.root, "--flagfile", conf)
        try:
            r = request(server, "GET", "/small.txt")
            self.assertEqual(r.status, 200)
            self.assertEqual(r.header("X-Quoted"), "yes")
            self.assertEqual(r.header("X-Double"), 'a "b"')
            self.assertEqual(r.header("X-Build"), "#42")
            self.assertEqual(r.header("Cache-Control"), "public, max-age=60")
            # The comment is not part of --index: / serves index.html, not a 403.
            r = request(server, "GET", "/")
            self.assertEqual(r.status, 200)
            self.assertEqual(r.body, self.files["index.html"])
        finally:
            self.assertEqual(server.stop(), 0, server.log)

    def test_an_open_quote_names_the_file_and_line(self):
        conf = self.flagfile("open.conf", "--index=index.html\n--add-header='X-Quoted: yes\n")
        out = run("--root", self.root, "--io", BACKEND, "--flagfile", conf, *ROOT_FLAGS)
        self.assertEqual(out.returncode, 2, out.stderr)
        self.assertEqual(out.stderr.strip().splitlines(), [
            "ringd: %s:2: a ' quote is not closed on its line (a flag and its value are one "
            "line: --add-header='X-Frame-Options: DENY')" % conf])


class DuplicateFlagTest(ConfigTestCase):
    def test_a_single_valued_flag_given_twice_is_refused(self):
        conf = self.flagfile("root.conf", "--shards=1\n# the site\n--root=%s\n" % self.root)
        for flags, says in [
                (["--root", self.root, "--root", self.root], "--root is given twice (first on "
                 "the command line): it takes one value"),
                (["--flagfile", conf, "--root", self.root], "--root is given twice (first at "
                 "%s:3): it takes one value" % conf),
                (["--root", self.root, "--flagfile", conf], "%s:3: --root is given twice (first "
                 "on the command line): it takes one value" % conf),
                (["--flagfile", conf, "--shards=2"], "--shards is given twice (first at %s:1): "
                 "it takes one value" % conf),
        ]:
            out = run("--io", BACKEND, "--listen", "127.0.0.1:0", *(ROOT_FLAGS + flags))
            self.assertEqual(out.returncode, 2, (flags, out.stderr))
            self.assertEqual(out.stderr.strip().splitlines(), ["ringd: " + says], flags)

    def test_lists_repeat(self):
        server = Server(self.root, "--listen", "127.0.0.1:0", "--add-header", "X-A: 1",
                        "--add-header", "X-B: 2")
        try:
            r = request(server, "GET", "/small.txt")
            self.assertEqual((r.header("X-A"), r.header("X-B")), ("1", "2"))
        finally:
            self.assertEqual(server.stop(), 0, server.log)


class ConfigCheckTest(ConfigTestCase):
    def check(self, *flags, **kwargs):
        """`ringd -t` with `flags` after the tier's; (exit status, stderr lines)."""
        out = run("-t", "--io", BACKEND, *(ROOT_FLAGS + list(flags)), **kwargs)
        self.assertEqual(out.stdout, "")
        return out.returncode, out.stderr.strip().splitlines()

    def test_a_configuration_that_starts_is_ok_without_binding(self):
        # The address is in use by a ringd that serves: -t does not bind, so it is no problem.
        server = Server(self.root)
        try:
            conf = self.flagfile("good.conf", (
                "--root='%s'   # the site\n--listen=127.0.0.1:%d\n--shards=1\n"
                "--add-header='X-Frame-Options: DENY'\n" % (self.root, server.port)))
            for first in ("-t", "--check-config"):
                out = run(first, "--flagfile", conf, "--io", BACKEND, *ROOT_FLAGS)
                self.assertEqual(out.returncode, 0, out.stderr)
                self.assertEqual(out.stderr.strip().splitlines()[-1], "ringd: configuration ok")
                self.assertFalse([l for l in out.stderr.splitlines() if "serving" in l])
            self.assertEqual(request(server, "GET", "/small.txt").status, 200)
        finally:
            self.assertEqual(server.stop(), 0, server.log)

    def test_a_broken_flagfile_names_its_file_and_line(self):
        conf = self.flagfile("broken.conf", "--root=%s\n# shards\n--shard=2\n" % self.root)
        rc, lines = self.check("--flagfile", conf)
        self.assertEqual(rc, 1, lines)
        self.assertEqual(lines, ["ringd: %s:3: unknown flag --shard (see --help)" % conf,
                                 "ringd: configuration test failed"])
        conf = self.flagfile("twice.conf", "--root=%s\n--root=%s\n" % (self.root, self.root))
        rc, lines = self.check("--flagfile", conf)
        self.assertEqual(rc, 1, lines)
        self.assertEqual(lines[0], "ringd: %s:2: --root is given twice (first at %s:1): it "
                                   "takes one value" % (conf, conf))

    def test_a_missing_root_fails(self):
        missing = os.path.join(self.dir, "no-such-root")
        rc, lines = self.check("--root", missing)
        self.assertEqual(rc, 1, lines)
        self.assertEqual(lines, ["ringd: --root: cannot use '%s': No such file or directory" %
                                 missing, "ringd: configuration test failed"])

    def test_every_bad_file_is_named(self):
        cert = self.flagfile("bad.crt", "not a certificate\n")
        key = self.flagfile("bad.key", "not a key\n")
        mime = os.path.join(self.dir, "no-such-mime.types")
        log = os.path.join(self.dir, "no-such-dir", "access.log")
        rc, lines = self.check("--root", self.root, "--listen-tls", "127.0.0.1:0", "--tls-cert",
                               cert, "--tls-key", key, "--mime-types", mime, "--error-page",
                               "404=/no-such-404.html", "--access-log", log)
        self.assertEqual(rc, 1, lines)
        self.assertEqual(lines[-1], "ringd: configuration test failed")
        self.assertTrue([l for l in lines if l.startswith("ringd: --tls-cert") and cert in l],
                        lines)
        self.assertIn("ringd: --mime-types: cannot read '%s': No such file or directory" % mime,
                      lines)
        self.assertIn("ringd: --access-log: cannot open '%s' for appending: No such file or "
                      "directory" % log, lines)
        # A page that cannot be read is served as the built-in one: a warning, said all the same.
        self.assertIn("ringd: --error-page 404=/no-such-404.html: cannot read '%s/no-such-404.html'"
                      ": No such file or directory; the built-in page is served instead" %
                      self.root, lines)


class SizingWarningTest(ConfigTestCase):
    def test_connections_beyond_the_descriptor_limit_and_shards_beyond_the_cpus(self):
        cpus = len(os.sched_getaffinity(0))
        shards = cpus + 1
        # 3000 connections a shard fit one shard's file table under 8192 descriptors (the bypass
        # tier's needs 4192 more), but not every shard's connections together.
        flags = ["--shards", str(shards), "--max-connections", "3000"]
        connections = "--max-connections=3000 on %d shards is up to %d connections (32 more per " \
                      "shard on their way out), more than the open-file limit of 8192 " \
                      "(RLIMIT_NOFILE)" % (shards, shards * 3032)
        too_many = "--shards=%d is more than the %d CPU%s this process may run on" % (
            shards, cpus, "" if cpus == 1 else "s")
        out = run("-t", "--root", self.root, "--io", BACKEND, *(ROOT_FLAGS + flags),
                  preexec_fn=nofile(8192))
        self.assertEqual(out.returncode, 0, out.stderr)
        lines = out.stderr.strip().splitlines()
        self.assertEqual(lines[-1], "ringd: configuration ok")
        self.assertTrue([l for l in lines if l.startswith("ringd: " + connections)], lines)
        self.assertTrue([l for l in lines if l.startswith("ringd: " + too_many)], lines)
        # Warnings, not errors: ringd says them and serves.
        server = Server(self.root, *flags, preexec_fn=nofile(8192))
        try:
            self.assertTrue([l for l in server.log if l.startswith("ringd: " + connections)],
                            server.log)
            self.assertTrue([l for l in server.log if l.startswith("ringd: " + too_many)],
                            server.log)
            self.assertEqual(request(server, "GET", "/small.txt").status, 200)
        finally:
            self.assertEqual(server.stop(), 0, server.log)

    def test_sizes_that_fit_say_nothing(self):
        out = run("-t", "--root", self.root, "--io", BACKEND, "--shards", "1",
                  "--max-connections", "1000", *ROOT_FLAGS, preexec_fn=nofile(8192))
        self.assertEqual(out.returncode, 0, out.stderr)
        self.assertEqual(out.stderr.strip().splitlines(), ["ringd: configuration ok"])


if __name__ == "__main__":
    unittest.main()
