"""The longtail scenario's logic that needs no root: the data set plan, the ideal hit ratio, the
load it drives, and the disk and size-class figures of a Result."""
import os
import shutil
import tempfile
import unittest

from harness import report
from harness.longtail import (DATASETS, PATHS_FILE, SIZE_CLASSES, SIZE_MIX, DataSet, build_tree, expected_hit_ratio,
                              plan)
from harness.result import Result, parse_ringd_load
from harness.scenarios import SCENARIOS, Column


class PlanTest(unittest.TestCase):
    def test_same_dataset_same_files_in_a_popularity_order_that_is_not_by_name(self):
        ds = DataSet(files=2000, cache_mib=16)
        files = plan(ds)
        self.assertEqual(files, plan(ds))
        self.assertNotEqual(files, plan(DataSet(files=2000, cache_mib=16, seed=2)))
        self.assertEqual(len({p for p, _ in files}), 2000)
        self.assertNotEqual([p for p, _ in files], sorted(p for p, _ in files))

    def test_sizes_stay_in_their_class_and_the_mix_holds(self):
        files = plan(DataSet(files=20000, cache_mib=16))
        bounds = {m[0]: (m[4], m[5]) for m in SIZE_MIX}
        counts = {m[0]: 0 for m in SIZE_MIX}
        for path, size in files:
            kind = path.split("/")[1]
            counts[kind] += 1
            lo, hi = bounds[kind]
            self.assertTrue(lo <= size <= hi, (path, size))
        for name, share, *_ in SIZE_MIX:
            self.assertAlmostEqual(counts[name] / len(files), share, delta=0.02)

    def test_full_dataset_is_several_times_its_cache(self):
        for ds in DATASETS.values():
            total = sum(z for _, z in plan(ds))
            self.assertGreater(total, 4 * ds.cache_mib << 20)

    def test_ideal_hit_ratio(self):
        self.assertAlmostEqual(expected_hit_ratio([10] * 10, 0, 50), 0.5)
        self.assertAlmostEqual(expected_hit_ratio([10] * 10, 1.0, 1000), 1.0)
        self.assertGreater(expected_hit_ratio([10] * 100, 1.0, 100), 0.5)  # 10% of the files


class ManyFilesTest(unittest.TestCase):
    def test_the_tree_holds_the_plan_and_is_written_once_per_data_set(self):
        tmp = tempfile.mkdtemp()
        try:
            root, ds, logged = os.path.join(tmp, "many"), DataSet(files=40, cache_mib=1), []
            build_tree(root, ds, logged.append)
            files = plan(ds)
            for path, size in files:
                self.assertEqual(os.path.getsize(root + path), size, path)
            with open(os.path.join(root, PATHS_FILE)) as f:
                self.assertEqual(f.read().split(), [p for p, _ in files])
            build_tree(root, ds, logged.append)
            self.assertEqual(len(logged), 1, "the same data set is not written again")
            build_tree(root, DataSet(files=40, cache_mib=1, seed=2), logged.append)
            self.assertEqual(len(logged), 2, "another one is")
        finally:
            shutil.rmtree(tmp)

    def test_many_files_is_opt_in_and_drives_zipf_over_the_quick_set(self):
        s = SCENARIOS["many-files"]
        self.assertTrue(s.opt_in)
        cmd = " ".join(s.load.command("ringd-load", 9, "/d", 5, "0"))
        self.assertIn("--paths-file /d/paths-longtail.txt --zipf 0.8", cmd)
        self.assertEqual(s.load.connections, 128)


class LoadAndFiguresTest(unittest.TestCase):
    def test_both_profiles_are_opt_in_and_drive_zipf_with_size_classes(self):
        for name in ("longtail-nvme", "longtail-hdd"):
            s = SCENARIOS[name]
            self.assertTrue(s.opt_in)
            cmd = " ".join(s.load.command("ringd-load", 9, "/d", 5, "0"))
            self.assertIn("--paths-file /d/paths-longtail.txt --zipf 0.8 --size-classes 16384,131072,1048576", cmd)
            self.assertGreaterEqual(s.load.connections, 100)
        self.assertFalse(SCENARIOS["mixed"].opt_in)

    def test_size_classes_and_disk_figures(self):
        out = ('{"requests": 100, "seconds": 2, "rps": 50, "bytes": 4000, "bytes_per_s": 2000, '
               '"latency_us": {"mean": 1500, "p50": 900, "p99": 9000}, "latency_by_size_us": ['
               '{"below": 16384, "count": 60, "p50": 100, "p99": 400}, {"below": 131072, "count": 0, "p50": 0, "p99": 0},'
               ' {"below": 1048576, "count": 30, "p50": 500, "p99": 900}, {"below": 0, "count": 10, "p50": 7000, "p99": 9000}],'
               ' "errors": {}, "status": {"200": 100}}')
        r = parse_ringd_load(out)
        self.assertEqual(len(r.latency_by_size_us), len(SIZE_CLASSES) + 1)
        r.disk_read_bytes = 1000
        f = r.figures()
        self.assertEqual((f["p50_class0_us"], f["p99_class3_us"], f["share_class2"]), (100, 9000, 0.3))
        self.assertIsNone(f["p99_class1_us"])  # no response in that class: no figure, not 0
        self.assertAlmostEqual(f["read_amplification"], 0.25)
        self.assertAlmostEqual(f["page_cache_hit_ratio"], 0.75)
        self.assertAlmostEqual(f["disk_bytes_per_s"], 500)
        self.assertEqual(f["mean_us"], 1500)
        r.disk_read_bytes = 9000  # read-ahead past what was served: a hit ratio of 0, not negative
        self.assertEqual(r.figures()["page_cache_hit_ratio"], 0)
        back = Result.from_dict(r.to_dict())
        self.assertEqual(back.latency_by_size_us, r.latency_by_size_us)
        self.assertEqual(back.disk_read_bytes, 9000)
        self.assertNotIn("read_amplification", Result().figures())

    def test_a_pair_column(self):
        c = Column("p50 / p99", "a", "%.1f", 1000, key2="b")
        self.assertEqual(report._cell({"a": {"median": 1500}, "b": {"median": 25000}}, c), "1.5 / 25.0")
        self.assertEqual(report._cell({"a": None, "b": {"median": 2000}}, c), "- / 2.0")
        self.assertEqual(report._cell({}, c), "")


if __name__ == "__main__":
    unittest.main()
