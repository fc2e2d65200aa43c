#!/usr/bin/env python3
"""A quick interleaved A/B of ringd configurations on the `mixed` mix, outside perf/run: ringd
pinned to CPU 1 (one shard), ringd-load to CPU 0, each configuration started fresh, warmed for
1 s, then measured; rounds interleave the configurations. Prints one line per run: rate, mean,
the size classes' latencies (ringd-load's latency_small_us / latency_large_us) and server CPU.

    bazel build --config=opt //server:ringd //perf:ringd-load && tools/gen-dataset --out /tmp/ringd-perf-data
    perf/send_order_ab.py --rounds 3 --seconds 4 \\
        'fair=--send-order=fair' 'srpt=--send-order=srpt' 'srpt4=--send-order=srpt --send-slots=4'
    perf/send_order_ab.py ... --load='--connections 100 --rate 4000'    # open loop
"""
import argparse
import json
import os
import shlex
import socket
import subprocess
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def cpu_ticks(pid):
    t = 0
    for tid in os.listdir("/proc/%d/task" % pid):
        with open("/proc/%d/task/%s/stat" % (pid, tid)) as f:
            fields = f.read().rsplit(")", 1)[1].split()
        t += int(fields[11]) + int(fields[12])
    return t


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def run(a, flags, seconds):
    port = free_port()
    srv = subprocess.Popen(["taskset", "-c", "1", a.ringd, "--root", a.data, "--listen", "127.0.0.1:%d" % port,
                            "--shards", "1", "--io", a.io, "--allow-root"] + flags,
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        time.sleep(0.3)
        base = ["taskset", "-c", "0", a.load_bin, "--port", str(port), "--bulk",
                "--paths-file", os.path.join(a.data, "paths-mixed.txt")]
        subprocess.run(base + ["--connections", "100", "--duration-s", "1"], capture_output=True)
        c0 = cpu_ticks(srv.pid)
        out = subprocess.run(base + ["--duration-s", str(seconds)] + shlex.split(a.load),
                             capture_output=True, text=True).stdout
        c1 = cpu_ticks(srv.pid)
    finally:
        srv.terminate()
        srv.wait()
    d = json.loads(out.strip().splitlines()[-1])
    cpu_s = (c1 - c0) / os.sysconf("SC_CLK_TCK")
    d["cpu_us_per_request"] = cpu_s * 1e6 / max(1, d["requests"])
    d["cpu_percent"] = cpu_s / seconds * 100
    return d


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("configs", nargs="+", help="NAME=FLAGS (ringd flags, shell-quoted)")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--seconds", type=float, default=4)
    ap.add_argument("--io", default="bypass")
    ap.add_argument("--load", default="--connections 100", help="ringd-load flags (default: closed loop)")
    ap.add_argument("--data", default="/tmp/ringd-perf-data")
    ap.add_argument("--ringd", default=os.path.join(REPO, "bazel-bin/server/ringd"))
    ap.add_argument("--load-bin", default=os.path.join(REPO, "bazel-bin/perf/ringd-load"))
    a = ap.parse_args()
    configs = [c.split("=", 1) for c in a.configs]
    for _ in range(a.rounds):
        for name, flags in configs:
            d = run(a, shlex.split(flags), a.seconds)
            s, l, t = d["latency_small_us"], d["latency_large_us"], d["latency_us"]
            print("%-12s rps %6.0f MB/s %5.0f mean %6.1f ms | <1 MiB mean %5.1f p99 %6.1f | all p99 %6.1f |"
                  " >=1 MiB mean %6.1f p99 %6.1f max %6.1f | CPU %5.1f us/req %3.0f%% | errors %d" % (
                      name, d["rps"], d["bytes_per_s"] / 1e6, t["mean"] / 1e3, s["mean"] / 1e3, s["p99"] / 1e3,
                      t["p99"] / 1e3, l["mean"] / 1e3, l["p99"] / 1e3, l["max"] / 1e3, d["cpu_us_per_request"],
                      d["cpu_percent"], sum(d["errors"].values())), flush=True)


if __name__ == "__main__":
    main()
