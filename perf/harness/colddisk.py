"""The cold scenario on a slow disk that behaves like one (issue #16, item 3): hot 612-byte
requests at a fixed rate while 16 clients read 4 MiB files from ext4 on a loop device behind a
read-throttled blkio cgroup (slowdisk.PROFILES: nvme, hdd), with every server in a memory cgroup
whose page-cache budget is far below the cold files, so a cold file is read from the disk each
time it is asked for, not once per run (the FUSE model's weakness: it caches what it has read).

    hooks = ColdSlowDisk("nvme")   # setup / before_run / after_run / teardown / server_prefix

The image holds /index.html (the hot file, copied from the perf data set) and /cold/file-N.bin;
it is built once beside the data set and reused.
"""
import os
import shutil
import signal
import tempfile
import zlib

from .longtail import MIB, backing_copy, build_image, evict_tree
from .slowdisk import PROFILES, Cgroups, LoopDisk, Undo, Unavailable

# Cold files (4 MiB each) and the page-cache budget: the budget holds a few percent of the cold
# bytes, so by the time a file comes round again its pages are long gone.
COLD = {"full": (256, 64), "quick": (16, 16)}  # (files, page-cache MiB)
COLD_FILE = 4 * MIB


def cold_files(count):
    return [("/cold/file-%03d.bin" % i, COLD_FILE) for i in range(count)]


class ColdSlowDisk:
    """Hooks of the cold-nvme and cold-hdd scenarios (see scenarios.Hooks)."""

    def __init__(self, profile):
        self.profile = PROFILES[profile]
        self.undo = Undo()
        self.disk = self.cg = None
        self.cache_mib = 0
        self.reads_before = None
        self.old_sigterm = None

    def setup(self, ctx):
        def on_term(*_):  # SIGTERM unwinds like Ctrl-C, so the teardown runs either way
            raise KeyboardInterrupt("SIGTERM")
        self.old_sigterm = signal.signal(signal.SIGTERM, on_term)
        if os.geteuid() != 0:
            raise Unavailable("needs root (losetup, mount, cgroups)")
        size = "quick" if ctx.args.quick else "full"
        count, self.cache_mib = COLD[size]
        index = os.path.join(ctx.data, "index.html")
        with open(index, "rb") as f:
            hot = f.read()
        image = "%s-cold-%s.img" % (ctx.args.data.rstrip("/"), size)

        def add_index(mnt):
            shutil.copyfile(index, os.path.join(mnt, "index.html"))
            os.chmod(os.path.join(mnt, "index.html"), 0o644)
        # The key names the hot file's bytes too: a new data set's index.html rebuilds the image.
        build_image(image, "cold %d x %d, index %08x" % (count, COLD_FILE, zlib.crc32(hot)),
                    cold_files(count), lambda m: print(m, flush=True), add_index)
        mnt = tempfile.mkdtemp(prefix="ringd-cold-")
        self.undo.push("rmdir " + mnt, lambda: os.rmdir(mnt))
        backing, backing_what = backing_copy(image, self.undo)
        self.disk = LoopDisk.attach(backing, mnt, self.undo)
        self.cg = Cgroups.create("ringd-cold", self.disk.dev, self.profile, 8 << 30, self.undo)
        ctx.meta.setdefault("slow_disk", {})["cold-" + self.profile.name] = (
            "ext4 on a loop device (direct-io=on) over %s; cgroup %s; %s; %d cold files of 4 MiB (%d MiB);"
            " memory cgroup limit = the servers' own memory + %d MiB of page cache, the cold files evicted"
            " before each run" % (backing_what, self.cg.version, self.profile.describe(), count,
                                  count * COLD_FILE // MIB, self.cache_mib))
        return mnt

    def server_prefix(self):
        return self.cg.prefix() if self.cg else []

    def before_run(self, ctx, serve_root):
        evict_tree(os.path.join(self.disk.mountpoint, "cold"))
        own = self.cg.memory_usage() - (self.cg.page_cache_bytes() or 0)
        self.cg.set_memory_limit(own + self.cache_mib * MIB)
        self.reads_before = self.disk.reads()

    def after_run(self, ctx, result):
        ios, read = self.disk.reads()
        result.disk_read_ios = ios - self.reads_before[0]
        result.disk_read_bytes = read - self.reads_before[1]

    def teardown(self, ctx):
        problems = self.undo.run()
        if self.old_sigterm is not None:
            signal.signal(signal.SIGTERM, self.old_sigterm)
        if problems:
            print("perf: cold teardown: " + "; ".join(problems), flush=True)
