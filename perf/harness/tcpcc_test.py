"""The congestion control a run measures under: set, put back, and put back after a killed run,
on a stand-in sysctl folder (the real one is the machine's and is never touched here)."""
import os
import signal
import subprocess
import sys
import tempfile
import textwrap
import unittest

from harness import tcpcc


class TcpccTest(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="tcpcc-test-")
        self.setting = os.path.join(self.dir, "tcp_congestion_control")
        self.record = os.path.join(self.dir, "record")
        self.write("tcp_congestion_control", "bbr")
        self.write("tcp_available_congestion_control", "reno bbr cubic")
        self.logged = []

    def write(self, name, value):
        with open(os.path.join(self.dir, name), "w") as f:
            f.write(value + "\n")

    def current(self):
        with open(self.setting) as f:
            return f.read().strip()

    def cc(self, want):
        return tcpcc.CongestionControl(want, self.logged.append, sysctl_dir=self.dir, record=self.record)

    def test_sets_for_the_run_and_puts_back(self):
        with self.cc("cubic") as cc:
            self.assertEqual(self.current(), "cubic")
            self.assertEqual(cc.used, "cubic")
            with open(self.record) as f:
                self.assertEqual(f.read().strip(), "bbr")
            self.assertIn("bbr put back", cc.describe())
        self.assertEqual(self.current(), "bbr")
        self.assertFalse(os.path.exists(self.record))

    def test_puts_back_when_the_run_raises(self):
        with self.assertRaises(KeyboardInterrupt):
            with self.cc("cubic"):
                raise KeyboardInterrupt
        self.assertEqual(self.current(), "bbr")
        self.assertFalse(os.path.exists(self.record))

    def test_machine_keeps_the_setting(self):
        with self.cc(tcpcc.MACHINE) as cc:
            self.assertEqual(self.current(), "bbr")
            self.assertFalse(os.path.exists(self.record))
            self.assertEqual(cc.describe(), "bbr (the machine's)")
        self.assertEqual(self.current(), "bbr")

    def test_the_same_as_the_machine_changes_nothing(self):
        with self.cc("bbr") as cc:
            self.assertFalse(os.path.exists(self.record))
            self.assertEqual(cc.used, "bbr")

    def test_a_killed_runs_record_is_put_back_first(self):
        self.write("tcp_congestion_control", "cubic")  # what the killed run had set
        self.write("record", "bbr")
        with self.cc("reno") as cc:
            self.assertEqual(cc.machine, "bbr")
            self.assertEqual(self.current(), "reno")
        self.assertEqual(self.current(), "bbr")
        self.assertTrue(any("killed" in m for m in self.logged))

    def test_a_refused_write_keeps_the_machines(self):
        # A read-only sysctl refuses writes even to root, as the real one does to anyone else.
        os.unlink(self.setting)
        os.symlink("/proc/sys/kernel/osrelease", self.setting)
        with open(self.setting) as f:
            machine = f.read().strip()
        with self.cc("cubic") as cc:
            self.assertEqual(cc.used, machine)
            self.assertIn("cubic not set", cc.why_not)
            self.assertFalse(os.path.exists(self.record))
        self.assertIn(cc.why_not, cc.describe())

    def test_a_procfs_setting_is_written_and_put_back(self):
        # procfs refuses fsync after a write has taken effect (EINVAL): that is not a refusal,
        # and the setting is still put back after the run. This process's own name is a procfs
        # file it may write.
        os.unlink(self.setting)
        os.symlink("/proc/self/comm", self.setting)
        with open(self.setting) as f:
            name = f.read().strip()
        try:
            with self.cc("cubic") as cc:
                self.assertIsNone(cc.why_not)
                self.assertEqual(cc.used, "cubic")
                self.assertEqual(self.current(), "cubic")
            self.assertEqual(self.current(), name)
        finally:
            with open("/proc/self/comm", "w") as f:
                f.write(name)

    def test_a_second_run_is_refused_while_one_holds_it(self):
        with self.cc("cubic"):
            with self.assertRaises(tcpcc.Busy):
                with self.cc("reno"):
                    pass
            self.assertEqual(self.current(), "cubic")
        self.assertEqual(self.current(), "bbr")

    def holder(self, unwind):
        """A child run that holds the setting, once it has said "holding"."""
        script = textwrap.dedent("""
            import sys, time
            sys.path.insert(0, %r)
            from harness import tcpcc
            if %r:
                tcpcc.unwind_on_termination()
            with tcpcc.CongestionControl("cubic", print, sysctl_dir=%r, record=%r):
                print("holding", flush=True)
                time.sleep(30)
        """ % (os.path.dirname(os.path.dirname(os.path.abspath(tcpcc.__file__))), unwind, self.dir,
               self.record))
        p = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
        self.addCleanup(p.stdout.close)
        self.addCleanup(p.kill)
        line = ""
        while "holding" not in line:
            line = p.stdout.readline()
            self.assertNotEqual(line, "", "the child ended before it held the setting")
        self.assertEqual(self.current(), "cubic")
        return p

    def test_sigterm_unwinds_and_puts_back(self):
        p = self.holder(unwind=True)
        p.send_signal(signal.SIGTERM)
        p.wait(timeout=10)
        self.assertEqual(self.current(), "bbr")
        self.assertFalse(os.path.exists(self.record))

    def test_a_signal_while_the_setting_changes_puts_it_back(self):
        # SIGTERM arrives between the record's write and the setting's: it waits, then unwinds
        # the run, and the machine's setting comes back.
        script = textwrap.dedent("""
            import os, signal, sys
            sys.path.insert(0, %r)
            from harness import tcpcc
            tcpcc.unwind_on_termination()
            write = tcpcc._write
            def write_then_signal(path, value):
                write(path, value)
                if path == %r:  # the record: the setting is written next
                    os.kill(os.getpid(), signal.SIGTERM)
            tcpcc._write = write_then_signal
            try:
                with tcpcc.CongestionControl("cubic", print, sysctl_dir=%r, record=%r):
                    print("ran", flush=True)
            except KeyboardInterrupt:
                print("interrupted", flush=True)
        """ % (os.path.dirname(os.path.dirname(os.path.abspath(tcpcc.__file__))), self.record, self.dir,
               self.record))
        out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=30)
        self.assertIn("interrupted", out.stdout, out.stderr)
        self.assertNotIn("ran", out.stdout)
        self.assertEqual(self.current(), "bbr")
        self.assertFalse(os.path.exists(self.record))

    def test_sigkill_is_mended_by_the_next_run(self):
        p = self.holder(unwind=False)
        p.kill()
        p.wait(timeout=10)
        self.assertEqual(self.current(), "cubic")  # nothing ran to put it back
        with self.cc(tcpcc.MACHINE) as cc:
            self.assertEqual(cc.machine, "bbr")
        self.assertEqual(self.current(), "bbr")
        self.assertFalse(os.path.exists(self.record))


if __name__ == "__main__":
    unittest.main()
