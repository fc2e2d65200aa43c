#!/usr/bin/python3
"""ringd(8) as tools/gen-manpage makes it from `ringd --help`: every flag --help lists, under the
topic --help puts it in, and the signals ringd handles.

    gen_manpage_test.py RINGD MANPAGE
"""
import re
import subprocess
import sys
import unittest

RINGD, MANPAGE = sys.argv[1], sys.argv[2]


class ManPageTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        with open(MANPAGE) as f:
            cls.page = f.read()
        cls.help = subprocess.run([RINGD, "--help"], capture_output=True, text=True,
                                  check=True).stdout

    def section(self, name):
        m = re.search(r"^\.SH %s\n(.*?)(?=^\.SH |\Z)" % name, self.page, re.S | re.M)
        self.assertIsNotNone(m, "no %s section" % name)
        return m.group(1)

    def test_every_flag_under_its_topic(self):
        options = self.section("OPTIONS")
        topic = None
        want = []
        for line in self.help.splitlines():
            t = re.match(r"^(\S.*):$", line)
            if t:
                topic = t.group(1)
            m = re.match(r"^  (--[a-z0-9-]+)", line)
            if m and topic:
                want.append((topic, m.group(1)))
        self.assertGreater(len(want), 80)
        got = []
        topic = None
        for line in options.splitlines():
            if line.startswith(".SS "):
                topic = line[4:]
            m = re.match(r"^\\fB(\\-\\-[a-z0-9\\-]+)\\fR", line)
            if m:
                got.append((topic, m.group(1).replace("\\-", "-")))
        self.assertEqual(got, want)

    def test_signals_as_ringd_handles_them(self):
        signals = self.section("SIGNALS")
        for name in ("SIGTERM", "SIGINT", "SIGQUIT", "SIGHUP", "SIGUSR1", "SIGUSR2"):
            self.assertIn("\\fB%s\\fR" % name, signals)
        self.assertRegex(signals, r"SIGHUP\\fR\n[^\n]*TLS certificates")
        self.assertRegex(signals, r"SIGUSR1\\fR\n[^\n]*reopen the access log")
        self.assertRegex(signals, r"SIGUSR2\\fR\n[^\n]*ignored")
        self.assertRegex(signals, r"SIGQUIT\\fR\n[^\n]*as long as it keeps moving")

    def test_version_flags(self):
        for flag in ("-v", "-V", "--version"):
            out = subprocess.run([RINGD, flag], capture_output=True, text=True, check=True).stdout
            self.assertTrue(out.startswith("ringd "), out)


if __name__ == "__main__":
    unittest.main(argv=sys.argv[:1])
