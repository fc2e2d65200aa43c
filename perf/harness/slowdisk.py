"""A slow disk that behaves like one: ext4 on a loop device, read through a block-io cgroup that
throttles reads (bytes/s and IOs/s) and a memory cgroup whose limit is below the data set, so the
page cache holds only part of it. The longtail scenario's hooks (longtail.py) drive it.

    undo = Undo()
    disk = LoopDisk.attach(image, mountpoint, undo)          # losetup --direct-io=on, mount
    cg = Cgroups.create("ringd-longtail", disk.dev, PROFILES["hdd"], 512 << 20, undo)
    prefix = cg.prefix()                                      # [...] + server argv: runs inside
    ...
    undo.run()                                                # umount, losetup -d, rmdir, always

    build_image(image, key, [(path, size)], log, finish)      # the ext4 image, rebuilt when key changes
    evict_tree(mountpoint)                                    # its files out of the page cache

Why the loop device runs with direct-io=on: with it off, the loop driver reads its backing file
through the host's page cache, which is not charged to the memory cgroup, so the whole data set
ends up cached a second time outside the limit. The throttle itself applies at the loop device
either way, to O_DIRECT and buffered reads alike (perf/diskcheck checks it with dd); a second
buffered pass comes from the page cache. longtail.py puts the backing file itself in tmpfs where
there is room, so that the throttle is the disk's only limit.

cgroup v1 (blkio + memory hierarchies) and cgroup v2 (io + memory controllers in one tree) are
both handled; whichever has the files is used, v1 first. Unavailable pieces raise Unavailable
with the reason, which the harness reports as a skip.
"""
import os
import random
import subprocess
import tempfile
import time
import zlib
from dataclasses import dataclass


MIB = 1 << 20


class Unavailable(RuntimeError):
    """This machine cannot provide the slow disk (the message says what is missing)."""


@dataclass(frozen=True)
class DiskProfile:
    name: str
    read_bps: int    # bytes per second
    read_iops: int   # IOs per second (blk-throttle counts bios, after splitting)
    what: str

    def describe(self):
        return "%s: reads throttled to %d MB/s and %d IOs/s (%s)" % (
            self.name, self.read_bps // 1000000, self.read_iops, self.what)


PROFILES = {
    # A modest NVMe drive's order of magnitude, kept below what the virtual disk underneath
    # delivers, so the throttle is what limits.
    "nvme": DiskProfile("nvme", 1000 * 1000 * 1000, 50000, "NVMe-like"),
    # One 7,200 rpm disk: about 150 MB/s sequential and 150 random IOs/s.
    "hdd": DiskProfile("hdd", 150 * 1000 * 1000, 150, "HDD-like"),
}


class Undo:
    """Teardown steps, run last-in first-out; each one runs even if an earlier one failed."""

    def __init__(self):
        self.steps = []

    def push(self, what, fn):
        self.steps.append((what, fn))

    def run(self):
        problems = []
        while self.steps:
            what, fn = self.steps.pop()
            try:
                fn()
            except Exception as e:  # every step gets its turn; what failed is returned
                problems.append("%s: %s" % (what, e))
        return problems


def _write(path, text):
    with open(path, "w") as f:
        f.write(text)


def _read(path):
    with open(path) as f:
        return f.read()


def _run(cmd):
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode != 0:
        raise RuntimeError("%s: %s" % (" ".join(cmd), (p.stderr or p.stdout).strip()))
    return p.stdout.strip()


def parse_block_stat(text):
    """/sys/block/<dev>/stat: (read IOs, bytes read); the third field counts 512-byte sectors."""
    f = text.split()
    return int(f[0]), int(f[2]) * 512


class LoopDisk:
    """ext4 on a loop device, mounted; `dev` is its "major:minor"."""

    def __init__(self, loop, mountpoint, dev):
        self.loop, self.mountpoint, self.dev = loop, mountpoint, dev

    @classmethod
    def attach(cls, image, mountpoint, undo):
        if not os.path.exists("/dev/loop-control"):
            raise Unavailable("no /dev/loop-control (loop devices unavailable)")
        cls.detach_stale(image)
        loop = _run(["losetup", "--find", "--show", "--direct-io=on", image])
        undo.push("losetup -d " + loop, lambda: cls._detach(loop))
        name = os.path.basename(loop)
        if _read("/sys/block/%s/loop/dio" % name).strip() != "1":
            raise Unavailable("%s refused direct-io=on (its backing file system cannot do O_DIRECT)" % loop)
        os.makedirs(mountpoint, exist_ok=True)
        _run(["mount", "-o", "noatime", loop, mountpoint])
        undo.push("umount " + mountpoint, lambda: cls._umount(mountpoint))
        return cls(loop, mountpoint, _read("/sys/block/%s/dev" % name).strip())

    def reads(self):
        """(read IOs, bytes read) of the loop device since it was attached."""
        return parse_block_stat(_read("/sys/block/%s/stat" % os.path.basename(self.loop)))

    @staticmethod
    def _umount(mountpoint):
        for _ in range(20):  # a server that just exited may still hold a file for a moment
            if subprocess.run(["umount", mountpoint], capture_output=True).returncode == 0:
                return
            time.sleep(0.25)
        _run(["umount", "--lazy", mountpoint])

    @staticmethod
    def _detach(loop):
        for _ in range(20):
            if subprocess.run(["losetup", "-d", loop], capture_output=True).returncode == 0:
                return
            time.sleep(0.25)
        _run(["losetup", "-d", loop])

    @classmethod
    def detach_stale(cls, image):
        """A run that was killed (SIGKILL, power) may have left the image attached and mounted."""
        out = subprocess.run(["losetup", "--associated", image], capture_output=True, text=True).stdout
        for line in out.splitlines():
            loop = line.split(":")[0]
            subprocess.run(["umount", loop], capture_output=True)  # fails harmlessly if not mounted
            cls._detach(loop)


def _own_cgroup(hierarchy, proc_cgroup_text):
    """This process's path in a cgroup v1 hierarchy ("memory", "blkio") or v2 (""), from
    /proc/self/cgroup."""
    for line in proc_cgroup_text.splitlines():
        _, controllers, path = line.split(":", 2)
        if (hierarchy == "" and controllers == "") or hierarchy in controllers.split(","):
            return path
    return "/"


class Cgroups:
    """The server's cgroups: reads throttled on one device, memory limited. `root` is where the
    cgroup file systems are mounted (a test passes a folder of its own)."""

    def __init__(self, version, dirs, dev):
        self.version, self.dirs, self.dev = version, dirs, dev  # dirs: {"io": path, "memory": path}

    @classmethod
    def detect(cls, root="/sys/fs/cgroup", proc_cgroup=None):
        """("v1", {"io": parent, "memory": parent}) or ("v2", ...): where new cgroups can go."""
        text = proc_cgroup if proc_cgroup is not None else _read("/proc/self/cgroup")
        v1_io, v1_mem = os.path.join(root, "blkio"), os.path.join(root, "memory")
        if (os.path.exists(os.path.join(v1_io, "blkio.throttle.read_bps_device"))
                and os.path.exists(os.path.join(v1_mem, "memory.limit_in_bytes"))):
            io = os.path.join(v1_io, _own_cgroup("blkio", text).lstrip("/"))
            mem = os.path.join(v1_mem, _own_cgroup("memory", text).lstrip("/"))
            return "v1", {"io": io, "memory": mem}
        for v2 in (os.path.join(root, "unified"), root):
            controllers = os.path.join(v2, "cgroup.controllers")
            if os.path.exists(controllers):
                have = _read(controllers).split()
                if "io" in have and "memory" in have:
                    # New cgroups go under the v2 root: a non-root cgroup that holds processes
                    # cannot hand controllers to its children.
                    return "v2", {"io": v2, "memory": v2}
        raise Unavailable("no usable cgroup: need cgroup v1 blkio.throttle.* and memory.limit_in_bytes under"
                          " %s, or cgroup v2 with the io and memory controllers" % root)

    @classmethod
    def create(cls, name, dev, profile, memory_limit, undo, root="/sys/fs/cgroup", proc_cgroup=None):
        version, parents = cls.detect(root, proc_cgroup)
        dirs = {}
        if version == "v2":
            _write(os.path.join(parents["io"], "cgroup.subtree_control"), "+io +memory")
        for kind in ("io", "memory"):
            if version == "v2" and kind == "memory":
                dirs[kind] = dirs["io"]
                break
            path = os.path.join(parents[kind], name)
            os.makedirs(path, exist_ok=True)
            undo.push("rmdir " + path, lambda p=path: _rmdir_cgroup(p))
            dirs[kind] = path
        cg = cls(version, dirs, dev)
        cg.throttle_reads(profile)
        cg.set_memory_limit(memory_limit)
        return cg

    def throttle_reads(self, profile):
        """Reads from the device throttled as `profile` says, or not at all (None). Lifting the
        throttle lets the reads queued in it go at once (a test's teardown need not wait for the
        slow disk to serve them)."""
        if self.version == "v1":
            bps, iops = (profile.read_bps, profile.read_iops) if profile else (0, 0)  # 0: no rule
            _write(os.path.join(self.dirs["io"], "blkio.throttle.read_bps_device"), "%s %d" % (self.dev, bps))
            _write(os.path.join(self.dirs["io"], "blkio.throttle.read_iops_device"), "%s %d" % (self.dev, iops))
        else:
            bps, iops = (profile.read_bps, profile.read_iops) if profile else ("max", "max")
            _write(os.path.join(self.dirs["io"], "io.max"), "%s rbps=%s riops=%s" % (self.dev, bps, iops))

    def procs_files(self, kinds=("io", "memory")):
        return sorted({os.path.join(self.dirs[k], "cgroup.procs") for k in kinds})

    def prefix(self, kinds=("io", "memory")):
        """An argv prefix that moves itself into the cgroups, then execs the rest: the server's
        first instruction already runs inside them (children and io workers inherit them)."""
        files = self.procs_files(kinds)
        script = ('n=$1; shift; while [ "$n" -gt 0 ]; do echo $$ > "$1" || exit 111; shift; n=$((n-1)); done;'
                  ' exec "$@"')
        return ["sh", "-c", script, "in-cgroup", str(len(files))] + files

    def set_memory_limit(self, limit):
        name = "memory.limit_in_bytes" if self.version == "v1" else "memory.max"
        _write(os.path.join(self.dirs["memory"], name), str(int(limit)))

    def memory_usage(self):
        name = "memory.usage_in_bytes" if self.version == "v1" else "memory.current"
        return int(_read(os.path.join(self.dirs["memory"], name)))

    def page_cache_bytes(self):
        """File pages charged to the memory cgroup now (v1 `cache`, v2 `file`)."""
        key = "cache" if self.version == "v1" else "file"
        for line in _read(os.path.join(self.dirs["memory"], "memory.stat")).splitlines():
            k, _, v = line.partition(" ")
            if k == key:
                return int(v)
        return None


def _rmdir_cgroup(path):
    """A cgroup can be removed once its processes are gone; they may take a moment to exit."""
    for _ in range(40):
        try:
            os.rmdir(path)
            return
        except FileNotFoundError:
            return
        except OSError:
            time.sleep(0.25)
    os.rmdir(path)


def fill_file(path, size, block):
    """A file of `size` bytes from `block` (seeded random bytes), starting where the path's hash says."""
    with open(path, "wb") as f:
        off = zlib.crc32(path.encode()) % len(block)
        while size > 0:
            n = min(size, len(block) - off)
            f.write(block[off:off + n])
            size -= n
            off = 0


def build_image(image, key, files, log, finish=None, seed=1):
    """ext4 image holding files ([(url path, size)], filled with seeded random bytes); kept beside
    the perf data set and rebuilt only when key changes (a marker file records the key it was
    built for). finish(mountpoint), if given, adds what else the image holds."""
    marker = image + ".dataset"
    if os.path.exists(image) and os.path.exists(marker) and open(marker).read() == key:
        return
    total = sum(z for _, z in files)
    log("perf: building %s (%d files, %.2f GiB)" % (image, len(files), total / (1 << 30)))
    for p in (marker, image):
        if os.path.exists(p):
            os.remove(p)
    with open(image, "wb") as f:
        f.truncate((int(total * 1.2) // MIB + 512) * MIB)  # whole MiBs: losetup warns otherwise
    subprocess.run(["mkfs.ext4", "-q", "-F", "-m", "0", image], check=True)
    undo = Undo()
    try:
        mnt = tempfile.mkdtemp(prefix="ringd-disk-build-")
        undo.push("rmdir " + mnt, lambda: os.rmdir(mnt))
        disk = LoopDisk.attach(image, mnt, undo)
        block = random.Random(seed).randbytes(16 * MIB)
        for path, size in files:
            full = disk.mountpoint + path
            os.makedirs(os.path.dirname(full), exist_ok=True)
            fill_file(full, size, block)
        if finish:
            finish(disk.mountpoint)
        os.chmod(disk.mountpoint, 0o755)
    finally:
        problems = undo.run()
    if problems:
        raise RuntimeError("building %s: %s" % (image, "; ".join(problems)))
    with open(marker, "w") as f:
        f.write(key)


def evict_tree(root):
    """Drops every file under root from the page cache, whichever cgroup its pages are charged to."""
    for d, _, names in os.walk(root):
        for n in names:
            fd = os.open(os.path.join(d, n), os.O_RDONLY)
            try:
                os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            finally:
                os.close(fd)
