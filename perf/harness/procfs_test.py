"""What the harness reads from /proc and perf stat, on this test's own process."""
import os
import threading
import unittest

from harness import procfs


class ProcfsTest(unittest.TestCase):
    def test_own_process(self):
        pids = procfs.proc_tree(os.getpid())
        self.assertEqual(pids[0], os.getpid())
        self.assertGreater(procfs.rss_kib(pids), 0)
        self.assertGreaterEqual(procfs.peak_rss_kib(pids), procfs.rss_kib(pids))
        self.assertGreaterEqual(procfs.cpu_ticks(pids), 0)

    def test_threads_and_context_switches(self):
        pids = [os.getpid()]
        before = procfs.ctx_switches(pids)
        stop = threading.Event()
        t = threading.Thread(target=stop.wait)
        t.start()
        try:
            self.assertGreaterEqual(procfs.threads(pids), 2)
        finally:
            stop.set()
            t.join()
        self.assertGreater(procfs.ctx_switches(pids), before)

    def test_gone_process_counts_nothing(self):
        self.assertEqual(procfs.cpu_ticks([2 ** 22 + 1]), 0)
        self.assertEqual(procfs.threads([2 ** 22 + 1]), 0)

    def test_parse_perf_stat(self):
        self.assertEqual(procfs.parse_perf_stat(
            "# started on Mon Nov 30 16:42:45 2026\n\n1581,,raw_syscalls:sys_enter,1581122,100.00,,\n"), 1581)
        self.assertIsNone(procfs.parse_perf_stat("<not supported>,,raw_syscalls:sys_enter,0,100.00,,\n"))
        self.assertIsNone(procfs.parse_perf_stat(""))


if __name__ == "__main__":
    unittest.main()
