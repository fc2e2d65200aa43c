"""The soak's site: a document root of static, cold and volatile files whose bytes say what they
are, so any body or slice of one can be checked without keeping every version in memory.

Every file is 64-byte lines, `TAG OFFSET....\\n`, where TAG names the file (and, for a volatile
file, its version) and OFFSET is the line's byte offset. A slice of any version is made again
from (tag, start, length); the version a body came from is read off its first whole line.

    site = Site.make()                      # site.root: the directory ringd serves
    site.static["s/a0007.css"]              # the bytes of a file that never changes
    site.replace("v/big0.bin")              # a new version renamed over the old
    site.truncate("v/big0.bin")             # the current version cut short in place
    site.check_volatile(path, start, body, total)   # None, or what is wrong with the bytes
"""
import gzip
import os
import random
import re
import tempfile
import threading

LINE = 64
_TAG = re.compile(rb"^(\S+) (\d{12})\.*\n$")


def line_bytes(tag, start, length):
    """Bytes [start, start + length) of the file whose lines carry `tag`."""
    if length <= 0:
        return b""
    first, last = start // LINE, (start + length - 1) // LINE
    lines = [("%s %012d" % (tag, i * LINE)).ljust(LINE - 1, ".") + "\n" for i in range(first, last + 1)]
    blob = "".join(lines).encode()
    skip = start - first * LINE
    return blob[skip:skip + length]


def tag_of(body, start):
    """(tag, offset) of the first whole line in `body` (which begins at byte `start` of its
    file), or None when it holds no whole line."""
    skip = (-start) % LINE
    line = body[skip:skip + LINE]
    m = _TAG.match(line) if len(line) == LINE else None
    if not m or int(m.group(2)) != start + skip:
        return None
    return m.group(1).decode(), start + skip


class Site:
    """The files, and the versions of the volatile ones (which only this object changes)."""

    # Volatile files: a few of each size class, the small ones within the small-file cache.
    VOLATILE = {"v/small%d.txt": (2, 1000, 12000), "v/mid%d.bin": (2, 20000, 300000),
                "v/big%d.bin": (2, 1 << 20, 6 << 20)}

    def __init__(self, root):
        self.root = root
        self.static = {}     # path -> bytes, never changed while ringd runs
        self.cold = []       # paths of many small static files, more than the cache holds
        self.large = []      # the static files worth dropping from the page cache
        self.versions = {}   # volatile path -> current version number
        self.cuts = {}       # (volatile path, version) -> the shortest it was truncated to
        self.lock = threading.Lock()
        self.rng = random.Random(7)

    @classmethod
    def make(cls, small=300, medium=40, large=4, cold=3000):
        site = cls(tempfile.mkdtemp(prefix="ringd-soak-"))
        os.chmod(site.root, 0o755)
        rng = random.Random(1)
        for i in range(small):
            ext = ("html", "css", "js", "txt", "svg")[i % 5]
            site._static("s/a%04d.%s" % (i, ext), rng.randint(0, 16000))
        for i in range(medium):
            site._static("m/b%03d.bin" % i, rng.randint(16 * 1024, 900 * 1024))
        for i in range(large):
            site.large.append(site._static("l/c%d.bin" % i, rng.randint(2 << 20, 8 << 20)))
        for i in range(cold):
            site.cold.append(site._static("cold/d%05d.txt" % i, rng.randint(100, 3000), keep=False))
        site._static("index.html", 4000)
        app = site._static("g/app.js", 30000)
        site.static["g/app.js.gz"] = gzip.compress(site.static[app], mtime=0)
        site._write("g/app.js.gz", site.static["g/app.js.gz"])  # written after: not older
        for pattern, (count, _, _) in cls.VOLATILE.items():
            for i in range(count):
                path = pattern % i
                site.versions[path] = 0
                site._write_version(path, 0)
        return site

    def _static(self, rel, size, keep=True):
        data = line_bytes(rel, 0, size)
        self._write(rel, data)
        if keep:
            self.static[rel] = data
        return rel

    def _write(self, rel, data):
        path = os.path.join(self.root, rel)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "wb") as f:
            f.write(data)

    def cold_bytes(self, rel):
        return line_bytes(rel, 0, os.path.getsize(os.path.join(self.root, rel)))

    # Volatile files. A version's size is fixed by its number, so that it can be checked later.
    def size_of(self, rel, version):
        for pattern, (count, lo, hi) in self.VOLATILE.items():
            if any(rel == pattern % i for i in range(count)):
                return random.Random("%s@%d" % (rel, version)).randint(lo, hi)
        raise KeyError(rel)

    @staticmethod
    def vtag(rel, version):
        return "%s@%06d" % (rel, version)

    def _write_version(self, rel, version):
        # Written beside it under a dot name (ringd never serves those), then renamed over it:
        # a response in flight keeps the old inode and sends the old version whole.
        tmp = os.path.join(self.root, os.path.dirname(rel), ".next-" + os.path.basename(rel))
        os.makedirs(os.path.dirname(tmp), exist_ok=True)
        with open(tmp, "wb") as f:
            f.write(line_bytes(self.vtag(rel, version), 0, self.size_of(rel, version)))
        os.rename(tmp, os.path.join(self.root, rel))

    def replace(self, rel):
        with self.lock:
            self.versions[rel] += 1
            version = self.versions[rel]
        self._write_version(rel, version)

    def truncate(self, rel):
        """Cuts the current version short in place. A version is never written again after
        this, so what ringd sends from it is always a prefix of that one version."""
        path = os.path.join(self.root, rel)
        size = self.rng.randint(0, os.path.getsize(path))  # only ever shorter
        with self.lock:
            key = (rel, self.versions[rel])
            self.cuts[key] = min(size, self.cuts.get(key, size))
        os.truncate(path, size)

    def check_volatile(self, rel, start, body, total):
        """What is wrong with `body`, bytes from `start` of a response for volatile `rel` whose
        length header says the file had `total` bytes; None when they are a slice of one version,
        possibly cut short (the file was truncated while sent). Past the point where that version
        was cut, zeros may stand in for its bytes: a send from the page cache (sendfile, splice)
        references the pages it queued, and the truncation zeroes the cut part of the page that
        holds the new end of file (a large folio: up to 2 MiB) before the client has read it.
        The kernel does this to any zero-copy sender (checked with os.sendfile alone)."""
        if not body:
            return None
        with self.lock:
            newest = self.versions[rel]
            cuts = dict(self.cuts)
        found = None
        lead = len(body) - len(body.lstrip(b"\0"))
        for k in range(lead, min(len(body), lead + 3 * LINE), 1):  # the first whole line
            if (start + k) % LINE == 0:
                found = tag_of(body[k:], start + k)
                break
        if found is not None:
            m = re.match(r"^(.*)@(\d{6})$", found[0])
            if not m or m.group(1) != rel or int(m.group(2)) > newest:
                return "a line of another file or version: %r" % found[0]
            candidates = [int(m.group(2))]
        else:  # no whole line (a short body, or zeros): any recent version may match
            candidates = range(newest, max(-1, newest - 200), -1)
        problem = None
        for version in candidates:
            problem = self._match(rel, version, cuts.get((rel, version)), start, body, total)
            if problem is None:
                return None
        return "bytes %d-%d (newest version %d, total %d): %s" % (
            start, start + len(body) - 1, newest, total, problem)

    def _match(self, rel, version, cut, start, body, total):
        size = self.size_of(rel, version)
        if total > size or start + len(body) > size:
            return "longer than version %d's %d bytes" % (version, size)
        want = line_bytes(self.vtag(rel, version), start, len(body))
        if body == want:
            return None
        at = next(i for i in range(len(body)) if body[i] != want[i])
        if cut is None or start + at < cut:
            return "version %d differs at file offset %d (cut %s): %r, not %r" % (
                version, start + at, cut, body[at:at + 64], want[at:at + 64])
        for i in range(at, len(body), 4096):  # past the cut: its bytes, or zeros
            got, due = body[i:i + 4096], want[i:i + 4096]
            if got != due and any(g != d and g != 0 for g, d in zip(got, due)):
                return "version %d differs past its cut at %d near file offset %d" % (
                    version, cut, start + i)
        return None

    def drop_page_cache(self, rels):
        """Drops `rels` from the page cache, so that ringd reads them from the disk again (and
        its memory cgroup is charged for the pages)."""
        for rel in rels:
            try:
                fd = os.open(os.path.join(self.root, rel), os.O_RDONLY)
            except FileNotFoundError:
                continue
            try:
                os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            finally:
                os.close(fd)

