"""The record readers against independent parses and Python's own writers."""

import csv
import glob
import io
import json
import os
import struct
import subprocess
import sys
import tarfile

import numpy as np
import pytest

import corgifs
from corgifs import crc as crcmod
from corgifs.formats import reader

_POLY = 0x82F63B78


def slow_crc32c(data):
    """Bit-at-a-time CRC32C: independent of both implementations."""
    c = 0xFFFFFFFF
    for b in data:
        c ^= b
        for _ in range(8):
            c = (c >> 1) ^ _POLY if c & 1 else c >> 1
    return c ^ 0xFFFFFFFF


def slow_masked(data):
    c = slow_crc32c(data)
    return (((c >> 15) | (c << 17)) + 0xA282EAD8) & 0xFFFFFFFF


def independent_frames(b):
    """(offset, payload) of every TFRecord frame of b, CRCs checked bit by bit
    for the first records and by the C module (if any) for the rest."""
    out, off = [], 0
    while off < len(b):
        n, lcrc = struct.unpack_from("<QI", b, off)
        payload = b[off + 12:off + 12 + n]
        (dcrc,) = struct.unpack_from("<I", b, off + 12 + n)
        if len(out) < 20:
            assert slow_masked(b[off:off + 8]) == lcrc and slow_masked(payload) == dcrc
        out.append((off, payload))
        off += n + 16
    assert off == len(b)
    return out


@pytest.fixture(params=["fast", "numpy"])
def crc_impl(request, monkeypatch):
    if request.param == "fast":
        if not crcmod.HAVE_FAST_CRC:
            pytest.skip("the crc32c module is not installed (Debian: python3-crc32c)")
    else:
        monkeypatch.setattr(crcmod, "_c_crc32c", None)
    return request.param


def test_crc32c_matches_the_bitwise_definition(crc_impl):
    rng = np.random.default_rng(1)
    assert corgifs.crc32c(b"123456789") == 0xE3069283  # the standard check value
    for n in [0, 1, 3, 8, 63, 64, 65, 127, 128, 129, 1000, 4097]:
        b = rng.integers(0, 256, n, dtype=np.uint8).tobytes()
        assert corgifs.crc32c(b) == slow_crc32c(b), n
    buf = rng.integers(0, 256, 20000, dtype=np.uint8).tobytes()
    starts = np.array([0, 5, 100, 700, 1000, 3000, 9999])
    lens = np.array([0, 8, 64, 300, 1, 5000, 10001])
    got = crcmod.masked_crc32c_many(buf, starts, lens)
    assert got.tolist() == [slow_masked(buf[s:s + n]) for s, n in zip(starts, lens)]


def test_tfrecord_reader_on_source_and_served_parts_equals_an_independent_parse(mount, source, crc_impl):
    files = sorted(glob.glob(os.path.join(source, "*.tfrecord")))
    files += [os.path.join(mount.dir, corgifs.part_name(0, i, 4)) for i in range(4)]
    for path in files:
        with open(path, "rb") as f:
            b = f.read()
        want = independent_frames(b)
        small = (1000, 7) if path in (files[0], files[-1]) else ()
        for chunk in (1 << 20,) + small:  # refills inside headers and payloads
            with open(path, "rb") as f:
                got = list(corgifs.read_tfrecords(f, chunk=chunk))
            assert [p for p, _ in got] == [p for _, p in want], (path, chunk)
            assert [o for _, o in got] == [o for o, _ in want[1:]] + [len(b)]
        # Resuming at a yielded offset gives the rest.
        with open(path, "rb") as f:
            rest = [p for p, _ in corgifs.read_tfrecords(f, offset=want[10][0])]
        assert rest == [p for _, p in want[10:]]


def _frames(payloads):
    return b"".join(corgifs.frame(p) for p in payloads)


def test_tfrecord_corruption_is_detected_with_file_and_offset(crc_impl, tmp_path):
    payloads = [bytes([i]) * (50 + 37 * i) for i in range(30)]
    good = _frames(payloads)
    assert [p for p, _ in corgifs.read_tfrecords(io.BytesIO(good))] == payloads
    third = len(corgifs.frame(payloads[0])) + len(corgifs.frame(payloads[1]))

    def read(b, **kw):
        return [p for p, _ in corgifs.read_tfrecords(io.BytesIO(b), name="x.tfrecord", **kw)]

    data = bytearray(good)
    data[third + 12 + 5] ^= 0x10  # a payload byte of the third record
    with pytest.raises(corgifs.CorruptRecord, match=f"x.tfrecord: data CRC mismatch .* offset {third}"):
        read(bytes(data))
    assert len(read(bytes(data), verify=False)) == 30  # the mount checked it already

    data = bytearray(good)
    data[third + 9] ^= 0x01  # the length CRC
    with pytest.raises(corgifs.CorruptRecord, match=f"length CRC mismatch .* offset {third}"):
        read(bytes(data))

    data = bytearray(good)
    data[third] ^= 0x40  # the length itself: must not be trusted
    with pytest.raises(corgifs.CorruptRecord, match=f"length CRC mismatch .* offset {third}"):
        read(bytes(data), chunk=third + 20)

    data = bytearray(good)
    data[third + 3] = 0xFF  # a length of gigabytes, far past the end
    with pytest.raises(corgifs.CorruptRecord, match=f"offset {third}"):
        read(bytes(data), chunk=64)

    p = tmp_path / "big-length.tfrecord"  # a file: its size bounds what verify=False reads
    p.write_bytes(bytes(data))
    with open(p, "rb") as f, pytest.raises(corgifs.CorruptRecord, match=f"offset {third} claims .* past the end"):
        list(corgifs.read_tfrecords(f, verify=False, chunk=64))

    with pytest.raises(corgifs.CorruptRecord, match="truncated"):
        read(good[:-3])
    with pytest.raises(corgifs.CorruptRecord, match="truncated header"):
        read(good + b"\0" * 5)


def _varint(v):
    out = bytearray()
    while True:
        b = v & 0x7F
        v >>= 7
        if v:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def _ld(field, b):
    return _varint(field << 3 | 2) + _varint(len(b)) + b


def _example(features):
    """Serializes {name: list} as a tf.train.Example; floats packed, ints
    unpacked for the odd names, packed for the others."""
    entries = b""
    for name, values in features.items():
        if isinstance(values[0], bytes):
            feat = _ld(1, b"".join(_ld(1, v) for v in values))
        elif isinstance(values[0], float):
            feat = _ld(2, _ld(1, np.array(values, "<f4").tobytes()))
        elif len(name) % 2:
            feat = _ld(3, b"".join(_varint(1 << 3 | 0) + _varint(v & (1 << 64) - 1) for v in values))
        else:
            feat = _ld(3, _ld(1, b"".join(_varint(v & (1 << 64) - 1) for v in values)))
        entries += _ld(1, _ld(1, name.encode()) + _ld(2, feat))
    return _ld(1, entries)


def test_example_decoding_into_numpy():
    ex = {"image": [b"\x00\x01\xff"], "tags": [b"a", b"bc"], "features": [1.5, -2.25, 1024.0],
          "ids": [0, 1, 300, -5, 2 ** 62], "lab": [7, -1]}
    got = corgifs.decode_example(_example(ex))
    assert got["image"] == b"\x00\x01\xff" and got["tags"] == [b"a", b"bc"]
    assert got["features"].dtype == np.float32 and got["features"].tolist() == [1.5, -2.25, 1024.0]
    assert got["ids"].dtype == np.int64 and got["ids"].tolist() == ex["ids"]
    assert got["lab"].tolist() == [7, -1]
    assert set(corgifs.decode_example(_example(ex), names=("lab",))) == {"lab"}
    # Unpacked floats (field 1, wire type 5) and a memoryview payload.
    floats = b"\x0d" + struct.pack("<f", 2.5) + b"\x0d" + struct.pack("<f", -1.0)
    unpacked = _ld(1, _ld(1, _ld(1, b"f") + _ld(2, _ld(2, floats))))
    assert corgifs.decode_example(memoryview(unpacked))["f"].tolist() == [2.5, -1.0]


def test_damaged_examples_raise_value_error_only():
    good = _example({"image": [b"\x00" * 200], "features": [1.0] * 40, "id": [12345678901], "label": [3]})
    rng = np.random.default_rng(7)
    for _ in range(3000):
        b = bytearray(good)
        for _ in range(rng.integers(1, 4)):
            b[rng.integers(len(b))] = rng.integers(256)
        b = bytes(b[:rng.integers(len(b) // 2, len(b) + 1)])
        try:
            corgifs.decode_example(b)
        except ValueError:
            pass


def test_served_records_decode_to_the_synthetic_features(mount):
    from conftest import RECORDS
    ids = []
    for i in range(4):
        for ex in corgifs.read_records(os.path.join(mount.dir, corgifs.part_name(0, i, 4))):
            assert ex["features"].shape == (8,) and ex["features"].dtype == np.float32
            assert 0 <= ex["label"][0] < 4
            ids.append(int(ex["id"][0]))
    assert sorted(ids) == list(range(RECORDS))


def _resumes(path, fmt, **opts):
    """All records, and the records read from every yielded offset on."""
    r = reader(fmt, **opts)
    with open(path, "rb") as f:
        recs = list(r.records(f))
    for k in range(len(recs)):
        with open(path, "rb") as f:
            rest = [x for x, _ in r.records(f, recs[k][1])]
        assert _same(rest, [x for x, _ in recs[k + 1:]]), (fmt, k)
    return r, [x for x, _ in recs]


def _same(a, b):
    if len(a) != len(b):
        return False
    return all((np.array_equal(x, y) if isinstance(x, np.ndarray) else x == y) for x, y in zip(a, b))


def test_csv_reader_equals_pythons_csv_writer(tmp_path):
    rows = [["id", "text", "x"], ["1", "plain", "0.5"], ["2", 'with "quotes", and commas', "1"],
            ["3", "two\nlines", "-2"], ["4", "", "3"]]
    path = tmp_path / "a.csv"
    with open(path, "w", newline="") as f:
        csv.writer(f, lineterminator="\n").writerows(rows)
    r, recs = _resumes(path, "csv")
    assert [r.decode(x) for x in recs] == [dict(zip(rows[0], row)) for row in rows[1:]]
    assert list(corgifs.read_records(path)) == [dict(zip(rows[0], row)) for row in rows[1:]]
    no_header = reader("csv", header=False)
    with open(path, "rb") as f:
        assert [no_header.decode(x) for x, _ in no_header.records(f)] == rows


def test_jsonl_lines_and_libsvm_readers(tmp_path):
    objs = [{"id": i, "s": "é\u2028" * i, "v": [i, None]} for i in range(5)]
    p = tmp_path / "a.jsonl"
    p.write_text("".join(json.dumps(o) + "\n" for o in objs))
    assert list(corgifs.read_records(p)) == objs
    _resumes(p, "jsonl")

    p = tmp_path / "a.txt"
    p.write_bytes(b"one\ntwo\r\n\nlast without newline")
    assert list(corgifs.read_records(p)) == ["one", "two", "", "last without newline"]
    _resumes(p, "lines")

    p = tmp_path / "a.libsvm"
    p.write_text("1 3:0.5 10:-2\n-1 qid:4 1:1e-3 # comment\n0\n")
    got = list(corgifs.read_records(p))
    assert got[0][0] == 1.0 and got[0][1].tolist() == [3, 10] and got[0][2].tolist() == [0.5, -2.0]
    assert got[1][0] == -1.0 and got[1][1].tolist() == [1] and np.isclose(got[1][2][0], 1e-3)
    assert got[2][0] == 0.0 and len(got[2][1]) == 0
    _resumes(p, "libsvm")


def test_webdataset_tar_samples_are_dicts_keyed_by_extension(tmp_path):
    p = tmp_path / "shard.tar"
    members = [("a/000.jpg", b"jpeg0"), ("a/000.cls", b"3"), ("a/000.meta.json", b"{}"),
               ("a/001.jpg", b"jpeg1" * 300), ("a/001.cls", b"4"),
               ("x" * 150 + "/002.jpg", b"long name"), ("noext", b"skipped")]
    with tarfile.open(p, "w", format=tarfile.PAX_FORMAT) as t:
        d = tarfile.TarInfo("a")
        d.type = tarfile.DIRTYPE
        t.addfile(d)
        for name, data in members:
            ti = tarfile.TarInfo(name)
            ti.size = len(data)
            t.addfile(ti, io.BytesIO(data))
    r, recs = _resumes(p, "wds")
    assert recs == [
        {"__key__": "a/000", "jpg": b"jpeg0", "cls": b"3", "meta.json": b"{}"},
        {"__key__": "a/001", "jpg": b"jpeg1" * 300, "cls": b"4"},
        {"__key__": "x" * 150 + "/002", "jpg": b"long name"},
    ]


@pytest.mark.parametrize("shape,dtype", [((7, 3), "<f4"), ((5, 2, 2), "|u1"), ((4,), "<i8"), ((3, 2), "<U3")])
def test_npy_rows_equal_numpy_save(tmp_path, shape, dtype):
    a = (np.arange(int(np.prod(shape))) % 200).astype(dtype).reshape(shape)
    p = tmp_path / "a.npy"
    np.save(p, a)
    r, recs = _resumes(p, "npy", chunk=16)
    assert len(recs) == shape[0]
    for i, row in enumerate(recs):
        assert row.dtype == a.dtype and np.array_equal(row, a[i]) and row.flags.writeable


def test_fixed_size_records(tmp_path):
    p = tmp_path / "a.bin"
    p.write_bytes(b"HDR" + bytes(range(40)))
    r, recs = _resumes(p, "fixed", record_size=8, header_bytes=3, chunk=10)
    assert recs == [bytes(range(i, i + 8)) for i in range(0, 40, 8)]
    p.write_bytes(b"HDR" + bytes(range(41)))
    with pytest.raises(corgifs.CorruptRecord, match="ends inside a record"):
        list(corgifs.read_records(p, format="fixed", record_size=8, header_bytes=3))


def test_readers_work_without_torch(source):
    code = ("import sys; sys.modules['torch'] = None\n"
            "import corgifs, glob\n"
            f"print(sum(1 for f in sorted(glob.glob('{source}/*.tfrecord')) for _ in corgifs.read_records(f)))\n")
    env = dict(os.environ, PYTHONPATH=os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
    assert out.returncode == 0, out.stderr
    from conftest import RECORDS
    assert out.stdout.strip() == str(RECORDS)


def test_part_path_follows_the_mapping_rule():
    got = [corgifs.part_path("/m", e, r, R, w, W) for r, R, w, W, e in
           [(0, 1, 0, 1, 0), (0, 1, 1, 2, 3), (1, 2, 0, 2, 7), (3, 4, 2, 3, 12)]]
    assert got == ["/m/epoch-0000/part-00000-of-00001.tfrecord", "/m/epoch-0003/part-00001-of-00002.tfrecord",
                   "/m/epoch-0007/part-00002-of-00004.tfrecord", "/m/epoch-0012/part-00011-of-00012.tfrecord"]
    with pytest.raises(ValueError):
        corgifs.part_path("/m", 0, 2, 2, 0, 1)


def test_config_and_order_agree_with_the_mount(mount, source, corgifs_bin):
    cfg = corgifs.config(mount.dir)
    assert cfg["parts"] == 4 and cfg["seed"] == 1 and cfg["dataset"]["records"] == 6000
    part = os.path.join(mount.dir, corgifs.part_name(2, 1, 4))
    with open(part, "rb") as f:
        served = list(corgifs.read_tfrecords(f))
    order = corgifs.order(mount.dir, epoch=2, part=1, binary=corgifs_bin, cache_dir=mount.cache)
    assert len(order) == len(served)
    for (name, off, n), (payload, _) in zip(order, served):
        with open(os.path.join(source, name), "rb") as f:
            f.seek(off)
            assert f.read(n)[12:-4] == payload
    dali = corgifs.order(mount.dir, epoch=2, part=1, binary=corgifs_bin, output="dali", cache_dir=mount.cache)
    ends = [o for _, o in served]
    assert [o for o, _ in dali] == [0] + ends[:-1] and [o + n for o, n in dali] == ends
