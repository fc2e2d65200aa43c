"""A disk that saturates never stalls hot requests, on a disk that is really slow:
ext4 on a loop device whose reads this test throttles itself (a blkio cgroup around ringd, the
perf harness's perf/harness/slowdisk.py), torn down at the end. Needs root, losetup and a cgroup
with read throttling; skipped with the reason otherwise.

- A page that is in the page cache while its read from the disk is still in flight (read-ahead
  puts pages in before it reads them) is not "cached" for the inline send path: a sendfile that
  met one would wait for the disk on the shard's thread (perf/cacheprobe prints the verdict).
- While clients download files that come from the throttled disk, a small cached file is still
  answered at once on every tier (a shard that sat in sendfile waiting for the disk would hold
  hot requests for seconds behind it).
"""
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
import unittest

from ringd_harness import BACKEND, BackendTestCase, Reader, Server, wait_for

HERE = os.path.dirname(os.path.abspath(__file__))
RUNFILES = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(RUNFILES, "perf"))
from harness.slowdisk import (MIB, Cgroups, DiskProfile, LoopDisk, Undo, Unavailable,  # noqa: E402
                              build_image, evict_tree)

CACHEPROBE = os.path.join(RUNFILES, "perf", "cacheprobe")
COLD_FILES = 6
COLD_SIZE = 8 * MIB
# Slow enough that a read waiting behind the others takes a second or more.
PROFILE = DiskProfile("test", 1000 * 1000, 10, "slow_disk_test")


def why_not():
    if os.geteuid() != 0:
        return "needs root (losetup, mount, cgroups)"
    for tool in ("losetup", "mkfs.ext4", "mount", "umount"):
        if not shutil.which(tool) and not os.path.exists("/usr/sbin/" + tool) and not os.path.exists("/sbin/" + tool):
            return "no %s" % tool
    try:
        Cgroups.detect()
    except Unavailable as e:
        return str(e)
    return None


class SlowDiskTest(BackendTestCase):
    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        reason = why_not()
        if reason:
            raise unittest.SkipTest(reason)
        os.environ["PATH"] += ":/usr/sbin:/sbin"  # losetup, mkfs (the test's PATH may lack them)
        cls.undo = Undo()
        try:
            cls._build()
        except Exception:
            cls.undo.run()
            raise

    @classmethod
    def _build(cls):
        base = "/dev/shm" if os.path.isdir("/dev/shm") else tempfile.gettempdir()
        work = tempfile.mkdtemp(prefix="ringd-slowdisk-test-", dir=base)
        cls.undo.push("rm " + work, lambda: shutil.rmtree(work))
        image = os.path.join(work, "disk.img")

        def add_index(mnt):
            with open(os.path.join(mnt, "index.html"), "wb") as f:
                f.write(b"<html>hot</html>\n" * 40)
        build_image(image, "slow_disk_test", [("/cold/file-%d.bin" % i, COLD_SIZE) for i in range(COLD_FILES)],
                    lambda m: None, add_index)
        mnt = os.path.join(work, "mnt")
        os.mkdir(mnt)
        cls.disk = LoopDisk.attach(image, mnt, cls.undo)
        cls.cg = Cgroups.create("ringd-slowdisk-test-%d" % os.getpid(), cls.disk.dev, PROFILE, 8 << 30, cls.undo)

    @classmethod
    def tearDownClass(cls):
        problems = cls.undo.run()
        if problems:
            raise RuntimeError("teardown: " + "; ".join(problems))

    def test_a_page_still_being_read_is_not_cached(self):
        path = os.path.join(self.disk.mountpoint, "cold", "file-0.bin")
        # Inside the throttled cgroup: WILLNEED puts the first MiB's pages in the cache at once,
        # and their reads wait in the throttle.
        out = subprocess.run(self.cg.prefix(kinds=("io",)) + [CACHEPROBE, "--evict", "--willneed", "--range",
                                                               str(MIB), path],
                             capture_output=True, text=True, timeout=60, check=True).stdout
        m = re.search(r"cachestat=(\d+)/(\d+).* ringd=(\w+)", out)
        self.assertIsNotNone(m, out)
        if m.group(1) != m.group(2):
            self.skipTest("this kernel did not put the read-ahead pages in the cache at once: %s" % out.strip())
        self.assertEqual(m.group(3), "no", "every page is in the cache, but being read: %s" % out)
        deadline = time.time() + 30
        while time.time() < deadline:  # once read, the same range is cached
            out = subprocess.run([CACHEPROBE, "--range", str(MIB), path], capture_output=True, text=True,
                                 timeout=60, check=True).stdout
            if "ringd=yes" in out:
                break
            time.sleep(0.2)
        self.assertIn("ringd=yes", out)

    def test_hot_requests_do_not_wait_for_cold_reads(self):
        evict_tree(os.path.join(self.disk.mountpoint, "cold"))
        server = Server(self.disk.mountpoint, "--shards", "1", wrap=self.cg.prefix())
        stop = threading.Event()
        cold_bytes = [0] * COLD_FILES  # bytes each download has received

        def download(i):
            # A client reading cold files as fast as the disk lets it, one after another.
            while not stop.is_set():
                with socket.create_connection(("127.0.0.1", server.port), timeout=60) as s:
                    s.sendall(b"GET /cold/file-%d.bin HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n" % i)
                    while not stop.is_set():
                        chunk = s.recv(1 << 16)
                        if not chunk:
                            break
                        cold_bytes[i] += len(chunk)

        threads = [threading.Thread(target=download, args=(i,), daemon=True) for i in range(COLD_FILES)]
        try:
            with server.connect() as hot:
                reader = Reader(hot)
                hot.sendall(b"GET /index.html HTTP/1.1\r\nHost: t\r\n\r\n")
                self.assertEqual(reader.read_response().status, 200)  # cached from here on
                for t in threads:
                    t.start()
                wait_for(lambda: all(cold_bytes), "every download under way", timeout=30)
                worst, end = 0.0, time.time() + 5
                while time.time() < end:
                    start = time.time()
                    hot.sendall(b"GET /index.html HTTP/1.1\r\nHost: t\r\n\r\n")
                    self.assertEqual(reader.read_response().status, 200)
                    worst = max(worst, time.time() - start)
                    time.sleep(0.01)
            self.assertGreater(sum(cold_bytes), 0, "the downloads moved nothing")
            # The disk gives each download a few hundred KB/s: a shard that waited for it would
            # hold a hot request for a second or more.
            self.assertLess(worst, 0.5, "a cached file took %.2f s while cold files were read (%s)" % (
                worst, BACKEND))
        finally:
            stop.set()
            # The measurement is over: the throttle lifted, the reads queued in it go at once, so
            # that each download sees `stop` at its next chunk and the shard's reads (a splice the
            # bypass tier has on io-wq too) end, without waiting seconds each for the slow disk.
            self.cg.throttle_reads(None)
            try:
                for t in threads:  # each closes its connection at its next chunk
                    t.join(timeout=30)
                rc = server.stop(timeout=90)
            finally:
                self.cg.throttle_reads(PROFILE)  # for the class's other tests
            self.assertEqual(rc, 0, "\n".join(server.log[-20:]))


if __name__ == "__main__":
    unittest.main()
