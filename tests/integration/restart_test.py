"""A restart without refused connections or failed requests: a new ringd joins the listening
address with --takeover while the old one serves, then the old one gets SIGTERM. Runs in a
network namespace of its own, where net.ipv4.tcp_migrate_req=1 moves the connections still
queued on the old listeners to the new ones (the sysctl is per namespace: the host's is left
alone)."""
import ctypes
import os
import shutil
import signal
import socket
import subprocess
import threading
import unittest

from ringd_harness import BackendTestCase, Server, make_docroot, wait_for

CLONE_NEWNET = 0x40000000


def enter_own_network_namespace():
    """Moves this process into a new network namespace with loopback up; None, or why not."""
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.unshare(CLONE_NEWNET) != 0:
        return "unshare(CLONE_NEWNET): %s" % os.strerror(ctypes.get_errno())
    up = subprocess.run(["ip", "link", "set", "lo", "up"], capture_output=True, text=True)
    if up.returncode != 0:
        return "ip link set lo up: " + up.stderr.strip()
    with open("/proc/sys/net/ipv4/tcp_migrate_req", "w") as f:
        f.write("1")
    return None


class Load:
    """Threads that each make one `Connection: close` request after another, counting results."""

    def __init__(self, port, want, threads=4):
        self.port, self.want = port, want
        self.ok = 0
        self.failures = []
        self.stop = threading.Event()
        self.lock = threading.Lock()
        self.threads = [threading.Thread(target=self.run) for _ in range(threads)]
        for t in self.threads:
            t.start()

    def one(self):
        with socket.create_connection(("127.0.0.1", self.port), timeout=5) as s:
            s.sendall(b"GET /small.txt HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n")
            data = b""
            while True:
                chunk = s.recv(65536)
                if not chunk:
                    break
                data += chunk
        head, _, body = data.partition(b"\r\n\r\n")
        if not head.startswith(b"HTTP/1.1 200 ") or body != self.want:
            raise RuntimeError("bad response: %r" % data[:60])

    def run(self):
        while not self.stop.is_set():
            try:
                self.one()
                with self.lock:
                    self.ok += 1
            except Exception as e:  # refused, reset, timeout, short: all count
                with self.lock:
                    self.failures.append(repr(e))

    def wait_for_more(self, n, what):
        """Waits until n more requests have been made (answered or failed) from now."""
        with self.lock:
            start = self.ok + len(self.failures)
        wait_for(lambda: self.ok + len(self.failures) >= start + n, what, timeout=30)

    def finish(self):
        self.stop.set()
        for t in self.threads:
            t.join()


class RestartTest(BackendTestCase):
    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        why = enter_own_network_namespace()
        if why is not None:
            raise unittest.SkipTest("no network namespace of our own: " + why)
        cls.root, cls.files = make_docroot()

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.root, ignore_errors=True)

    def test_restart_under_load_loses_nothing(self):
        old = Server(self.root)
        load = Load(old.port, self.files["small.txt"])
        new = None
        try:
            load.wait_for_more(50, "requests to the old process")
            new = Server(self.root, "--takeover", listen="127.0.0.1:%d" % old.port)
            self.assertTrue(any("--takeover" in l and "tcp_migrate_req=1" in l for l in new.log),
                            new.log)
            load.wait_for_more(50, "requests while both listen")
            self.assertEqual(old.stop(signal.SIGTERM), 0)
            load.wait_for_more(50, "requests after the old process stopped")
        finally:
            load.finish()
            if new is not None:
                self.assertEqual(new.stop(), 0)
            if old.proc.poll() is None:
                old.stop()
        self.assertEqual(load.failures[:5], [], "%d of %d requests failed" %
                         (len(load.failures), len(load.failures) + load.ok))
        self.assertGreater(load.ok, 100)
        served_by_new = [l for l in new.log if "stopped after" in l]
        self.assertTrue(served_by_new and " 0 requests" not in served_by_new[0], new.log)

    def test_without_takeover_a_second_ringd_is_refused(self):
        old = Server(self.root)
        try:
            with self.assertRaises(RuntimeError):
                Server(self.root, listen="127.0.0.1:%d" % old.port)
        finally:
            self.assertEqual(old.stop(), 0)


if __name__ == "__main__":
    unittest.main()
