"""Choosing the io tier: --io=auto takes the best tier whose features the probe finds, a kernel
that lacks one feature loses that feature's tier only, and forcing a tier the probe refuses is
one clear line and exit 1. `--io-mask` makes the probe report features as missing."""
import glob
import os
import shutil
import subprocess
import sys
import time
import unittest

from ringd_harness import (RINGD, ROOT_FLAGS, BackendTestCase, Server, make_docroot, request,
                           skip_for_tier, uring_usable)

BYPASS_FEATURES = ["registered file table", "accept direct", "IORING_OP_SHUTDOWN"]


class TierSelectionTest(BackendTestCase):
    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        ok, why = uring_usable("bypass")
        if not ok:
            skip_for_tier("bypass", "nothing to mask: " + why)
        cls.root, cls.files = make_docroot()

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.root, ignore_errors=True)

    def serve_and_check(self, *flags, backend="auto"):
        server = Server(self.root, *flags, backend=backend)
        try:
            line = [l for l in server.log if "io backend" in l][0]
            self.assertEqual(request(server, "GET", "/large.bin").body, self.files["large.bin"])
            self.assertEqual(request(server, "GET", "/small.txt").body, self.files["small.txt"])
            return line
        finally:
            self.assertEqual(server.stop(), 0)

    def test_auto_takes_bypass_when_everything_is_there(self):
        self.assertIn("io backend bypass: direct descriptors", self.serve_and_check())

    def test_a_missing_bypass_feature_loses_bypass_not_io_uring(self):
        for feature in BYPASS_FEATURES:
            line = self.serve_and_check("--io-mask", feature)
            self.assertIn("io backend uring:", line, feature)
            self.assertIn("not bypass: missing %s (masked)" % feature, line)

    def test_with_the_access_log_on_auto_takes_uring_which_names_clients(self):
        import tempfile
        with tempfile.TemporaryDirectory() as d:
            line = self.serve_and_check("--access-log", d + "/access.log")
            self.assertIn("io backend uring:", line)
            self.assertIn("not bypass: the access log is on", line)
            with open(d + "/access.log") as f:
                self.assertTrue(f.readline().startswith("127.0.0.1 - - ["))

    def test_a_missing_uring_feature_falls_back_to_epoll(self):
        for feature in ["IORING_OP_SPLICE", "provided buffer ring", "io_uring"]:
            line = self.serve_and_check("--io-mask", feature)
            self.assertIn("io backend epoll:", line, feature)

    def test_a_missing_optional_feature_loses_the_feature_not_the_tier(self):
        line = self.serve_and_check()
        if "incremental receive buffers" not in line:
            self.skipTest("no incremental receive here: " + line)
        self.assertIn("incremental receive buffers (1024 KiB per shard)", line)
        line = self.serve_and_check("--io-mask", "incremental receive")
        self.assertIn("io backend bypass: direct descriptors", line)
        self.assertIn("whole receive buffers (incremental receive: unavailable)", line)

    def test_bypass_sends_cached_bodies_with_sendfile_where_the_kernel_installs_fds(self):
        line = self.serve_and_check(backend="bypass")
        if "cached bodies with sendfile on an installed fd" not in line:
            self.skipTest("no IORING_OP_FIXED_FD_INSTALL here: " + line)
        for flags in [("--io-mask", "fd install"), ("--bypass-sendfile=false",)]:
            line = self.serve_and_check(*flags, backend="bypass")
            self.assertIn("io backend bypass: chosen with --io=bypass", line, flags)
            self.assertIn("; every body spliced", line, flags)

    def test_bypass_enters_its_ring_by_a_registered_index_where_the_kernel_has_one(self):
        line = self.serve_and_check(backend="bypass")
        if "; registered ring fd" not in line:
            self.skipTest("no IORING_REGISTER_RING_FDS here: " + line)
        line = self.serve_and_check("--io-mask", "registered ring fd")
        self.assertIn("io backend bypass: direct descriptors", line)
        self.assertIn("; ring entered by fd (registered ring fd: unavailable)", line)
        for tier in ["uring", "epoll"]:  # the plain tiers say nothing of it
            self.assertNotIn("registered ring", self.serve_and_check(backend=tier), tier)

    def test_closes_post_no_completion_where_the_kernel_can_skip_it(self):
        for tier in ["bypass", "uring"]:
            line = self.serve_and_check(backend=tier)
            if "; closes and cancels post no completion" not in line:
                self.skipTest("no IOSQE_CQE_SKIP_SUCCESS here: " + line)
            line = self.serve_and_check("--io-mask", "CQE skip", backend=tier)
            self.assertIn("; closes and cancels complete (CQE skip: unavailable)", line, tier)
        self.assertNotIn("CQE skip", self.serve_and_check(backend="epoll"))

    def test_batched_waits_serve_where_the_kernel_has_them_and_are_refused_elsewhere(self):
        probe = subprocess.run([RINGD, "--probe"], capture_output=True, text=True,
                               timeout=10).stdout
        if "batched waits: ok" not in probe:
            self.skipTest("no batched waits here: " + probe)
        for tier in ["bypass", "uring"]:
            line = self.serve_and_check("--batch-wait-us", "50", backend=tier)
            self.assertIn("io backend %s" % tier, line)
            self.assertIn("; batched waits 50 us", line)
        # A kernel without min_wait_usec (masked): one line, exit 1, like any missing feature.
        out = subprocess.run([RINGD, "--root", self.root, "--io-mask", "batched waits",
                              "--batch-wait-us", "50", "--listen", "127.0.0.1:0"] + ROOT_FLAGS,
                             capture_output=True, text=True, timeout=10)
        self.assertEqual(out.returncode, 1, out.stderr)
        self.assertEqual(out.stderr.strip().splitlines(),
                         ["ringd: --batch-wait-us: this kernel cannot bound a wait for "
                          "completions (io_uring_enter's min_wait_usec needs Linux 6.12; "
                          "ringd --probe says more)"])
        # Where it cannot apply: a bad flag, one line and exit 2.
        for flags, says in [(["--io", "epoll"], "needs a tier that has it (--io=bypass or --io=uring)"),
                            (["--io", "bypass", "--sqpoll"], "does not apply with --sqpoll")]:
            out = subprocess.run([RINGD, "--root", self.root, "--batch-wait-us", "50",
                                  "--listen", "127.0.0.1:0"] + flags + ROOT_FLAGS,
                                 capture_output=True, text=True, timeout=10)
            self.assertEqual(out.returncode, 2, out.stderr)
            self.assertEqual(len(out.stderr.strip().splitlines()), 1, out.stderr)
            self.assertIn(says, out.stderr)

    def sq_threads(self, expected, *flags):
        """Serves with --sqpoll and the flags; how many SQ threads (iou-sqp-PID) the process has
        once the count is `expected` or has stopped changing for 5 s. The start-up probe's own
        SQPOLL ring leaves an SQ thread that exits a moment after the ring closes (the kernel
        tears a ring down in a work queue), so one look could count it too."""
        server = Server(self.root, "--sqpoll", *flags, backend="bypass")
        try:
            self.assertEqual(request(server, "GET", "/small.txt").body, self.files["small.txt"])
            deadline = time.time() + 5
            while True:
                names = []
                for comm in glob.glob("/proc/%d/task/*/comm" % server.proc.pid):
                    try:
                        with open(comm) as f:
                            names.append(f.read().strip())
                    except OSError:
                        pass
                count = len([n for n in names if n.startswith("iou-sqp")])
                if count == expected or time.time() > deadline:
                    return count
                time.sleep(0.05)
        finally:
            self.assertEqual(server.stop(), 0)

    def test_shards_share_one_sq_thread_unless_asked_for_one_each(self):
        # Server() starts two shards: their rings attach to one SQ thread (IORING_SETUP_ATTACH_WQ).
        self.assertEqual(self.sq_threads(1), 1)
        self.assertEqual(self.sq_threads(2, "--sqpoll-per-shard"), 2)

    def test_forcing_a_refused_tier_is_one_line_and_exit_1(self):
        for tier, mask, says in [("bypass", "accept direct", "--io=bypass, but the bypass tier is "
                                  "unusable: missing accept direct (masked)"),
                                 ("uring", "IORING_OP_SPLICE", "--io=uring, but the uring tier "
                                  "is unusable: missing IORING_OP_SPLICE")]:
            out = subprocess.run([RINGD, "--root", self.root, "--io", tier, "--io-mask", mask,
                                  "--listen", "127.0.0.1:0"] + ROOT_FLAGS, capture_output=True,
                                 text=True, timeout=10)
            self.assertEqual(out.returncode, 1, out.stderr)
            lines = out.stderr.strip().splitlines()
            self.assertEqual(len(lines), 1, out.stderr)
            self.assertIn(says, lines[0])

    def test_probe_says_what_auto_would_choose(self):
        out = subprocess.run([RINGD, "--probe", "--io-mask", "accept direct"], capture_output=True,
                             text=True, timeout=10)
        self.assertEqual(out.returncode, 0)
        self.assertIn("bypass: accept direct: masked", out.stdout)
        self.assertIn("--io=auto would choose uring", out.stdout)


class RequiredTiersTest(unittest.TestCase):
    """A tier a test needs but cannot use is a skip that says why, and with RINGD_REQUIRED_TIERS
    (tools/test sets it in CI) a failure: a green run there means every tier ran. The bypass
    tier is made unusable by masking one of its features, which the harness's probe honours."""

    def run_suite_on_bypass(self, required):
        suite = ("import unittest, ringd_harness\n"
                 "class Needs(ringd_harness.BackendTestCase):\n"
                 "    def test_nothing(self): pass\n"
                 "unittest.main(verbosity=2)\n")
        env = dict(os.environ, RINGD_IO="bypass", RINGD_FLAGS="--io-mask='accept direct'",
                   RINGD_REQUIRED_TIERS=required)
        return subprocess.run([sys.executable, "-c", suite], env=env, capture_output=True,
                              text=True, timeout=60, cwd=os.path.dirname(os.path.abspath(__file__)))

    def test_a_tier_that_cannot_run_skips_with_why_unless_required(self):
        out = self.run_suite_on_bypass("")
        self.assertEqual(out.returncode, 0, out.stderr)
        self.assertIn("skipped 'bypass tier unusable on this machine: bypass tier: unusable "
                      "(missing accept direct (masked))'", out.stderr)
        out = self.run_suite_on_bypass("bypass,uring,epoll")
        self.assertNotEqual(out.returncode, 0, out.stderr)
        self.assertIn("the bypass tier is required here (RINGD_REQUIRED_TIERS=bypass,epoll,uring) "
                      "but cannot run: bypass tier: unusable (missing accept direct (masked))",
                      out.stderr)
        # A tier that is not required still skips.
        self.assertEqual(self.run_suite_on_bypass("uring,epoll").returncode, 0)


if __name__ == "__main__":
    unittest.main()
