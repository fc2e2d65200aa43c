"""With io_uring blocked by seccomp (as Docker's default profile does), --io=auto falls back to
epoll and says why, and --io=uring refuses to start with one clear line."""
import shutil
import subprocess
import unittest

from ringd_harness import RINGD, ROOT_FLAGS, WRAP, BackendTestCase, Server, make_docroot, request


class FallbackTest(BackendTestCase):
    def test_auto_falls_back_to_epoll_and_logs_why(self):
        root, files = make_docroot()
        try:
            server = Server(root, backend="auto")
            line = [l for l in server.log if "io backend" in l][0]
            self.assertIn("io backend epoll: ", line)
            self.assertIn("; not uring: io_uring_setup: ENOSYS", line)
            self.assertIn("seccomp", line)
            self.assertEqual(request(server, "GET", "/large.bin").body, files["large.bin"])
            self.assertEqual(server.stop(), 0)
        finally:
            shutil.rmtree(root, ignore_errors=True)

    def test_forced_uring_is_a_clear_error(self):
        out = subprocess.run(WRAP + [RINGD, "--root", "/tmp", "--io=uring", "--listen", "127.0.0.1:0"] + ROOT_FLAGS,
                             capture_output=True, text=True, timeout=10)
        self.assertEqual(out.returncode, 1)
        lines = out.stderr.strip().splitlines()
        self.assertEqual(len(lines), 1, out.stderr)
        self.assertIn("--io=uring, but the uring tier is unusable: io_uring_setup: ENOSYS", lines[0])

    def test_probe_reports_it(self):
        out = subprocess.run(WRAP + [RINGD, "--probe"], capture_output=True, text=True, timeout=10)
        self.assertEqual(out.returncode, 0)
        self.assertIn("uring tier: unusable (io_uring_setup: ENOSYS", out.stdout)
        self.assertIn("epoll tier: usable", out.stdout)
        self.assertIn("--io=auto would choose epoll", out.stdout)


if __name__ == "__main__":
    unittest.main()
