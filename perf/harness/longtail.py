"""The longtail scenario's data set and hooks: an origin whose files do not fit in its page cache.

Many files with a site's size mix on the slow disk (slowdisk.py), requested Zipf-distributed; every
server runs inside one memory cgroup whose limit is the servers' own memory plus a page-cache
budget several times smaller than the data set, and one blkio cgroup that throttles reads.

    ds = DATASETS["full"]
    files = plan(ds)                     # [(path, size)] hottest first: the Zipf ranks
    hooks = LongtailDisk("hdd")          # setup / before_run / after_run / teardown / server_prefix

The size mix (counts, then each class's size as a log-normal around a median, clipped), roughly
after the HTTP Archive's medians for a page's resources (html, css and js of tens of KB, images of
tens to hundreds of KB) plus a few downloads of MBs, which carry most of the bytes:

    html 30%   median 12 KiB (1-200 KiB)     css/js 35%  median 18 KiB (1-400 KiB)
    images 34% median 40 KiB (2 KiB-1 MiB)   media 1%    median 3 MiB (1-12 MiB)

Ranks are a seeded shuffle of the files (popularity does not follow size), and the Zipf exponent
is 0.8: what an origin behind a CDN sees is flatter than the edge's s near 1 (Breslau et al., "Web
caching and Zipf-like distributions", INFOCOM 1999: 0.64-0.83 for proxy traces).
"""
import math
import os
import random
import signal
import subprocess
import tempfile
from dataclasses import dataclass

from .slowdisk import MIB, PROFILES, Cgroups, LoopDisk, Undo, Unavailable, build_image, evict_tree, fill_file

PATHS_FILE = "paths-longtail.txt"  # in the data set's root, hottest first
ZIPF_S = 0.8
SIZE_CLASSES = (16 << 10, 128 << 10, 1 << 20)  # p50/p99 per class: < 16 KiB, < 128 KiB, < 1 MiB, more

# (name, share of files, extension, median bytes, smallest, largest)
SIZE_MIX = (
    ("html", 0.30, "html", 12 << 10, 1 << 10, 200 << 10),
    ("static", 0.35, "js", 18 << 10, 1 << 10, 400 << 10),
    ("img", 0.34, "png", 40 << 10, 2 << 10, 1 << 20),
    ("media", 0.01, "bin", 3 << 20, 1 << 20, 12 << 20),
)
SIGMA = 1.0  # of the log-normal sizes


@dataclass(frozen=True)
class DataSet:
    files: int
    cache_mib: int  # the page-cache budget: the memory cgroup's limit is the servers' memory plus this
    seed: int = 1


DATASETS = {"full": DataSet(files=40000, cache_mib=512), "quick": DataSet(files=8000, cache_mib=128)}


def plan(ds):
    """[(url path, size)], hottest first; the same DataSet always gives the same list."""
    rng = random.Random(ds.seed)
    shares = [m[1] for m in SIZE_MIX]
    files = []
    for i in range(ds.files):
        name, _, ext, median, lo, hi = rng.choices(SIZE_MIX, weights=shares)[0]
        size = int(min(hi, max(lo, rng.lognormvariate(math.log(median), SIGMA))))
        files.append(("/%s/%03d/%06d.%s" % (name, i // 1000, i, ext), size))
    rng.shuffle(files)
    return files


def expected_hit_ratio(sizes_by_rank, s, cache_bytes):
    """The byte hit ratio of a cache that holds exactly the hottest files that fit (the best any
    cache can do under independent Zipf requests): a yardstick for the measured ratio."""
    weights = [1 / (i + 1) ** s for i in range(len(sizes_by_rank))]
    total = sum(w * z for w, z in zip(weights, sizes_by_rank))
    held, hit = 0, 0.0
    for w, z in zip(weights, sizes_by_rank):
        if held + z > cache_bytes:
            break
        held += z
        hit += w * z
    return hit / total if total else 0.0


def build_longtail_image(ds, image, log):
    """The longtail data set's image, with its paths file (hottest first) in the root."""
    files = plan(ds)

    def paths_file(mnt):
        with open(os.path.join(mnt, PATHS_FILE), "w") as f:
            f.write("".join(p + "\n" for p, _ in files))
    build_image(image, repr(ds), files, log, paths_file, ds.seed)


def backing_copy(image, undo, shm="/dev/shm"):
    """Where the loop device's backing file lives while it runs: a copy in tmpfs where there is
    room for it, so that the throttle is the disk's only limit and the virtual disk underneath
    (shared with whatever else the host runs) is not: from tmpfs, readers in the NVMe cgroup
    reach the throttle. Returns (path, what it is)."""
    need = os.stat(image).st_blocks * 512
    if os.path.isdir(shm):
        st = os.statvfs(shm)
        if st.f_bavail * st.f_frsize > need + (1 << 30):
            copy = os.path.join(shm, "ringd-" + os.path.basename(image))
            LoopDisk.detach_stale(copy)
            undo.push("rm " + copy, lambda: os.remove(copy))
            subprocess.run(["cp", "--sparse=always", image, copy], check=True)
            return copy, "a copy of the image in tmpfs: the throttle is the only limit"
    return image, ("the image on the local disk (no room in %s): that disk's own speed adds to the"
                   " throttle" % shm)


class SlowDiskHooks:
    """What the slow-disk scenarios' hooks share (see scenarios.Hooks): root, SIGTERM unwinding
    like Ctrl-C (so the teardown runs either way), the image attached from a tmpfs copy, the
    cgroups every server runs in, the disk's reads counted per run, and the teardown."""

    name = "slowdisk"  # of the mount point and the cgroups

    def __init__(self, profile):
        self.profile = PROFILES[profile]
        self.undo = Undo()
        self.disk = self.cg = None
        self.reads_before = None
        self.old_sigterm = None

    def begin(self):
        def on_term(*_):
            raise KeyboardInterrupt("SIGTERM")
        self.old_sigterm = signal.signal(signal.SIGTERM, on_term)
        if os.geteuid() != 0:
            raise Unavailable("needs root (losetup, mount, cgroups)")

    def attach(self, image):
        """Mounts the image (from a tmpfs copy where there is room) and makes the cgroups, with a
        generous memory limit (before_run sets the real one once the servers run). Returns the
        mount point and what backs the loop device."""
        mnt = tempfile.mkdtemp(prefix="ringd-%s-" % self.name)
        self.undo.push("rmdir " + mnt, lambda: os.rmdir(mnt))
        backing, backing_what = backing_copy(image, self.undo)
        self.disk = LoopDisk.attach(backing, mnt, self.undo)
        self.cg = Cgroups.create("ringd-" + self.name, self.disk.dev, self.profile, 8 << 30, self.undo)
        return mnt, backing_what

    def server_prefix(self):
        return self.cg.prefix() if self.cg else []

    def limit_page_cache(self, budget):
        """The memory limit: the servers' own memory (usage minus file pages) plus `budget`."""
        own = self.cg.memory_usage() - (self.cg.page_cache_bytes() or 0)
        self.cg.set_memory_limit(own + budget)

    def after_run(self, ctx, result):
        ios, read = self.disk.reads()
        result.disk_read_ios = ios - self.reads_before[0]
        result.disk_read_bytes = read - self.reads_before[1]
        cached = self.cg.page_cache_bytes()
        result.page_cache_mib = cached / MIB if cached is not None else None

    def teardown(self, ctx):
        problems = self.undo.run()
        if self.old_sigterm is not None:
            signal.signal(signal.SIGTERM, self.old_sigterm)
        if problems:
            print("perf: %s teardown: %s" % (self.name, "; ".join(problems)), flush=True)


class LongtailDisk(SlowDiskHooks):
    """Hooks of the longtail scenarios (see scenarios.Hooks): the slow disk for one profile."""

    name = "longtail"

    def __init__(self, profile):
        super().__init__(profile)
        self.ds = None

    def setup(self, ctx):
        self.begin()
        self.ds = DATASETS["quick" if ctx.args.quick else "full"]
        image = "%s-longtail-%s.img" % (ctx.args.data.rstrip("/"), "quick" if ctx.args.quick else "full")
        build_longtail_image(self.ds, image, lambda m: print(m, flush=True))
        mnt, backing_what = self.attach(image)
        self.files = plan(self.ds)
        total = sum(z for _, z in self.files)
        ctx.meta.setdefault("slow_disk", {})["longtail-" + self.profile.name] = (
            "ext4 on a loop device (direct-io=on) over %s; cgroup %s; %s; %d files, %.2f GiB, Zipf s=%.1f; memory"
            " cgroup limit = the servers' own memory + %d MiB of page cache, evicted and refilled with the"
            " hottest files before each run (ideal-cache byte hit ratio %.2f)" % (
                backing_what, self.cg.version, self.profile.describe(), len(self.files), total / (1 << 30), ZIPF_S,
                self.ds.cache_mib, expected_hit_ratio([z for _, z in self.files], ZIPF_S, self.ds.cache_mib * MIB)))
        return mnt

    def before_run(self, ctx, serve_root):
        """Every run starts from the same cache: nothing but the hottest files that fill 90% of the
        budget, read (unthrottled) by a process in the memory cgroup, coldest of them first."""
        evict_tree(self.disk.mountpoint)
        budget = self.ds.cache_mib * MIB
        self.limit_page_cache(budget)
        picked, held = [], 0
        for path, size in self.files:
            if held + size > 0.9 * budget:
                break
            picked.append(self.disk.mountpoint + path)
            held += size
        with tempfile.NamedTemporaryFile("w", prefix="ringd-longtail-fill-", delete=False) as f:
            f.write("".join(p + "\n" for p in reversed(picked)))
        try:
            subprocess.run(self.cg.prefix(kinds=("memory",)) + ["xargs", "-a", f.name, "-d", "\n", "cat"],
                           stdout=subprocess.DEVNULL, check=True)
        finally:
            os.remove(f.name)
        self.reads_before = self.disk.reads()


class ManyFiles:
    """Hooks of the many-files scenario (see scenarios.Hooks): the quick data set (8,000 files of
    the same size mix) as plain files in a folder beside the perf data set, every byte in the
    page cache, no cgroup. What a site of thousands of files costs when nothing waits for a disk:
    the open-file cache's entries and revalidations, the two precompressed siblings each file is
    asked for, and the checks of the page cache before inline sends."""

    def __init__(self):
        self.root = None

    def setup(self, ctx):
        ds = DATASETS["quick"]
        self.root = ctx.args.data.rstrip("/") + "-many-files"
        build_tree(self.root, ds, lambda m: print(m, flush=True))
        return self.root

    def server_prefix(self):
        return []

    def before_run(self, ctx, serve_root):
        """Every file read once, so that every run starts with all of them in the page cache."""
        for d, _, names in os.walk(serve_root):
            for n in names:
                with open(os.path.join(d, n), "rb") as f:
                    while f.read(1 << 20):
                        pass

    def after_run(self, ctx, result):
        pass

    def teardown(self, ctx):
        pass


def build_tree(root, ds, log):
    """The data set's files and paths file (hottest first) under root; rebuilt only when the data
    set changes (a marker file beside the folder records the one it holds)."""
    marker = root + ".dataset"
    if os.path.isdir(root) and os.path.exists(marker) and open(marker).read() == repr(ds):
        return
    files = plan(ds)
    log("perf: writing %s (%d files, %.2f GiB)" % (root, len(files), sum(z for _, z in files) / (1 << 30)))
    if os.path.exists(marker):
        os.remove(marker)
    block = random.Random(ds.seed).randbytes(16 * MIB)
    for path, size in files:
        full = root + path
        os.makedirs(os.path.dirname(full), exist_ok=True)
        fill_file(full, size, block)
    with open(os.path.join(root, PATHS_FILE), "w") as f:
        f.write("".join(p + "\n" for p, _ in files))
    os.chmod(root, 0o755)
    with open(marker, "w") as f:
        f.write(repr(ds))
