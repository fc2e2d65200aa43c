"""Servers.start: a server whose port another socket took between free_port and its bind is
started again on another port; any other failure to start is reported at once."""
import os
import shutil
import sys
import tempfile
import unittest
from types import SimpleNamespace

from harness.measure import Servers
from harness.peers import Peer

# Listens on the port it is given, unless a marker file says to fail first as ringd does when
# the port is taken (and removes it, so that the next start listens).
SERVE = r"""
import os, socket, sys, time
port, marker = int(sys.argv[1]), sys.argv[2]
if os.path.exists(marker):
    os.remove(marker)
    print("ringd: cannot listen on 127.0.0.1:%d: Address already in use" % port, file=sys.stderr)
    sys.exit(2)
if sys.argv[3] == "broken":
    print("ringd: --root: no such directory", file=sys.stderr)
    sys.exit(2)
s = socket.socket()
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("127.0.0.1", port))
s.listen()
while True:
    c, _ = s.accept()
    c.close()
"""


class StartTest(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.mkdtemp()
        self.addCleanup(shutil.rmtree, self.dir)
        self.marker = os.path.join(self.dir, "taken")
        args = SimpleNamespace(shards=1, server_cpus="0-%d" % (os.cpu_count() - 1))
        self.servers = Servers(args, {}, self.dir)
        self.addCleanup(self.servers.stop_all)

    def peer(self, mode):
        return Peer("fake-" + mode, lambda peer, ctx: [sys.executable, "-c", SERVE, str(ctx.port),
                                                       self.marker, mode])

    def test_a_taken_port_is_tried_again_on_another(self):
        open(self.marker, "w").close()
        s = self.servers.start(self.peer("serves"), "/data")
        self.assertFalse(os.path.exists(self.marker))  # the first try failed and said why
        with open(os.path.join(self.dir, "servers", "fake-serves.log")) as f:
            self.assertIn("Address already in use", f.read())
        self.assertIsNone(s.proc.poll())

    def test_another_failure_is_reported_at_once(self):
        with self.assertRaisesRegex(RuntimeError, "fake-broken did not start"):
            self.servers.start(self.peer("broken"), "/data")
        with open(os.path.join(self.dir, "servers", "fake-broken.log")) as f:
            self.assertEqual(f.read().count("no such directory"), 1)


if __name__ == "__main__":
    unittest.main()
