"""A memory cgroup around ringd for the soak's pressure windows: cgroup v1 (memory) or v2 (the
memory controller). In a window its limit is what it uses plus a margin (v1
memory.limit_in_bytes, v2 memory.high: reclaim, throttling), so the page cache ringd reads in
is reclaimed as fast as it comes; outside the windows it has none.

    cgroup, why = MemoryCgroup.create()     # (None, why) where none can be made
    Server(..., preexec_fn=cgroup.join)     # ringd starts inside it
    cgroup.squeeze(margin=24 << 20); ...; cgroup.release()
    cgroup.report(); cgroup.remove()
"""
import os
import time

ROOT = "/sys/fs/cgroup"
PREFIX = "ringd-soak-"


def _read(path):
    with open(path) as f:
        return f.read()


def _write(path, text):
    with open(path, "w") as f:
        f.write(text)


class MemoryCgroup:
    def __init__(self, version, path):
        self.version, self.path = version, path
        self.squeezes = 0

    @classmethod
    def create(cls, root=ROOT):
        """(MemoryCgroup, None), or (None, why not) where this machine does not let us. Its
        name carries this process's pid: soaks on several tiers run at once."""
        name = PREFIX + str(os.getpid())
        try:
            version, parent = cls._parent(root)
            if version is None:
                return None, parent
            for stale in os.listdir(parent):  # a run killed before its clean-up (its pid gone)
                pid = stale[len(PREFIX):]
                if stale.startswith(PREFIX) and pid.isdigit() and not os.path.exists("/proc/" + pid):
                    try:
                        os.rmdir(os.path.join(parent, stale))
                    except OSError:
                        pass
            path = os.path.join(parent, name)
            os.mkdir(path)
            group = cls(version, path)
            group.release()
            return group, None
        except OSError as e:
            return None, "cannot make a memory cgroup under %s: %s" % (root, e)

    @staticmethod
    def _parent(root):
        v1 = os.path.join(root, "memory")
        if os.path.exists(os.path.join(v1, "memory.limit_in_bytes")):
            own = "/"
            for line in _read("/proc/self/cgroup").splitlines():
                _, controllers, path = line.split(":", 2)
                if "memory" in controllers.split(","):
                    own = path
            return "v1", os.path.join(v1, own.lstrip("/"))
        for v2 in (os.path.join(root, "unified"), root):
            controllers = os.path.join(v2, "cgroup.controllers")
            if os.path.exists(controllers) and "memory" in _read(controllers).split():
                # New cgroups go under the v2 root: a non-root cgroup that holds processes
                # cannot hand controllers to its children.
                _write(os.path.join(v2, "cgroup.subtree_control"), "+memory")
                return "v2", v2
        return None, "no memory cgroup controller under %s (v1 memory or v2)" % root

    def _file(self, v1, v2):
        return os.path.join(self.path, v1 if self.version == "v1" else v2)

    def join(self):
        """For preexec_fn: the calling process (ringd, before its exec) moves in. A failure here
        is left for holds() to find: preexec_fn must not raise."""
        try:
            _write(self._file("cgroup.procs", "cgroup.procs"), str(os.getpid()))
        except OSError:
            pass

    def holds(self, pid):
        return str(pid) in _read(self._file("cgroup.procs", "cgroup.procs")).split()

    def usage(self):
        return int(_read(self._file("memory.usage_in_bytes", "memory.current")))

    def squeeze(self, margin):
        limit = self.usage() + margin
        _write(self._file("memory.limit_in_bytes", "memory.high"), str(limit))
        self.squeezes += 1

    def release(self):
        _write(self._file("memory.limit_in_bytes", "memory.high"), "-1" if self.version == "v1" else "max")

    def report(self):
        """What the limit did: times it was hit (v1 failcnt, v2 high events), OOM kills."""
        out = {"version": self.version, "windows": self.squeezes}
        if self.version == "v1":
            out["limit_hit"] = int(_read(self._file("memory.failcnt", "")))
            out["peak_mib"] = round(int(_read(self._file("memory.max_usage_in_bytes", ""))) / (1 << 20), 1)
            events = dict(l.split() for l in _read(self._file("memory.oom_control", "")).splitlines())
        else:
            events = dict(l.split() for l in _read(self._file("", "memory.events")).splitlines())
            out["limit_hit"] = int(events.get("high", 0))
        out["oom_kills"] = int(events.get("oom_kill", 0))
        return out

    def remove(self):
        """Removes the cgroup once its processes have gone (their charges move to the parent)."""
        deadline = time.monotonic() + 10
        while True:
            try:
                os.rmdir(self.path)
                return
            except FileNotFoundError:
                return
            except OSError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.1)
