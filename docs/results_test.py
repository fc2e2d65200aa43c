#!/usr/bin/python3
"""The docs and the perf results they cite agree.

Fails when a path under perf/results/ that docs/*.md or README.md cites does not exist, when a
kept results folder is cited by no doc, when a file under perf/results/ names a path of the
machine that ran it (/root/, /home/, /work/, /tmp/: commands and configs say DATA, PORT and
servers/ instead), or when a report.md differs from what `perf/run --report` renders from its
raw.json (re-render with `perf/run --report perf/results/NAME`). A folder with a README.md and no
raw.json holds the output of a tool other than perf/run (its README.md says which and how it ran),
so it has no report to re-render.

    docs/results_test.py [ROOT]    # ROOT: a checkout (default: the working directory, as Bazel runs it)

Under Bazel the folders checked are those perf/results/BUILD.bazel lists, which must be exactly
the folders the docs cite.
"""
import glob
import os
import re
import sys
import unittest

sys.dont_write_bytecode = True

ROOT = os.path.abspath(sys.argv.pop(1) if len(sys.argv) > 1 else ".")
sys.path.insert(0, os.path.join(ROOT, "perf"))
from harness import report  # noqa: E402

RESULTS = os.path.join(ROOT, "perf", "results")
CITED = re.compile(r"perf/results/[A-Za-z0-9._/-]*[A-Za-z0-9_/-]")
MACHINE_PATH = re.compile(r"(?<![\w.])/(?:root|home|work|tmp)/\S*")


def docs():
    return sorted(glob.glob(os.path.join(ROOT, "docs", "*.md"))) + [os.path.join(ROOT, "README.md")]


def citations():
    """(doc, cited path) for every perf/results path the docs name."""
    found = []
    for doc in docs():
        with open(doc) as f:
            for path in CITED.findall(f.read()):
                found.append((os.path.relpath(doc, ROOT), path.rstrip("/")))
    return found


def kept_folders():
    return sorted(d for d in os.listdir(RESULTS) if os.path.isdir(os.path.join(RESULTS, d)))


def result_files():
    for dirpath, _, files in os.walk(RESULTS):
        for name in files:
            if name != "BUILD.bazel":
                yield os.path.join(dirpath, name)


class ResultsTest(unittest.TestCase):
    def test_every_cited_path_exists(self):
        missing = ["%s cites %s" % (doc, path) for doc, path in citations()
                   if not os.path.exists(os.path.join(ROOT, path))]
        self.assertEqual(missing, [], "cited results that do not exist (or are not listed in "
                         "perf/results/BUILD.bazel); never cite a run that was not committed")

    def test_every_kept_folder_is_cited(self):
        cited = {path.split("/")[2] for _, path in citations() if path.count("/") >= 2}
        uncited = [d for d in kept_folders() if d not in cited]
        self.assertEqual(uncited, [], "results folders no doc cites: remove them (git rm -r) "
                         "and from perf/results/BUILD.bazel")

    def test_no_machine_paths(self):
        found = []
        for path in result_files():
            with open(path, errors="replace") as f:
                for lineno, line in enumerate(f, 1):
                    m = MACHINE_PATH.search(line)
                    if m:
                        found.append("%s:%d: %s" % (os.path.relpath(path, ROOT), lineno, m.group(0)))
        self.assertEqual(found, [], "machine paths in committed results: write DATA for the "
                         "document root, servers/ for the run's own folder, PORT for ports")

    def test_reports_are_what_the_renderer_makes(self):
        stale = []
        for d in kept_folders():
            folder = os.path.join(RESULTS, d)
            if not os.path.exists(os.path.join(folder, "raw.json")):
                # A tool's output, not perf/run's (its README.md says so): nothing to render.
                if not os.path.exists(os.path.join(folder, "README.md")):
                    stale.append("%s: no raw.json" % d)
                continue
            with open(os.path.join(folder, "report.md")) as f:
                checked_in = f.read()
            if checked_in != report.render(*report.load_raw(folder)):
                stale.append(d)
        self.assertEqual(stale, [], "report.md differs from its raw.json's rendering: run "
                         "perf/run --report perf/results/NAME")


if __name__ == "__main__":
    unittest.main(verbosity=2)
