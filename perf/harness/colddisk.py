"""The cold scenario on a slow disk that behaves like one: hot 612-byte
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
import zlib

from .longtail import SlowDiskHooks
from .slowdisk import MIB, build_image, evict_tree

# Cold files (4 MiB each) and the page-cache budget: the budget holds under a tenth of the cold
# bytes, so by the time a file comes round again its pages are mostly gone. It must still hold
# what 16 transfers have in flight (pipes, read-ahead), or the memory cgroup kills the server, so
# the quick set is smaller but its budget is not.
COLD = {"full": (256, 96), "quick": (32, 48)}  # (files, page-cache MiB)
COLD_FILE = 4 * MIB


def cold_files(count):
    return [("/cold/file-%03d.bin" % i, COLD_FILE) for i in range(count)]


class ColdSlowDisk(SlowDiskHooks):
    """Hooks of the cold-nvme and cold-hdd scenarios (see scenarios.Hooks)."""

    name = "cold"

    def setup(self, ctx):
        self.begin()
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
        mnt, backing_what = self.attach(image)
        ctx.meta.setdefault("slow_disk", {})["cold-" + self.profile.name] = (
            "ext4 on a loop device (direct-io=on) over %s; cgroup %s; %s; %d cold files of 4 MiB (%d MiB);"
            " memory cgroup limit = the servers' own memory + %d MiB of page cache, the cold files evicted"
            " before each run" % (backing_what, self.cg.version, self.profile.describe(), count,
                                  count * COLD_FILE // MIB, self.cache_mib))
        return mnt

    def before_run(self, ctx, serve_root):
        evict_tree(os.path.join(self.disk.mountpoint, "cold"))
        self.limit_page_cache(self.cache_mib * MIB)
        self.reads_before = self.disk.reads()
