#!/usr/bin/python3
"""CPU per byte saved for each level of gzip, Brotli and zstd on text assets (--compress's levels).

Compresses every file given (or the demo site and the docs) at each level, a few rounds each,
with Python's bindings of the same libraries ringd links (zlib, libbrotli, libzstd), and prints
per coding and level: the output as a share of the input, and the CPU nanoseconds spent per byte
saved. A level is worth its CPU while that cost stays flat and the ratio still falls.

    perf/compress/levels.py [FILE...]
"""
import glob
import os
import sys
import time
import zlib

import brotli
import zstandard


def gzip_level(data, level):
    c = zlib.compressobj(level, zlib.DEFLATED, 31)
    return c.compress(data) + c.flush()


CODINGS = {
    "gzip": (gzip_level, range(1, 10)),
    "br": (lambda d, l: brotli.compress(d, quality=l, lgwin=22), range(1, 12)),
    "zstd": (lambda d, l: zstandard.ZstdCompressor(level=l).compress(d), [1, 3, 6, 9, 12, 15, 19]),
}


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    root = os.path.dirname(os.path.dirname(here))
    files = sys.argv[1:] or sorted([f for f in glob.glob(os.path.join(root, "tools/demo-site/*")) if not f.endswith(".webm")] +
                                   glob.glob(os.path.join(root, "docs/*.md")))
    blobs = [open(f, "rb").read() for f in files if os.path.isfile(f)]
    total = sum(len(b) for b in blobs)
    print(f"{len(blobs)} files, {total} bytes")
    print(f"{'coding':6} {'level':>5} {'ratio':>7} {'ns/byte saved':>14} {'MB/s':>8}")
    for name, (fn, levels) in CODINGS.items():
        for level in levels:
            rounds = 3
            start = time.process_time_ns()
            for _ in range(rounds):
                out = sum(len(fn(b, level)) for b in blobs)
            cpu = (time.process_time_ns() - start) / rounds
            saved = total - out
            print(f"{name:6} {level:>5} {out / total:7.3f} {cpu / saved:14.1f} "
                  f"{total / (cpu / 1e9) / 1e6:8.1f}")


if __name__ == "__main__":
    main()
