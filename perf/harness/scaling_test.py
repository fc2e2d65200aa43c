"""perf/scaling's plan of shard counts and its report."""
import os
import shutil
import tempfile
import unittest

from harness import scaling

TESTDATA = os.path.join(os.path.dirname(os.path.abspath(__file__)), "testdata")


class PlanTest(unittest.TestCase):
    def test_two_cpus_run_one_shard(self):
        self.assertEqual(scaling.plan(2), [(1, "1", "0", 1)])
        self.assertIn("only 1 shard", scaling.note(2))

    def test_sixteen_cpus(self):
        self.assertEqual(scaling.plan(16), [(1, "8", "0-7", 8), (2, "8-9", "0-7", 8), (4, "8-11", "0-7", 8),
                                            (8, "8-15", "0-7", 8)])
        self.assertEqual(scaling.plan(12)[-1], (4, "6-9", "0-5", 6))


class ReportTest(unittest.TestCase):
    def test_table_from_result_folders(self):
        out = tempfile.mkdtemp()
        try:
            for n in (1, 2):
                os.mkdir(os.path.join(out, "shards-%d" % n))
                shutil.copy(os.path.join(TESTDATA, "golden-raw.json"), os.path.join(out, "shards-%d" % n, "raw.json"))
            scaling.write(out, 4)
            with open(os.path.join(out, "scaling.md")) as f:
                md = f.read()
            self.assertIn("| server | 1 shard | 2 shards | x 1 shard at the most |", md)
            self.assertIn("| ringd-uring | 200000.0 | 200000.0 | 1.00 |", md)
            self.assertIn("## cold: hot p99 latency (ms)", md)
            self.assertTrue(os.path.exists(os.path.join(out, "scaling.svg")))
        finally:
            shutil.rmtree(out)


if __name__ == "__main__":
    unittest.main()
