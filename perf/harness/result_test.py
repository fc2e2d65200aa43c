"""The parsers that turn wrk's, ringd-load's and h2load's output (and failures) into a Result."""
import os
import unittest

from harness.result import ParseError, Result, failed, parse_h2load, parse_ringd_load, parse_wrk

TESTDATA = os.path.join(os.path.dirname(os.path.abspath(__file__)), "testdata")


def testdata(name):
    with open(os.path.join(TESTDATA, name)) as f:
        return f.read()


class WrkTest(unittest.TestCase):
    def test_report(self):
        r = parse_wrk(testdata("wrk.txt"))
        self.assertEqual(r.generator, "wrk")
        self.assertEqual(r.requests, 152547)
        self.assertEqual(r.seconds, 1.0)
        self.assertEqual(r.rps, 152547.0)
        self.assertEqual(r.bytes, 120.93 * (1 << 20))
        self.assertEqual(r.latency_us.p50, 611.0)
        self.assertEqual(r.latency_us.p90, 762.0)
        self.assertEqual(r.latency_us.p99, 1120.0)
        self.assertIsNone(r.latency_us.p999)  # wrk has no p99.9 line: not a copy of p99
        self.assertAlmostEqual(r.latency_us.mean, 635.91)
        self.assertEqual(r.latency_us.max, 4790.0)
        self.assertEqual(r.errors, {"connect": 0, "reset": 4, "timeout": 2, "parse": 0, "eof": 0})
        self.assertEqual(r.status, {"200": 152542, "500": 5})
        self.assertEqual(r.error_count, 11)

    def test_p99_is_read_from_its_own_line(self):
        # wrk2-style lines: 99.000% and 99.900%, the 99.9 line first.
        text = testdata("wrk.txt").replace(
            "     99%    1.12ms\n", "     99.900%    9.00ms\n     99.000%    2.50ms\n")
        r = parse_wrk(text)
        self.assertEqual(r.latency_us.p99, 2500.0)
        self.assertEqual(r.latency_us.p999, 9000.0)

    def test_units(self):
        text = testdata("wrk.txt").replace("1.00s, 120.93MB", "1.50m, 2.00GB").replace("1.12ms", "1.50s")
        r = parse_wrk(text)
        self.assertEqual(r.seconds, 90.0)
        self.assertEqual(r.bytes, 2.0 * (1 << 30))
        self.assertEqual(r.latency_us.p99, 1.5e6)

    def test_no_errors(self):
        text = "\n".join(l for l in testdata("wrk.txt").splitlines() if "errors" not in l and "Non-2xx" not in l)
        r = parse_wrk(text)
        self.assertEqual(r.error_count, 0)
        self.assertEqual(r.status, {"200": 152547})

    def test_not_a_report(self):
        for text in ("", "unable to connect to 127.0.0.1:1 Connection refused\n",
                     "  0 requests in 0.00s, 0.00B read\n"):
            with self.assertRaises(ParseError):
                parse_wrk(text)


class RingdLoadTest(unittest.TestCase):
    def test_result_line(self):
        r = parse_ringd_load(testdata("ringd-load.txt"))
        self.assertEqual((r.requests, r.seconds, r.rps, r.bytes_per_s, r.idle_held),
                         (1000, 2.0, 500.0, 306000, 1000))
        self.assertEqual(r.latency_us.p99, 799)
        self.assertEqual(r.latency_us.p999, 1679)
        self.assertEqual(r.latency_small_us.p99, 799)
        self.assertEqual(r.non_2xx, 2)
        self.assertEqual(r.error_count, 3)

    def test_size_classes(self):
        line = ('{"requests": 10, "seconds": 1.0, "rps": 10.0, "bytes": 0, "bytes_per_s": 0, "idle_held": 0, '
                '"latency_us": {"mean": 50.0, "p50": 7, "p90": 9, "p99": 400, "p999": 400, "max": 400}, '
                '"latency_small_us": {"count": 9, "mean": 6.5, "p50": 7, "p99": 9, "max": 9}, '
                '"latency_large_us": {"count": 1, "mean": 400.0, "p50": 400, "p99": 400, "max": 400}}')
        r = parse_ringd_load(line)
        self.assertEqual((r.latency_small_us.mean, r.latency_small_us.max), (6.5, 9))
        self.assertEqual((r.latency_large_us.count, r.latency_large_us.p99), (1, 400))
        f = r.figures()
        self.assertEqual((f["mean_us"], f["p99_large_us"], f["mean_large_us"]), (50.0, 400, 400.0))
        back = Result.from_dict(r.to_dict())
        self.assertEqual(back.latency_large_us, r.latency_large_us)
        # Older output (no large class, no small mean) still parses; the missing figures are None.
        old = parse_ringd_load(testdata("ringd-load.txt"))
        self.assertIsNone(old.latency_large_us)
        self.assertIsNone(old.latency_small_us.mean)
        self.assertIsNone(old.figures()["p99_large_us"])

    def test_takes_the_last_json_line(self):
        text = testdata("ringd-load.txt") + "ringd-load: a warning after the result\n\n"
        self.assertEqual(parse_ringd_load(text).requests, 1000)

    def test_missing_fields_are_unknown_not_zero(self):
        r = parse_ringd_load('{"requests": 5, "seconds": 1.0, "rps": 5.0}')
        self.assertEqual(r.requests, 5)
        self.assertIsNone(r.latency_us.p99)
        self.assertIsNone(r.latency_small_us)
        self.assertEqual(r.error_count, 0)

    def test_tls_counts(self):
        # ringd-load --tls --close --tls-resume against ringd, 20 connections, 1 s.
        r = parse_ringd_load(testdata("ringd-load-tls.txt"))
        self.assertEqual((r.tls_handshakes, r.tls_resumed), (480, 460))
        self.assertEqual((r.tls_version, r.tls_cipher, r.tls_group), ("TLSv1.3", "TLS_AES_128_GCM_SHA256", "X25519"))
        self.assertEqual(r.errors["tls"], 2)  # failed handshakes are errors
        self.assertEqual(r.error_count, 2)
        f = r.figures()
        self.assertAlmostEqual(f["tls_resumed_percent"], 100 * 460 / 480)
        self.assertEqual(f["tls_handshakes_per_s"], 480.0)
        self.assertEqual(Result.from_dict(r.to_dict()), r)
        # Plaintext output has no tls object: no TLS figures, not zeros.
        plain = parse_ringd_load(testdata("ringd-load.txt"))
        self.assertIsNone(plain.tls_handshakes)
        self.assertIsNone(plain.figures()["tls_resumed_percent"])
        self.assertIsNone(plain.figures()["tls_handshakes_per_s"])
        # No handshake at all: a rate of 0, and no share of nothing.
        none = parse_ringd_load('{"requests": 0, "seconds": 1.0, "tls": {"handshakes": 0, "resumed": 0}}')
        self.assertEqual(none.figures()["tls_handshakes_per_s"], 0)
        self.assertIsNone(none.figures()["tls_resumed_percent"])

    def test_defensive(self):
        for text in (None, "", "IDLE_READY 10\n", '{"requests": 1, "rps"', "[1, 2]",
                     '{"seconds": 1}', '{"requests": "many"}', '{"requests": 1, "latency_us": {"p99": "x"}}',
                     '{"requests": 1, "tls": 3}', '{"requests": 1, "tls": {"handshakes": "x"}}',
                     '{"requests": 1, "tls": {"handshakes": 1, "version": 13}}'):
            with self.assertRaises(ParseError, msg=repr(text)):
                parse_ringd_load(text)


class H2loadTest(unittest.TestCase):
    # Captured from h2load 1.52 (Debian's nghttp2-client): h2load-tls.txt -c100 -m10 -D2
    # --warm-up-time=1s against h2o over TLS; h2load-failed.txt -n 400000 against lighttpd in
    # plaintext, killed (SIGKILL) a second in; h2load-no-h2.txt against an HTTPS port without h2.
    def test_report(self):
        r = parse_h2load(testdata("h2load-tls.txt"), "h2")
        self.assertIsNone(r.failed)
        self.assertEqual(r.generator, "h2load")
        self.assertEqual(r.requests, 142660)
        self.assertEqual(r.seconds, 2.0)  # the main duration: the warm-up's second is not counted
        self.assertEqual(r.rps, 71330.0)  # what h2load says too
        self.assertEqual(r.bytes, 91734980)
        self.assertEqual(r.bytes_per_s, 91734980 / 2)
        self.assertEqual(r.latency_us.mean, 11390.0)
        self.assertEqual(r.latency_us.max, 43020.0)
        self.assertIsNone(r.latency_us.p50)  # h2load gives no percentile: none is made up
        self.assertIsNone(r.figures()["p99_us"])
        self.assertEqual(r.status, {"2xx": 142660})
        self.assertEqual(r.error_count, 0)
        self.assertEqual((r.protocol, r.tls_version, r.tls_cipher, r.tls_group),
                         ("h2", "TLSv1.3", "TLS_AES_128_GCM_SHA256", "X25519"))
        self.assertEqual(Result.from_dict(r.to_dict()), r)

    def test_failed_requests_make_a_failed_run(self):
        r = parse_h2load(testdata("h2load-failed.txt"), "h2c")
        self.assertEqual(r.failed, "h2load: 278120 of 400000 requests failed (278120 errored, 0 timed out)")
        self.assertEqual(r.figures()["rps"], 0)  # not the 121,880 that succeeded before the kill
        self.assertEqual(r.requests, 0)
        self.assertEqual(r.error_count, 278120)
        self.assertEqual(r.protocol, "h2c")

    def test_errors_timeouts_and_statuses_each_fail_a_run(self):
        ok = testdata("h2load-tls.txt")
        line = "142660 total, 142660 started, 142660 done, 142660 succeeded, 0 failed, 0 errored, 0 timeout"
        for bad in ("142660 total, 142660 started, 142660 done, 142659 succeeded, 0 failed, 1 errored, 0 timeout",
                    "142660 total, 142660 started, 142660 done, 142659 succeeded, 0 failed, 0 errored, 1 timeout"):
            r = parse_h2load(ok.replace(line, bad), "h2")
            self.assertTrue(r.failed, bad)
            self.assertEqual(r.error_count, 1)
        r = parse_h2load(ok.replace("142660 2xx, 0 3xx, 0 4xx", "142650 2xx, 0 3xx, 10 4xx"), "h2")
        self.assertEqual(r.failed, "h2load: 10 responses were 4xx or 5xx")
        self.assertEqual(r.error_count, 10)  # the statuses, counted once

    def test_another_protocol_or_no_request_fails(self):
        r = parse_h2load(testdata("h2load-tls.txt"), "h2c")
        self.assertEqual(r.failed, "h2load: the connections spoke h2, not h2c")
        r = parse_h2load(testdata("h2load-no-h2.txt"), "h2")
        self.assertEqual(r.failed, "h2load: the connections spoke no protocol h2load could use, not h2")
        self.assertEqual(r.error_count, 1)
        no_request = testdata("h2load-tls.txt").replace(
            "142660 total, 142660 started, 142660 done, 142660 succeeded", "0 total, 0 started, 0 done, 0 succeeded")
        self.assertEqual(parse_h2load(no_request, "h2").failed, "h2load: no request was done")

    def test_defensive(self):
        for text in (None, "", "starting benchmark...\n",
                     "requests: 1 total, 1 started, 1 done, 1 succeeded, 0 failed, 0 errored, 0 timeout\n"):
            with self.assertRaises(ParseError, msg=repr(text)):
                parse_h2load(text, "h2")


class SchemaTest(unittest.TestCase):
    def test_failed(self):
        r = failed("the load generator did not finish")
        f = r.figures()
        self.assertEqual(f["rps"], 0)
        self.assertIsNone(f["p99_us"])  # no latency rather than a latency of 0
        self.assertEqual(f["errors"], 1)
        self.assertEqual(r.to_dict()["failed"], "the load generator did not finish")

    def test_round_trip(self):
        r = parse_ringd_load(testdata("ringd-load.txt"))
        r.cold = parse_wrk(testdata("wrk.txt"))
        r.threads, r.cpu_us_per_request = 3, 4.5
        d = r.to_dict()
        self.assertNotIn("packets_per_request", d)  # None is left out
        self.assertNotIn("p999", d["cold"]["latency_us"])
        self.assertEqual(Result.from_dict(d), r)

    def test_older_raw_json(self):
        d = {"requests": 10, "seconds": 1.0, "rps": 10.0, "bytes": 0, "bytes_per_s": 0, "idle_held": 0,
             "latency_us": {"mean": 1.0, "p50": 1, "p90": 2, "p99": 3, "p999": 3, "max": 4},
             "errors": {"connect": 0, "reset": 0, "timeout": 0}, "status": {"200": 10},
             "generator": "wrk", "non_2xx": 0, "something_new": 1}
        r = Result.from_dict(d)
        self.assertEqual(r.figures()["p99_us"], 3)
        self.assertEqual(r.errors["eof"], 0)


if __name__ == "__main__":
    unittest.main()
