"""Limits per client (--limit-conn, --limit-req) and the client a trusted proxy names
(--real-ip-from), on the real ringd binary on one io backend (RINGD_IO). Clients are raw sockets
bound to addresses of 127.0.0.0/8 before they connect (each address a client), PROXY protocol
headers naming addresses of the test's choosing, and Python's h2 for HTTP/2 streams. One shard,
so that every connection meets the same tables."""
import os
import re
import shutil
import socket
import ssl
import subprocess
import tempfile
import unittest

import h2.config
import h2.connection
import h2.events

from ringd_harness import (ADMIN, BACKEND, DocrootTestCase, Reader, Server, RINGD, ROOT_FLAGS,
                           logged_client, wait_for)
from tls_pki import make_pki

ONE_SHARD = ("--shards", "1")


def connect(port, source, timeout=10):
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.settimeout(timeout)
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    s.bind((source, 0))
    s.connect(("127.0.0.1", port))
    return s


def get(s, marker="x", headers=b"", close=False):
    """One request on `s`; the response (status, headers, body)."""
    s.sendall(b"GET /small.txt?%s HTTP/1.1\r\nHost: t\r\n%s%s\r\n" %
              (marker.encode(), headers, b"Connection: close\r\n" if close else b""))
    return Reader(s).read_response()


def served(port, source, header=b"", marker="x"):
    """Whether a new connection from `source` is answered 200; None when it was closed unanswered."""
    try:
        with connect(port, source) as s:
            s.sendall(header)
            return get(s, marker, close=True).status == 200
    except (EOFError, ConnectionResetError, BrokenPipeError, socket.timeout):
        return None


def closed_without_answer(s, timeout=5):
    s.settimeout(timeout)
    try:
        s.sendall(b"GET /small.txt HTTP/1.1\r\nHost: t\r\n\r\n")
        return s.recv(65536) == b""
    except (ConnectionResetError, BrokenPipeError):
        return True
    except socket.timeout:
        return False


def v1(src):
    return ("PROXY TCP4 %s 127.0.0.1 40000 80\r\n" % src).encode()


class ClientLimitsTest(DocrootTestCase):
    def start(self, *flags, listen="127.0.0.1:0", needs_peer=True):
        if needs_peer and BACKEND == "bypass":
            self.skipTest("bypass cannot name a socket's peer: limits there key on the PROXY "
                          "header (test_limits_key_on_the_proxy_address, BypassTest)")
        server = Server(self.root, *ONE_SHARD, *ADMIN, *flags, listen=listen)
        self.addCleanup(lambda: self.assertEqual(server.stop(), 0, server.log))
        return server

    def access_log(self):
        d = tempfile.mkdtemp(prefix="ringd-limits-")
        self.addCleanup(shutil.rmtree, d, True)
        return os.path.join(d, "access.log")

    def test_a_burst_then_refusal_with_retry_after(self):
        # 1r/m: nothing drains while the test runs, so exactly 1 + burst are served.
        server = self.start("--limit-req", "1r/m,burst=3")
        with connect(server.port, "127.0.0.2") as s:
            for i in range(4):
                self.assertEqual(get(s, "b%d" % i).status, 200, i)
            r = get(s, "refused")
            self.assertEqual(r.status, 503)  # nginx's limit_req_status default
            self.assertGreaterEqual(int(r.header("retry-after")), 50)  # about a minute
            self.assertNotEqual(r.header("connection"), "close")  # the connection lives
            self.assertEqual(get(s, "again").status, 503)
        self.assertTrue(served(server.port, "127.0.0.3"))  # another client, its own bucket
        self.assertEqual(server.metric("ringd_limit_req_refused_total"), 2)

    def test_refused_then_served_again_once_the_rate_allows(self):
        # 4r/s, no burst: a request per 250 ms. Refusal and recovery are polled for, not timed.
        server = self.start("--limit-req", "4r/s", "--limit-req-status", "429")
        with connect(server.port, "127.0.0.4") as s:
            statuses = [get(s, "r").status for _ in range(2)]
            if statuses != [200, 429]:  # a slow machine: the rate allowed the second one
                statuses.append(wait_for(lambda: get(s, "r").status == 429 or None, "a 429"))
            self.assertEqual(statuses[0], 200)
            r = get(s, "r")
            while r.status == 200:
                r = get(s, "r")
            self.assertEqual(r.status, 429)
            self.assertEqual(r.header("retry-after"), "1")
            wait_for(lambda: get(s, "r").status == 200, "served again after 250 ms")

    def test_http2_streams_are_limited_one_by_one(self):
        server = self.start("--limit-req", "1r/m,burst=2")
        with connect(server.port, "127.0.0.5") as s:
            conn = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True))
            conn.initiate_connection()
            s.sendall(conn.data_to_send())
            statuses = {}
            ended = set()
            for _ in range(5):
                sid = conn.get_next_available_stream_id()
                conn.send_headers(sid, [(":method", "GET"), (":path", "/small.txt"),
                                        (":scheme", "http"), (":authority", "t")],
                                  end_stream=True)
            s.sendall(conn.data_to_send())
            while len(ended) < 5:
                data = s.recv(65536)
                self.assertTrue(data, "the connection closed")
                for ev in conn.receive_data(data):
                    if isinstance(ev, h2.events.ResponseReceived):
                        statuses[ev.stream_id] = dict(ev.headers)
                    elif isinstance(ev, h2.events.StreamEnded):
                        ended.add(ev.stream_id)
                    self.assertNotIsInstance(ev, h2.events.ConnectionTerminated)
                s.sendall(conn.data_to_send())
            codes = [statuses[k][b":status"] for k in sorted(statuses)]
            self.assertEqual(codes, [b"200"] * 3 + [b"503"] * 2)
            self.assertIn(b"retry-after", statuses[max(statuses)])
        self.assertEqual(server.metric("ringd_limit_req_refused_total"), 2)

    def test_the_table_stays_bounded_with_many_clients(self):
        server = self.start("--limit-req", "1r/m,burst=1", "--limit-table", "8")
        for i in range(40):
            self.assertTrue(served(server.port, "127.1.0.%d" % (i + 1)))
        wait_for(lambda: server.metric("ringd_limit_req_evicted_total") >= 32, "evictions")
        self.assertEqual(server.metric("ringd_limit_req_clients"), 8)
        self.assertEqual(server.metric("ringd_limit_req_refused_total"), 0)

    def test_connections_beyond_the_limit_are_closed_at_accept(self):
        log = self.access_log()
        server = self.start("--limit-conn", "2", "--error-log", log + ".err")
        first = connect(server.port, "127.0.0.6")
        second = connect(server.port, "127.0.0.6")
        self.assertEqual(get(first, "c1").status, 200)
        self.assertEqual(get(second, "c2").status, 200)
        third = connect(server.port, "127.0.0.6")
        self.assertTrue(closed_without_answer(third))
        third.close()
        self.assertTrue(served(server.port, "127.0.0.7"))  # another client
        self.assertEqual(server.metric("ringd_limit_conn_refused_total"), 1)
        # A slot freed is the client's again.
        first.close()
        wait_for(lambda: served(server.port, "127.0.0.6"), "a freed slot taken again")
        self.assertEqual(get(second, "c3").status, 200)
        self.assertEqual(server.metric("ringd_limit_conn_clients"), 1)
        second.close()
        # Every connection closed: the table holds nobody (nothing leaks).
        wait_for(lambda: server.metric("ringd_limit_conn_clients") == 0, "an empty table")
        def error_logged():
            if not os.path.exists(log + ".err"):
                return False
            with open(log + ".err") as f:
                return "limiting connections by --limit-conn" in f.read()
        wait_for(error_logged, "the error log's line")

    def test_x_forwarded_for_from_a_trusted_peer_only(self):
        log = self.access_log()
        server = self.start("--real-ip-from", "127.0.0.8", "--access-log", log,
                            "--error-log", log + ".err", "--limit-req", "1r/m")
        xff = b"X-Forwarded-For: 198.51.100.1, 203.0.113.5\r\n"
        with connect(server.port, "127.0.0.8") as s:
            self.assertEqual(get(s, "trusted", xff).status, 200)
        self.assertEqual(logged_client(log, "trusted"), "203.0.113.5")
        with connect(server.port, "127.0.0.9") as s:
            self.assertEqual(get(s, "untrusted", xff).status, 200)
        self.assertEqual(logged_client(log, "untrusted"), "127.0.0.9")
        # The limits count the client it names: another client behind the same proxy has its own
        # bucket, the same one again is refused.
        with connect(server.port, "127.0.0.8") as s:
            self.assertEqual(get(s, "other", b"X-Forwarded-For: 203.0.113.6\r\n").status, 200)
            self.assertEqual(get(s, "same", b"X-Forwarded-For: 203.0.113.5\r\n").status, 503)
        self.assertEqual(logged_client(log, "same"), "203.0.113.5")
        # The error log's line for the refusal names the client counted, not the proxy.
        def refusal_line():
            if not os.path.exists(log + ".err"):
                return None
            with open(log + ".err") as f:
                return next((l for l in f if "limiting requests by --limit-req" in l), None)
        line = wait_for(refusal_line, "the error log's line")
        self.assertIn("status 503, client: 203.0.113.5,", line)
        self.assertIn("same", line)

    def test_x_forwarded_for_over_http2(self):
        log = self.access_log()
        server = self.start("--real-ip-from", "127.0.0.15", "--access-log", log)
        for source, marker, expected in (("127.0.0.15", "h2trusted", "203.0.113.77"),
                                         ("127.0.0.16", "h2untrusted", "127.0.0.16")):
            with connect(server.port, source) as s:
                conn = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True))
                conn.initiate_connection()
                conn.send_headers(1, [(":method", "GET"), (":path", "/small.txt?" + marker),
                                      (":scheme", "http"), (":authority", "t"),
                                      ("x-forwarded-for", "192.0.2.1"),
                                      ("x-forwarded-for", "203.0.113.77")], end_stream=True)
                s.sendall(conn.data_to_send())
                done = False
                while not done:
                    data = s.recv(65536)
                    self.assertTrue(data, "the connection closed")
                    for ev in conn.receive_data(data):
                        done = done or isinstance(ev, h2.events.StreamEnded)
                    s.sendall(conn.data_to_send())
            self.assertEqual(logged_client(log, marker), expected)

    def test_recursive_skips_trusted_proxies(self):
        log = self.access_log()
        server = self.start("--real-ip-from", "127.0.0.0/8", "--real-ip-from", "10.0.0.0/8",
                            "--real-ip-recursive", "--real-ip-header", "X-Real-Client",
                            "--access-log", log)
        with connect(server.port, "127.0.0.10") as s:
            self.assertEqual(get(s, "rec", b"X-Real-Client: 192.0.2.7, 10.1.1.1\r\n").status, 200)
        self.assertEqual(logged_client(log, "rec"), "192.0.2.7")

    def test_limits_key_on_the_proxy_address(self):
        # On every tier: with every listener ,proxy and --proxy-from all, the header names each
        # client (bypass included, which cannot ask a socket's peer).
        server = self.start("--limit-conn", "1", "--limit-req", "1r/m,burst=1", "--proxy-from",
                            "all", listen="127.0.0.1:0,proxy", needs_peer=False)
        held = connect(server.port, "127.0.0.11")
        held.sendall(v1("203.0.113.1"))
        self.assertEqual(get(held, "p1").status, 200)
        # The same client from another peer address: one connection is its limit.
        other_peer = connect(server.port, "127.0.0.12")
        other_peer.sendall(v1("203.0.113.1"))
        self.assertTrue(closed_without_answer(other_peer))
        other_peer.close()
        self.assertEqual(server.metric("ringd_limit_conn_refused_total"), 1)
        # Another client through the same peer address is served.
        self.assertTrue(served(server.port, "127.0.0.11", v1("203.0.113.2")))
        # Its requests are counted as its own: burst 1, so the third is refused.
        self.assertEqual(get(held, "p2").status, 200)
        self.assertEqual(get(held, "p3").status, 503)
        held.close()

    def tls_server(self, *flags):
        pki = tempfile.mkdtemp(prefix="ringd-limits-pki-")
        self.addCleanup(shutil.rmtree, pki, True)
        make_pki(pki)
        self.ctx = ssl.create_default_context(cafile=os.path.join(pki, "ca.crt"))
        return self.start("--listen-tls", "127.0.0.1:0,proxy", "--proxy-from", "all",
                          "--tls-cert", os.path.join(pki, "localhost-ec.crt"),
                          "--tls-key", os.path.join(pki, "localhost-ec.key"), *flags,
                          listen="127.0.0.1:0,proxy", needs_peer=False)

    def tls(self, port, source, client):
        s = connect(port, source)
        s.sendall(v1(client))
        return self.ctx.wrap_socket(s, server_hostname="localhost")

    def test_https_behind_a_proxy_header(self):
        # The client is named below TLS (the TlsLoop reads the header): counted at its first
        # bytes, limited per request as over plaintext.
        server = self.tls_server("--limit-conn", "1", "--limit-req", "1r/m,burst=1")
        held = self.tls(server.tls_port, "127.0.0.13", "203.0.113.21")
        self.assertEqual(get(held, "t1").status, 200)
        try:
            with self.tls(server.tls_port, "127.0.0.14", "203.0.113.21") as extra:
                extra.settimeout(5)
                refused = get(extra, "t-extra").status != 200
        except (EOFError, ConnectionResetError, BrokenPipeError, ssl.SSLError, OSError):
            refused = True
        self.assertTrue(refused)
        wait_for(lambda: server.metric("ringd_limit_conn_refused_total") == 1, "1 refused")
        self.assertEqual(get(held, "t2").status, 200)
        self.assertEqual(get(held, "t3").status, 503)
        held.close()
        # Its slot freed, the client connects again (its requests still over the rate).
        def again():
            try:
                s = self.tls(server.tls_port, "127.0.0.14", "203.0.113.21")
                with s:
                    return get(s, "t4").status == 503
            except (EOFError, ConnectionResetError, BrokenPipeError, ssl.SSLError, OSError):
                return False
        wait_for(again, "the freed slot taken again")
        wait_for(lambda: server.metric("ringd_limit_conn_clients") == 0, "an empty table")


class BypassTest(DocrootTestCase):
    def test_refused_on_bypass_unless_a_proxy_header_names_every_client(self):
        if BACKEND != "bypass":
            self.skipTest("bypass only")
        for flags in (["--limit-conn", "4"], ["--limit-req", "1r/s"],
                      ["--real-ip-from", "127.0.0.1"],
                      ["--limit-conn", "4", "--listen", "127.0.0.1:0,proxy"]):
            out = subprocess.run([RINGD, "--root", self.root, "--io", "bypass"] + ROOT_FLAGS +
                                 flags, capture_output=True, text=True, timeout=20)
            self.assertNotEqual(out.returncode, 0, flags)
            self.assertIn("needs a tier that has it", out.stderr)


if __name__ == "__main__":
    unittest.main()
