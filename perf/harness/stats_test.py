"""Medians, ranges and ratios over repeated runs."""
import unittest

from harness.result import Result, failed
from harness.stats import by_round, ratio, round_order, summarize, summarize_runs


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

    def test_by_round(self):
        def runs(*cpu):
            return [Result(requests=10, rps=1.0, cpu_us_per_request=c) for c in cpu]
        # The machine's speed moved between rounds: the medians, taken from different rounds, say
        # 1.1x; round by round it was 0.8x, 1.1x and 0.9x.
        mine, base = runs(8.0, 22.0, 27.0), runs(10.0, 20.0, 30.0)
        self.assertAlmostEqual(ratio(summarize_runs(mine)["cpu_us_per_request"],
                                     summarize_runs(base)["cpu_us_per_request"]), 1.1)
        s = by_round(mine, base, "cpu_us_per_request")
        self.assertAlmostEqual(s["median"], 0.9)
        self.assertEqual((s["min"], s["n"]), (0.8, 3))
        self.assertAlmostEqual(s["max"], 1.1)
        # A round either side failed to measure is left out; one round is not a range.
        self.assertEqual(by_round(runs(8.0, None, 27.0), base, "cpu_us_per_request")["n"], 2)
        self.assertIsNone(by_round(runs(8.0), base, "cpu_us_per_request"))
        self.assertIsNone(by_round(mine, runs(10.0, 0, None), "cpu_us_per_request"))
        # A failed run's CPU per request is no measure of the server: its round is left out.
        self.assertEqual(by_round(mine, [base[0], failed("stopped"), base[2]], "cpu_us_per_request")["n"], 2)

    def test_round_order(self):
        servers = ("a", "b", "c")
        order = [round_order(servers, rep) for rep in range(4)]
        self.assertEqual(order, [["a", "b", "c"], ["c", "b", "a"], ["a", "b", "c"], ["c", "b", "a"]])
        # Over an even number of rounds every server's mean position is the middle.
        for name in servers:
            self.assertEqual(sum(o.index(name) for o in order) / len(order), 1.0)


if __name__ == "__main__":
    unittest.main()
