"""The h2-idle client's frames: its request bytes, and reading a response split anywhere."""
import unittest

from harness.h2idle import (ACK, DATA, END_HEADERS, END_STREAM, GOAWAY, HEADERS, PING, PREFACE, SETTINGS,
                            Response, frame, request)


def response(*frames):
    return b"".join(frames)


class H2idleTest(unittest.TestCase):
    def test_request(self):
        got = request("/index.html", tls=True)
        self.assertTrue(got.startswith(PREFACE + b"\x00\x00\x00\x04\x00\x00\x00\x00\x00"))  # empty SETTINGS
        # HEADERS on stream 1, END_STREAM | END_HEADERS: GET, https, then :path and :authority as
        # literals without indexing whose names are the static table's 4 and 1.
        block = b"\x82\x87\x04\x0b/index.html\x01\x09localhost"
        self.assertEqual(got[len(PREFACE) + 9:], b"\x00\x00\x1a\x01\x05\x00\x00\x00\x01" + block)
        self.assertEqual(len(block), 0x1a)
        self.assertIn(b"\x82\x86\x04", request("/", tls=False))  # scheme http

    def test_a_response_split_at_every_byte(self):
        server = response(frame(SETTINGS, 0, 0, b"\x00\x03\x00\x00\x00\x64"), frame(PING, 0, 0, b"12345678"),
                          frame(HEADERS, END_HEADERS, 1, b"\x88\x5f\x87"), frame(DATA, 0, 1, b"x" * 600),
                          frame(DATA, END_STREAM, 1, b"y" * 12))
        for cut in range(len(server) + 1):
            r = Response()
            replies = r.feed(server[:cut])
            self.assertFalse(r.done and cut < len(server))
            replies += r.feed(server[cut:])
            self.assertTrue(r.done, cut)
            self.assertIsNone(r.error)
            self.assertEqual(replies, frame(SETTINGS, ACK, 0) + frame(PING, ACK, 0, b"12345678"))

    def test_what_is_not_a_response(self):
        for server, why in ((frame(HEADERS, END_HEADERS | END_STREAM, 1, b"\x8d"), "a status other than 200"),
                            (frame(GOAWAY, 0, 0, b"\x00" * 8), "GOAWAY"),
                            (frame(DATA, END_STREAM, 1, b"x"), "the stream ended without a response head")):
            r = Response()
            r.feed(server)
            self.assertFalse(r.done)
            self.assertEqual(r.error, why)
        # A padded HEADERS with a priority: the status after both.
        r = Response()
        r.feed(frame(HEADERS, END_HEADERS | END_STREAM | 0x8 | 0x20, 1, b"\x02" + b"\x00" * 5 + b"\x88" + b"\x00\x00"))
        self.assertTrue(r.done)


if __name__ == "__main__":
    unittest.main()
