"""What the harness reads about a server while it runs: /proc for CPU time, memory, threads and
context switches, /proc/net/dev for loopback packets, and `perf stat` for system calls.

    pids = proc_tree(server_pid)
    before = cpu_ticks(pids); ...; cpu_s = (cpu_ticks(proc_tree(server_pid)) - before) / TICKS
"""
import os
import shutil
import signal
import subprocess
import tempfile
import time

TICKS = os.sysconf("SC_CLK_TCK")


def _read(path):
    with open(path) as f:
        return f.read()


def proc_tree(pid):
    """pid and all its descendant processes."""
    children = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                fields = _read("/proc/%s/stat" % entry).rsplit(")", 1)[1].split()
                children.setdefault(int(fields[1]), []).append(int(entry))
            except (OSError, IndexError):
                pass
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        out.append(p)
        todo.extend(children.get(p, []))
    return out


def cpu_ticks(pids):
    """utime + stime of each process, dead threads included (/proc/PID/stat, not task/)."""
    total = 0
    for p in pids:
        try:
            fields = _read("/proc/%d/stat" % p).rsplit(")", 1)[1].split()
            total += int(fields[11]) + int(fields[12])
        except (OSError, IndexError, ValueError):
            pass
    return total


def cpu_ticks_by_name(pids):
    """cpu_ticks per process name (/proc/PID/comm up to its first '-': a process whose main
    thread is a shard is `ringd-shard-0`): what each component of a process tree spent (the
    fleet scenario's HAProxy and ringd nodes)."""
    out = {}
    for p in pids:
        try:
            name = _read("/proc/%d/comm" % p).strip().split("-", 1)[0]
        except OSError:
            continue
        out[name] = out.get(name, 0) + cpu_ticks([p])
    return out


def _status_kib(pids, key):
    total = 0
    for p in pids:
        try:
            for line in _read("/proc/%d/status" % p).splitlines():
                if line.startswith(key + ":"):
                    total += int(line.split()[1])
        except (OSError, IndexError, ValueError):
            pass
    return total


def rss_kib(pids):
    return _status_kib(pids, "VmRSS")


def anon_kib(pids):
    """RssAnon summed: the resident memory the processes allocated, without the file pages (program
    text, libraries) whose residency follows the page cache and the kernel's fault-around."""
    return _status_kib(pids, "RssAnon")


def wait_settled(get_pids, interval=0.1, timeout=3.0):
    """Waits until a just-started server has finished starting: its processes, and their
    anonymous memory, the same over one interval (a server answers once its first shard or
    worker listens; the others may still be setting up). Returns its pids, as they were last seen,
    once settled or after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    last = None
    while True:
        pids = get_pids()
        now = (tuple(sorted(pids)), anon_kib(pids))
        if now == last or time.monotonic() > deadline:
            return pids
        last = now
        time.sleep(interval)


def peak_rss_kib(pids):
    """VmHWM summed over the processes: each one's peak resident set since it started."""
    return _status_kib(pids, "VmHWM")


def threads(pids):
    """Threads of the processes now (io_uring's io-wq workers and thread pools included)."""
    n = 0
    for p in pids:
        try:
            n += len(os.listdir("/proc/%d/task" % p))
        except OSError:
            pass
    return n


def ctx_switches(pids):
    """voluntary + nonvoluntary context switches of every live thread of the processes. Threads
    that exit during a run take theirs with them, so this undercounts short-lived workers."""
    total = 0
    for p in pids:
        try:
            tids = os.listdir("/proc/%d/task" % p)
        except OSError:
            continue
        for t in tids:
            try:
                for line in _read("/proc/%d/task/%s/status" % (p, t)).splitlines():
                    if line.startswith(("voluntary_ctxt_switches:", "nonvoluntary_ctxt_switches:")):
                        total += int(line.split()[1])
            except (OSError, IndexError, ValueError):
                pass
    return total


def parse_cpu_list(text):
    """The CPUs of a cpu list as taskset takes it ("1", "0-3", "1,3-4"), as a set."""
    cpus = set()
    for part in text.split(","):
        first, _, last = part.strip().partition("-")
        cpus.update(range(int(first), int(last or first) + 1))
    return cpus


def core_busy_ticks(cpus, stat_text=None):
    """Ticks the CPUs spent on anything but idle, iowait and steal since boot (/proc/stat: user,
    nice, system, irq and softirq; guest time is inside user). Unlike cpu_ticks it counts what no
    process is charged for: interrupts, softirqs and the ksoftirqd threads that run a server's TCP
    work on its cores. None where /proc/stat has no line for one of them."""
    text = _read("/proc/stat") if stat_text is None else stat_text
    total, seen = 0, set()
    for line in text.splitlines():
        name, _, rest = line.partition(" ")
        if not name.startswith("cpu") or not name[3:].isdigit() or int(name[3:]) not in cpus:
            continue
        user, nice, system, _idle, _iowait, irq, softirq = (int(v) for v in rest.split()[:7])
        total += user + nice + system + irq + softirq
        seen.add(int(name[3:]))
    return total if seen == set(cpus) else None


def lo_packets():
    """Packets sent over loopback so far (every packet of a run, both directions, is one of them)."""
    try:
        for line in _read("/proc/net/dev").splitlines():
            name, _, rest = line.partition(":")
            if name.strip() == "lo":
                return int(rest.split()[9])
    except (OSError, ValueError, IndexError):
        pass
    return None


def parse_perf_stat(text):
    """The count from `perf stat -x,` output for one event; None if it was not counted."""
    for line in text.splitlines():
        fields = line.split(",")
        if len(fields) > 2 and fields[2].startswith("raw_syscalls:sys_enter"):
            try:
                return int(fields[0])
            except ValueError:
                return None
    return None


class SyscallCounter:
    """Counts the system calls a set of processes makes, with `perf stat -e raw_syscalls:sys_enter`.
    `why_not()` says why it cannot (no perf, no permission); then start/stop do nothing."""

    EVENT = "raw_syscalls:sys_enter"

    def __init__(self):
        self.proc, self.out = None, None

    @classmethod
    def why_not(cls):
        if shutil.which("perf") is None:
            return "perf is not installed"
        try:
            probe = subprocess.run(["perf", "stat", "-x,", "-e", cls.EVENT, "true"],
                                   capture_output=True, text=True, timeout=20)
        except (OSError, subprocess.TimeoutExpired) as e:
            return "perf stat did not run: %s" % e
        if probe.returncode != 0 or parse_perf_stat(probe.stderr) is None:
            last = (probe.stderr.strip().splitlines() or ["no output"])[-1]
            return "perf stat cannot count %s here: %s" % (cls.EVENT, last)
        return None

    def start(self, pids):
        fd, self.out = tempfile.mkstemp(prefix="ringd-perf-stat-")
        os.close(fd)
        self.proc = subprocess.Popen(["perf", "stat", "-x,", "-e", self.EVENT, "-o", self.out,
                                      "-p", ",".join(str(p) for p in pids)],
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    def stop(self):
        """The count since start(), or None."""
        if self.proc is None:
            return None
        self.proc.send_signal(signal.SIGINT)
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        try:
            return parse_perf_stat(_read(self.out))
        except OSError:
            return None
        finally:
            os.unlink(self.out)
            self.proc = None
