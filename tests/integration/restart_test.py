"""A restart without refused connections or failed requests: a new ringd joins the listening
address and the admin address with --takeover while the old one serves, then the old one gets
SIGTERM; scrapes of /metrics and /readyz go on through the switch, and HTTP/2 clients that keep
their connections lose no stream (GOAWAY names the last stream the old process answers). Runs in a
network namespace of its own, where net.ipv4.tcp_migrate_req=1 moves the connections still
queued on the old listeners to the new ones (the sysctl is per namespace: the host's is left
alone)."""
import ctypes
import os
import shutil
import signal
import socket
import subprocess
import threading
import unittest

import hpack
from hyperframe.frame import (DataFrame, Frame, GoAwayFrame, HeadersFrame, PingFrame,
                              RstStreamFrame, SettingsFrame, WindowUpdateFrame)

from ringd_harness import BackendTestCase, Reader, Server, admin_get, make_docroot, wait_for

CLONE_NEWNET = 0x40000000


def enter_own_network_namespace():
    """Moves this process into a new network namespace with loopback up; None, or why not."""
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.unshare(CLONE_NEWNET) != 0:
        return "unshare(CLONE_NEWNET): %s" % os.strerror(ctypes.get_errno())
    up = subprocess.run(["ip", "link", "set", "lo", "up"], capture_output=True, text=True)
    if up.returncode != 0:
        return "ip link set lo up: " + up.stderr.strip()
    with open("/proc/sys/net/ipv4/tcp_migrate_req", "w") as f:
        f.write("1")
    return None


class Clients:
    """Threads running `run` until finish(), counting what they made: `ok`, and `failures`."""

    def __init__(self, threads):
        self.ok = 0
        self.failures = []
        self.stop = threading.Event()
        self.lock = threading.Lock()
        self.threads = [threading.Thread(target=self.run) for _ in range(threads)]
        for t in self.threads:
            t.start()

    def fail(self, why):
        with self.lock:
            self.failures.append(why)

    def made(self):
        with self.lock:
            return self.ok + len(self.failures)

    def wait_for_more(self, n, what):
        """Waits until n more have been made (answered or failed) from now."""
        start = self.made()
        wait_for(lambda: self.made() >= start + n, what, timeout=30)

    def finish(self):
        self.stop.set()
        for t in self.threads:
            t.join()


class Load(Clients):
    """Threads that each make one `Connection: close` request after another, counting results."""

    def __init__(self, port, want, threads=4):
        self.port, self.want = port, want
        super().__init__(threads)

    def one(self):
        with socket.create_connection(("127.0.0.1", self.port), timeout=5) as s:
            s.sendall(b"GET /small.txt HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n")
            data = b""
            while True:
                chunk = s.recv(65536)
                if not chunk:
                    break
                data += chunk
        head, _, body = data.partition(b"\r\n\r\n")
        if not head.startswith(b"HTTP/1.1 200 ") or body != self.want:
            raise RuntimeError("bad response: %r" % data[:60])

    def run(self):
        while not self.stop.is_set():
            try:
                self.one()
                with self.lock:
                    self.ok += 1
            except Exception as e:  # refused, reset, timeout, short: all count
                self.fail(repr(e))


class H2Load(Clients):
    """Threads that each keep an h2c connection with up to four streams in flight, as a browser
    or a CDN keeps its connection to an origin. A GOAWAY names the last stream the server
    answers: the streams above it were never processed (RFC 9113 6.8) and are asked again on a
    new connection, as clients do; every other stream must end with its whole body. A stream
    reset, cut short, or refused, and a GOAWAY with an error, count as failures."""

    PATHS = ("/small.txt", "/medium.bin")

    def __init__(self, port, files, threads=2):
        self.port, self.files = port, files
        self.retried = self.goaways = 0
        super().__init__(threads)

    def connection(self, pending):
        """Serves `pending` paths (asked again) and new ones until GOAWAY or stop; returns the
        paths to ask again. Frames are made and read with hyperframe and hpack rather than
        Python's h2, whose connection refuses every frame after a GOAWAY."""
        sock = socket.create_connection(("127.0.0.1", self.port), timeout=5)
        encoder, decoder = hpack.Encoder(), hpack.Decoder()
        out = [b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n", SettingsFrame(0).serialize()]
        streams = {}  # stream id -> [path, status, body]
        retry, last, next_sid, n, buf = [], None, 1, 0, b""
        try:
            while True:
                while last is None and not self.stop.is_set() and len(streams) < 4:
                    path = pending.pop() if pending else self.PATHS[n % 2]
                    n += 1
                    fields = encoder.encode([(":method", "GET"), (":scheme", "http"),
                                             (":path", path), (":authority", "t")])
                    out.append(HeadersFrame(next_sid, data=fields,
                                            flags=["END_HEADERS", "END_STREAM"]).serialize())
                    streams[next_sid] = [path, None, b""]
                    next_sid += 2
                sock.sendall(b"".join(out))
                out = []
                if not streams:
                    return retry + pending
                data = sock.recv(65536)
                if not data:
                    for sid, (path, _, body) in streams.items():
                        self.fail("stream %d (%s) cut short after %d bytes" % (sid, path, len(body)))
                    return retry + pending
                buf += data
                while len(buf) >= 9 and len(buf) >= 9 + int.from_bytes(buf[:3], "big"):
                    frame, length = Frame.parse_frame_header(memoryview(buf[:9]))
                    frame.parse_body(memoryview(buf[9:9 + length]))
                    buf = buf[9 + length:]
                    ended = "END_STREAM" in frame.flags and frame.stream_id in streams
                    if isinstance(frame, SettingsFrame) and "ACK" not in frame.flags:
                        out.append(SettingsFrame(0, flags=["ACK"]).serialize())
                    elif isinstance(frame, PingFrame) and "ACK" not in frame.flags:
                        out.append(PingFrame(0, data=frame.opaque_data, flags=["ACK"]).serialize())
                    elif isinstance(frame, HeadersFrame):
                        assert "END_HEADERS" in frame.flags  # ringd's heads fit one frame
                        streams[frame.stream_id][1] = dict(decoder.decode(frame.data))[":status"]
                    elif isinstance(frame, DataFrame) and frame.flow_controlled_length:
                        streams[frame.stream_id][2] += frame.data
                        for sid in (0, frame.stream_id):
                            out.append(WindowUpdateFrame(
                                sid, window_increment=frame.flow_controlled_length).serialize())
                    elif isinstance(frame, RstStreamFrame):
                        path = streams.pop(frame.stream_id)[0]
                        self.fail("stream %d (%s) reset: %d" % (frame.stream_id, path,
                                                                 frame.error_code))
                    elif isinstance(frame, GoAwayFrame):
                        if frame.error_code != 0:
                            self.fail("GOAWAY %d" % frame.error_code)
                        last = frame.last_stream_id
                        above = [sid for sid in streams if sid > last]
                        with self.lock:
                            self.goaways += 1
                            self.retried += len(above)
                        retry += [streams.pop(sid)[0] for sid in above]
                    if ended:
                        path, status, body = streams.pop(frame.stream_id)
                        if status != "200" or body != self.files[path[1:]]:
                            self.fail("stream %d (%s): %r, %d bytes" % (frame.stream_id, path,
                                                                          status, len(body)))
                        else:
                            with self.lock:
                                self.ok += 1
        finally:
            sock.close()

    def run(self):
        pending = []
        while not self.stop.is_set():
            try:
                pending = self.connection(pending)
            except Exception as e:  # refused, reset, timeout: all count
                self.fail(repr(e))


class Scrapes:
    """A thread that scrapes the admin listener's /metrics and /readyz in turn until stopped; every
    answer but 200 (a refused connection, a reset, a 503) is a failure."""

    def __init__(self, port):
        self.port = port
        self.ok = 0
        self.failures = []
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self.run)
        self.thread.start()

    def run(self):
        while not self.stop.is_set():
            for path in ("/metrics", "/readyz"):
                try:
                    status, body = admin_get(self.port, path, timeout=5)
                    if status == 200:
                        self.ok += 1
                    else:
                        self.failures.append("%s: %d %s" % (path, status, body.strip()))
                except Exception as e:  # refused, reset, timeout
                    self.failures.append("%s: %r" % (path, e))

    def finish(self):
        self.stop.set()
        self.thread.join()


class RestartTest(BackendTestCase):
    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        why = enter_own_network_namespace()
        if why is not None:
            raise unittest.SkipTest("no network namespace of our own: " + why)
        cls.root, cls.files = make_docroot()

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.root, ignore_errors=True)

    def test_restart_under_load_loses_nothing(self):
        old = Server(self.root, "--admin-listen", "127.0.0.1:0")
        admin = old.admin_port()
        load = Load(old.port, self.files["small.txt"])
        scrapes = Scrapes(admin)
        new = None
        try:
            load.wait_for_more(50, "requests to the old process")
            new = Server(self.root, "--takeover", "--admin-listen", "127.0.0.1:%d" % admin,
                         listen="127.0.0.1:%d" % old.port)
            self.assertTrue(any("--takeover" in l and "tcp_migrate_req=1" in l for l in new.log),
                            new.log)
            self.assertEqual(new.admin_port(), admin)
            load.wait_for_more(50, "requests while both listen")
            self.assertEqual(old.stop(signal.SIGTERM), 0)
            self.assertTrue(any("admin listener on 127.0.0.1:%d left to the process sharing it"
                                % admin in l for l in old.log), old.log)
            load.wait_for_more(50, "requests after the old process stopped")
            start = scrapes.ok
            wait_for(lambda: scrapes.ok >= start + 10, "scrapes of the new process", timeout=30)
        finally:
            load.finish()
            scrapes.finish()
            if new is not None:
                self.assertEqual(new.stop(), 0)
            if old.proc.poll() is None:
                old.stop()
        self.assertEqual(load.failures[:5], [], "%d of %d requests failed" %
                         (len(load.failures), len(load.failures) + load.ok))
        self.assertGreater(load.ok, 100)
        self.assertEqual(scrapes.failures[:5], [], "%d of %d scrapes failed" %
                         (len(scrapes.failures), len(scrapes.failures) + scrapes.ok))
        self.assertGreater(scrapes.ok, 20)
        served_by_new = [l for l in new.log if "stopped after" in l]
        self.assertTrue(served_by_new and " 0 requests" not in served_by_new[0], new.log)

    def test_restart_loses_no_http2_stream(self):
        old = Server(self.root)
        load = H2Load(old.port, self.files)
        new = None
        try:
            load.wait_for_more(50, "streams to the old process")
            new = Server(self.root, "--takeover", listen="127.0.0.1:%d" % old.port)
            load.wait_for_more(50, "streams while both listen")
            self.assertEqual(old.stop(signal.SIGTERM), 0)
            load.wait_for_more(50, "streams after the old process stopped")
        finally:
            load.finish()
            if new is not None:
                self.assertEqual(new.stop(), 0)
            if old.proc.poll() is None:
                old.stop()
        self.assertEqual(load.failures[:5], [], "%d of %d streams failed" %
                         (len(load.failures), len(load.failures) + load.ok))
        self.assertGreater(load.ok, 150)
        # The clients' connections outlived the old process's listener: it said goodbye to
        # them with GOAWAY, and they went on with the new one.
        print("h2 restart: %d streams, %d GOAWAYs, %d streams asked again" %
              (load.ok, load.goaways, load.retried))
        self.assertGreaterEqual(load.goaways, 2)
        served_by_new = [l for l in new.log if "stopped after" in l]
        self.assertTrue(served_by_new and " 0 requests" not in served_by_new[0], new.log)

    def test_deferred_clients_that_have_not_sent_cross_a_restart(self):
        # With --defer-accept a client that connected and sent nothing waits in the kernel as a
        # request of the old process's listener; when the old process closes it,
        # tcp_migrate_req=1 (this namespace's) moves the request to the new process's listener,
        # which serves it once the client speaks.
        old = Server(self.root, "--defer-accept")
        silent = []
        new = None
        try:
            for _ in range(8):
                s = socket.create_connection(("127.0.0.1", old.port), timeout=10)
                self.addCleanup(s.close)
                silent.append(s)
            new = Server(self.root, "--takeover", "--defer-accept",
                         listen="127.0.0.1:%d" % old.port)
            self.assertEqual(old.stop(signal.SIGTERM), 0)
            for s in silent:
                s.sendall(b"GET /small.txt HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n")
            for s in silent:
                r = Reader(s).read_response()
                self.assertEqual((r.status, r.body), (200, self.files["small.txt"]))
        finally:
            if new is not None:
                self.assertEqual(new.stop(), 0)
            if old.proc.poll() is None:
                old.stop()
        served_by_new = [l for l in new.log if "stopped after" in l]
        self.assertTrue(served_by_new and " 8 requests" in served_by_new[0], new.log)

    def test_without_takeover_a_second_ringd_is_refused(self):
        old = Server(self.root, "--admin-listen", "127.0.0.1:0")
        try:
            with self.assertRaises(RuntimeError):
                Server(self.root, listen="127.0.0.1:%d" % old.port)
            # The admin address as well, though its listener shares with a --takeover process.
            with self.assertRaisesRegex(RuntimeError, "admin-listen: cannot listen on .*in use"):
                Server(self.root, "--admin-listen", "127.0.0.1:%d" % old.admin_port())
        finally:
            self.assertEqual(old.stop(), 0)


if __name__ == "__main__":
    unittest.main()
