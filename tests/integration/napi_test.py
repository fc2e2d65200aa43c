"""NAPI busy polling (--busy-poll-us): the ring registers it (IORING_REGISTER_NAPI) and ringd
serves over a real network device, a veth pair between two network namespaces this test creates
(and deletes) itself, with the client in the other namespace. The epoll tier has no ring to
register it with: it refuses the flag with one line and exit 2, like any bad flag."""
import os
import shutil
import subprocess
import sys
import unittest

from ringd_harness import BACKEND, RINGD, ROOT_FLAGS, DocrootTestCase, Server

IP = shutil.which("ip") or "/usr/sbin/ip"
SERVER_ADDR = "10.231.0.1"
CLIENT_ADDR = "10.231.0.2"

# Run inside the client's namespace: GET the path, print the status line and the body's length.
CLIENT = r"""
import socket, sys
s = socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=10)
s.sendall(b"GET " + sys.argv[3].encode() + b" HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n")
data = b""
while True:
    chunk = s.recv(65536)
    if not chunk:
        break
    data += chunk
head, _, body = data.partition(b"\r\n\r\n")
print(head.split(b"\r\n")[0].decode(), len(body))
"""


def napi_usable():
    out = subprocess.run([RINGD, "--probe"], capture_output=True, text=True, timeout=10).stdout
    line = next((l for l in out.splitlines() if l.startswith("NAPI busy poll:")), "")
    return line.startswith("NAPI busy poll: ok"), line or "no NAPI line in ringd --probe"


def ip(*args):
    subprocess.run([IP] + list(args), check=True, capture_output=True, timeout=10)


class NapiTest(DocrootTestCase):
    def test_epoll_refuses_busy_poll(self):
        if BACKEND != "epoll":
            self.skipTest("the uring tiers accept --busy-poll-us")
        out = subprocess.run([RINGD, "--root", self.root, "--io", "epoll", "--busy-poll-us", "50",
                              "--listen", "127.0.0.1:0"] + ROOT_FLAGS, capture_output=True,
                             text=True, timeout=10)
        self.assertEqual(out.returncode, 2, out.stderr)  # a bad flag, like every other
        self.assertEqual(out.stderr.strip(),
                         "ringd: --busy-poll-us needs a tier that has it (--io=bypass or "
                         "--io=uring); the epoll tier does not")

    def test_serves_over_veth_with_napi_registered(self):
        if BACKEND == "epoll":
            self.skipTest("epoll has no ring to register NAPI with (see test_epoll_refuses...)")
        ok, why = napi_usable()
        if not ok:
            self.skipTest("the kernel cannot busy-poll for io_uring: " + why)
        if os.geteuid() != 0 or not os.path.exists(IP):
            self.skipTest("network namespaces need root and iproute2's ip")
        tag = "%d" % os.getpid()
        srv, cli = "ringd-napi-s" + tag, "ringd-napi-c" + tag
        ip("netns", "add", srv)
        self.addCleanup(subprocess.run, [IP, "netns", "del", srv], capture_output=True)
        ip("netns", "add", cli)
        self.addCleanup(subprocess.run, [IP, "netns", "del", cli], capture_output=True)
        ip("link", "add", "rn0" + tag[-6:], "netns", srv, "type", "veth",
           "peer", "name", "rn1" + tag[-6:], "netns", cli)
        for ns, dev, addr in [(srv, "rn0" + tag[-6:], SERVER_ADDR),
                              (cli, "rn1" + tag[-6:], CLIENT_ADDR)]:
            ip("-n", ns, "addr", "add", addr + "/30", "dev", dev)
            ip("-n", ns, "link", "set", dev, "up")
            ip("-n", ns, "link", "set", "lo", "up")

        server = Server(self.root, "--busy-poll-us", "50", wrap=[IP, "netns", "exec", srv],
                        listen=SERVER_ADDR + ":0")
        try:
            line = [l for l in server.log if "io backend" in l][0]
            self.assertIn("NAPI busy poll 50 us", line)
            for path in ["/small.txt", "/large.bin"]:
                out = subprocess.run([IP, "netns", "exec", cli, sys.executable, "-c", CLIENT,
                                      SERVER_ADDR, str(server.port), path],
                                     capture_output=True, text=True, timeout=30)
                self.assertEqual(out.returncode, 0, out.stderr)
                self.assertEqual(out.stdout.split(), ["HTTP/1.1", "200", "OK",
                                                      str(len(self.files[path[1:]]))])
        finally:
            self.assertEqual(server.stop(), 0)


if __name__ == "__main__":
    unittest.main()
