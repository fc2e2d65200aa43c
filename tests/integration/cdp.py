"""Headless Chromium driven through the DevTools protocol over a pipe (--remote-debugging-pipe:
JSON messages ended by a NUL byte, the browser reading fd 3 and writing fd 4), Python's standard
library only: no websocket, no port, no npm. Every wait has a deadline, and close() always ends
the browser's whole process group.

    with Chromium(chromium_binary()) as browser:
        session = browser.new_page()
        browser.call("Page.navigate", {"url": url}, session)
        browser.wait_event("Page.loadEventFired", session, timeout=60)

Also decode_png(), for screenshots (no imaging library on the machine).
"""
import fcntl
import json
import os
import select
import shutil
import signal
import struct
import tempfile
import time
import zlib

# What the issue asks for: headless, no sandbox (tests run as root), no GPU, nothing that
# reaches for the network (the machine's network is closed), a fresh profile.
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--no-default-browser-check", "--disable-breakpad", "--disable-dev-shm-usage", "--mute-audio",
         "--autoplay-policy=no-user-gesture-required", "--window-size=900,700",
         "--remote-debugging-pipe"]


def chromium_binary():
    """Debian's chromium (tools/setup installs it); None if it is not there."""
    return shutil.which("chromium") or shutil.which("chromium", path="/usr/bin:/usr/lib/chromium")


class CdpError(RuntimeError):
    pass


class Chromium:
    def __init__(self, binary, timeout=60, flags=()):
        """`flags`: more command-line flags after FLAGS."""
        self.timeout = timeout
        self.dir = tempfile.mkdtemp(prefix="ringd-chromium-")
        self.log_path = os.path.join(self.dir, "chromium.log")
        to_r, to_w = os.pipe()
        from_r, from_w = os.pipe()
        # Well above 4, so that the dup2s onto 3 and 4 never overwrite one of these.
        to_r, to_w, from_r, from_w = [self._high(fd) for fd in (to_r, to_w, from_r, from_w)]
        env = dict(os.environ, HOME=self.dir, XDG_CONFIG_HOME=self.dir, XDG_CACHE_HOME=self.dir)
        argv = [binary] + FLAGS + list(flags) + ["--user-data-dir=" + os.path.join(self.dir, "profile"), "about:blank"]
        actions = [(os.POSIX_SPAWN_OPEN, 0, "/dev/null", os.O_RDONLY, 0),
                   (os.POSIX_SPAWN_OPEN, 1, self.log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644),
                   (os.POSIX_SPAWN_DUP2, 1, 2),
                   (os.POSIX_SPAWN_DUP2, to_r, 3),
                   (os.POSIX_SPAWN_DUP2, from_w, 4)]
        # A session of its own: close() kills the browser and every helper process it started.
        self.pid = os.posix_spawn(binary, argv, env, file_actions=actions, setsid=True)
        os.close(to_r)
        os.close(from_w)
        self.w, self.r = to_w, from_r
        self.buf = b""
        self.next_id = 0
        self.events = []  # every event received, in order: (method, params, sessionId)
        self.exit_status = None

    @staticmethod
    def _high(fd):
        high = fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, 10)
        os.close(fd)
        return high

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def log(self):
        try:
            with open(self.log_path, errors="replace") as f:
                return f.read()[-4000:]
        except OSError:
            return ""

    def _read_message(self, deadline):
        while b"\0" not in self.buf:
            left = deadline - time.time()
            if left <= 0:
                raise CdpError("no message from the browser in time; its log:\n" + self.log())
            ready, _, _ = select.select([self.r], [], [], min(left, 1.0))
            if ready:
                chunk = os.read(self.r, 1 << 20)
                if not chunk:
                    raise CdpError("the browser closed the pipe (it exited); its log:\n" + self.log())
                self.buf += chunk
        raw, self.buf = self.buf.split(b"\0", 1)
        return json.loads(raw)

    def call(self, method, params=None, session=None, timeout=None):
        """Sends a command and returns its result; events that arrive meanwhile are kept."""
        self.next_id += 1
        msg = {"id": self.next_id, "method": method, "params": params or {}}
        if session:
            msg["sessionId"] = session
        data = json.dumps(msg).encode() + b"\0"
        while data:
            _, ready, _ = select.select([], [self.w], [], self.timeout)
            if not ready:
                raise CdpError("the browser does not read its pipe")
            data = data[os.write(self.w, data):]
        deadline = time.time() + (timeout or self.timeout)
        while True:
            m = self._read_message(deadline)
            if m.get("id") == self.next_id:
                if "error" in m:
                    raise CdpError("%s: %s" % (method, m["error"]))
                return m.get("result", {})
            if "method" in m:
                self.events.append((m["method"], m.get("params", {}), m.get("sessionId")))

    def wait_event(self, method, session=None, timeout=None, since=0):
        """The first event `method` (of `session`) at or after index `since` of self.events."""
        deadline = time.time() + (timeout or self.timeout)
        i = since
        while True:
            while i < len(self.events):
                name, params, sid = self.events[i]
                i += 1
                if name == method and (session is None or sid == session):
                    return params
            m = self._read_message(deadline)
            if "method" in m:
                self.events.append((m["method"], m.get("params", {}), m.get("sessionId")))

    def new_context(self):
        """A browser context of its own, as a fresh profile has: its own cache, cookies and
        connections. Returns its id, for new_page and dispose_context."""
        return self.call("Target.createBrowserContext")["browserContextId"]

    def dispose_context(self, context):
        """Closes a browser context and its pages."""
        self.call("Target.disposeBrowserContext", {"browserContextId": context})

    def new_page(self, context=None):
        """A new tab (in browser context `context`, else the default one), attached; returns its
        session id."""
        params = {"url": "about:blank"}
        if context is not None:
            params["browserContextId"] = context
        target = self.call("Target.createTarget", params)["targetId"]
        return self.call("Target.attachToTarget", {"targetId": target, "flatten": True})["sessionId"]

    def close(self):
        if self.pid is None:
            return
        try:
            self.call("Browser.close", timeout=10)
        except (CdpError, OSError, ValueError):
            pass
        for fd in (self.w, self.r):
            try:
                os.close(fd)
            except OSError:
                pass
        deadline = time.time() + 10
        while time.time() < deadline:
            pid, status = os.waitpid(self.pid, os.WNOHANG)
            if pid:
                self.exit_status = status
                break
            time.sleep(0.1)
        try:  # whatever is left of it (helpers, or the browser itself if it hung)
            os.killpg(self.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        if self.exit_status is None:
            os.waitpid(self.pid, 0)
        self.pid = None
        shutil.rmtree(self.dir, ignore_errors=True)


def decode_png(data):
    """(width, height, channels, pixel rows) of an 8-bit, non-interlaced RGB or RGBA PNG, as
    Chromium's screenshots are."""
    if data[:8] != b"\x89PNG\r\n\x1a\n":
        raise ValueError("not a PNG")
    pos, idat, header = 8, [], None
    while pos < len(data):
        length, kind = struct.unpack(">I4s", data[pos:pos + 8])
        body = data[pos + 8:pos + 8 + length]
        pos += 12 + length
        if kind == b"IHDR":
            header = struct.unpack(">IIBBBBB", body)
        elif kind == b"IDAT":
            idat.append(body)
        elif kind == b"IEND":
            break
    width, height, depth, color, _, _, interlace = header
    channels = {2: 3, 6: 4}.get(color)
    if depth != 8 or channels is None or interlace:
        raise ValueError("unsupported PNG: depth %d, color type %d, interlace %d" % (depth, color, interlace))
    raw = zlib.decompress(b"".join(idat))
    stride = width * channels
    rows, prev = [], bytearray(stride)
    for y in range(height):
        kind = raw[y * (stride + 1)]
        line = bytearray(raw[y * (stride + 1) + 1:(y + 1) * (stride + 1)])
        if kind == 1:
            for i in range(channels, stride):
                line[i] = (line[i] + line[i - channels]) & 0xFF
        elif kind == 2:
            line = bytearray((a + b) & 0xFF for a, b in zip(line, prev))
        elif kind == 3:
            for i in range(stride):
                left = line[i - channels] if i >= channels else 0
                line[i] = (line[i] + ((left + prev[i]) >> 1)) & 0xFF
        elif kind == 4:
            for i in range(stride):
                a = line[i - channels] if i >= channels else 0
                b, c = prev[i], prev[i - channels] if i >= channels else 0
                p = a + b - c
                pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                line[i] = (line[i] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 0xFF
        elif kind != 0:
            raise ValueError("bad PNG filter %d" % kind)
        rows.append(bytes(line))
        prev = line
    return width, height, channels, rows
