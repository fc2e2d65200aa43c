"""Makes a WebM file larger without re-encoding it: an EBML Void element (which every Matroska
reader skips) at the end of each Cluster, with the positions that point past it (the SeekHead's
SeekPosition, the Cues' CueClusterPosition) rewritten. The browser test plays the demo video
padded this way, so that the middle of the file lies beyond what the player reads ahead and
seeking there needs a Range request of its own.

    big = pad_clusters(open("demo.webm", "rb").read(), 2 << 20, first=12)   # 2 MiB after each of 12
    cluster_offsets(big)[12]                                                 # where the 13th starts
"""

SEGMENT, CLUSTER, VOID = 0x18538067, 0x1F43B675, 0xEC
# Master elements on the way to a position: Segment, SeekHead, Seek, Cues, CuePoint, CueTrackPositions.
MASTERS = {SEGMENT, 0x114D9B74, 0x4DBB, 0x1C53BB6B, 0xBB, 0xB7}
# Unsigned integers that are offsets from the start of the Segment's data.
POSITIONS = {0x53AC, 0xF1}


def _vint(data, pos, keep_marker=False):
    """(value, length) of the EBML variable-length integer at pos (an ID keeps its marker bit)."""
    first, length, mask = data[pos], 1, 0x80
    while not first & mask:
        length, mask = length + 1, mask >> 1
        if length > 8:
            raise ValueError("bad EBML length at byte %d" % pos)
    value = first if keep_marker else first & (mask - 1)
    for b in data[pos + 1:pos + length]:
        value = (value << 8) | b
    return value, length


def _children(data, start, end):
    """(id, start, data start, end) of each element in data[start:end]."""
    out, pos = [], start
    while pos < end:
        eid, n = _vint(data, pos, keep_marker=True)
        size, m = _vint(data, pos + n)
        out.append((eid, pos, pos + n + m, pos + n + m + size))
        pos += n + m + size
    if pos != end:
        raise ValueError("an element runs past its parent's end")
    return out


def _element(eid, payload):
    """An element with an 8-byte size: its length never depends on the values inside it."""
    return eid.to_bytes((eid.bit_length() + 7) // 8, "big") + ((1 << 56) | len(payload)).to_bytes(8, "big") + payload


def _rewrite(data, start, end, new_position, pad):
    """The elements of data[start:end] re-encoded; pad(n) is the Void size after Cluster n."""
    out = bytearray()
    for eid, _, body, stop in _children(data, start, end):
        if eid in MASTERS:
            payload = _rewrite(data, body, stop, new_position, pad)
        elif eid in POSITIONS:
            payload = new_position(int.from_bytes(data[body:stop], "big")).to_bytes(8, "big")
        elif eid == CLUSTER:
            n = pad.clusters
            pad.clusters += 1
            payload = data[body:stop] + (_element(VOID, bytes(pad(n))) if pad(n) else b"")
        else:
            payload = data[body:stop]
        out += _element(eid, payload)
    return bytes(out)


class _Pad:
    def __init__(self, pad, first):
        self.pad, self.first, self.clusters = pad, first, 0

    def __call__(self, n):
        return self.pad if self.first is None or n < self.first else 0


def cluster_offsets(data):
    """Where each Cluster starts, from the start of the file."""
    seg = next(t for t in _children(data, 0, len(data)) if t[0] == SEGMENT)
    return [at for eid, at, _, _ in _children(data, seg[2], seg[3]) if eid == CLUSTER]


def pad_clusters(data, pad, first=None):
    """The same WebM with `pad` bytes of Void at the end of each of the first `first` Clusters
    (all of them if None)."""
    top = _children(data, 0, len(data))
    seg = next(t for t in top if t[0] == SEGMENT)
    kids = _children(data, seg[2], seg[3])

    def layout(new_position):
        parts, where, offset = [], {}, 0
        pad_of = _Pad(pad, first)
        for _, at, _, stop in kids:
            parts.append(_rewrite(data, at, stop, new_position, pad_of))
            where[at - seg[2]] = offset
            offset += len(parts[-1])
        return parts, where

    # Every size is fixed (8 bytes, positions too), so the first layout gives the final offsets.
    _, where = layout(lambda old: 0)

    def moved(old):
        if old not in where:
            raise ValueError("a position (%d) that is not the start of a top-level element" % old)
        return where[old]

    parts, _ = layout(moved)
    return data[:seg[1]] + _element(SEGMENT, b"".join(parts)) + data[seg[3]:]
