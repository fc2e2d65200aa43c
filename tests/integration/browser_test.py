"""A real browser against the demo site tools/serve serves (tools/demo-site): headless Chromium,
driven over the DevTools protocol (cdp.py), loads the page from the real ringd. The page renders
(its screenshot shows the stylesheet's text and the logo's colours, not a blank page), its
assets arrive with the right types, and the demo video plays, seeks to its middle and plays on
from there, fetched with Range requests: 206s in ringd's access log.

tools/setup installs Debian's chromium; missing, the test fails (it does not skip).
tools/demo-site/demo.webm was made, byte for byte reproducibly, with Debian's ffmpeg 5.1:
  ffmpeg -f lavfi -i testsrc=duration=24:size=320x180:rate=10 -c:v libvpx -b:v 80k -g 10 \
    -keyint_min 10 -auto-alt-ref 0 -threads 1 -fflags +bitexact -flags:v +bitexact \
    -map_metadata -1 demo.webm
"""
import base64
import json
import os
import shutil
import tempfile
import unittest

from cdp import Chromium, chromium_binary, decode_png
from ringd_harness import BackendTestCase, Server, wait_for
from webm import cluster_offsets, pad_clusters

HERE = os.path.dirname(os.path.abspath(__file__))
DEMO_SITE = os.path.join(HERE, "../../tools/demo-site")

# Every wait has a deadline (generous: a loaded 2-core machine decodes slowly).
WAITS = r"""
const v = document.querySelector('video');
const sleep = ms => new Promise(r => setTimeout(r, ms));
const until = async (cond, what, ms) => {
  const end = Date.now() + ms;
  while (!cond()) {
    if (v.error) throw new Error('media error ' + v.error.code + ': ' + v.error.message);
    if (Date.now() > end) throw new Error(what + ' (currentTime ' + v.currentTime + ')');
    await sleep(50);
  }
};
"""
# Plays from the start.
PLAY = "(async () => {" + WAITS + r"""
  v.muted = true;
  await until(() => v.readyState >= 1, 'no metadata within 30 s', 30000);
  await v.play();
  await until(() => v.currentTime > 0.5, 'playback did not pass 0.5 s within 30 s', 30000);
  return JSON.stringify({duration: v.duration, start: v.currentTime});
})()
"""
# Seeks to the middle and plays on from there; draws the frame on a canvas and counts its colours.
SEEK = "(async () => {" + WAITS + r"""
  const mid = v.duration / 2;
  let seeked = false;
  v.addEventListener('seeked', () => { seeked = true; }, {once: true});
  v.currentTime = mid;
  await until(() => seeked, 'no seeked event within 30 s', 30000);
  await until(() => v.currentTime > mid + 0.5, 'playback did not go on after the seek within 30 s', 30000);
  const c = document.createElement('canvas');
  c.width = v.videoWidth; c.height = v.videoHeight;
  const g = c.getContext('2d');
  g.drawImage(v, 0, 0);
  const px = g.getImageData(0, 0, c.width, c.height).data;
  const colours = new Set();
  for (let i = 0; i < px.length; i += 4 * 97) colours.add((px[i] >> 4) + ',' + (px[i+1] >> 4) + ',' + (px[i+2] >> 4));
  return JSON.stringify({mid, after: v.currentTime, colours: colours.size, width: v.videoWidth,
                         height: v.videoHeight});
})()
"""


def near(px, rgb, tol=24):
    return all(abs(a - b) <= tol for a, b in zip(px, rgb))


class BrowserTest(BackendTestCase):
    # What BrowserTlsTest (browser_tls_test.py) changes to run the same tests over HTTPS: more
    # flags for ringd and for Chromium, and the page's address.
    server_flags = ()
    browser_flags = ()

    def page_url(self):
        return "http://127.0.0.1:%d/" % self.server.port

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        cls.chromium = chromium_binary()
        if cls.chromium is None:
            raise RuntimeError("chromium is not installed: run tools/setup")
        # A copy: the runfiles are symlinks out of the tree, which ringd does not follow.
        cls.root = tempfile.mkdtemp(prefix="ringd-browser-")
        os.chmod(cls.root, 0o755)
        for name in os.listdir(DEMO_SITE):
            shutil.copy(os.path.join(DEMO_SITE, name), os.path.join(cls.root, name))
        # The committed video is small (240 KB): the player reads all of it with its first
        # request and seeks in memory. Padded (the same frames, 2 MiB of Void after each of the
        # first 12 seconds' clusters), its 12th second starts 24 MiB in, while the player reads
        # ahead about 10 s at the file's average rate (1 MiB/s here) from where it plays: the
        # seek to the middle needs a Range request of its own.
        video = os.path.join(cls.root, "demo.webm")
        with open(video, "rb") as f:
            padded = pad_clusters(f.read(), 2 << 20, first=12)
        with open(video, "wb") as f:
            f.write(padded)
        cls.middle = cluster_offsets(padded)[11:13]  # where the seconds from 11 s and from 12 s start
        # One Chromium for the class's tests, started by the first (once a subclass has set its
        # flags); each test opens its page in a browser context of its own, as a fresh profile.
        cls.shared_browser = None

    @classmethod
    def tearDownClass(cls):
        if cls.shared_browser is not None:
            cls.shared_browser.close()
        shutil.rmtree(cls.root, ignore_errors=True)

    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="ringd-browser-log-")
        self.addCleanup(shutil.rmtree, self.dir, True)
        self.log = os.path.join(self.dir, "access.log")
        self.server = Server(self.root, "--access-log", self.log, "--access-log-format=json",
                             *self.server_flags)
        self.addCleanup(lambda: self.server.proc.poll() is not None or self.server.stop())
        if type(self).shared_browser is None:
            type(self).shared_browser = Chromium(self.chromium, timeout=90, flags=self.browser_flags)
        self.browser = type(self).shared_browser
        context = self.browser.new_context()
        self.addCleanup(self.browser.dispose_context, context)
        self.page = self.browser.new_page(context)
        for domain in ("Page", "Network", "Runtime"):
            self.browser.call(domain + ".enable", session=self.page)

    def open_demo(self):
        url = self.page_url()
        mark = len(self.browser.events)
        self.browser.call("Page.navigate", {"url": url}, self.page)
        self.browser.wait_event("Page.loadEventFired", self.page, timeout=90, since=mark)

    def responses(self):
        """path -> [(status, mimeType, Content-Type header)] of every response the page got."""
        out = {}
        for method, p, sid in self.browser.events:
            if method == "Network.responseReceived" and sid == self.page:
                r = p["response"]
                path = "/" + r["url"].split("/", 3)[3] if r["url"].count("/") >= 3 else r["url"]
                ctype = next((v for k, v in r["headers"].items() if k.lower() == "content-type"), None)
                out.setdefault(path, []).append((r["status"], r["mimeType"], ctype))
        return out

    def access_log(self):
        """ringd's access log, read after it stopped (which writes out every queued line)."""
        self.assertEqual(self.server.stop(), 0)
        with open(self.log) as f:
            return [json.loads(line) for line in f if line.strip()]

    def test_page_renders_with_its_assets(self):
        self.open_demo()
        got = self.responses()
        for path, ctype in (("/", "text/html"), ("/style.css", "text/css"), ("/ring.svg", "image/svg+xml")):
            self.assertIn(path, got, "the page did not fetch %s (got %s)" % (path, sorted(got)))
            status, mime, header = got[path][0]
            self.assertEqual((status, mime), (200, ctype), path)
            self.assertTrue(header.startswith(ctype), "%s: Content-Type %r" % (path, header))
        self.check_screenshot()
        lines = self.access_log()
        served = {(l["request"].split(" ")[1], l["status"]) for l in lines}
        for path in ("/", "/style.css", "/ring.svg"):
            self.assertIn((path, 200), served)

    def test_page_renders_with_its_text_compressed_on_the_fly(self):
        # The demo site has no precompressed siblings: with --compress ringd makes each text
        # asset's variant once, off the shard, and serves it from then on (the first requests
        # get the file as it is while the variants are made).
        self.assertEqual(self.server.stop(), 0)
        self.server = Server(self.root, "--compress", *self.server_flags)
        self.browser.call("Network.setCacheDisabled", {"cacheDisabled": True}, self.page)
        text = ("/", "/style.css", "/ring.svg")

        def compressed():
            mark = len(self.browser.events)
            self.open_demo()
            codings = {}
            for method, p, sid in self.browser.events[mark:]:
                if method == "Network.responseReceived" and sid == self.page:
                    r = p["response"]
                    if r["url"].count("/") < 3:
                        continue  # not a URL of the site
                    path = "/" + r["url"].split("/", 3)[3]
                    codings[path] = next((v for k, v in r["headers"].items()
                                          if k.lower() == "content-encoding"), None)
            return codings if all(codings.get(p) in ("br", "gzip", "zstd") for p in text) else None

        codings = wait_for(compressed, "the page's text served compressed", timeout=60)
        self.assertEqual(self.responses()["/style.css"][-1][:2], (200, "text/css"))
        self.check_screenshot()
        print("codings Chromium was sent: %s" % codings)

    def check_screenshot(self):
        """The page as drawn: its text and the logo's colours."""
        shot = self.browser.call("Page.captureScreenshot", {"format": "png"}, self.page)
        width, height, n, rows = decode_png(base64.b64decode(shot["data"]))
        pixels = [tuple(row[i:i + 3]) for row in rows for i in range(0, width * n, n)]
        counts = {"not white": sum(1 for p in pixels if p != (255, 255, 255)),
                  "text (#1d232b)": sum(1 for p in pixels if near(p, (0x1d, 0x23, 0x2b))),
                  "ring (#2b6cb0)": sum(1 for p in pixels if near(p, (0x2b, 0x6c, 0xb0))),
                  "dots (#ed8936)": sum(1 for p in pixels if near(p, (0xed, 0x89, 0x36)))}
        # The logo's ring alone covers about 2,300 pixels, its dots about 800.
        for what, least in (("not white", 5000), ("text (#1d232b)", 300), ("ring (#2b6cb0)", 1000),
                            ("dots (#ed8936)", 300)):
            self.assertGreater(counts[what], least, "screenshot %dx%d: %s" % (width, height, counts))

    def evaluate(self, script):
        r = self.browser.call("Runtime.evaluate", {"expression": script, "awaitPromise": True}, self.page,
                              timeout=150)
        self.assertNotIn("exceptionDetails", r, r.get("exceptionDetails", {}).get("exception", {}))
        return json.loads(r["result"]["value"])

    def video_ranges(self, since=0):
        """The Range header of each request for the video from event `since` on: [(first, last)]."""
        out = []
        for method, p, sid in self.browser.events[since:]:
            if method == "Network.requestWillBeSent" and sid == self.page and p["request"]["url"].endswith("/demo.webm"):
                r = next((v for k, v in p["request"]["headers"].items() if k.lower() == "range"), "")
                first, _, last = r[len("bytes="):].partition("-")
                self.assertTrue(r.startswith("bytes=") and first.isdigit(), "request without a Range: %r" % r)
                out.append((int(first), int(last) if last else None))
        return out

    def test_video_plays_and_seeks_with_range_requests(self):
        # The browser's own cache out of the way: every byte the player wants comes from ringd.
        self.browser.call("Network.setCacheDisabled", {"cacheDisabled": True}, self.page)
        self.open_demo()
        played = self.evaluate(PLAY)
        self.assertAlmostEqual(played["duration"], 24, delta=0.2)
        mark = len(self.browser.events)
        seen = self.evaluate(SEEK)
        self.assertEqual((seen["width"], seen["height"]), (320, 180))
        self.assertGreater(seen["after"], seen["mid"] + 0.5)
        self.assertLess(seen["after"], seen["mid"] + 10, "playback did not go on from the middle")
        self.assertGreater(seen["colours"], 4, "the frame after the seek is blank: %s" % seen)
        # The seek asked for the middle: a request after it starts at the 12-second cluster, or
        # a little before it (the player asks from the 32 KiB block that holds it), after the
        # 11-second one.
        after_seek = self.video_ranges(since=mark)
        self.assertTrue(any(self.middle[0] < first <= self.middle[1] for first, _ in after_seek),
                        "no Range request for the middle (bytes %d-%d) after the seek: %s, before: %s" % (
                            self.middle[0], self.middle[1], after_seek, self.video_ranges()))
        for status, mime, header in self.responses().get("/demo.webm", []):
            self.assertEqual((status, mime, header), (206, "video/webm", "video/webm"))
        # In ringd's access log: a 206 for each request that reached it (the first and the seek's
        # at least); 499 is a request the player gave up before its answer began.
        lines = [(l["status"], l["body_bytes_sent"]) for l in self.access_log()
                 if l["request"].startswith("GET /demo.webm ")]
        self.assertEqual({s for s, _ in lines} - {206, 499}, set(), lines)
        self.assertGreaterEqual(sum(1 for s, _ in lines if s == 206), 2, lines)


if __name__ == "__main__":
    unittest.main()
