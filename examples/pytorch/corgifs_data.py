"""Read corgifs part files from PyTorch, with nothing but torch, numpy and the
standard library.

A corgifs mount shows, for every epoch, K part files

    MNT/epoch-EEEE/part-IIIII-of-KKKKK.tfrecord

that are disjoint and together hold every record once, in a CorgiPile order.
The mapping rule: with R ranks (processes, e.g. DDP) and W DataLoader workers
per rank, use K = R * W parts; consumer (rank r, worker w) reads part r*W + w.
Each part is a plain TFRecord file, read from start to end.

This module holds:

  part_path       the mapping rule
  masked_crc32c   TFRecord's checksum (CRC32C, Castagnoli), vectorised with numpy
  read_records    TFRecord framing, checking both CRCs of every record
  parse_example   a minimal tf.train.Example decoder (protobuf wire format)
  CorgiParts      an IterableDataset: each DataLoader worker opens its own part
  load_tfrecords  a whole directory of records as numpy arrays (e.g. a test set)
"""

import glob
import os
import struct

import numpy as np
import torch
from torch.utils.data import IterableDataset, get_worker_info

__all__ = [
    "part_path", "crc32c", "masked_crc32c", "read_records", "parse_example",
    "decode_image_example", "CorgiParts", "load_tfrecords", "CorruptRecord",
]


# ---------------------------------------------------------------------------
# The mapping rule.

def part_path(mount, epoch, rank, world, worker, workers):
    """Path of the part that DataLoader worker `worker` (of `workers`) of rank
    `rank` (of `world`) reads in `epoch`: part rank*workers + worker of
    K = world*workers."""
    if not (0 <= rank < world and 0 <= worker < workers):
        raise ValueError(f"rank {rank} of {world}, worker {worker} of {workers}: out of range")
    k = world * workers
    i = rank * workers + worker
    return os.path.join(mount, f"epoch-{epoch:04d}", f"part-{i:05d}-of-{k:05d}.tfrecord")


# ---------------------------------------------------------------------------
# CRC32C (Castagnoli, reflected polynomial 0x82F63B78), masked as TFRecord does.

_POLY = 0x82F63B78


def _byte_table():
    table = []
    for b in range(256):
        c = b
        for _ in range(8):
            c = (c >> 1) ^ _POLY if c & 1 else c >> 1
        table.append(c)
    return table


_TABLE = _byte_table()

# The byte-at-a-time CRC register update, reg = T[(reg ^ b) & 0xff] ^ (reg >> 8),
# is linear over GF(2). So, for a chunk of n bytes entered into a zero
# register, the result is the XOR over i of Z[n-1-i][byte_i], where Z[k][b] is
# byte b followed by k zero bytes. A non-zero register is the same as XORing it
# into the chunk's first 4 bytes (little endian). numpy does the XOR over all
# bytes of a chunk at once.
_CHUNK = 4096
_ROWS = None  # _ROWS[_CHUNK-1-k] = Z[k], so a chunk of n uses _ROWS[_CHUNK-n:]
_POS = np.arange(_CHUNK)


def _rows():
    global _ROWS
    if _ROWS is None:
        z = np.empty((_CHUNK, 256), dtype=np.uint32)
        t = np.array(_TABLE, dtype=np.uint32)
        z[0] = t
        for k in range(1, _CHUNK):
            z[k] = t[z[k - 1] & 0xFF] ^ (z[k - 1] >> 8)
        _ROWS = z[::-1].copy()
    return _ROWS


def crc32c(data):
    """CRC32C of a bytes-like object."""
    reg = 0xFFFFFFFF
    mv = memoryview(data).cast("B")
    n, pos = len(mv), 0
    if n >= 64:
        rows_all = _rows()
        while n - pos >= 4:
            m = min(_CHUNK, n - pos)
            rows = rows_all[_CHUNK - m:]
            a = np.frombuffer(mv[pos:pos + m], dtype=np.uint8)
            c = np.bitwise_xor.reduce(rows[_POS[:m], a])
            c ^= rows[0, reg & 0xFF] ^ rows[1, (reg >> 8) & 0xFF] ^ rows[2, (reg >> 16) & 0xFF] ^ rows[3, reg >> 24]
            reg = int(c)
            pos += m
    for b in mv[pos:]:
        reg = _TABLE[(reg ^ b) & 0xFF] ^ (reg >> 8)
    return reg ^ 0xFFFFFFFF


def masked_crc32c(data):
    """The masked CRC32C that TFRecord stores after the length and the data."""
    c = crc32c(data)
    return (((c >> 15) | (c << 17)) + 0xA282EAD8) & 0xFFFFFFFF


# ---------------------------------------------------------------------------
# TFRecord framing: uint64 length, uint32 masked CRC of the length,
# data, uint32 masked CRC of the data; all little endian.

class CorruptRecord(ValueError):
    pass


def read_records(f, name="<stream>"):
    """Yields the payload of every record of the binary file object f, in
    order, checking both CRCs. Raises CorruptRecord on damage."""
    offset = 0
    while True:
        head = f.read(12)
        if not head:
            return
        if len(head) < 12:
            raise CorruptRecord(f"{name}: truncated record header at offset {offset}")
        n, length_crc = struct.unpack("<QI", head)
        if masked_crc32c(head[:8]) != length_crc:
            raise CorruptRecord(f"{name}: length CRC mismatch at offset {offset}")
        body = f.read(n + 4)
        if len(body) < n + 4:
            raise CorruptRecord(f"{name}: truncated record at offset {offset}")
        data = body[:n]
        if masked_crc32c(data) != struct.unpack("<I", body[n:])[0]:
            raise CorruptRecord(f"{name}: data CRC mismatch at offset {offset}")
        yield data
        offset += n + 16


# ---------------------------------------------------------------------------
# tf.train.Example from the protobuf wire format:
#   Example  { Features features = 1; }
#   Features { map<string, Feature> feature = 1; }   entry: key = 1, value = 2
#   Feature  { oneof { BytesList bytes_list = 1; FloatList float_list = 2;
#                      Int64List int64_list = 3; } }
#   *List    { repeated ... value = 1; }             scalars usually packed

def _varint(b, i):
    result = shift = 0
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
        if wire == 0:
            v, i = _varint(b, i)
        elif wire == 2:
            n, i = _varint(b, i)
            v, i = (i, i + n), i + n
        elif wire == 1:
            v, i = (i, i + 8), i + 8
        elif wire == 5:
            v, i = (i, i + 4), i + 4
        else:
            raise ValueError(f"unsupported wire type {wire}")
        if i > end:
            raise ValueError("field runs past its message")
        yield field, wire, v


def _signed64(v):
    return v - (1 << 64) if v >= 1 << 63 else v


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
                values.extend(np.frombuffer(b[x[0]:x[1]], dtype="<f4").tolist())
            elif field == 2 and w == 5:
                values.append(struct.unpack("<f", b[x[0]:x[1]])[0])
            elif field == 3 and w == 2:
                i, stop = x
                while i < stop:
                    n, i = _varint(b, i)
                    values.append(_signed64(n))
            elif field == 3 and w == 0:
                values.append(_signed64(x))
    return {1: "bytes", 2: "float", 3: "int64"}.get(kind), values


def parse_example(payload, names=None):
    """Decodes a serialized tf.train.Example into {name: (kind, values)},
    kind one of "bytes", "float", "int64" (None for an empty feature). Only
    the features in `names` are decoded when it is given."""
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


def decode_image_example(payload, image="image", label="label", id="id"):
    """The (pixels uint8 numpy array, label, id) of a record made by
    `corgifs gen fashion-mnist`."""
    ex = parse_example(payload, (image, label, id))
    try:
        return (np.frombuffer(ex[image][1][0], dtype=np.uint8), ex[label][1][0], ex[id][1][0])
    except (KeyError, IndexError) as e:
        raise ValueError(f"record lacks the feature {e}") from None


# ---------------------------------------------------------------------------
# The dataset.

class CorgiParts(IterableDataset):
    """Yields (image float32 tensor [784] in [0, 1], label, id) from the part
    of the mount that this DataLoader worker of this rank reads in the current
    epoch. Call set_epoch(e) before iterating a new DataLoader for epoch e.

    rank and world default to torch.distributed's when it is initialised, to
    0 and 1 otherwise. The number of workers is the DataLoader's num_workers
    (0 counts as one worker, the main process)."""

    def __init__(self, mount, rank=None, world=None, epoch=0):
        super().__init__()
        dist = torch.distributed
        ddp = dist.is_available() and dist.is_initialized()
        self.mount = mount
        self.rank = rank if rank is not None else (dist.get_rank() if ddp else 0)
        self.world = world if world is not None else (dist.get_world_size() if ddp else 1)
        self.epoch = epoch

    def set_epoch(self, epoch):
        self.epoch = epoch

    def path(self):
        info = get_worker_info()
        worker, workers = (info.id, info.num_workers) if info is not None else (0, 1)
        return part_path(self.mount, self.epoch, self.rank, self.world, worker, workers)

    def __iter__(self):
        path = self.path()
        with open(path, "rb", buffering=1 << 20) as f:
            for payload in read_records(f, path):
                pixels, label, rid = decode_image_example(payload)
                yield torch.from_numpy(pixels.astype(np.float32) / 255.0), label, rid


def load_tfrecords(directory, pattern="*.tfrecord"):
    """All records of the files matching pattern in directory, in file-name
    order, as (images float32 [N, 784] in [0, 1], labels int64 [N], ids int64 [N])."""
    images, labels, ids = [], [], []
    for name in sorted(glob.glob(os.path.join(directory, pattern))):
        with open(name, "rb", buffering=1 << 20) as f:
            for payload in read_records(f, name):
                pixels, label, rid = decode_image_example(payload)
                images.append(pixels)
                labels.append(label)
                ids.append(rid)
    if not images:
        raise FileNotFoundError(f"no {pattern} records in {directory}")
    return (np.stack(images).astype(np.float32) / 255.0, np.array(labels, dtype=np.int64),
            np.array(ids, dtype=np.int64))
