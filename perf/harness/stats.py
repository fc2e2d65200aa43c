"""Medians, ranges and ratios over repeated runs.

    s = summarize_runs(results)        # {figure: {"median", "min", "max", "n"} or None}
    ratio(s["rps"], nginx["rps"])      # median over median, None if either is missing or zero
    by_round(runs, nginx_runs, "cpu_us_per_request")  # the same ratio round by round, summarized
    round_order(servers, rep)          # the order of the servers in round `rep`
"""
import statistics


def summarize(values):
    """Median, min, max and count of the values that are known (None is left out)."""
    values = [v for v in values if v is not None]
    if not values:
        return None
    return {"median": statistics.median(values), "min": min(values), "max": max(values), "n": len(values)}


def summarize_runs(results):
    """One summary per figure over the repeated runs (Result objects) of one server."""
    figs = [r.figures() for r in results]
    keys = dict.fromkeys(k for f in figs for k in f)  # a failed run may lack some
    return {k: summarize([f.get(k) for f in figs]) for k in keys}


def ratio(value, base):
    """value's median over base's median."""
    if not value or not base or not base["median"]:
        return None
    return value["median"] / base["median"]


def round_order(items, rep):
    """The order of one round of interleaved repeats: every other round reversed (A, B, C, C, B,
    A, ...). Where a server stands in a round changes what it is measured against: the run before
    it leaves TIME_WAIT sockets, reclaimable memory and warm or cold caches behind. In a fixed
    order the same server always follows the same one and a small lead can be the order's (two
    io tiers measured in pairs of runs, one order then the other: in one order each tier looked
    1-2% cheaper when it ran second). Over an even number of rounds every server stands, on
    average, in the middle, and follows each neighbour as often as it precedes it."""
    return list(items) if rep % 2 == 0 else list(reversed(items))


def by_round(runs, base_runs, key):
    """`key` over the base's, round by round, summarized (median, min, max, n); None with fewer than
    two rounds where both ran whole and measured it. The i-th run of every server belongs to one round of the
    interleaved repeats, so a ratio within a round leaves out what drifted between rounds (the
    machine's own speed, other tenants), and its range says whether a lead holds in every round."""
    pairs = [(r.figures().get(key), b.figures().get(key)) for r, b in zip(runs, base_runs)
             if not r.failed and not b.failed]
    s = summarize([v / b for v, b in pairs if v is not None and b])
    return s if s and s["n"] >= 2 else None
