"""The slow disk's pieces that need no root: cgroup detection and files written (on a fake cgroup
tree), the in-cgroup prefix, block stats, and the teardown order."""
import os
import shutil
import subprocess
import tempfile
import unittest

from harness.slowdisk import PROFILES, Cgroups, Undo, Unavailable, parse_block_stat


def touch(path, text=""):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        f.write(text)


def read(path):
    with open(path) as f:
        return f.read()


class CgroupsTest(unittest.TestCase):
    def setUp(self):
        self.root = tempfile.mkdtemp()
        self.addCleanup(shutil.rmtree, self.root)

    def v1_tree(self):
        touch(os.path.join(self.root, "blkio", "blkio.throttle.read_bps_device"))
        touch(os.path.join(self.root, "memory", "memory.limit_in_bytes"))
        os.makedirs(os.path.join(self.root, "memory", "jail", "me"))

    def test_v1_goes_under_the_processes_own_cgroups(self):
        self.v1_tree()
        version, parents = Cgroups.detect(self.root, "7:blkio:/\n4:memory:/jail/me\n0::/\n")
        self.assertEqual(version, "v1")
        self.assertEqual(parents, {"io": os.path.join(self.root, "blkio", ""),
                                   "memory": os.path.join(self.root, "memory", "jail/me")})

    def test_v1_create_writes_throttle_and_limit_and_undo_removes(self):
        self.v1_tree()
        undo = Undo()
        cg = Cgroups.create("t", "7:3", PROFILES["hdd"], 1 << 29, undo, self.root, "7:blkio:/\n4:memory:/\n")
        io, mem = os.path.join(self.root, "blkio", "t"), os.path.join(self.root, "memory", "t")
        self.assertEqual(read(os.path.join(io, "blkio.throttle.read_bps_device")), "7:3 150000000")
        self.assertEqual(read(os.path.join(io, "blkio.throttle.read_iops_device")), "7:3 150")
        self.assertEqual(read(os.path.join(mem, "memory.limit_in_bytes")), str(1 << 29))
        cg.set_memory_limit(12345)
        self.assertEqual(read(os.path.join(mem, "memory.limit_in_bytes")), "12345")
        cg.throttle_reads(None)  # lifted: v1 removes a device's rule with 0
        self.assertEqual(read(os.path.join(io, "blkio.throttle.read_bps_device")), "7:3 0")
        self.assertEqual(read(os.path.join(io, "blkio.throttle.read_iops_device")), "7:3 0")
        cg.throttle_reads(PROFILES["nvme"])
        self.assertEqual(read(os.path.join(io, "blkio.throttle.read_bps_device")), "7:3 1000000000")
        self.assertEqual(read(os.path.join(io, "blkio.throttle.read_iops_device")), "7:3 50000")
        touch(os.path.join(mem, "memory.stat"), "cache 4096\nrss 8192\n")
        self.assertEqual(cg.page_cache_bytes(), 4096)
        self.assertEqual(cg.procs_files(), [os.path.join(io, "cgroup.procs"), os.path.join(mem, "cgroup.procs")])
        for d in (io, mem):  # a real cgroup folder empties itself; a plain one must be emptied here
            for f in os.listdir(d):
                os.remove(os.path.join(d, f))
        self.assertEqual(undo.run(), [])
        self.assertFalse(os.path.exists(io) or os.path.exists(mem))

    def test_v2_needs_io_and_memory_controllers(self):
        touch(os.path.join(self.root, "unified", "cgroup.controllers"), "hugetlb\n")
        with self.assertRaises(Unavailable):
            Cgroups.detect(self.root, "0::/\n")
        touch(os.path.join(self.root, "unified", "cgroup.controllers"), "cpu io memory\n")
        undo = Undo()
        cg = Cgroups.create("t", "7:0", PROFILES["nvme"], 1 << 30, undo, self.root, "0::/\n")
        d = os.path.join(self.root, "unified", "t")
        self.assertEqual(cg.version, "v2")
        self.assertEqual(read(os.path.join(self.root, "unified", "cgroup.subtree_control")), "+io +memory")
        self.assertEqual(read(os.path.join(d, "io.max")), "7:0 rbps=1000000000 riops=50000")
        self.assertEqual(read(os.path.join(d, "memory.max")), str(1 << 30))
        cg.throttle_reads(None)
        self.assertEqual(read(os.path.join(d, "io.max")), "7:0 rbps=max riops=max")
        touch(os.path.join(d, "memory.stat"), "anon 1\nfile 777\n")
        self.assertEqual(cg.page_cache_bytes(), 777)
        self.assertEqual(len(cg.procs_files()), 1)

    def test_nothing_usable_is_a_reason(self):
        with self.assertRaises(Unavailable) as e:
            Cgroups.detect(self.root, "0::/\n")
        self.assertIn("cgroup", str(e.exception))

    def test_prefix_moves_itself_then_execs(self):
        cg = Cgroups("v1", {"io": os.path.join(self.root, "a"), "memory": os.path.join(self.root, "b")}, "7:0")
        os.makedirs(os.path.join(self.root, "a"))
        os.makedirs(os.path.join(self.root, "b"))
        out = subprocess.run(cg.prefix() + ["sh", "-c", "echo $$"], capture_output=True, text=True, check=True)
        pid = out.stdout.strip()
        self.assertEqual(read(os.path.join(self.root, "a", "cgroup.procs")).strip(), pid)
        self.assertEqual(read(os.path.join(self.root, "b", "cgroup.procs")).strip(), pid)
        only = cg.prefix(kinds=("memory",))
        self.assertEqual(only[4:], ["1", os.path.join(self.root, "b", "cgroup.procs")])
        bad = Cgroups("v1", {"io": os.path.join(self.root, "missing"), "memory": self.root}, "7:0")
        self.assertEqual(subprocess.run(bad.prefix(kinds=("io",)) + ["true"], stderr=subprocess.DEVNULL).returncode, 111)


class PiecesTest(unittest.TestCase):
    def test_block_stat(self):
        text = "    1187        0    75304      405        0        0        0        0        0      512      405\n"
        self.assertEqual(parse_block_stat(text), (1187, 75304 * 512))

    def test_undo_is_lifo_and_runs_every_step(self):
        done, undo = [], Undo()
        undo.push("a", lambda: done.append("a"))
        undo.push("b", lambda: 1 / 0)
        undo.push("c", lambda: done.append("c"))
        problems = undo.run()
        self.assertEqual(done, ["c", "a"])
        self.assertEqual(len(problems), 1)
        self.assertTrue(problems[0].startswith("b: "))
        self.assertEqual(undo.run(), [])

    def test_profiles(self):
        self.assertGreater(PROFILES["nvme"].read_bps, 5 * PROFILES["hdd"].read_bps)
        self.assertGreater(PROFILES["nvme"].read_iops, 100 * PROFILES["hdd"].read_iops)
        self.assertIn("150 MB/s", PROFILES["hdd"].describe())


if __name__ == "__main__":
    unittest.main()
