#!/usr/bin/env python3
"""The `fleet` scenario's server: N ringd nodes, each on a loopback address of its own
(127.0.0.2, 127.0.0.3, ...), behind HAProxy configured from the shipped
deploy/haproxy/ringd-fleet.cfg (consistent hashing of the URI, /readyz checks on the admin port).
perf/run starts this launcher as one server: the launcher, the nodes and HAProxy form one process
tree, pinned to the server CPUs together, and the harness reads each component's CPU time from
that tree (procfs.cpu_ticks_by_name).

    fleet.py --nodes 2 --ringd BIN --root DIR --port 8080 --shards 1 --confdir DIR -- --io bypass ...
    fleet.py --nodes 1 --tls-pem FILE ...    # HAProxy terminates TLS; the nodes serve plaintext

The launcher stays until SIGTERM (it forwards it and waits for the nodes' drains) or until a
node or HAProxy exits on its own (it then stops the rest and exits 1).
"""
import argparse
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SHIPPED = os.path.join(REPO, "deploy", "haproxy", "ringd-fleet.cfg")


def haproxy_binary():
    """Debian puts haproxy in /usr/sbin, which a user's PATH may lack."""
    return shutil.which("haproxy") or shutil.which("haproxy", path="/usr/sbin:/usr/local/sbin:/sbin")


def node_hosts(n):
    return ["127.0.0.%d" % (2 + i) for i in range(n)]


def config(shipped, front_port, nodes, admin_port, tls_pem=None, alpn=None):
    """The shipped config with its frontend on 127.0.0.1:front_port, health checks on
    admin_port, and one `server` line per node ("host:port") in place of the examples. With
    tls_pem (certificate and key in one file) the frontend terminates TLS: `ssl crt FILE` on its
    bind line, HAProxy's defaults otherwise (TLS 1.2 and 1.3, stateless tickets); with alpn
    ("h2,http/1.1") it offers those protocols by ALPN, so that h2 clients speak h2 to HAProxy (the
    nodes still get HTTP/1.1). A plaintext bind takes h2c with prior knowledge as it is."""
    lines = shipped.splitlines()
    servers = [i for i, l in enumerate(lines) if re.match(r"\s*server\s+\S+\s+\S+:\d+", l)]
    if not servers or "bind 0.0.0.0:80" not in shipped or "check port 9090" not in shipped:
        raise ValueError("the shipped HAProxy config no longer has the shape this scenario edits"
                         " (bind 0.0.0.0:80, check port 9090, server lines)")
    indent = re.match(r"\s*", lines[servers[0]]).group(0)
    ours = ["%sserver node%d %s" % (indent, i + 1, node) for i, node in enumerate(nodes)]
    lines = lines[:servers[0]] + ours + [l for i, l in enumerate(lines[servers[0]:], servers[0])
                                         if i not in servers]
    text = "\n".join(lines) + "\n"
    text = text.replace("bind 0.0.0.0:80", "bind 127.0.0.1:%d%s%s" % (
        front_port, " ssl crt %s" % tls_pem if tls_pem else "", " alpn %s" % alpn if tls_pem and alpn else ""))
    return text.replace("check port 9090", "check port %d" % admin_port)


def _bindable(host, port):
    with socket.socket() as s:
        try:
            s.bind((host, port))
            return True
        except OSError:
            return False


def common_port(hosts, avoid=()):
    """A port free on every one of the hosts (the admin port is one for all nodes)."""
    for _ in range(100):
        with socket.socket() as s:
            s.bind((hosts[0], 0))
            port = s.getsockname()[1]
        if port not in avoid and all(_bindable(h, port) for h in hosts[1:]):
            return port
    raise RuntimeError("no port free on all of %s" % ", ".join(hosts))


def _wait_port(host, port, procs, timeout=20):
    deadline = time.time() + timeout
    while time.time() < deadline:
        if any(p.poll() is not None for p in procs):
            return False
        try:
            socket.create_connection((host, port), timeout=0.2).close()
            return True
        except OSError:
            time.sleep(0.05)
    return False


def _stop(procs, timeout=15):
    for p in procs:
        if p.poll() is None:
            p.send_signal(signal.SIGTERM)
    deadline = time.time() + timeout
    for p in procs:
        try:
            p.wait(timeout=max(0.1, deadline - time.time()))
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--nodes", type=int, required=True)
    ap.add_argument("--ringd", required=True)
    ap.add_argument("--root", required=True)
    ap.add_argument("--port", type=int, required=True, help="HAProxy's frontend, on 127.0.0.1")
    ap.add_argument("--shards", type=int, default=1, help="per node")
    ap.add_argument("--confdir", required=True, help="where haproxy-N.cfg is written")
    ap.add_argument("--tls-pem", help="HAProxy terminates TLS with this certificate and key (one PEM file)")
    ap.add_argument("--alpn", help="with --tls-pem, what the frontend offers by ALPN (h2,http/1.1)")
    ap.add_argument("flags", nargs="*", help="more ringd flags, for every node (after --)")
    args = ap.parse_args(argv)
    haproxy = haproxy_binary()
    if haproxy is None:
        sys.exit("fleet: haproxy is not installed (tools/setup installs it)")
    hosts = node_hosts(args.nodes)
    node_port = common_port(hosts)
    admin_port = common_port(hosts, avoid=(node_port,))
    procs = []
    stopping = []

    def on_term(signum, frame):
        stopping.append(signum)

    signal.signal(signal.SIGTERM, on_term)
    signal.signal(signal.SIGINT, on_term)
    try:
        for host in hosts:
            procs.append(subprocess.Popen(
                # The shipped config sends each connection a PROXY v2 header (send-proxy-v2):
                # the nodes read it, from HAProxy on this machine (any tier: bypass cannot ask a
                # peer's address, so the trust is given, not checked).
                [args.ringd, "--root", args.root, "--listen", "%s:%d,proxy" % (host, node_port),
                 "--proxy-from", "all", "--admin-listen", "%s:%d" % (host, admin_port),
                 "--shards", str(args.shards)] + args.flags))
        for host in hosts:
            if not _wait_port(host, node_port, procs):
                sys.exit("fleet: the node on %s did not start" % host)
        with open(SHIPPED) as f:
            cfg = config(f.read(), args.port, ["%s:%d" % (h, node_port) for h in hosts], admin_port,
                         args.tls_pem, args.alpn)
        path = os.path.join(args.confdir, "haproxy-%d%s%s.cfg" % (args.nodes, "-tls" if args.tls_pem else "",
                                                                 "-h2" if args.alpn else ""))
        with open(path, "w") as f:
            f.write(cfg)
        print("fleet: %d node(s) on %s port %d (admin %d), HAProxy on 127.0.0.1:%d with %s" % (
            args.nodes, ", ".join(hosts), node_port, admin_port, args.port, path), file=sys.stderr, flush=True)
        procs.append(subprocess.Popen([haproxy, "-db", "-f", path]))
        # Until SIGTERM, or until one of them exits on its own (then the run is over).
        while not stopping and all(p.poll() is None for p in procs):
            time.sleep(0.2)
        gone = [p.args[0] for p in procs if p.poll() is not None]
        if not stopping:
            print("fleet: %s exited on its own; stopping the rest" % ", ".join(gone), file=sys.stderr)
            return 1
        return 0
    finally:
        _stop(procs)


if __name__ == "__main__":
    sys.exit(main())
