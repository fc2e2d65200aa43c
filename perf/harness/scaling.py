"""perf/scaling's plan and report: which shard counts a machine can run, and the table and chart of
each server's rate against its cores, from the perf/run result folders (shards-N/raw.json).

    plan(16)   # [(1, "8", "0-7", 8), (2, "8-9", "0-7", 8), (4, ...), (8, "8-15", "0-7", 8)]
    write(outdir)
"""
import os
import re

from . import charts
from .report import load_raw, summaries
from .scenarios import SCENARIOS


def plan(cpus):
    """(shards, server CPUs, client CPUs, client threads) for 1, 2, 4 ... shards up to half the
    CPUs; the client gets the other half, one thread per CPU."""
    half = max(1, cpus // 2)
    client = "0" if half == 1 else "0-%d" % (half - 1)
    out, n = [], 1
    while n <= half:
        server = str(half) if n == 1 else "%d-%d" % (half, half + n - 1)
        out.append((n, server, client, half))
        n *= 2
    return out


def note(cpus):
    shards = [p[0] for p in plan(cpus)]
    if len(shards) == 1:
        return ("This machine has %d CPUs: only 1 shard was run (shard counts go up to half the CPUs; the"
                " load generator gets the other half). Run perf/scaling on a machine with 4 or more CPUs"
                " for a curve." % cpus)
    return "Shard counts %s on %d CPUs; the load generator gets the other half." % (
        ", ".join(map(str, shards)), cpus)


def runs(outdir):
    """{shards: (meta, results)} for every shards-N folder."""
    out = {}
    for d in os.listdir(outdir):
        m = re.fullmatch(r"shards-(\d+)", d)
        if m and os.path.exists(os.path.join(outdir, d, "raw.json")):
            out[int(m.group(1))] = load_raw(os.path.join(outdir, d))
    return dict(sorted(out.items()))


def table(per_shards):
    """{scenario: {server: {shards: median of the main metric}}}"""
    out = {}
    for shards, (_, results) in per_shards.items():
        for scenario, per_server in summaries(results).items():
            key = SCENARIOS[scenario].metric.key
            for server, s in per_server.items():
                if s.get(key):
                    out.setdefault(scenario, {}).setdefault(server, {})[shards] = s[key]["median"]
    return out


def render(per_shards, cpus):
    t = table(per_shards)
    shard_counts = list(per_shards)
    lines = ["# ringd scaling report", "", note(cpus), ""]
    if per_shards:
        meta = next(iter(per_shards.values()))[0]
        lines += ["Machine: %s, kernel %s; each figure is the median of %d runs of %s s (perf/run)." % (
            meta["machine"], meta["kernel"], meta["repeats"], meta["duration_s"]), ""]
    for scenario, per_server in t.items():
        metric = SCENARIOS[scenario].metric
        lines += ["## %s: %s" % (scenario, metric.label), "",
                  "| server | " + " | ".join("%d shard%s" % (n, "" if n == 1 else "s") for n in shard_counts)
                  + " | x 1 shard at the most |",
                  "|" + " --- |" * (len(shard_counts) + 2)]
        for server, by_n in per_server.items():
            cells = ["%.1f" % (by_n[n] * metric.scale) if n in by_n else "" for n in shard_counts]
            top = max(shard_counts) if shard_counts else None
            gain = "%.2f" % (by_n[top] / by_n[1]) if by_n.get(1) and top in by_n else ""
            lines.append("| %s | %s | %s |" % (server, " | ".join(cells), gain))
        lines.append("")
    lines += ["Per shard count: `shards-N/report.md`. Chart: [scaling.svg](scaling.svg)", ""]
    return "\n".join(lines)


def write(outdir, cpus):
    per_shards = runs(outdir)
    with open(os.path.join(outdir, "scaling.md"), "w") as f:
        f.write(render(per_shards, cpus))
    t = table(per_shards)
    groups = ["%s, %d" % (s, n) for s in t for n in per_shards]
    servers = list(dict.fromkeys(srv for per in t.values() for srv in per))
    vals = {}
    for s, per in t.items():
        for srv, by_n in per.items():
            for n, v in by_n.items():
                base = by_n.get(1)
                vals[("%s, %d" % (s, n), srv)] = v / base if base else None
    charts.svg(os.path.join(outdir, "scaling.svg"), "Rate vs shards, x the same server on 1 shard",
               groups, servers, vals)
