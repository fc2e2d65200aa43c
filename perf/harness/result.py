"""One result schema for every measured run: ringd-load's JSON, wrk's text report and a run that
failed all become a `Result`; raw.json holds them as dicts (`to_dict` / `from_dict`).

    r = parse_ringd_load(stdout)          # or parse_wrk(stdout), parse_h2load(stdout, "h2"), or failed("why")
    r.figures()["p99_us"]                 # the figures the report summarizes, None where not known

Latencies are microseconds. p99 means the same for every generator: the latency that 99% of the
completed requests did not exceed, as the generator itself reports it (ringd-load: its histogram's
p99 field, at most 1.6% above the exact value; wrk: its `99%` line from --latency). A figure a
generator does not give (wrk has no p99.9) is None, never a copy of another one.
"""
import dataclasses
import json
import math
import re
from dataclasses import dataclass, field
from typing import Dict, Optional

ERROR_KINDS = ("connect", "reset", "timeout", "parse", "eof")


class ParseError(ValueError):
    """A load generator's output that does not say what was measured."""


@dataclass
class Latency:
    mean: Optional[float] = None
    p50: Optional[float] = None
    p90: Optional[float] = None
    p99: Optional[float] = None
    p999: Optional[float] = None
    max: Optional[float] = None


@dataclass
class SmallLatency:
    """Latency of one size class (ringd-load only): the responses with bodies under 1 MiB
    (latency_small_us), or the rest (latency_large_us)."""
    count: int = 0
    p50: Optional[float] = None
    p99: Optional[float] = None
    mean: Optional[float] = None
    max: Optional[float] = None


@dataclass
class Result:
    generator: str = "ringd-load"
    requests: int = 0
    seconds: float = 0.0
    rps: float = 0.0
    bytes: float = 0
    bytes_per_s: float = 0
    idle_held: int = 0
    latency_us: Latency = field(default_factory=Latency)
    latency_small_us: Optional[SmallLatency] = None
    latency_large_us: Optional[SmallLatency] = None
    errors: Dict[str, int] = field(default_factory=lambda: {k: 0 for k in ERROR_KINDS})
    status: Dict[str, int] = field(default_factory=dict)
    failed: Optional[str] = None
    # Filled in by the harness (measure.py), about the server during the run.
    command: Optional[str] = None
    cpu_s: Optional[float] = None
    cpu_us_per_request: Optional[float] = None
    # A server made of several programs (the fleet: haproxy, ringd): CPU us/request of each.
    cpu_us_per_request_by: Optional[Dict[str, float]] = None
    client_cpu_us_per_request: Optional[float] = None  # the load generator's
    # Everything the server's cores did per request (procfs.core_busy_ticks): the server's threads
    # and what no process is charged for (softirqs, ksoftirqd), and anything else that ran there.
    core_us_per_request: Optional[float] = None
    server_cpu_percent: Optional[float] = None
    packets_per_request: Optional[float] = None
    rss_kib: Optional[int] = None
    # RSS of a freshly started server that has served nothing yet, before the load (idle-fresh).
    start_rss_kib: Optional[int] = None
    idle_bytes_per_connection: Optional[float] = None
    syscalls_per_request: Optional[float] = None
    ctx_switches_per_request: Optional[float] = None
    threads: Optional[int] = None
    peak_rss_kib: Optional[int] = None
    # A second load run at the same time (the cold scenario's cold readers).
    cold: Optional["Result"] = None
    cold_command: Optional[str] = None
    # Latency per body-size class (ringd-load --size-classes): [{"below", "count", "p50", "p99"}],
    # "below" 0 for the last class (no upper bound).
    latency_by_size_us: Optional[list] = None
    # The slow disk's side of the run (longtail): what the loop device read while it ran, and the
    # file pages charged to the server's memory cgroup at its end.
    disk_read_bytes: Optional[int] = None
    disk_read_ios: Optional[int] = None
    page_cache_mib: Optional[float] = None
    # ringd-load --tls: handshakes completed in the run, how many resumed a session, and what the
    # first one negotiated (its "tls" object). None over plaintext and from wrk.
    tls_handshakes: Optional[int] = None
    tls_resumed: Optional[int] = None
    tls_version: Optional[str] = None
    tls_cipher: Optional[str] = None
    tls_group: Optional[str] = None
    # h2load: the protocol the connections spoke ("h2" by ALPN over TLS, "h2c" in plaintext).
    protocol: Optional[str] = None

    @property
    def non_2xx(self):
        return sum(n for code, n in self.status.items() if not code.startswith(("2", "3")))

    @property
    def error_count(self):
        return sum(self.errors.values()) + self.non_2xx

    def figures(self):
        """The per-run figures the report takes medians of; None where not measured."""
        lat, small, large = self.latency_us, self.latency_small_us, self.latency_large_us
        return {
            "rps": self.rps, "bytes_per_s": self.bytes_per_s,
            "cpu_us_per_request": self.cpu_us_per_request,
            "p50_us": lat.p50, "p90_us": lat.p90, "p99_us": lat.p99, "p999_us": lat.p999,
            "max_us": lat.max, "rss_kib": self.rss_kib, "errors": self.error_count,
            "server_cpu_percent": self.server_cpu_percent,
            "packets_per_request": self.packets_per_request,
            "p99_small_us": small.p99 if small and small.count else None,
            "mean_us": lat.mean,
            "p99_large_us": large.p99 if large and large.count else None,
            "mean_large_us": large.mean if large and large.count else None,
            "idle_bytes_per_connection": self.idle_bytes_per_connection,
            "idle_held": self.idle_held or None,
            "cold_bytes_per_s": self.cold.bytes_per_s if self.cold else None,
            "background_rps": self.cold.rps if self.cold else None,
            "syscalls_per_request": self.syscalls_per_request,
            "ctx_switches_per_request": self.ctx_switches_per_request,
            "threads": self.threads, "peak_rss_kib": self.peak_rss_kib,
            "start_rss_kib": self.start_rss_kib,
            "mean_us": lat.mean, "page_cache_mib": self.page_cache_mib,
            **self._disk_figures(), **self._size_class_figures(),
            "client_cpu_us_per_request": self.client_cpu_us_per_request,
            "core_us_per_request": self.core_us_per_request,
            "tls_handshakes_per_s": self.tls_handshakes / self.seconds
            if self.tls_handshakes is not None and self.seconds else None,
            # Handshakes per second of the server process's CPU time (over the same window as CPU
            # per request, so about 1e6 / that): the handshake scenarios are bound by the client's
            # core, which does as much cryptography as the server's. Kernel work that loopback
            # charges to the client's side is in neither.
            "tls_handshakes_per_cpu_s": self.tls_handshakes / self.cpu_s
            if self.tls_handshakes and self.cpu_s else None,
            "tls_resumed_percent": 100 * self.tls_resumed / self.tls_handshakes
            if self.tls_handshakes and self.tls_resumed is not None else None,
            **{"cpu_us_per_request_%s" % k: v for k, v in (self.cpu_us_per_request_by or {}).items()},
        }

    def _disk_figures(self):
        """Read amplification is disk bytes read over bytes served; the page-cache hit ratio (by
        bytes) is one minus it, floored at 0: read-ahead that nobody asked for counts as a miss."""
        served = self.bytes + (self.cold.bytes if self.cold else 0)  # the cold readers' bytes too
        if self.disk_read_bytes is None or not served:
            return {}
        amplification = self.disk_read_bytes / served
        return {"read_amplification": amplification, "page_cache_hit_ratio": max(0.0, 1 - amplification),
                "disk_bytes_per_s": self.disk_read_bytes / self.seconds if self.seconds else None}

    def _size_class_figures(self):
        out = {}
        for k, c in enumerate(self.latency_by_size_us or []):
            counted = c.get("count")
            out["p50_class%d_us" % k] = c.get("p50") if counted else None
            out["p99_class%d_us" % k] = c.get("p99") if counted else None
            out["share_class%d" % k] = counted / self.requests if counted and self.requests else None
        return out

    def to_dict(self):
        """As raw.json stores it: fields that are None are left out."""
        def strip(v):
            if isinstance(v, dict):
                return {k: strip(x) for k, x in v.items() if x is not None}
            return v
        d = strip(dataclasses.asdict(self))
        d["non_2xx"] = self.non_2xx
        return d

    @classmethod
    def from_dict(cls, d):
        """Reads a run back from raw.json (older files included: unknown keys are ignored)."""
        names = {f.name for f in dataclasses.fields(cls)}
        kw = {k: v for k, v in d.items() if k in names}
        kw["latency_us"] = _dataclass(Latency, d.get("latency_us") or {})
        for key in ("latency_small_us", "latency_large_us"):
            if d.get(key) is not None:
                kw[key] = _dataclass(SmallLatency, d[key])
        if d.get("cold") is not None:
            kw["cold"] = cls.from_dict(d["cold"])
        errors = {k: 0 for k in ERROR_KINDS}
        errors.update(d.get("errors") or {})
        kw["errors"] = errors
        return cls(**kw)


def _dataclass(cls, d):
    names = {f.name for f in dataclasses.fields(cls)}
    return cls(**{k: v for k, v in d.items() if k in names})


def failed(reason, kind="timeout", generator="ringd-load"):
    """A run that measured nothing: no rate, no latency, one error of `kind`."""
    r = Result(generator=generator, failed=reason)
    r.errors[kind] = 1
    return r


def _number(d, key, default=0):
    v = d.get(key, default)
    if v is None:
        return default
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        raise ParseError("%s is not a number: %r" % (key, v))
    return v


def parse_ringd_load(text, generator="ringd-load"):
    """ringd-load prints progress lines (IDLE_READY N) and ends with one JSON object. Takes the last
    line that is a JSON object with a request count; anything else raises ParseError."""
    for line in reversed((text or "").strip().splitlines()):
        line = line.strip()
        if not line.startswith("{"):
            continue
        try:
            d = json.loads(line)
        except ValueError:
            continue
        if isinstance(d, dict) and "requests" in d:
            break
    else:
        raise ParseError("no JSON result line in the output (%d bytes)" % len(text or ""))
    lat = d.get("latency_us") if isinstance(d.get("latency_us"), dict) else {}
    def size_class(key):
        c = d.get(key) if isinstance(d.get(key), dict) else None
        if c is None:
            return None
        return SmallLatency(int(_number(c, "count")), _number(c, "p50", None), _number(c, "p99", None),
                            _number(c, "mean", None), _number(c, "max", None))
    errors = {k: 0 for k in ERROR_KINDS}
    for k, v in (d.get("errors") or {}).items():
        errors[str(k)] = int(v)
    status = {str(k): int(v) for k, v in (d.get("status") or {}).items()}
    tls = d.get("tls")
    if tls is not None and not isinstance(tls, dict):
        raise ParseError("tls is not an object: %r" % (tls,))
    tls_fields = {} if tls is None else dict(
        tls_handshakes=int(_number(tls, "handshakes")), tls_resumed=int(_number(tls, "resumed")),
        tls_version=_text(tls, "version"), tls_cipher=_text(tls, "cipher"), tls_group=_text(tls, "group"))
    return Result(
        generator=generator, requests=int(_number(d, "requests")), seconds=_number(d, "seconds"),
        rps=_number(d, "rps"), bytes=_number(d, "bytes"), bytes_per_s=_number(d, "bytes_per_s"),
        idle_held=int(_number(d, "idle_held")),
        latency_us=Latency(**{k: _number(lat, k, None) for k in ("mean", "p50", "p90", "p99", "p999", "max")}),
        latency_small_us=size_class("latency_small_us"), latency_large_us=size_class("latency_large_us"),
        errors=errors, status=status, latency_by_size_us=_size_classes(d.get("latency_by_size_us")),
        **tls_fields)


def _text(d, key):
    v = d.get(key)
    if v is not None and not isinstance(v, str):
        raise ParseError("%s is not a string: %r" % (key, v))
    return v or None


def _size_classes(v):
    if v is None:
        return None
    if not isinstance(v, list) or not all(isinstance(c, dict) for c in v):
        raise ParseError("latency_by_size_us is not a list of objects: %r" % (v,))
    return [{k: _number(c, k, None) for k in ("below", "count", "p50", "p99")} for c in v]


_UNIT_US = {"us": 1, "ms": 1e3, "s": 1e6, "m": 60e6, "h": 3600e6}
_UNIT_BYTES = {"B": 1, "KB": 1 << 10, "MB": 1 << 20, "GB": 1 << 30, "TB": 1 << 40}
_TIME = r"([\d.]+)(us|ms|s|m|h)"


def _us(value, unit):
    """wrk prints two decimals: keep what it said, not the float noise of the conversion."""
    return round(float(value) * _UNIT_US[unit], 6)


def parse_wrk(text):
    """wrk 4's text report (run with --latency) as a Result."""
    m = re.search(r"(\d+) requests in " + _TIME + r", ([\d.]+)(B|KB|MB|GB|TB) read", text)
    if not m:
        raise ParseError("no 'N requests in T, B read' line in wrk's output")
    requests = int(m.group(1))
    seconds = float(m.group(2)) * _UNIT_US[m.group(3)] / 1e6
    total = float(m.group(4)) * _UNIT_BYTES[m.group(5)]
    if seconds <= 0:
        raise ParseError("wrk ran for %s%s" % (m.group(2), m.group(3)))

    def percentile(pattern):
        # One line per percentile, "     99%    1.12ms"; anchored so that 99% never reads 99.9%.
        p = re.search(r"^\s*%s%%\s+%s\s*$" % (pattern, _TIME), text, re.M)
        return _us(p.group(1), p.group(2)) if p else None

    lat = Latency(p50=percentile(r"50(?:\.0+)?"), p90=percentile(r"90(?:\.0+)?"),
                  p99=percentile(r"99(?:\.0+)?"), p999=percentile(r"99\.90*"))
    m = re.search(r"^\s*Latency\s+%s\s+%s\s+%s" % (_TIME, _TIME, _TIME), text, re.M)
    if m:
        lat.mean, lat.max = _us(m.group(1), m.group(2)), _us(m.group(5), m.group(6))
    errors = {k: 0 for k in ERROR_KINDS}
    m = re.search(r"Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)", text)
    if m:
        errors.update(connect=int(m.group(1)), reset=int(m.group(2)) + int(m.group(3)),
                      timeout=int(m.group(4)))
    m = re.search(r"Non-2xx or 3xx responses: (\d+)", text)
    non2xx = int(m.group(1)) if m else 0
    status = {"200": requests - non2xx}
    if non2xx:
        status["500"] = non2xx  # wrk does not say which codes: counted as failures
    return Result(generator="wrk", requests=requests, seconds=seconds, rps=requests / seconds,
                  bytes=total, bytes_per_s=total / seconds, latency_us=lat, errors=errors,
                  status=status)


_H2LOAD_REQUESTS = re.compile(r"^requests: (\d+) total, (\d+) started, (\d+) done, (\d+) succeeded, (\d+) failed,"
                              r" (\d+) errored, (\d+) timeout", re.M)


def parse_h2load(text, protocol):
    """h2load's text report (nghttp2 1.52, timing-based: -D with --warm-up-time) as a Result; protocol
    is what the connections must have spoken ("h2" over TLS, "h2c" in plaintext). A run with any
    failed, errored or timed-out request, any 4xx or 5xx, no request done or another protocol is a
    failed Result (no rate, no latency): h2load counts only the requests that succeeded in its rate,
    so such a run's figures would describe some other load than the one asked for."""
    text = text or ""
    m = _H2LOAD_REQUESTS.search(text)
    if not m:
        raise ParseError("no 'requests: N total, ...' line in h2load's output")
    total, _, done, succeeded, failures, errored, timeouts = (int(g) for g in m.groups())
    codes = re.search(r"^status codes: (\d+) 2xx, (\d+) 3xx, (\d+) 4xx, (\d+) 5xx", text, re.M)
    if not codes:
        raise ParseError("no 'status codes:' line in h2load's output")
    status = {k: int(v) for k, v in zip(("2xx", "3xx", "4xx", "5xx"), codes.groups()) if int(v)}
    spoke = re.search(r"^Application protocol: (\S+)", text, re.M)
    spoke = spoke.group(1) if spoke else None
    why = []
    if failures or errored or timeouts:
        why.append("%d of %d requests failed (%d errored, %d timed out)" % (failures, total, errored, timeouts))
    bad = status.get("4xx", 0) + status.get("5xx", 0)
    if bad:
        why.append("%d responses were 4xx or 5xx" % bad)
    if spoke != protocol:
        why.append("the connections spoke %s, not %s" % (spoke or "no protocol h2load could use", protocol))
    if not done and not why:
        why.append("no request was done")
    if why:
        r = failed("h2load: " + "; ".join(why), generator="h2load")
        r.errors = {k: 0 for k in ERROR_KINDS}
        # One count of what went wrong: h2load's failed requests (its errored and timed-out ones
        # are among them), else one for the run; 4xx and 5xx count apart, as status (non_2xx).
        r.errors["failed"] = failures or errored + timeouts or (0 if bad else 1)
        r.status, r.protocol = status, spoke
        return r
    # With -D, h2load's rate and bytes are over the main duration only (the warm-up left out).
    main = re.search(r"and (\d+(?:\.\d+)?)(us|ms|s|m|h) of main duration", text)
    finished = re.search(r"^finished in " + _TIME + r", ([\d.]+) req/s", text, re.M)
    if not main and not finished:
        raise ParseError("no duration in h2load's output")
    seconds = _us(*main.groups()) / 1e6 if main else _us(finished.group(1), finished.group(2)) / 1e6
    if seconds <= 0:
        raise ParseError("h2load ran for %g s" % seconds)
    traffic = re.search(r"^traffic: \S+ \((\d+)\) total", text, re.M)
    total_bytes = int(traffic.group(1)) if traffic else 0
    lat = Latency()
    t = re.search(r"^time for request:\s+%s\s+%s\s+%s" % (_TIME, _TIME, _TIME), text, re.M)
    if t:
        lat.max, lat.mean = _us(t.group(3), t.group(4)), _us(t.group(5), t.group(6))
    tls = {}
    for key, pattern in (("tls_version", r"^TLS Protocol: (\S+)"), ("tls_cipher", r"^Cipher: (\S+)"),
                         ("tls_group", r"^Server Temp Key: (\S+)")):
        v = re.search(pattern, text, re.M)
        if v:
            tls[key] = v.group(1)
    return Result(generator="h2load", requests=succeeded, seconds=seconds, rps=succeeded / seconds,
                  bytes=total_bytes, bytes_per_s=total_bytes / seconds, latency_us=lat, status=status,
                  protocol=spoke, **tls)


def _nearest_rank(sorted_values, q):
    """The q-quantile (0 < q <= 1) of sorted values by nearest rank: a value that was measured."""
    return sorted_values[max(0, min(len(sorted_values) - 1, math.ceil(q * len(sorted_values)) - 1))]


def parse_h2page(text, protocol):
    """perf/harness/h2page.py's lines (one per page load) as a Result whose requests are page loads:
    rate, CPU and latency are per page (time to its last asset's last byte, connection included).
    Any failed page load, or one that spoke another protocol, fails the run."""
    text = text or ""
    times, requests, total_bytes, why = [], 0, 0, []
    for line in text.splitlines():
        if line.startswith("PAGE_FAILED"):
            why.append(line[len("PAGE_FAILED "):])
        elif line.startswith("PAGE "):
            us, n, b, spoke = line.split()[1:5]
            if spoke != protocol:
                why.append("a page load spoke %s, not %s" % (spoke, protocol))
            times.append(float(us))
            requests, total_bytes = requests + int(n), total_bytes + int(b)
    loads = re.search(r"^PAGES (\d+)$", text, re.M)
    if not loads:
        raise ParseError("no 'PAGES N' line in h2page.py's output")
    if why:
        r = failed("h2page: %d of %s page loads failed: %s" % (len(why), loads.group(1), why[0]),
                   generator="h2page")
        r.errors = {k: 0 for k in ERROR_KINDS}
        r.errors["failed"] = len(why)
        return r
    if not times:
        raise ParseError("h2page.py made no page load")
    seconds = sum(times) / 1e6  # loads run one after another: the time they took
    ordered = sorted(times)
    lat = Latency(mean=sum(times) / len(times), p50=_nearest_rank(ordered, 0.5),
                  p90=_nearest_rank(ordered, 0.9), p99=_nearest_rank(ordered, 0.99), max=ordered[-1])
    return Result(generator="h2page", requests=len(times), seconds=seconds, rps=len(times) / seconds,
                  bytes=total_bytes, bytes_per_s=total_bytes / seconds, latency_us=lat, protocol=protocol)
