"""report.md and the charts, from raw.json alone, and the well-formedness check of a results folder.

    write(outdir)              # reads outdir/raw.json, writes report.md and *.svg
    render(raw) -> str         # the Markdown, for tests
    check(outdir) -> [problem, ...]

No path of the machine that ran it reaches the report: commands are shown with PORT, DATA (the
document root) and servers/ (the configs beside the report) in place of what they were.
"""
import json
import os
import re
import tempfile
import xml.dom.minidom

from . import charts
from .peers import PEERS
from .result import Result
from .scenarios import SCENARIOS, Column
from .stats import by_round, ratio, summarize_runs

MACHINE_KEYS = ("machine", "cpus", "kernel", "server_cpus", "client_cpus", "shards", "generator", "ringd",
                "nginx", "h2o", "lighttpd", "cold_disk")
# Shown only where a run recorded them (some checked-in raw.json files have none).
OPTIONAL_MACHINE_KEYS = ("client_threads", "congestion_control", "syscalls", "skipped", "haproxy", "openssl",
                         "tls", "aes_128_gcm")
OPTIONAL_COLUMNS = (
    Column("syscalls/request", "syscalls_per_request", "%.2f"),
    Column("context switches/request", "ctx_switches_per_request", "%.3f"),
    Column("threads", "threads", "%d"),
    Column("peak RSS MiB", "peak_rss_kib", "%.1f", 1024),
    Column("RSS after start MiB", "start_rss_kib", "%.1f", 1024),
)
CHARTS = ("throughput.svg", "latency.svg", "cold.svg")


def scrub(cmd):
    """A command as the report shows it: no temporary or machine paths, no port numbers."""
    cmd = re.sub(r"\S*/ringd-perf-bin-[^/ ]*/", "", cmd)  # the harness's copies of our binaries
    cmd = re.sub(r"\S*/ringd-load", "ringd-load", cmd)
    cmd = re.sub(r"127\.0\.0\.1:\d+", "127.0.0.1:PORT", cmd)
    cmd = re.sub(r"--port \d+", "--port PORT", cmd)
    cmd = re.sub(r"--paths-file \S*/", "--paths-file DATA/", cmd)
    cmd = re.sub(r"--root \S+", "--root DATA", cmd)
    cmd = re.sub(r"\S*/perf/harness/", "perf/harness/", cmd)  # the fleet launcher
    cmd = re.sub(r"--confdir \S+", "--confdir servers", cmd)
    cmd = re.sub(r"(?<!\S)/\S*/(tls/[\w.-]+\.pem)", r"\1", cmd)  # the run's certificate and key
    return re.sub(r"(?<!\S)/\S*/servers(?=/|\s|$)", "servers", cmd)


def load_raw(outdir):
    with open(os.path.join(outdir, "raw.json")) as f:
        raw = json.load(f)
    results = {scenario: {server: [Result.from_dict(r) for r in runs] for server, runs in per_server.items()}
               for scenario, per_server in raw["results"].items()}
    return raw["meta"], results


def summaries(results):
    return {scenario: {server: summarize_runs(runs) for server, runs in per_server.items()}
            for scenario, per_server in results.items()}


def _cell(summary, column):
    v = summary.get(column.key)
    if column.key2:
        v2 = summary.get(column.key2)
        return "%s / %s" % (column.fmt % (v["median"] / column.per) if v else "-",
                            column.fmt % (v2["median"] / column.per) if v2 else "-") if v or v2 else ""
    return column.fmt % (v["median"] / column.per) if v else ""


def _range(s):
    """A ratio's median and range over the rounds: 0.95 [0.91-1.02]."""
    return "%.2f [%.2f-%.2f]" % (s["median"], s["min"], s["max"]) if s else ""


def _ratio_cells(s, metric, others, cpu_others):
    """The scenario's extra ratios (Scenario.ratio_to, cpu_ratio_to) for one row."""
    cells = []
    for base, key in [(b, metric.key) for b in others] + [(b, "cpu_us_per_request") for b in cpu_others]:
        r = ratio(s.get(key), base)
        cells.append("" if r is None else "%.3g" % r)
    return cells


def _table(scenario, per_server, summary, meta=None):
    metric = scenario.metric
    nginx = summary.get("nginx", {}).get(metric.key)
    reference = summary.get(scenario.reference, {}).get(metric.key) if scenario.reference else None
    # Ratios to more peers, where they ran (a TLS table: x h2o, CPU x nginx, ...).
    ratio_to = [p for p in scenario.ratio_to if summary.get(p, {}).get(metric.key)]
    cpu_ratio_to = [p for p in scenario.cpu_ratio_to if summary.get(p, {}).get("cpu_us_per_request")]
    others = [summary[p][metric.key] for p in ratio_to]
    cpu_others = [summary[p]["cpu_us_per_request"] for p in cpu_ratio_to]
    meta_value = (meta or {}).get(scenario.meta_reference[0]) if scenario.meta_reference else None
    extra = list(scenario.columns) + [c for c in OPTIONAL_COLUMNS
                                      if any(s.get(c.key) for s in summary.values())]
    # CPU per request over nginx's within each round of the interleaved repeats (stats.by_round).
    rounds = {server: by_round(runs, per_server["nginx"], "cpu_us_per_request")
              for server, runs in per_server.items()} if scenario.cpu_column and "nginx" in per_server else {}
    by_rounds = any(rounds.values())
    # Where CPU per request is the main figure (h2-small), its column is not repeated.
    cpu_main = metric.key == "cpu_us_per_request"
    cols = ["server", metric.label, "x nginx"] + ["x %s" % p for p in ratio_to] + (
        ["fraction of %s" % scenario.reference] if reference else []) + (
        [scenario.meta_reference[1]] if meta_value else []) + (
        [] if cpu_main else ["CPU us/request"]) + (["CPU x nginx by round"] if by_rounds else []) + [
        "CPU x %s" % p for p in cpu_ratio_to] + [
        "server CPU %", "p50 ms", "p99 ms", "errors"]
    lines = ["| " + " | ".join(cols + [c.header for c in extra]) + " |",
             "|" + " --- |" * (len(cols) + len(extra))]
    for server, s in summary.items():
        m = s.get(metric.key)
        r = ratio(m, nginx)
        shown = "" if r is None else "%.3g" % r + ("" if metric.higher_is_better else " (lower is better)")
        main = "%.1f [%.1f-%.1f]" % (m["median"] * metric.scale, m["min"] * metric.scale,
                                     m["max"] * metric.scale) if m else ""
        failures = sum(1 for r in per_server[server] if r.failed)
        if failures:  # a failed run is in the figure as no rate and no latency: said beside it
            main += "%s(%d of %d runs failed)" % (" " if main else "", failures, len(per_server[server]))
        cpu = s.get("cpu_us_per_request")
        busy = s.get("server_cpu_percent")
        p50, p99 = s.get("p50_us"), s.get("p99_us")
        fraction = ratio(m, reference)
        ratios = _ratio_cells(s, metric, others, cpu_others)
        of_meta = ["%.2f" % (m["median"] / meta_value) if m else ""] if meta_value else []
        row = [server, main, shown] + ratios[:len(others)] + (
               ["%.2f" % fraction if fraction is not None else ""] if reference else []) + of_meta + ([] if cpu_main else [
               ("%.2f" % cpu["median"] if cpu else "") if scenario.cpu_column else "-"]) + (
               [_range(rounds.get(server))] if by_rounds else []) + ratios[len(others):] + [
               "%.0f" % busy["median"] if busy else "",
               "%.2f" % (p50["median"] / 1000) if p50 else "", "%.2f" % (p99["median"] / 1000) if p99 else "",
               "%d" % s["errors"]["median"]]
        lines.append("| " + " | ".join(row + [
            _range(by_round(per_server[server], per_server["nginx"], c.key)) if c.by_round and "nginx" in per_server
            else "" if c.by_round else _cell(s, c) for c in extra]) + " |")
    return lines


def render(meta, results):
    """The Markdown report."""
    summary = summaries(results)
    lines = ["# ringd perf report", "",
             "Run %s on %s; every figure is the median of %d interleaved runs of %s s (min-max in brackets),"
             " and a ratio to nginx measured in the same run." % (
                 meta["started"], meta["machine"], meta["repeats"], meta["duration_s"]), "",
             "| machine | |", "| --- | --- |"]
    for k in MACHINE_KEYS:
        lines.append("| %s | %s |" % (k, meta.get(k, "")))
    for k in OPTIONAL_MACHINE_KEYS:
        if k in meta:
            v = meta[k]
            lines.append("| %s | %s |" % (k, "; ".join("%s: %s" % i for i in v.items()) if isinstance(v, dict) else v))
    lines.append("")
    for name, per_server in results.items():
        scenario = SCENARIOS[name]
        lines += ["## %s" % name, "", scenario.what + ". Seed: " + scenario.seed + ".", ""]
        lines += _table(scenario, per_server, summary[name], meta)
        first = next(iter(per_server.values()))[0]
        lines += ["", "Load: `%s`" % scrub(first.command or "")]
        if first.cold_command:
            lines.append("%s: `%s`" % (scenario.background_label, scrub(first.cold_command)))
        if name in meta.get("slow_disk", {}):
            lines.append("Disk: " + meta["slow_disk"][name] + ".")
        lines += list(scenario.notes)
        if scenario.reference in per_server and scenario.reference_note:
            lines.append(scenario.reference_note)
        lines.append("")
    lines += ["## Commands", "", "Servers (configs in `servers/`):", ""]
    for server, cmd in meta["server_commands"].items():
        lines.append("- %s: `%s`" % (server, scrub(cmd)))
    lines += ["", "Charts: " + ", ".join("[%s](%s)" % (c, c) for c in CHARTS), ""]
    return "\n".join(lines)


def write_charts(outdir, results):
    """Throughput as a ratio to nginx per scenario; latency percentiles at a fixed rate; the cold
    scenario's hot-request latency."""
    summary = summaries(results)
    order = list(PEERS)
    # Scenarios without nginx (the fleet) have no ratio to show here.
    groups = [s for s in results if s not in ("latency-at-rate", "cold") and "nginx" in summary[s]]
    servers = sorted({srv for s in groups for srv in summary[s]},
                     key=lambda n: order.index(n) if n in order else len(order))
    vals = {}
    for s in groups:
        key = SCENARIOS[s].metric.key
        base = summary[s].get("nginx", {}).get(key)
        for srv in servers:
            vals[(s, srv)] = ratio(summary[s].get(srv, {}).get(key), base)
    charts.svg(os.path.join(outdir, "throughput.svg"), "Throughput, x nginx (higher is better)", groups,
               servers, vals)
    for name, title, pct in (
            ("latency-at-rate", "latency-at-rate: percentiles, ms (lower is better)",
             ["p50_us", "p90_us", "p99_us", "p999_us"]),
            ("cold", "cold: hot-request latency, ms (lower is better)", ["p50_us", "p99_us"])):
        path = os.path.join(outdir, "latency.svg" if name == "latency-at-rate" else "cold.svg")
        if name not in summary:
            charts.svg(path, "%s: not run" % name, [], [], {})
            continue
        srvs = list(summary[name])
        v = {(p, srv): summary[name][srv][p]["median"] / 1000 if summary[name][srv].get(p) else None
             for p in pct for srv in srvs}
        charts.svg(path, title, pct, srvs, v)


def write(outdir):
    """report.md and the charts from outdir/raw.json."""
    meta, results = load_raw(outdir)
    with open(os.path.join(outdir, "report.md"), "w") as f:
        f.write(render(meta, results))
    write_charts(outdir, results)


def machine_paths(text):
    """Absolute paths of this machine's working folders that a report must not contain."""
    repo = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    found = [p for p in (repo + "/", tempfile.gettempdir() + "/") if p in text]
    return found + re.findall(r"(?<![\w.])/(?:home|root|work)/\S+", text)[:1]


def check(outdir):
    """Checks that a results folder is complete and well formed (not what the numbers are)."""
    problems = []
    try:
        with open(os.path.join(outdir, "raw.json")) as f:
            raw = json.load(f)
    except (OSError, ValueError) as e:
        return ["raw.json: %s" % e]
    try:
        with open(os.path.join(outdir, "report.md")) as f:
            report = f.read()
    except OSError:
        report = ""
    if not report.startswith("# ringd perf report"):
        problems.append("report.md missing or without its title")
    for path in machine_paths(report):
        problems.append("report.md names a path of this machine: %s" % path)
    for scenario, per_server in raw["results"].items():
        if "## %s" % scenario not in report:
            problems.append("report.md has no section for %s" % scenario)
        for server, runs in per_server.items():
            for r in runs:
                for k in ("requests", "rps", "latency_us", "errors", "status", "cpu_us_per_request"):
                    if k not in r:
                        problems.append("%s/%s: no %s" % (scenario, server, k))
                # Zero requests with errors is a measurement (a server that could not cope); zero
                # with no errors at all means the run did not happen.
                if r.get("requests", 0) <= 0 and "failed" not in r and not sum(r.get("errors", {}).values()):
                    problems.append("%s/%s: no requests completed" % (scenario, server))
            if "| %s |" % server not in report:
                problems.append("report.md: no row for %s in %s" % (server, scenario))
        problems += _check_tls(scenario, per_server, raw["meta"])
        problems += _check_http2(scenario, per_server)
    for chart in CHARTS:
        try:
            xml.dom.minidom.parse(os.path.join(outdir, chart))
        except Exception as e:  # any parse failure is a problem to report, not to raise
            problems.append("%s: %s" % (chart, e))
    problems += too_large(outdir)
    return problems


def _check_tls(scenario, per_server, meta):
    """A TLS scenario measured TLS: every run the client made over TLS counted handshakes (and a
    resumed scenario resumed some), the plaintext floor none, and tls-large has its reference."""
    s = SCENARIOS.get(scenario)
    if s is None or not s.tls:
        return []
    problems = []
    for server, runs in per_server.items():
        peer = PEERS.get(server)
        over_tls = peer is None or peer.serves_tls(s)
        for i, r in enumerate(runs):
            if r.get("failed") or r.get("generator") != "ringd-load":
                continue  # wrk says nothing of handshakes
            handshakes = r.get("tls_handshakes")
            # No handshake with errors is a server that could not cope (a measurement); with
            # none, the client never spoke TLS.
            if over_tls and not handshakes and not sum((r.get("errors") or {}).values()):
                problems.append("%s/%s run %d: no TLS handshake counted (was it HTTPS?)" % (scenario, server, i + 1))
            elif not over_tls and handshakes:
                problems.append("%s/%s run %d: TLS handshakes on the plaintext floor" % (scenario, server, i + 1))
            elif over_tls and s.load.tls_resume and not r.get("tls_resumed"):
                problems.append("%s/%s run %d: no handshake resumed" % (scenario, server, i + 1))
    if s.meta_reference and not meta.get(s.meta_reference[0]):
        problems.append("%s: no %s in the run's meta (openssl speed)" % (scenario, s.meta_reference[0]))
    return problems


def _check_http2(scenario, per_server):
    """An HTTP/2 scenario measured HTTP/2: every run that did not fail says its connections spoke
    h2 (TLS) or h2c (plaintext), as parse_h2load checked when it ran."""
    s = SCENARIOS.get(scenario)
    if s is None or not s.http2:
        return []
    problems = []
    for server, runs in per_server.items():
        peer = PEERS.get(server)
        want = "h2" if peer is None or peer.serves_tls(s) else "h2c"
        for i, r in enumerate(runs):
            if not r.get("failed") and r.get("protocol") != want:
                problems.append("%s/%s run %d: spoke %s, not %s" % (scenario, server, i + 1, r.get("protocol"), want))
    return problems


# A results folder is checked in and is small (under a megabyte for a whole run); a server's
# access log left in it would make it hundreds of megabytes, past what a submission may carry.
MAX_RESULTS_BYTES = 8 << 20


def too_large(outdir):
    sizes = []
    for dirpath, _, files in os.walk(outdir):
        for name in files:
            path = os.path.join(dirpath, name)
            sizes.append((os.path.getsize(path), os.path.relpath(path, outdir)))
    total = sum(size for size, _ in sizes)
    if total <= MAX_RESULTS_BYTES:
        return []
    size, name = max(sizes)
    return ["the folder holds %.1f MB, more than %d MB to check in (largest: %s, %.1f MB)" % (
        total / 1e6, MAX_RESULTS_BYTES >> 20, name, size / 1e6)]
