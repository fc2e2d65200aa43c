"""Starting servers and measuring one run: the load generator against one server, with the
server's CPU time, memory, threads, context switches and packets sampled around it.

    servers = Servers(args, bins, outdir)
    s = servers.start(PEERS["nginx"], root)
    r = run_one(ctx, s, scenario, serve_root)      # a Result
"""
import glob
import os
import resource
import signal
import socket
import subprocess
import threading
import time
from dataclasses import replace

from . import procfs
from .peers import Ctx
from .scenarios import H2LOAD_WARM_UP_S
from .result import ParseError, failed, parse_h2load, parse_h2page, parse_ringd_load, parse_wrk


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_port(port, proc, timeout=10):
    deadline = time.time() + timeout
    while time.time() < deadline:
        if proc.poll() is not None:
            return False
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            return True
        except OSError:
            time.sleep(0.05)
    return False


class Server:
    def __init__(self, peer, proc, port, cmd):
        self.peer, self.proc, self.port, self.cmd = peer, proc, port, cmd

    @property
    def name(self):
        return self.peer.name

    def pids(self):
        return procfs.proc_tree(self.proc.pid)


class Servers:
    """Starts and stops the servers of one scenario, each on its own port, all pinned."""

    def __init__(self, args, bins, outdir):
        self.args, self.bins, self.confdir = args, bins, os.path.join(outdir, "servers")
        self.running = {}
        self.prefix = []  # before taskset: the scenario's hooks may run servers inside cgroups
        self.tls = None   # a TLS scenario's certificate (tls.TlsFiles), for the peers that serve TLS
        self.http2 = False  # an HTTP/2 scenario: the peers that need a setting for it get it

    def start(self, peer, root, tries=3):
        """Starts `peer` on a port the kernel had free. Between free_port's close and the
        server's bind another socket may take that port (an outgoing connection's ephemeral
        port): a server that says so is started again on another, up to `tries` times."""
        os.makedirs(self.confdir, exist_ok=True)
        log = os.path.join(self.confdir, "%s.log" % peer.name)
        tls = self.tls if peer.in_tls == "serves" else None
        for attempt in range(tries):
            port = free_port()
            cmd = peer.command(Ctx(self.bins, root, port, self.args.shards, self.confdir, tls, self.http2))
            full = self.prefix + ["taskset", "-c", self.args.server_cpus] + cmd
            with open(log, "a") as logf:
                start = logf.tell()
                proc = subprocess.Popen(full, stdout=logf, stderr=logf, start_new_session=True)
            if wait_port(port, proc):
                self.running[peer.name] = Server(peer, proc, port, " ".join(cmd))
                return self.running[peer.name]
            proc.kill()
            proc.wait()
            with open(log) as f:
                f.seek(start)
                taken = "Address already in use" in f.read()
            if not taken:
                break
        raise RuntimeError("%s did not start (see servers/%s.log)" % (peer.name, peer.name))

    def _stop(self, s):
        try:
            os.killpg(s.proc.pid, signal.SIGTERM)
            s.proc.wait(timeout=15)
        except ProcessLookupError:
            pass
        except subprocess.TimeoutExpired:
            os.killpg(s.proc.pid, signal.SIGKILL)
            s.proc.wait()

    def restart(self, name, root):
        """Stops one server and starts it again (same flags, new port)."""
        s = self.running.pop(name)
        self._stop(s)
        time.sleep(0.5)
        return self.start(s.peer, root)

    def stop_all(self):
        for s in self.running.values():
            try:
                os.killpg(s.proc.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
        for s in self.running.values():
            try:
                s.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                os.killpg(s.proc.pid, signal.SIGKILL)
                s.proc.wait()
        self.running = {}
        remove_access_logs(self.confdir)


def remove_access_logs(confdir):
    """The servers with an access log on write it beside their configs; a full run leaves
    hundreds of MB there, and the results folder is checked in. Their cost is
    measured; their lines are not needed."""
    for name in glob.glob(os.path.join(confdir, "*-access.log*")):
        os.unlink(name)


class RunCtx:
    """What every run of a scenario shares: options, binaries, data root, results folder, meta."""

    def __init__(self, args, bins, data, outdir, meta):
        self.args, self.bins, self.data, self.outdir, self.meta = args, bins, data, outdir, meta
        self.tls = None  # the run's certificate, made by the first TLS scenario (TlsCertificate)


def warm_up(ctx, server, scenario, serve_root):
    """Fills open-file caches and the page cache, unmeasured (in HTTP/2 with h2load where the
    scenario is HTTP/2: nginx's h2c port speaks nothing else)."""
    load, _ = scenario.loads(ctx.args.quick)
    tls = server.peer.serves_tls(scenario)
    if scenario.http2:
        cmd = replace(load, idle=0).h2load_command(server.port, serve_root, 0.3, ctx.args.client_cpus,
                                                   ctx.args.client_threads, tls=tls, warm_up_s=0)
    else:
        cmd = load.warm().command(ctx.bins["load"], server.port, serve_root, 0.3, ctx.args.client_cpus,
                                  ctx.args.client_threads, tls=tls)
    subprocess.run(cmd, stdout=subprocess.DEVNULL, timeout=60)


def _generator(ctx, server, scenario, serve_root, duration, h2load_warm_up_s=H2LOAD_WARM_UP_S):
    load, _ = scenario.loads(ctx.args.quick)
    tls = server.peer.serves_tls(scenario)
    if scenario.http2:
        return "h2page" if load.page_assets else "h2load", load.h2load_command(server.port, serve_root, duration, ctx.args.client_cpus,
                                             ctx.args.client_threads, tls=tls, warm_up_s=h2load_warm_up_s)
    if ctx.args.generator == "wrk" and scenario.wrk:
        return "wrk", load.wrk_command(server.port, serve_root, duration, ctx.args.client_cpus,
                                       ctx.args.client_threads, tls=tls)
    return "ringd-load", load.command(ctx.bins["load"], server.port, serve_root, duration,
                                      ctx.args.client_cpus, ctx.args.client_threads, tls=tls)


def _parse(generator, text, protocol=None):
    if generator == "h2load":
        return parse_h2load(text, protocol)
    if generator == "h2page":
        return parse_h2page(text, protocol)
    return parse_wrk(text) if generator == "wrk" else parse_ringd_load(text)


def _protocol(server, scenario):
    """What an HTTP/2 scenario's connections must speak to this server."""
    return "h2" if server.peer.serves_tls(scenario) else "h2c"


# h2load's lines around its main duration (nghttp2 1.52), flushed as they happen: the server's
# counters are read at each, so that the warm-up's handshakes and requests stay out of them.
MAIN_STARTS = "Main benchmark duration is started"
MAIN_ENDS = "Main benchmark duration is over"


class _Counters:
    """What run_one reads about the server (and the client) before and after the measured part."""

    def __init__(self, pids, cores, client_pids=()):
        self.cpu, self.ctx_switches, self.packets = procfs.cpu_ticks(pids), procfs.ctx_switches(pids), procfs.lo_packets()
        self.by_name, self.core = procfs.cpu_ticks_by_name(pids), procfs.core_busy_ticks(cores)
        # The load generator's CPU, where it is read while it runs (h2load's main duration): its
        # process tree's, h2load being a child of h2idle.py in the h2-idle scenarios. A process of
        # it already reaped (h2idle.py may reap h2load before its last lines are read here) takes
        # its ticks along: then there is no figure.
        self.client_pids = list(client_pids)
        alive = all(os.path.exists("/proc/%d/stat" % p) for p in self.client_pids)
        self.client = procfs.cpu_ticks(self.client_pids) if self.client_pids and alive else None


def _children_cpu_s():
    """User + system CPU time of this process's children that have been waited for."""
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def run_one(ctx, server, scenario, serve_root):
    """One measured run of one server; returns a Result."""
    args = ctx.args
    duration = scenario.duration(args)
    generator, cmd = _generator(ctx, server, scenario, serve_root, duration)
    _, background = scenario.loads(args.quick)
    # A fresh server's memory before any connection counts only once every shard or worker is up.
    pids = procfs.wait_settled(server.pids) if scenario.fresh_server else server.pids()
    extra, extra_cmd = None, None
    if background is not None:
        extra_cmd = background.command(ctx.bins["hello_flood" if background.hello_flood else "load"],
                                       server.port, serve_root, duration,
                                       args.client_cpus, args.client_threads,
                                       tls=server.peer.serves_tls(scenario))
        extra = subprocess.Popen(extra_cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    rss_before, anon_before = procfs.rss_kib(pids), procfs.anon_kib(pids)
    cores = procfs.parse_cpu_list(args.server_cpus)
    before, client0 = _Counters(pids, cores), _children_cpu_s()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True)
    anon_idle, idle_held, out_lines, after = None, 0, [], None
    # A load generator that does not finish in time is stopped, and the run is recorded as failed
    # rather than stalling the whole harness.
    killer = threading.Timer(duration + 90, proc.kill)
    killer.daemon = True  # a run interrupted here (^C, SIGTERM) exits at once, not after the timer
    killer.start()
    for line in proc.stdout:
        if line.startswith("IDLE_READY"):
            time.sleep(0.2)
            anon_idle = procfs.anon_kib(server.pids())
            idle_held = int(line.split()[1])
        elif generator == "h2load" and line.startswith(MAIN_STARTS):
            before = _Counters(server.pids(), cores, procfs.proc_tree(proc.pid))
        elif generator == "h2load" and line.startswith(MAIN_ENDS) and before.client_pids:
            after = _Counters(server.pids(), cores, before.client_pids)
        else:
            out_lines.append(line)
    proc.wait()
    client_s = _children_cpu_s() - client0  # the load generator, reaped just now
    killer.cancel()
    pids = server.pids()
    if after is None:
        after = _Counters(pids, cores)
    else:  # the main duration's: the generator's CPU read while it ran, not what it used in all
        client_s = (after.client - before.client) / procfs.TICKS if after.client is not None else None
    t0, c0, p0, by0, core0 = before.cpu, before.ctx_switches, before.packets, before.by_name, before.core
    t1, c1, p1, by1, core1 = after.cpu, after.ctx_switches, after.packets, after.by_name, after.core
    try:
        result = _parse(generator, "".join(out_lines), _protocol(server, scenario) if scenario.http2 else None)
    except ParseError as e:
        why = "the load generator was stopped after %d s" % (duration + 90) if proc.returncode < 0 else (
            "the load generator exited with status %d: %s" % (proc.returncode, e))
        result = failed(why, generator=generator)
    if generator in ("h2load", "h2page") and server.proc.poll() is not None and not result.failed:
        # h2load's timing-based runs count no failure for connections a dying server drops.
        result = failed("the server exited during the run (status %s)" % server.proc.returncode, generator=generator)
    result.command = " ".join(cmd)
    if extra is not None:
        try:
            out, _ = extra.communicate(timeout=duration + 90)
        except subprocess.TimeoutExpired:
            extra.kill()
            out, _ = extra.communicate()
        try:
            result.cold = parse_ringd_load(out)
        except ParseError as e:
            result.cold = failed("the background load's output: %s" % e)
        result.cold_command = " ".join(extra_cmd)
    requests = max(result.requests, 1)
    result.cpu_s = (t1 - t0) / procfs.TICKS
    # A failed h2load run has no per-request figure: its CPU over no requests would read as one.
    per_request = not (result.failed and generator in ("h2load", "h2page"))
    result.cpu_us_per_request = 1e6 * result.cpu_s / requests if per_request else None
    result.client_cpu_us_per_request = 1e6 * client_s / requests if per_request and client_s is not None else None
    if core0 is not None and core1 is not None and per_request:
        result.core_us_per_request = 1e6 * (core1 - core0) / procfs.TICKS / requests
    if len(by1) > 1:  # a server made of several programs (the fleet): each one's share
        result.cpu_us_per_request_by = {name: 1e6 * (t - by0.get(name, 0)) / procfs.TICKS / requests
                                        for name, t in sorted(by1.items())}
    # How busy the server's core was: near 100% the server is the limit; well below it, the load
    # generator is, and requests/s says more about the client than the server.
    result.server_cpu_percent = 100 * result.cpu_s / max(result.seconds or duration, 1e-9)
    if scenario.packets and per_request:
        if p0 is not None and p1 is not None:
            result.packets_per_request = (p1 - p0) / requests
        result.ctx_switches_per_request = (c1 - c0) / requests
    result.rss_kib = procfs.rss_kib(pids)
    result.peak_rss_kib = procfs.peak_rss_kib(pids)
    result.threads = procfs.threads(pids)
    if scenario.fresh_server and not scenario.warm:
        result.start_rss_kib = rss_before  # nothing served yet: what starting it took
    if anon_idle is not None:
        # Anonymous memory only: a file page of the program faulted in meanwhile is not a
        # connection's, and VmRSS's file part moves by megabytes between starts of one server.
        result.idle_bytes_per_connection = (anon_idle - anon_before) * 1024 / max(idle_held, 1)
        result.idle_held = idle_held
    return result


def count_syscalls(ctx, server, scenario, serve_root):
    """System calls per request, from a separate unmeasured run with `perf stat` attached (tracing
    system calls slows each one a little, so the measured runs go without it)."""
    duration = max(0.3, min(2.0, scenario.duration(ctx.args) / 2))  # a count needs less time than a rate
    # h2load without its warm-up: perf counts from start to end, handshakes included, as with ringd-load.
    generator, cmd = _generator(ctx, server, scenario, serve_root, duration, h2load_warm_up_s=0)
    counter = procfs.SyscallCounter()
    counter.start(server.pids())
    time.sleep(0.2)  # perf attaches before the load starts
    try:
        out = subprocess.run(cmd, stdout=subprocess.PIPE, text=True, timeout=duration + 90).stdout
    except subprocess.TimeoutExpired:
        out = ""
    n = counter.stop()
    try:
        r = _parse(generator, out, _protocol(server, scenario) if scenario.http2 else None)
    except ParseError:
        return None
    return n / r.requests if n is not None and r.requests else None
