#!/usr/bin/python3
"""What ringd's package holds, unpacked with dpkg-deb (nothing installed): the files
docs/OPERATIONS.md's "HTTPS under systemd" has an operator install (ringd-https.socket as a
unit, the two drop-ins as examples, each as in deploy/), and every link of the installed guide
resolves to a file the package installs (an absolute link from the root, a relative one from
/usr/share/doc/ringd).

    contents_test.py RINGD.DEB
"""
import gzip
import os
import re
import subprocess
import sys
import tempfile
import unittest

DEB = sys.argv.pop(1)
LINK = re.compile(r"\[([^\]]*)\]\(([^)\s]+)\)")


class ContentsTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.TemporaryDirectory()
        cls.root = cls.tmp.name
        subprocess.run(["dpkg-deb", "-x", DEB, cls.root], check=True)

    @classmethod
    def tearDownClass(cls):
        cls.tmp.cleanup()

    def path(self, p):
        return os.path.join(self.root, p.lstrip("/"))

    def assertSame(self, installed, source):
        with open(self.path(installed), "rb") as a, open(source, "rb") as b:
            self.assertEqual(a.read(), b.read(), installed)
        self.assertEqual(oct(os.stat(self.path(installed)).st_mode & 0o777), "0o644", installed)

    def test_https_under_systemd(self):
        self.assertSame("/lib/systemd/system/ringd-https.socket",
                        "deploy/systemd/ringd-https.socket")
        for dropin in ("https-socket.conf", "tls.conf"):
            self.assertSame("/usr/share/doc/ringd/examples/ringd.service.d/" + dropin,
                            "deploy/systemd/ringd.service.d/" + dropin)
        # Examples only: a drop-in in effect on install would change ringd.service for everyone.
        self.assertFalse(os.path.exists(self.path("/lib/systemd/system/ringd.service.d")))
        self.assertFalse(os.path.exists(self.path("/etc/systemd")))

    def test_every_link_of_the_installed_guide_resolves(self):
        with gzip.open(self.path("/usr/share/doc/ringd/OPERATIONS.md.gz"), "rt") as f:
            guide = f.read()
        doc_dir = self.path("/usr/share/doc/ringd")
        checked, dangling = 0, []
        for label, target in LINK.findall(guide):
            if target.startswith(("#", "http://", "https://", "mailto:")):
                continue
            path = target.split("#", 1)[0]
            where = self.path(path) if path.startswith("/") else os.path.join(doc_dir, path)
            checked += 1
            if not os.path.exists(where):
                dangling.append("[%s](%s)" % (label, target))
        self.assertEqual(dangling, [])
        self.assertGreaterEqual(checked, 5)  # the units, the drop-ins, logrotate's file


if __name__ == "__main__":
    unittest.main()
