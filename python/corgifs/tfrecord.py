"""TFRecord framing and tf.train.Example decoding, with nothing but numpy
(and, for decoding, the C decoder in _example.c when the package was built
with it: parse_example and decode_example are then its functions, the pure
ones stay as parse_example_pure and decode_example_pure).

A TFRecord file is a sequence of frames: uint64 length, uint32 masked CRC32C
of the length, the data, uint32 masked CRC32C of the data; all little endian.
"""

import io
import os
import struct

import numpy as np

from . import crc as _crc
from .crc import masked_crc32c, masked_crc32c_many

__all__ = ["CorruptRecord", "read_tfrecords", "parse_example", "decode_example", "frame",
           "parse_example_pure", "decode_example_pure", "HAVE_FAST_DECODE"]

CHUNK = 1 << 20
_HEAD = struct.Struct("<QI")
_U32 = struct.Struct("<I")


class CorruptRecord(ValueError):
    """A record whose framing or checksum is wrong, with the file and offset."""


def frame(payload):
    """The TFRecord frame of payload (for writing test files)."""
    n = struct.pack("<Q", len(payload))
    return n + _U32.pack(masked_crc32c(n)) + payload + _U32.pack(masked_crc32c(payload))


def read_tfrecords(f, offset=0, verify=True, name=None, chunk=CHUNK, writable=False):
    """Yields (payload, next_offset) for every record of the binary file
    object f from byte `offset` on (a record boundary, such as a
    next_offset yielded before), reading `chunk` bytes at a time.

    With verify (the default) both CRCs of every record are checked and a
    damaged record raises CorruptRecord naming the file and offset.
    verify=False skips the checks: a corgifs mount has already checked
    every record's CRCs when it loaded the record's block from the source,
    and never serves a block that failed, so a reader of a mount may skip
    them to save CPU. The framing is checked either way.

    writable=True yields every payload as a fresh bytearray (the same one
    copy as the bytes otherwise yielded), which the decoders take as given
    away: their float arrays then view it instead of copying it."""
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
        if writable:
            mv = memoryview(data)
            for s, n in zip(starts, lens):
                yield bytearray(mv[s + 12:s + 12 + n]), base + s + n + 16
            del mv  # data is replaced below
        else:
            for s, n in zip(starts, lens):
                yield data[s + 12:s + 12 + n], base + s + n + 16
        # Refill: keep the partial frame, read at least what it needs.
        need = 12
        if len(data) - pos >= 12:
            need = _HEAD.unpack_from(data, pos)[0] + 16
            if need > chunk:  # unchecked with verify=False: never read past the end for it
                size = _size(f)
                if size is not None and base + pos + need > size:
                    raise CorruptRecord(f"{name}: the record at offset {base + pos} claims {need - 16} bytes, "
                                        f"past the end of the file ({size} bytes)")
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


def _size(f):
    try:
        return os.fstat(f.fileno()).st_size
    except (AttributeError, OSError, ValueError, io.UnsupportedOperation):
        return None


def _check(data, starts, lens, name, base):
    c = _crc._c_crc32c
    if c is not None:  # one C call per CRC; numpy would only add overhead
        mv, unpack = memoryview(data), _U32.unpack_from
        for s, n in zip(starts, lens):
            x = c(mv[s:s + 8])
            if (((x >> 15) | (x << 17)) + 0xA282EAD8) & 0xFFFFFFFF != unpack(data, s + 8)[0]:
                raise CorruptRecord(f"{name}: length CRC mismatch in the record at offset {base + s}")
            x = c(mv[s + 12:s + 12 + n])
            if (((x >> 15) | (x << 17)) + 0xA282EAD8) & 0xFFFFFFFF != unpack(data, s + 12 + n)[0]:
                raise CorruptRecord(f"{name}: data CRC mismatch in the record at offset {base + s}")
        return
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
    if i >= len(b):
        raise ValueError("truncated varint")
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
            # Bits past the 64th are dropped, as protobuf (and the C decoder) do.
            return result & 0xFFFFFFFFFFFFFFFF, i
        shift += 7
        if shift >= 70:
            raise ValueError("varint too long")


def _skip(b, i, wire, end):
    """The index after a field of wire type `wire` whose value starts at i."""
    if wire == 0:
        _, i = _varint(b, i)
    elif wire == 2:
        n, i = _varint(b, i)
        i += n
    elif wire == 1:
        i += 8
    elif wire == 5:
        i += 4
    else:
        raise ValueError(f"unsupported wire type {wire} at byte {i}")
    if i > end:
        raise ValueError("field runs past its message")
    return i


def _span(b, i, end):
    """(start, stop) of a length-delimited value whose length is at i."""
    n, i = _varint(b, i)
    if i + n > end:
        raise ValueError("field runs past its message")
    return i, i + n


def _signed64(v):
    return v - (1 << 64) if v >= 1 << 63 else v


_KINDS = {1: "bytes", 2: "float", 3: "int64"}


def _list(b, kind, i, end):
    """The values of a BytesList (kind 1), FloatList (2) or Int64List (3)
    in b[i:end]: a list of bytes, or numpy arrays to concatenate."""
    values = []
    while i < end:
        key = b[i]
        if key == 0x0A:  # field 1, length-delimited: bytes, or packed numbers
            ln = b[i + 1] if i + 1 < end else 0x80
            if ln < 0x80 and i + 2 + ln <= end:
                s, i = i + 2, i + 2 + ln
            else:
                s, i = _span(b, i + 1, end)
            if kind == 1:
                values.append(bytes(b[s:i]))
            elif kind == 2:
                if (i - s) % 4:
                    raise ValueError("packed floats whose length is not a multiple of 4")
                values.append(np.frombuffer(b, dtype="<f4", count=(i - s) // 4, offset=s))
            else:
                ints = []
                while s < i:
                    v = b[s]
                    if v < 0x80:
                        s += 1
                    else:
                        v, s = _varint(b, s)
                        if v >= 1 << 63:
                            v -= 1 << 64
                    ints.append(v)
                if s != i:
                    raise ValueError("packed varints run past their list")
                values.append(np.array(ints, dtype=np.int64))
        elif key == 0x0D and kind == 2:  # one unpacked float
            if i + 5 > end:
                raise ValueError("field runs past its message")
            values.append(np.frombuffer(b, dtype="<f4", count=1, offset=i + 1))
            i += 5
        elif key == 0x08 and kind == 3:  # one unpacked int64
            v, i = _varint(b, i + 1)
            values.append(np.array([_signed64(v)], dtype=np.int64))
        else:
            key, i = _varint(b, i)
            i = _skip(b, i, key & 7, end)
    if i != end:
        raise ValueError("list runs past its feature")
    return values


def _feature(b, i, end):
    kind, values = None, []
    key = b[i] if i < end else 0
    if key in (0x0A, 0x12, 0x1A) and i + 1 < end and b[i + 1] < 0x80 and i + 2 + b[i + 1] == end:
        # The usual feature: one list filling it.
        kind = key >> 3
        values = _list(b, kind, i + 2, end)
        i = end
    while i < end:
        key, i = _varint(b, i)
        field = key >> 3
        if key & 7 == 2 and field in (1, 2, 3):
            s, i = _span(b, i, end)
            if field != kind:  # a later list of another kind replaces the earlier one
                kind, values = field, []
            values += _list(b, field, s, i)
        else:
            i = _skip(b, i, key & 7, end)
    if kind == 2:
        values = (values[0] if len(values) == 1 and values[0].flags.writeable and values[0].dtype == np.float32 else
                  values[0].astype(np.float32) if len(values) == 1 else
                  np.concatenate(values).astype(np.float32) if values else np.zeros(0, np.float32))
    elif kind == 3:
        values = values[0] if len(values) == 1 else np.concatenate(values) if values else np.zeros(0, np.int64)
    return _KINDS.get(kind), values


def parse_example_pure(payload, names=None):
    """Decodes a serialized tf.train.Example into {name: (kind, values)}:
    kind "float" with a float32 numpy array, "int64" with an int64 numpy
    array, "bytes" with a list of bytes, or None (and []) for an empty
    feature. Only the features in `names` are decoded when it is given.
    Raises ValueError on a malformed message.

    A bytearray payload is taken as given away (read_tfrecords(writable=True)
    yields a fresh one per record): a float list packed in one piece is then
    a writable array viewing it, not a copy (as in the C decoder, which
    takes a writable memoryview alike)."""
    # Keys and lengths under 128 are one byte: read inline, as a call per
    # varint would cost more than the rest of the parse.
    b = payload.tobytes() if isinstance(payload, memoryview) else payload
    out = {}
    n, i = len(b), 0
    while i < n:  # Example
        key, i = _varint(b, i)
        if key != 0x0A:  # not `Features features = 1`
            i = _skip(b, i, key & 7, n)
            continue
        fs, fe = _span(b, i, n)
        i = fs
        while i < fe:  # Features
            if b[i] != 0x0A:  # not a `feature` map entry
                key, i = _varint(b, i)
                i = _skip(b, i, key & 7, fe)
                continue
            ln = b[i + 1] if i + 1 < fe else 0x80
            if ln < 0x80:
                es, ee = i + 2, i + 2 + ln
            else:
                es, ee = _span(b, i + 1, fe)
            if ee > fe:
                raise ValueError("field runs past its message")
            i, name, vs, ve = es, None, 0, 0
            while i < ee:  # entry: string key = 1; Feature value = 2
                key = b[i]
                ln = b[i + 1] if i + 1 < ee else 0x80
                if key in (0x0A, 0x12) and ln < 0x80:
                    s, i = i + 2, i + 2 + ln
                    if i > ee:
                        raise ValueError("field runs past its message")
                elif key in (0x0A, 0x12):
                    s, i = _span(b, i + 1, ee)
                else:
                    key, i = _varint(b, i)
                    i = _skip(b, i, key & 7, ee)
                    continue
                if key == 0x0A:
                    name = b[s:i].decode()
                else:
                    vs, ve = s, i
            if name is not None and (names is None or name in names):
                out[name] = _feature(b, vs, ve)
            i = ee
        i = fe
    return out


def decode_example_pure(payload, names=None):
    """A tf.train.Example as {name: value}: float features as float32 numpy
    arrays, int64 features as int64 numpy arrays (both 1-D, so that a
    DataLoader stacks them into [batch, n] tensors), a bytes feature of one
    value as that bytes object, of several as a list of bytes."""
    out = {}
    for k, (kind, v) in parse_example_pure(payload, names).items():
        if kind == "bytes" and len(v) == 1:
            v = v[0]
        out[k] = v
    return out


# The C decoder (corgifs/_example.c, built with the package when a compiler
# is at hand) returns the same values 10x faster or more; without it the
# pure-Python functions above serve.
try:
    from . import _example
except ImportError:
    _example = None

HAVE_FAST_DECODE = _example is not None
if HAVE_FAST_DECODE:
    parse_example = _example.parse_example
    decode_example = _example.decode_example
else:
    parse_example = parse_example_pure
    decode_example = decode_example_pure
