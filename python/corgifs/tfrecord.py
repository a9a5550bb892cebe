"""TFRecord framing and tf.train.Example decoding, with nothing but numpy.

A TFRecord file is a sequence of frames: uint64 length, uint32 masked CRC32C
of the length, the data, uint32 masked CRC32C of the data; all little endian.
"""

import struct

import numpy as np

from .crc import masked_crc32c, masked_crc32c_many

__all__ = ["CorruptRecord", "read_tfrecords", "parse_example", "decode_example", "frame"]

CHUNK = 1 << 20
_HEAD = struct.Struct("<QI")
_U32 = struct.Struct("<I")


class CorruptRecord(ValueError):
    """A record whose framing or checksum is wrong, with the file and offset."""


def frame(payload):
    """The TFRecord frame of payload (for writing test files)."""
    n = struct.pack("<Q", len(payload))
    return n + _U32.pack(masked_crc32c(n)) + payload + _U32.pack(masked_crc32c(payload))


def read_tfrecords(f, offset=0, verify=True, name=None, chunk=CHUNK):
    """Yields (payload, next_offset) for every record of the binary file
    object f from byte `offset` on (a record boundary, such as a
    next_offset yielded before), reading `chunk` bytes at a time.

    With verify (the default) both CRCs of every record are checked and a
    damaged record raises CorruptRecord naming the file and offset.
    verify=False skips the checks: a corgifs mount has already checked
    every record's CRCs when it loaded the record's block from the source,
    and never serves a block that failed, so a reader of a mount may skip
    them to save CPU. The framing is checked either way."""
    name = name or getattr(f, "name", "<stream>")
    if offset:
        f.seek(offset)
    data, pos, base = b"", 0, offset  # data[pos] is at file offset base + pos
    while True:
        # Frame every whole record in data; check the CRCs of the batch.
        starts, lens = [], []
        end = len(data)
        while end - pos >= 12:
            n, lcrc = _HEAD.unpack_from(data, pos)
            if end - pos < n + 16:
                if verify and masked_crc32c(data[pos:pos + 8]) != lcrc:
                    raise CorruptRecord(f"{name}: length CRC mismatch at offset {base + pos}")
                break
            starts.append(pos)
            lens.append(n)
            pos += n + 16
        if verify and starts:
            _check(data, starts, lens, name, base)
        for s, n in zip(starts, lens):
            yield data[s + 12:s + 12 + n], base + s + n + 16
        # Refill: keep the partial frame, read at least what it needs.
        need = 12
        if len(data) - pos >= 12:
            need = _HEAD.unpack_from(data, pos)[0] + 16
        more = f.read(max(chunk, need - (len(data) - pos)))
        if not more:
            if pos < len(data):
                what = "header" if len(data) - pos < 12 else "record"
                raise CorruptRecord(f"{name}: truncated {what} at offset {base + pos}: "
                                    f"{len(data) - pos} bytes before the end of the file")
            return
        base += pos
        data = data[pos:] + more
        pos = 0


def _check(data, starts, lens, name, base):
    st = np.asarray(starts, dtype=np.int64)
    ln = np.asarray(lens, dtype=np.int64)
    want_len = np.frombuffer(b"".join(data[s + 8:s + 12] for s in starts), dtype="<u4")
    got_len = masked_crc32c_many(data, st, np.full(len(st), 8))
    want_data = np.frombuffer(b"".join(data[s + 12 + n:s + 16 + n] for s, n in zip(starts, lens)), dtype="<u4")
    got_data = masked_crc32c_many(data, st + 12, ln)
    bad_len = np.nonzero(got_len != want_len)[0]
    bad_data = np.nonzero(got_data != want_data)[0]
    first = min(bad_len[:1].tolist() + bad_data[:1].tolist(), default=None)
    if first is not None:
        what = "length" if first in bad_len[:1] else "data"
        raise CorruptRecord(f"{name}: {what} CRC mismatch in the record at offset {base + starts[first]}")


# ---------------------------------------------------------------------------
# tf.train.Example from the protobuf wire format:
#   Example  { Features features = 1; }
#   Features { map<string, Feature> feature = 1; }   entry: key = 1, value = 2
#   Feature  { oneof { BytesList bytes_list = 1; FloatList float_list = 2;
#                      Int64List int64_list = 3; } }
#   *List    { repeated ... value = 1; }             scalars usually packed

def _varint(b, i):
    c = b[i]
    if c < 0x80:  # most keys and lengths fit one byte
        return c, i + 1
    result, shift = c & 0x7F, 7
    i += 1
    while True:
        if i >= len(b):
            raise ValueError("truncated varint")
        c = b[i]
        i += 1
        result |= (c & 0x7F) << shift
        if c < 0x80:
            return result, i
        shift += 7
        if shift >= 70:
            raise ValueError("varint too long")


def _fields(b, i, end):
    """Yields (field number, wire type, value): an int for varints, a
    (start, stop) span for the other wire types."""
    while i < end:
        key, i = _varint(b, i)
        field, wire = key >> 3, key & 7
        if wire == 2:
            n, i = _varint(b, i)
            v, i = (i, i + n), i + n
        elif wire == 0:
            v, i = _varint(b, i)
        elif wire == 1:
            v, i = (i, i + 8), i + 8
        elif wire == 5:
            v, i = (i, i + 4), i + 4
        else:
            raise ValueError(f"unsupported wire type {wire} at byte {i}")
        if i > end:
            raise ValueError("field runs past its message")
        yield field, wire, v


def _signed64(v):
    return v - (1 << 64) if v >= 1 << 63 else v


_KINDS = {1: "bytes", 2: "float", 3: "int64"}


def _feature(b, start, end):
    kind, values = None, []
    for field, wire, v in _fields(b, start, end):
        if wire != 2 or field not in (1, 2, 3):
            continue
        if field != kind:  # a later list of another kind replaces the earlier one
            kind, values = field, []
        for f, w, x in _fields(b, *v):
            if f != 1:
                continue
            if field == 1 and w == 2:
                values.append(bytes(b[x[0]:x[1]]))
            elif field == 2 and w == 2:
                values.append(np.frombuffer(b, dtype="<f4", count=(x[1] - x[0]) // 4, offset=x[0]))
            elif field == 2 and w == 5:
                values.append(np.frombuffer(b, dtype="<f4", count=1, offset=x[0]))
            elif field == 3 and w == 2:
                i, stop = x
                ints = []
                while i < stop:
                    n, i = _varint(b, i)
                    ints.append(_signed64(n))
                values.append(np.array(ints, dtype=np.int64))
            elif field == 3 and w == 0:
                values.append(np.array([_signed64(x)], dtype=np.int64))
    if kind == 2:
        values = np.concatenate(values).astype(np.float32) if values else np.zeros(0, np.float32)
    elif kind == 3:
        values = np.concatenate(values) if values else np.zeros(0, np.int64)
    return _KINDS.get(kind), values


def parse_example(payload, names=None):
    """Decodes a serialized tf.train.Example into {name: (kind, values)}:
    kind "float" with a float32 numpy array, "int64" with an int64 numpy
    array, "bytes" with a list of bytes, or None (and []) for an empty
    feature. Only the features in `names` are decoded when it is given."""
    out = {}
    for f1, w1, features in _fields(payload, 0, len(payload)):
        if f1 != 1 or w1 != 2:
            continue
        for f2, w2, entry in _fields(payload, *features):
            if f2 != 1 or w2 != 2:
                continue
            key, value = None, (0, 0)
            for f3, w3, v in _fields(payload, *entry):
                if w3 == 2 and f3 == 1:
                    key = bytes(payload[v[0]:v[1]]).decode()
                elif w3 == 2 and f3 == 2:
                    value = v
            if key is not None and (names is None or key in names):
                out[key] = _feature(payload, *value)
    return out


def decode_example(payload, names=None):
    """A tf.train.Example as {name: value}: float features as float32 numpy
    arrays, int64 features as int64 numpy arrays (both 1-D, so that a
    DataLoader stacks them into [batch, n] tensors), a bytes feature of one
    value as that bytes object, of several as a list of bytes."""
    out = {}
    for k, (kind, v) in parse_example(payload, names).items():
        if kind == "bytes" and len(v) == 1:
            v = v[0]
        out[k] = v
    return out
