"""The parts of the ringd perf harness (perf/run, perf/scaling): standard library only.

    result.py     the one result schema (Result) and the parsers that produce it
    scenarios.py  Scenario entries: load, main metric, extra columns, --quick scaling, hooks
    peers.py      Peer entries: ringd tiers, nginx, h2o, lighttpd, the ceiling, with their configs
    procfs.py     what the harness samples from /proc (and perf stat) about a server
    slowdisk.py   the longtail scenarios' slow disk: ext4 on a loop device, blkio and memory cgroups
    longtail.py   the longtail scenarios' data set (a site's size mix, Zipf ranks) and hooks
    measure.py    starts servers, runs one measured load, fills in a Result
    stats.py      medians, ranges and ratios
    report.py     report.md, the SVG charts and --check, from raw.json alone
"""
