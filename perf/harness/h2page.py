#!/usr/bin/python3
"""The h2-page scenarios' client: page loads over HTTP/2, one after another, for a duration. Each
is one h2load run of one connection that asks for the page and all its assets at once (every
stream opened together, as a browser does once it has read the page), so its time is the time to
the last byte of the last asset, connection and handshake included: what a first visit waits.

    h2page.py --duration-s 4 --port 8443 --tls --root DATA --page /index.html --assets assets --count 100

The assets are the first `count` files of ROOT/ASSETS by name, precompressed siblings left out
(a browser asks for the file, not its .gz). Over TLS h2 alone is offered (so a server without it
fails the load rather than falling back to HTTP/1.1), with TLS_AES_128_GCM_SHA256 and X25519 as in
the other h2 scenarios. Prints one line per page load, `PAGE <us> <requests> <bytes> <protocol>`, or `PAGE_FAILED <why>`,
then `PAGES <loads>`; perf/harness/result.py (parse_h2page) makes a Result of them.
"""
import argparse
import os
import re
import subprocess
import sys
import time

_FINISHED = re.compile(r"^finished in ([\d.]+)(us|ms|s),", re.M)
_REQUESTS = re.compile(r"^requests: (\d+) total, \d+ started, (\d+) done, (\d+) succeeded, (\d+) failed", re.M)
_CODES = re.compile(r"^status codes: (\d+) 2xx, (\d+) 3xx, (\d+) 4xx, (\d+) 5xx", re.M)
_TRAFFIC = re.compile(r"^traffic: \S+ \((\d+)\) total", re.M)
_PROTOCOL = re.compile(r"^Application protocol: (\S+)", re.M)
_UNIT_US = {"us": 1, "ms": 1e3, "s": 1e6}


def page_line(text):
    """One h2load run's output as a PAGE or PAGE_FAILED line."""
    finished, requests, codes = _FINISHED.search(text), _REQUESTS.search(text), _CODES.search(text)
    if not (finished and requests and codes):
        return "PAGE_FAILED h2load printed no summary"
    total, done, succeeded, failures = (int(g) for g in requests.groups())
    bad = int(codes.group(3)) + int(codes.group(4))
    protocol = _PROTOCOL.search(text)
    if failures or succeeded != total or bad:
        return "PAGE_FAILED %d of %d requests failed, %d were 4xx or 5xx" % (total - succeeded, total, bad)
    if not protocol:
        return "PAGE_FAILED no application protocol"
    us = float(finished.group(1)) * _UNIT_US[finished.group(2)]
    traffic = _TRAFFIC.search(text)
    return "PAGE %.0f %d %d %s" % (us, succeeded, int(traffic.group(1)) if traffic else 0, protocol.group(1))


def page_paths(root, page, assets, count):
    """The page's path, then its assets' paths."""
    names = [n for n in sorted(os.listdir(os.path.join(root, assets))) if not n.endswith((".gz", ".br", ".zst"))]
    return [page] + ["/%s/%s" % (assets, n) for n in names[:count]]


def h2load_command(port, tls, paths):
    """One page load: one connection, a stream per path, all at once."""
    cmd = ["h2load", "-t1", "-c1", "-m%d" % len(paths), "-n%d" % len(paths)]
    if tls:
        cmd += ["--npn-list=h2", "--tls13-ciphers=TLS_AES_128_GCM_SHA256", "--groups=X25519"]
    return cmd + ["%s://127.0.0.1:%d%s" % ("https" if tls else "http", port, p) for p in paths]


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--duration-s", type=float, required=True, help="start page loads for this long")
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--tls", action="store_true", help="h2 by ALPN (else h2c with prior knowledge)")
    ap.add_argument("--root", required=True, help="the data root the server serves")
    ap.add_argument("--page", default="/index.html")
    ap.add_argument("--assets", default="assets", help="a folder of the root")
    ap.add_argument("--count", type=int, default=100, help="assets per page")
    args = ap.parse_args(argv)
    load = h2load_command(args.port, args.tls, page_paths(args.root, args.page, args.assets, args.count))
    end = time.monotonic() + args.duration_s
    loads = 0
    while loads == 0 or time.monotonic() < end:
        try:
            out = subprocess.run(load, capture_output=True, text=True, timeout=60).stdout
            print(page_line(out), flush=True)
        except subprocess.TimeoutExpired:
            print("PAGE_FAILED h2load ran past 60 s", flush=True)
        loads += 1
    print("PAGES %d" % loads, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
