"""The h2-page client's reading of one h2load run, and the Result its lines make."""
import os
import shutil
import tempfile
import unittest

from harness.h2page import h2load_command, page_line, page_paths
from harness.result import parse_h2page


def testdata(name):
    with open(os.path.join(os.path.dirname(os.path.abspath(__file__)), "testdata", name)) as f:
        return f.read()


class PageLineTest(unittest.TestCase):
    # h2load-page.txt: h2load 1.52 -t1 -c1 -m101 -n101, a page and 100 assets from ringd over h2c.
    def test_a_page_load(self):
        self.assertEqual(page_line(testdata("h2load-page.txt")), "PAGE 19710 101 5666623 h2c")

    def test_failures_fail_the_load(self):
        ok = testdata("h2load-page.txt")
        self.assertEqual(page_line(ok.replace("101 succeeded, 0 failed", "100 succeeded, 1 failed")),
            "PAGE_FAILED 1 of 101 requests failed, 0 were 4xx or 5xx")
        self.assertEqual(page_line(ok.replace("101 2xx, 0 3xx, 0 4xx", "100 2xx, 0 3xx, 1 4xx")),
                         "PAGE_FAILED 0 of 101 requests failed, 1 were 4xx or 5xx")
        self.assertEqual(page_line(ok.replace("Application protocol: h2c\n", "")),
                         "PAGE_FAILED no application protocol")
        self.assertEqual(page_line("connect failed"), "PAGE_FAILED h2load printed no summary")


class CommandTest(unittest.TestCase):
    def test_the_page_and_its_first_assets_without_siblings(self):
        root = tempfile.mkdtemp()
        try:
            os.mkdir(os.path.join(root, "assets"))
            for i in range(130):
                for suffix in ("", ".gz", ".br"):
                    open(os.path.join(root, "assets", "a%03d.js%s" % (i, suffix)), "w").close()
            paths = page_paths(root, "/index.html", "assets", 100)
        finally:
            shutil.rmtree(root)
        self.assertEqual(paths, ["/index.html"] + ["/assets/a%03d.js" % i for i in range(100)])
        cmd = h2load_command(9, True, paths)
        self.assertEqual(cmd[:5], ["h2load", "-t1", "-c1", "-m101", "-n101"])
        self.assertIn("--npn-list=h2", cmd)
        self.assertEqual(cmd[-101], "https://127.0.0.1:9/index.html")
        self.assertEqual(cmd[-1], "https://127.0.0.1:9/assets/a099.js")
        self.assertEqual(h2load_command(9, False, ["/x"]), ["h2load", "-t1", "-c1", "-m1", "-n1",
                                                           "http://127.0.0.1:9/x"])


class ParseTest(unittest.TestCase):
    def test_page_times_make_the_percentiles(self):
        lines = ["PAGE %d 101 1000 h2" % (1000 * (i + 1)) for i in range(100)] + ["PAGES 100"]
        r = parse_h2page("\n".join(lines), "h2")
        self.assertIsNone(r.failed)
        self.assertEqual(r.generator, "h2page")
        self.assertEqual(r.requests, 100)  # page loads, so CPU per request is per page
        self.assertEqual(r.seconds, sum(range(1, 101)) / 1000)
        self.assertEqual((r.latency_us.p50, r.latency_us.p99, r.latency_us.max), (50000, 99000, 100000))
        self.assertEqual(r.latency_us.mean, 50500)
        self.assertEqual(r.bytes, 100000)

    def test_a_failed_load_or_another_protocol_fails_the_run(self):
        r = parse_h2page("PAGE 1000 101 10 h2\nPAGE_FAILED 1 of 101 requests failed\nPAGES 2", "h2")
        self.assertEqual(r.failed, "h2page: 1 of 2 page loads failed: 1 of 101 requests failed")
        self.assertEqual(r.requests, 0)
        self.assertEqual(r.error_count, 1)
        r = parse_h2page("PAGE 1000 101 10 http/1.1\nPAGES 1", "h2")
        self.assertEqual(r.failed, "h2page: 1 of 1 page loads failed: a page load spoke http/1.1, not h2")


if __name__ == "__main__":
    unittest.main()
