"""The TCP congestion control a perf run measures under, set for the run and put back after it.

Loopback has no bottleneck, so a congestion control that paces from its own delivery estimate
(BBR without the fq qdisc paces each socket with an hrtimer on the sender's core) measures its
pacing, not the servers: see docs/PERFORMANCE.md, "Loopback under BBR measured pacing". A run
therefore sets net.ipv4.tcp_congestion_control (CUBIC, the kernel's default, unless told
otherwise) before any server or client socket exists, and restores the machine's value after.

    with CongestionControl("cubic", log) as cc:
        ...                                  # every socket made here defaults to cc.used
    cc.describe()                            # for the report's machine table

The machine's value must come back whatever ends the run: it is written to RECORD before the
change, so the next run restores it after a SIGKILL; SIGINT, SIGTERM and SIGHUP are held while
the setting and the record are written; a lock lets one run at a time hold the setting.
"""
import errno
import fcntl
import os
import signal

SYSCTL_DIR = "/proc/sys/net/ipv4"
RECORD = "/run/ringd-perf-tcpcc"
MACHINE = "machine"  # keep whatever the machine has
HELD = {signal.SIGINT, signal.SIGTERM, signal.SIGHUP}


class Busy(RuntimeError):
    """Another run holds the setting."""


def _read(path):
    with open(path) as f:
        return f.read().strip()


def _write(path, value):
    # No fsync: procfs answers it with EINVAL after the write took effect, and the record lives in
    # /run (tmpfs), which a reboot clears together with the sysctl it restores.
    with open(path, "w") as f:
        f.write(value + "\n")


class _SignalsHeld:
    """SIGINT, SIGTERM and SIGHUP wait while the setting and its record are written; one that
    came meanwhile is raised (KeyboardInterrupt) once they agree again. Main thread only."""

    def __enter__(self):
        self.pending = None
        self.old = {s: signal.signal(s, self._defer) for s in HELD}

    def _defer(self, signum, frame):
        self.pending = signum

    def __exit__(self, exc_type, *exc):
        for s, h in self.old.items():
            signal.signal(s, h)
        if self.pending is not None and exc_type is None:
            raise KeyboardInterrupt("signal %d" % self.pending)


class _SignalsIgnored:
    """While the machine's setting is put back, a second ^C or SIGTERM cannot stop it halfway
    (CPython drops a signal still pending for a handler that is now SIG_IGN)."""

    def __enter__(self):
        self.old = {s: signal.signal(s, signal.SIG_IGN) for s in HELD}

    def __exit__(self, *exc):
        for s, h in self.old.items():
            signal.signal(s, h)


class CongestionControl:
    def __init__(self, want, log, sysctl_dir=SYSCTL_DIR, record=RECORD):
        self.want, self.log = want, log
        self.setting = os.path.join(sysctl_dir, "tcp_congestion_control")
        self.available = os.path.join(sysctl_dir, "tcp_available_congestion_control")
        self.record, self.lock_path = record, record + ".lock"
        self.machine = self.used = None
        self.why_not = None  # why the wanted algorithm is not the one in use
        self._lock = None
        self._changed = False

    def __enter__(self):
        try:
            self._lock = open(self.lock_path, "a")
        except OSError as e:  # not root: nothing here may change the setting either
            self.machine = self.used = _read(self.setting)
            if self.want not in (MACHINE, self.machine):
                self.why_not = "%s not set: %s: %s" % (self.want, self.lock_path, e.strerror or e)
                self.log("perf: tcp_congestion_control stays %s (%s)" % (self.machine, self.why_not))
            return self
        try:
            fcntl.flock(self._lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as e:
            self._lock.close()
            if e.errno in (errno.EAGAIN, errno.EACCES):
                raise Busy("another perf run holds %s (lock %s)" % (self.setting, self.lock_path))
            raise
        try:
            self._restore_stale()
            self.machine = self.used = _read(self.setting)
            if self.want not in (MACHINE, self.machine):
                self._set(self.want)
        except BaseException:  # a signal held while the setting changed comes out here
            self.__exit__(None, None, None)
            raise
        return self

    def __exit__(self, *exc):
        with _SignalsIgnored():
            try:
                if self._changed:
                    _write(self.setting, self.machine)
                    os.unlink(self.record)
                    self._changed = False
                    self.log("perf: tcp_congestion_control back to %s" % self.machine)
            finally:
                self._unlock()

    def describe(self):
        if self.used == self.machine:
            s = "%s (the machine's)" % self.used
        else:
            s = "%s for the run (the machine's %s put back after it)" % (self.used, self.machine)
        return s + ("; %s" % self.why_not if self.why_not else "")

    def _restore_stale(self):
        """A run killed with SIGKILL left its record: the machine's value is in it."""
        try:
            stale = _read(self.record)
        except FileNotFoundError:
            return
        with _SignalsHeld():
            if stale:
                _write(self.setting, stale)
            os.unlink(self.record)
        self.log("perf: a run before this one was killed while it held tcp_congestion_control;"
                 " put back %s" % stale)

    def _set(self, want):
        try:
            offered = _read(self.available).split()
        except OSError:
            offered = []
        if want not in offered:
            # The kernel loads a module for a name it knows but has not loaded (tcp_<name>).
            self.log("perf: %s is not among the loaded algorithms (%s); asking the kernel for it" %
                     (want, " ".join(offered) or "none listed"))
        try:
            with _SignalsHeld():
                _write(self.record, self.machine)
                try:
                    _write(self.setting, want)
                except OSError:
                    os.unlink(self.record)
                    raise
                self._changed = True
        except OSError as e:
            self.why_not = "%s not set: %s" % (want, e.strerror or e)
            self.log("perf: tcp_congestion_control stays %s (%s)" % (self.machine, self.why_not))
            return
        self.used = want
        self.log("perf: tcp_congestion_control %s for this run (the machine's %s comes back after it)" %
                 (want, self.machine))

    def _unlock(self):
        if self._lock:
            fcntl.flock(self._lock, fcntl.LOCK_UN)
            self._lock.close()
            self._lock = None


def unwind_on_termination():
    """SIGTERM and SIGHUP unwind the run like ^C does, so every `finally` (servers, disks, the
    congestion control) runs."""
    def raise_interrupt(signum, frame):
        raise KeyboardInterrupt("signal %d" % signum)
    for s in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(s, raise_interrupt)
