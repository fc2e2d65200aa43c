"""What the harness reads from /proc and perf stat, on this test's own process."""
import os
import threading
import time
import unittest

from harness import procfs


class ProcfsTest(unittest.TestCase):
    def test_own_process(self):
        pids = procfs.proc_tree(os.getpid())
        self.assertEqual(pids[0], os.getpid())
        self.assertGreater(procfs.rss_kib(pids), 0)
        self.assertGreaterEqual(procfs.peak_rss_kib(pids), procfs.rss_kib(pids))
        self.assertGreaterEqual(procfs.cpu_ticks(pids), 0)

    def test_anonymous_memory_grows_with_what_is_touched_not_with_files(self):
        pids = [os.getpid()]
        self.assertLess(procfs.anon_kib(pids), procfs.rss_kib(pids))  # the interpreter's text is not
        before = procfs.anon_kib(pids)
        block = bytearray(8 << 20)  # zero-filled: every page written
        self.assertGreaterEqual(procfs.anon_kib(pids) - before, 7 << 10)
        del block

    def test_a_process_settles_once_its_memory_stops_growing(self):
        blocks, stop = [], threading.Event()

        def grow():  # a shard still setting up: 1 MiB more every 50 ms for 0.4 s
            for _ in range(8):
                blocks.append(bytearray(1 << 20))
                time.sleep(0.05)
            stop.set()

        t = threading.Thread(target=grow)
        t.start()
        try:
            pids = procfs.wait_settled(lambda: [os.getpid()], interval=0.1, timeout=5)
            self.assertTrue(stop.is_set(), "settled while the memory still grew")
            self.assertEqual(pids, [os.getpid()])
        finally:
            t.join()
        start = time.monotonic()
        procfs.wait_settled(lambda: [os.getpid()], interval=0.1, timeout=5)
        self.assertLess(time.monotonic() - start, 1.0, "an idle process settles at once")

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

    def test_cpu_list(self):
        self.assertEqual(procfs.parse_cpu_list("1"), {1})
        self.assertEqual(procfs.parse_cpu_list("0-3"), {0, 1, 2, 3})
        self.assertEqual(procfs.parse_cpu_list("1,3-4"), {1, 3, 4})

    def test_core_busy_ticks(self):
        stat = ("cpu  30 0 30 300 3 0 3 9 0 0\n"
                "cpu0 10 1 20 100 5 2 3 40 7 0\n"
                "cpu1 100 0 50 900 8 4 6 70 0 0\n"
                "intr 12345\n")
        # user + nice + system + irq + softirq; idle, iowait and steal left out
        self.assertEqual(procfs.core_busy_ticks({1}, stat), 160)
        self.assertEqual(procfs.core_busy_ticks({0, 1}, stat), 196)
        self.assertIsNone(procfs.core_busy_ticks({2}, stat))
        # the machine's own: it only grows
        cpus = {0}
        before = procfs.core_busy_ticks(cpus)
        self.assertIsNotNone(before)
        self.assertGreaterEqual(procfs.core_busy_ticks(cpus), before)

    def test_parse_perf_stat(self):
        self.assertEqual(procfs.parse_perf_stat(
            "# started on Mon Nov 30 16:42:45 2026\n\n1581,,raw_syscalls:sys_enter,1581122,100.00,,\n"), 1581)
        self.assertIsNone(procfs.parse_perf_stat("<not supported>,,raw_syscalls:sys_enter,0,100.00,,\n"))
        self.assertIsNone(procfs.parse_perf_stat(""))


if __name__ == "__main__":
    unittest.main()
