"""Steady-state serving allocates nothing: after warm-up, keep-alive GETs that hit the file
caches make zero calls into the allocator (counted by an LD_PRELOAD shim, OpenSSL's routed
allocations included), on this backend, over HTTP/1.1 and over TLS."""
import os
import shutil
import signal
import socket
import ssl
import tempfile
import unittest

from ringd_harness import BackendTestCase, Reader, Server, make_docroot, wait_for
from tls_pki import make_pki

SHIM = os.environ.get("RINGD_WRAP_LIB", "")
OBSERVE = os.environ.get("RINGD_ALLOC_OBSERVE") == "1"


class ZeroAllocationTest(BackendTestCase):
    def read_count(self, server, path):
        os.kill(server.proc.pid, signal.SIGRTMIN + 5)  # tests/alloc_counter.cc

        def answer():
            with open(path) as f:
                return f.read().strip()
        return int(wait_for(answer, "the allocation counter to answer SIGRTMIN+5"))

    def test_keepalive_hits_allocate_nothing(self):
        self.keepalive_hits_allocate_nothing(tls=False)

    def test_tls_keepalive_hits_allocate_nothing(self):
        """The same over TLS keep-alive: established connections' records, OpenSSL's buffers and
        the TLS loop's send state allocate nothing while they stay busy."""
        self.keepalive_hits_allocate_nothing(tls=True)

    def keepalive_hits_allocate_nothing(self, tls):
        if not SHIM or not os.path.exists(SHIM):
            self.fail("RINGD_WRAP_LIB must name the allocation-counting shim")
        root, files = make_docroot()
        pki = None
        count_file = tempfile.mktemp(prefix="ringd-allocs-")
        env = dict(os.environ, LD_PRELOAD=SHIM, RINGD_ALLOC_COUNT_FILE=count_file)
        flags = ["--open-file-cache-valid-ms", "600000"]
        log = None
        if OBSERVE:  # every request also formats and queues an access log line, and carries
            # the origin headers of three rules and two added headers (precomputed at start-up),
            log = tempfile.mktemp(prefix="ringd-alloc-access-")
            flags += ["--access-log", log, "--admin-listen", "127.0.0.1:0",
                      "--cache-control", "*.txt=public, max-age=60",
                      "--cache-control", "*.html=no-cache",
                      "--default-cache-control", "max-age=10",
                      "--add-header", "X-Content-Type-Options: nosniff",
                      "--add-header", "Access-Control-Allow-Origin: *"]
        if tls:
            pki = tempfile.mkdtemp(prefix="ringd-alloc-tls-")
            make_pki(pki)
            flags += ["--listen-tls", "127.0.0.1:0",
                      "--tls-cert", os.path.join(pki, "localhost-ec.crt"),
                      "--tls-key", os.path.join(pki, "localhost-ec.key")]
        if OBSERVE:  # and is chosen by its host among sites (--site; last: a site's flags follow)
            flags += ["--site", "t,localhost", "--root", root, "--site", "*.example.org",
                      "--root", root]
        server = Server(root, *flags, env=env)
        try:
            paths = ["/index.html", "/small.txt", "/medium.bin", "/dir/", "/missing", "/app.js"]
            heads = [b"GET %s HTTP/1.1\r\nHost: t\r\nAccept-Encoding: gzip\r\n\r\n" % p.encode() for p in paths]
            heads.append(b"GET /medium.bin HTTP/1.1\r\nHost: t\r\nRange: bytes=0-9,100-199\r\n\r\n")
            heads.append(b"HEAD /large.bin HTTP/1.1\r\nHost: t\r\n\r\n")
            if tls:
                ctx = ssl.create_default_context(cafile=os.path.join(pki, "ca.crt"))

                def connect():
                    raw = socket.create_connection(("127.0.0.1", server.tls_port), timeout=10)
                    return ctx.wrap_socket(raw, server_hostname="localhost")
                conns = [connect() for _ in range(8)]
            else:
                conns = [server.connect() for _ in range(8)]
            readers = [Reader(c) for c in conns]

            def batch(rounds):
                for _ in range(rounds):
                    for c, r in zip(conns, readers):
                        c.sendall(b"".join(heads))  # pipelined, too
                        for h in heads:
                            r.read_response(head_request=h.startswith(b"HEAD"))

            batch(5)  # warm-up: caches fill, pools touch their first slots
            if OBSERVE:  # the origin headers are really on
                conns[0].sendall(heads[1])  # /small.txt
                r = readers[0].read_response()
                self.assertEqual(r.header("cache-control"), "public, max-age=60")
                self.assertEqual(r.header("access-control-allow-origin"), "*")
            before = self.read_count(server, count_file)
            # The shim is really counting: start-up and cache misses did allocate.
            self.assertGreater(before, 100)
            batch(50)
            after = self.read_count(server, count_file)
            served = 50 * len(conns) * len(heads)
            self.assertEqual(after - before, 0,
                             "%d allocator calls while serving %d requests" % (after - before, served))
            for c in conns:
                c.close()
        finally:
            self.assertEqual(server.stop(), 0)
            shutil.rmtree(root, ignore_errors=True)
            if pki is not None:
                shutil.rmtree(pki, ignore_errors=True)
            if log is not None:
                with open(log, "rb") as f:
                    lines = f.read().count(b"\n")
                os.remove(log)
                # Every request of the warm-up and the measured batch has its line.
                self.assertEqual(lines, 55 * len(conns) * len(heads) + 1)  # + the header check
            if os.path.exists(count_file):
                os.remove(count_file)


if __name__ == "__main__":
    unittest.main()
