"""Medians, ranges and ratios over repeated runs."""
import unittest

from harness.result import Result, failed
from harness.stats import ratio, summarize, summarize_runs


class StatsTest(unittest.TestCase):
    def test_summarize(self):
        self.assertEqual(summarize([3, 1, 2]), {"median": 2, "min": 1, "max": 3, "n": 3})
        self.assertEqual(summarize([4, 1])["median"], 2.5)
        self.assertEqual(summarize([None, 5, None]), {"median": 5, "min": 5, "max": 5, "n": 1})
        self.assertIsNone(summarize([None, None]))
        self.assertIsNone(summarize([]))

    def test_failed_runs_count_as_zero_rate_but_have_no_latency(self):
        ok = Result(requests=10, rps=100.0)
        ok.latency_us.p99 = 800
        s = summarize_runs([ok, failed("stopped"), ok])
        self.assertEqual(s["rps"], {"median": 100.0, "min": 0, "max": 100.0, "n": 3})
        self.assertEqual(s["p99_us"], {"median": 800, "min": 800, "max": 800, "n": 2})
        self.assertEqual(s["errors"]["max"], 1)
        self.assertIsNone(s["threads"])

    def test_ratio(self):
        self.assertEqual(ratio({"median": 3.0}, {"median": 2.0}), 1.5)
        self.assertEqual(ratio({"median": 0}, {"median": 2.0}), 0)
        self.assertIsNone(ratio({"median": 3.0}, {"median": 0}))
        self.assertIsNone(ratio(None, {"median": 2.0}))
        self.assertIsNone(ratio({"median": 3.0}, None))


if __name__ == "__main__":
    unittest.main()
