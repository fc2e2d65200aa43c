"""The configuration as an operator writes it, read by the real ringd binary:

- a flagfile quoted as a shell quotes, with comments after a '#': the served response carries
  the added header without its quotes, and / finds its index despite the comment;
- a quote left open, and a flag that takes one value given twice (in the flagfile, on the
  command line, or both): one line naming the file and line or the flag, exit status 2.
"""
import os
import shutil
import subprocess
import tempfile
import unittest

from ringd_harness import BACKEND, RINGD, ROOT_FLAGS, BackendTestCase, Server, make_docroot, request


def run(*flags, timeout=30):
    """ringd with `flags` (it is not meant to serve); the finished process."""
    return subprocess.run([RINGD] + list(flags), capture_output=True, text=True, timeout=timeout)


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


if __name__ == "__main__":
    unittest.main()
