"""CRC32C (Castagnoli), as TFRecord uses it.

The fast path is the C ``crc32c`` module (Debian: python3-crc32c), used when
it is installed. Without it, a numpy implementation checks many records at
once: it is far slower than the C module but far faster than a byte loop.
"""

import numpy as np

try:  # Debian python3-crc32c: about 1.5 GB/s even without SSE4.2.
    from crc32c import crc32c as _c_crc32c
except ImportError:  # pragma: no cover - depends on the machine
    _c_crc32c = None

__all__ = ["crc32c", "masked_crc32c", "mask", "masked_crc32c_many", "HAVE_FAST_CRC"]

HAVE_FAST_CRC = _c_crc32c is not None

_POLY = 0x82F63B78
_MASK_DELTA = 0xA282EAD8


def _byte_table():
    t = np.arange(256, dtype=np.uint32)
    for _ in range(8):
        t = np.where(t & 1, (t >> 1) ^ np.uint32(_POLY), t >> 1).astype(np.uint32)
    return t


_TABLE = _byte_table()

# The register update reg' = T[(reg ^ b) & 0xff] ^ (reg >> 8) is linear over
# GF(2). Running n zero bytes through a register is therefore a 32x32 bit
# matrix; _shift_cols(k) holds the images of the 32 basis bits for n = 2**k
# bytes, so any shift is a product of a few of them. From a matrix, four
# 256-entry tables apply it to a whole array of registers at once.
_SHIFT_COLS = {}
_SHIFT_TABLES = {}


def _apply_cols(cols, x):
    """The matrix given by its 32 columns applied to the uint32 array x."""
    out = np.zeros_like(x)
    for bit in range(32):
        out ^= np.where((x >> np.uint32(bit)) & np.uint32(1), cols[bit], np.uint32(0)).astype(np.uint32)
    return out


def _shift_cols(k):
    cols = _SHIFT_COLS.get(k)
    if cols is None:
        if k == 0:
            cols = (np.uint32(1) << np.arange(32, dtype=np.uint32)).astype(np.uint32)
            cols = _TABLE[cols & 0xFF] ^ (cols >> np.uint32(8))
        else:
            prev = _shift_cols(k - 1)
            cols = _apply_cols(prev, prev)
        _SHIFT_COLS[k] = cols
    return cols


def _tables_of(cols):
    v = np.arange(256, dtype=np.uint32)
    return np.stack([_apply_cols(cols, v << np.uint32(8 * i)) for i in range(4)])


def _shift_table(k):
    t = _SHIFT_TABLES.get(k)
    if t is None:
        t = _SHIFT_TABLES[k] = _tables_of(_shift_cols(k))
    return t


def _shift(x, k):
    """x (uint32 array of registers) after 2**k zero bytes."""
    t = _shift_table(k)
    return t[0][x & 0xFF] ^ t[1][(x >> 8) & 0xFF] ^ t[2][(x >> 16) & 0xFF] ^ t[3][x >> 24]


_INIT_AFTER = {}


def _init_after(n):
    """The register 0xFFFFFFFF after n zero bytes (what the initial value
    contributes to the CRC of n bytes)."""
    r = _INIT_AFTER.get(n)
    if r is None:
        x, k, m = np.array([0xFFFFFFFF], dtype=np.uint32), 0, n
        while m:
            if m & 1:
                x = _apply_cols(_shift_cols(k), x)
            m >>= 1
            k += 1
        r = _INIT_AFTER[n] = int(x[0])
    return r


_SEG = 64  # bytes per lane of the numpy kernel (2**6)
_SEG_LOG = 6


def _raw_many(buf, starts, lengths):
    """Zero-initialised CRC registers of buf[s:s+n] for every (s, n), as a
    uint32 array. Every span is cut into 64-byte segments, the first one
    padded with leading zeros (which leave a zero register unchanged); all
    segments are run through the table at once, one byte column at a time,
    then the segments of each span are combined pairwise with shift tables."""
    a = np.frombuffer(buf, dtype=np.uint8)
    starts = np.asarray(starts, dtype=np.int64)
    lengths = np.asarray(lengths, dtype=np.int64)
    nseg = np.maximum((lengths + _SEG - 1) // _SEG, 1)
    levels = int(np.ceil(np.log2(nseg.max()))) if nseg.max() > 1 else 0
    width = 1 << levels  # segments per span, padded in front with zero segments
    # Byte b of padded span i is buf[starts[i] - pad[i] + b], pad the number
    # of leading zeros making the span width * 64 bytes; a padding byte reads
    # the zero appended at the end of the array.
    total = width * _SEG
    padded = np.concatenate([a, np.zeros(1, dtype=np.uint8)])
    idx = (starts - (total - lengths))[:, None] + np.arange(total, dtype=np.int64)[None, :]
    idx = np.where(idx >= starts[:, None], idx, len(a))
    m = padded[idx].reshape(len(starts) * width, _SEG).astype(np.uint32)
    reg = np.zeros(len(starts) * width, dtype=np.uint32)
    for b in range(_SEG):
        reg = _TABLE[(reg ^ m[:, b]) & 0xFF] ^ (reg >> np.uint32(8))
    reg = reg.reshape(len(starts), width)
    k = _SEG_LOG
    while reg.shape[1] > 1:
        reg = _shift(reg[:, 0::2], k) ^ reg[:, 1::2]
        k += 1
    return reg[:, 0]


def _finish(raw, lengths):
    uniq, inv = np.unique(np.asarray(lengths), return_inverse=True)
    init = np.array([_init_after(int(n)) for n in uniq], dtype=np.uint32)[inv]
    return raw ^ init ^ np.uint32(0xFFFFFFFF)


def mask(c):
    """TFRecord's mask of a CRC: rotate right by 15 bits and add a constant."""
    return (((c >> 15) | (c << 17)) + _MASK_DELTA) & 0xFFFFFFFF


def crc32c(data):
    """CRC32C of a bytes-like object."""
    if _c_crc32c is not None:
        return _c_crc32c(data)
    mv = memoryview(data).cast("B")
    if len(mv) == 0:
        return 0
    return int(_finish(_raw_many(mv, [0], [len(mv)]), [len(mv)])[0])


def masked_crc32c(data):
    """The masked CRC32C that TFRecord stores after the length and the data."""
    return mask(crc32c(data))


def masked_crc32c_many(buf, starts, lengths):
    """Masked CRC32C of buf[s:s+n] for every (s, n), as a uint32 array."""
    starts = np.asarray(starts, dtype=np.int64)
    lengths = np.asarray(lengths, dtype=np.int64)
    if len(starts) == 0:
        return np.zeros(0, dtype=np.uint32)
    if _c_crc32c is not None:
        mv = memoryview(buf).cast("B")
        return np.array([mask(_c_crc32c(mv[s:s + n])) for s, n in zip(starts.tolist(), lengths.tolist())],
                        dtype=np.uint32)
    out = np.empty(len(starts), dtype=np.uint32)
    # Spans of very different lengths would pad the short ones to the long
    # ones' segment count: group them by that count.
    nseg = np.maximum((lengths + _SEG - 1) // _SEG, 1)
    group = np.ceil(np.log2(nseg)).astype(np.int64)
    for g in np.unique(group):
        sel = np.nonzero(group == g)[0]
        c = _finish(_raw_many(buf, starts[sel], lengths[sel]), lengths[sel])
        out[sel] = ((c >> np.uint32(15)) | (c << np.uint32(17))) + np.uint32(_MASK_DELTA)
    return out
