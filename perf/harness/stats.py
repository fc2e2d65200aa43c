"""Medians, ranges and ratios over repeated runs.

    s = summarize_runs(results)        # {figure: {"median", "min", "max", "n"} or None}
    ratio(s["rps"], nginx["rps"])      # median over median, None if either is missing or zero
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
