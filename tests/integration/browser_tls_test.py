"""browser_test's tests over HTTPS: ringd serves the demo site on --listen-tls with a certificate
for localhost signed by a test CA (tls_pki.py), and Chromium trusts that one certificate through
the pin of its public key (--ignore-certificate-errors-spki-list), not by ignoring every
certificate error: without the pin, the same page is refused. The page loads from
https://localhost, renders as over plain HTTP, and the video plays and seeks with Range requests.
"""
import json
import os
import shutil
import tempfile
import unittest

import browser_test
from cdp import Chromium
from tls_pki import make_pki, spki_pin


class BrowserTlsTest(browser_test.BrowserTest):
    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        cls.pki = tempfile.mkdtemp(prefix="ringd-browser-pki-")
        make_pki(cls.pki)
        cert, key = os.path.join(cls.pki, "localhost-ec.crt"), os.path.join(cls.pki, "localhost-ec.key")
        cls.server_flags = ("--listen-tls", "127.0.0.1:0", "--tls-cert", cert, "--tls-key", key)
        cls.pin = spki_pin(cert)
        # Chromium resolves localhost to ::1 as well; ringd listens on 127.0.0.1 only.
        cls.browser_flags = ("--ignore-certificate-errors-spki-list=" + cls.pin,
                             "--host-resolver-rules=MAP localhost 127.0.0.1")

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.pki, ignore_errors=True)
        super().tearDownClass()

    def page_url(self):
        return "https://localhost:%d/" % self.server.tls_port

    def navigate(self, browser, session):
        """Page.navigate's result: errorText is set when the page could not be opened."""
        mark = len(browser.events)
        result = browser.call("Page.navigate", {"url": self.page_url()}, session, timeout=90)
        if "errorText" not in result:
            browser.wait_event("Page.loadEventFired", session, timeout=90, since=mark)
        return result

    def open_demo(self):
        result = self.navigate(self.browser, self.page)
        self.assertNotIn("errorText", result, "Chromium could not open %s (pin %s); its log:\n%s" % (
            self.page_url(), self.pin, self.browser.log()))
        r = self.browser.call("Runtime.evaluate", {"expression": "location.href"}, self.page)
        self.assertEqual(r["result"]["value"], self.page_url())
        # The document came over TLS, with the test CA's certificate for localhost.
        doc = next(p["response"] for m, p, sid in self.browser.events
                   if m == "Network.responseReceived" and sid == self.page
                   and p["response"]["url"] == self.page_url())
        details = doc.get("securityDetails")
        self.assertIsNotNone(details, "no TLS details for %s: %s" % (self.page_url(), json.dumps(doc)[:2000]))
        self.assertEqual((details["subjectName"], details["issuer"]), ("localhost", "ringd test CA"), details)
        self.assertIn(details["protocol"], ("TLS 1.3", "TLS 1.2"), details)
        self.assertEqual(doc.get("protocol"), "h2", "the page did not come over HTTP/2")

    def test_a_page_of_100_assets_comes_over_h2(self):
        # A page of 100 images of mixed sizes beside the demo: over HTTPS Chromium takes h2 by
        # ALPN, and every response (the page's own included) comes on it.
        sizes = [300 + (i * 7919) % 60000 for i in range(100)]
        body = "".join('<img src="/assets/%d.svg" width="8" height="8">' % i for i in range(100))
        os.makedirs(os.path.join(self.root, "assets"), exist_ok=True)
        for i, n in enumerate(sizes):
            with open(os.path.join(self.root, "assets", "%d.svg" % i), "w") as f:
                f.write('<svg xmlns="http://www.w3.org/2000/svg" width="8" height="8">'
                        '<!--%s--><rect width="8" height="8" fill="#%06x"/></svg>' %
                        ("x" * n, i * 2500))
        with open(os.path.join(self.root, "assets.html"), "w") as f:
            f.write("<!doctype html><title>assets</title>" + body)
        mark = len(self.browser.events)
        url = self.page_url() + "assets.html"
        self.browser.call("Page.navigate", {"url": url}, self.page, timeout=90)
        self.browser.wait_event("Page.loadEventFired", self.page, timeout=90, since=mark)
        protocols = self.browser.call("Runtime.evaluate", {
            "expression": "JSON.stringify([performance.getEntriesByType('navigation')[0]"
                          ".nextHopProtocol].concat(performance.getEntriesByType('resource')"
                          ".map(e => e.nextHopProtocol + ' ' + e.name + ' ' + e.transferSize)))",
            "returnByValue": True}, self.page)
        seen = json.loads(protocols["result"]["value"])
        self.assertEqual(seen[0], "h2", seen[:3])
        assets = [e for e in seen[1:] if "/assets/" in e]
        self.assertEqual(len(assets), 100, seen)
        self.assertEqual({e.split(" ")[0] for e in assets}, {"h2"}, assets[:5])
        got = self.responses()
        for i in range(100):
            self.assertEqual(got["/assets/%d.svg" % i][0][:2], (200, "image/svg+xml"), i)
        lines = self.access_log()
        asset_lines = [l for l in lines if l["request"].startswith("GET /assets/")]
        self.assertEqual(len(asset_lines), 100)
        self.assertTrue(all(l["request"].endswith(" HTTP/2.0") for l in asset_lines), asset_lines[:3])

    def test_without_the_pin_the_certificate_is_refused(self):
        # The same page in a browser without the pin: the test CA is no CA it knows.
        with Chromium(self.chromium, timeout=90, flags=browser_test.BrowserTest.browser_flags +
                      ("--host-resolver-rules=MAP localhost 127.0.0.1",)) as other:
            session = other.new_page()
            other.call("Page.enable", session=session)
            result = self.navigate(other, session)
        self.assertIn("ERR_CERT", result.get("errorText", ""), result)


if __name__ == "__main__":
    unittest.main()
