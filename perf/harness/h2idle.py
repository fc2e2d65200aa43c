#!/usr/bin/env python3
"""The h2-idle scenarios' client: opens N HTTP/2 connections, makes one request on each and keeps
them open, prints `IDLE_READY N` (as ringd-load --idle does, so that the harness reads the
server's memory then), runs the load given after `--` with its output passed through, and closes
the connections when that load has ended.

    h2idle.py --port 8443 --idle 5000 --path /index.html --tls --settle-s 3 -- h2load -t1 -c100 ...

One connection after another, each with its own blocking socket: over TLS h2 by ALPN (no other
protocol offered, no certificate check, SNI localhost), in plaintext h2c with prior knowledge.
The request is a GET whose fields are HPACK-coded without indexing (static-table names only), so
it leaves nothing in the server's dynamic table; the client acknowledges the server's SETTINGS
and PINGs. A connection that fails is counted out and said on stderr; IDLE_READY gives the number
held. Standard library only: no HTTP/2 package is needed on the machine.
"""
import argparse
import socket
import ssl
import struct
import subprocess
import sys
import time

PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
DATA, HEADERS, RST_STREAM, SETTINGS, PING, GOAWAY = 0x0, 0x1, 0x3, 0x4, 0x6, 0x7
END_STREAM, ACK, END_HEADERS, PADDED, PRIORITY = 0x1, 0x1, 0x4, 0x8, 0x20
STREAM = 1  # the one request's stream


def frame(kind, flags, stream, payload=b""):
    return struct.pack(">I", len(payload))[1:] + bytes([kind, flags]) + struct.pack(">I", stream) + payload


def _literal(name_index, value):
    """A field as HPACK's literal without indexing, its name from the static table (RFC 7541,
    6.2.2), the value a plain string under 127 bytes."""
    data = value.encode()
    assert name_index < 15 and len(data) < 127
    return bytes([name_index, len(data)]) + data


def request(path, tls, authority="localhost"):
    """The client's first bytes: the preface, an empty SETTINGS, and GET path on stream 1."""
    block = b"\x82" + (b"\x87" if tls else b"\x86") + _literal(4, path) + _literal(1, authority)
    return PREFACE + frame(SETTINGS, 0, 0) + frame(HEADERS, END_STREAM | END_HEADERS, STREAM, block)


class Response:
    """Reads the server's frames: feed() returns what to send back (SETTINGS and PING
    acknowledgements); done once stream 1 has ended with status 200, error when it cannot."""

    def __init__(self):
        self.buf, self.done, self.error, self.status_ok = b"", False, None, None

    def feed(self, data):
        self.buf += data
        out = b""
        while len(self.buf) >= 9 and not self.error:
            length = int.from_bytes(self.buf[:3], "big")
            if len(self.buf) < 9 + length:
                break
            kind, flags = self.buf[3], self.buf[4]
            stream = struct.unpack(">I", self.buf[5:9])[0] & 0x7FFFFFFF
            payload, self.buf = self.buf[9:9 + length], self.buf[9 + length:]
            if kind == SETTINGS and not flags & ACK:
                out += frame(SETTINGS, ACK, 0)
            elif kind == PING and not flags & ACK:
                out += frame(PING, ACK, 0, payload)
            elif kind == GOAWAY:
                self.error = "GOAWAY"
            elif kind == RST_STREAM and stream == STREAM:
                self.error = "RST_STREAM"
            elif kind == HEADERS and stream == STREAM and self.status_ok is None:
                # Every server here codes `:status 200` as the static table's entry 8 (0x88).
                skip = (1 if flags & PADDED else 0) + (5 if flags & PRIORITY else 0)  # pad length, priority
                self.status_ok = payload[skip:skip + 1] == b"\x88"
                if not self.status_ok:
                    self.error = "a status other than 200"
            if stream == STREAM and kind in (HEADERS, DATA) and flags & END_STREAM and not self.error:
                self.done = bool(self.status_ok)
                if not self.done:
                    self.error = "the stream ended without a response head"
        return out


def open_one(port, path, context, timeout_s=10):
    """One connection with its request answered, or raises OSError."""
    sock = socket.create_connection(("127.0.0.1", port), timeout=timeout_s)
    try:
        if context is not None:
            sock = context.wrap_socket(sock, server_hostname="localhost")
            if sock.selected_alpn_protocol() != "h2":
                raise OSError("ALPN gave %s, not h2" % sock.selected_alpn_protocol())
        sock.sendall(request(path, context is not None))
        response = Response()
        while not response.done:
            data = sock.recv(65536)
            if not data:
                raise OSError("closed before the response ended")
            reply = response.feed(data)
            if response.error:
                raise OSError(response.error)
            if reply:
                sock.sendall(reply)
        return sock
    except BaseException:
        sock.close()
        raise


def client_context():
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    context.set_alpn_protocols(["h2"])
    return context


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--idle", type=int, required=True, help="connections to open and hold")
    ap.add_argument("--path", default="/index.html")
    ap.add_argument("--tls", action="store_true", help="h2 by ALPN (else h2c with prior knowledge)")
    ap.add_argument("--settle-s", type=float, default=0.0,
                    help="seconds to hold them all, idle, before IDLE_READY")
    ap.add_argument("load", nargs=argparse.REMAINDER, help="-- the load to run while they are held")
    args = ap.parse_args(argv)
    load = args.load[1:] if args.load[:1] == ["--"] else args.load
    context = client_context() if args.tls else None
    held, failures = [], {}
    for _ in range(args.idle):
        try:
            held.append(open_one(args.port, args.path, context))
        except OSError as e:
            failures[str(e)] = failures.get(str(e), 0) + 1
    for why, n in failures.items():
        print("h2idle: %d connections failed: %s" % (n, why), file=sys.stderr)
    time.sleep(args.settle_s)
    print("IDLE_READY %d" % len(held), flush=True)
    rc = 0
    if load:
        proc = subprocess.Popen(load, stdout=subprocess.PIPE, text=True)
        for line in proc.stdout:
            sys.stdout.write(line)
            sys.stdout.flush()
        rc = proc.wait()
    for s in held:
        s.close()
    return rc


if __name__ == "__main__":
    sys.exit(main())
