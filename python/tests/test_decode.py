"""The C decoder of tf.train.Example (corgifs/_example.c) against the
pure-Python one, on every feature kind, with Examples encoded by Debian's
protobuf runtime (an independent implementation of the wire format) and by
hand where protobuf would not write the message (unpacked numbers, lists
merged or replaced in one feature, damaged messages)."""

import glob
import importlib.util
import os
import struct
import subprocess
import sys
import warnings

import numpy as np
import pytest

from conftest import CI

from corgifs import tfrecord

PKG = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.fixture(scope="session")
def fast(tmp_path_factory):
    """The C decoder: the installed one, else built from the source tree
    into a temporary directory and loaded from there."""
    if tfrecord.HAVE_FAST_DECODE:
        return tfrecord._example
    out = tmp_path_factory.mktemp("ext")
    p = subprocess.run([sys.executable, "setup.py", "-q", "build_ext", "--build-lib", str(out / "lib"),
                        "--build-temp", str(out / "tmp")], cwd=PKG, capture_output=True, text=True)
    so = glob.glob(str(out / "lib" / "corgifs" / "_example*.so"))
    if p.returncode != 0 or not so:
        msg = f"cannot build the C decoder (Debian: apt-get install gcc python3-dev): {p.stdout}{p.stderr}"
        if CI:
            pytest.fail(msg)
        pytest.skip(msg)
    spec = importlib.util.spec_from_file_location("corgifs._example", so[0])
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.fixture(scope="session")
def pb():
    try:
        import example_pb2
    except ImportError as e:
        msg = f"{e} (Debian: apt-get install python3-protobuf)"
        if CI:
            pytest.fail(msg)
        pytest.skip(msg)
    return example_pb2


def same(a, b):
    """Two parse_example results hold the same kinds and values, bit for bit."""
    assert a.keys() == b.keys()
    for k in a:
        (ka, va), (kb, vb) = a[k], b[k]
        assert ka == kb, k
        if isinstance(va, np.ndarray):
            assert isinstance(vb, np.ndarray) and va.dtype == vb.dtype and va.shape == vb.shape, k
            assert va.tobytes() == vb.tobytes(), k
            assert vb.flags.writeable and vb.flags.c_contiguous
        else:
            assert va == vb and all(type(x) is bytes for x in vb), k


def protobuf_view(ex):
    """{name: (kind, values)} as protobuf decoded the message."""
    out = {}
    for k, f in ex.features.feature.items():
        w = f.WhichOneof("kind")
        if w is None:
            out[k] = (None, [])
        elif w == "bytes_list":
            out[k] = ("bytes", list(f.bytes_list.value))
        elif w == "float_list":
            out[k] = ("float", np.array(f.float_list.value, dtype=np.float32))
        else:
            out[k] = ("int64", np.array(f.int64_list.value, dtype=np.int64))
    return out


def test_every_feature_kind_decodes_the_same_in_c_python_and_protobuf(fast, pb):
    ex = pb.Example()
    f = ex.features.feature
    f["one_bytes"].bytes_list.value.append(b"\x00\x01\xff")
    f["many_bytes"].bytes_list.value.extend([b"a", b"", b"x" * 300])
    f["empty_bytes"].bytes_list.SetInParent()
    f["floats"].float_list.value.extend([1.5, -2.25, 0.0, -0.0, 3.4e38, float("inf"), float("-inf"), 1e-45])
    f["nan"].float_list.value.append(float("nan"))
    f["empty_floats"].float_list.SetInParent()
    f["big_floats"].float_list.value.extend(np.linspace(-1, 1, 30000, dtype=np.float32).tolist())
    f["ints"].int64_list.value.extend([0, 1, 127, 128, 300, -1, -5, -128, 2 ** 62, 2 ** 63 - 1, -2 ** 63])
    f["empty_ints"].int64_list.SetInParent()
    f["no_kind"].SetInParent()
    f["ünïcode name"].int64_list.value.append(7)
    payload = ex.SerializeToString()
    want = protobuf_view(pb.Example.FromString(payload))
    same(want, tfrecord.parse_example_pure(payload))
    same(want, fast.parse_example(payload))
    for form in (bytearray(payload), memoryview(payload)):
        same(want, fast.parse_example(form))
    # Missing features: names not in the message are absent, the others kept.
    names = ("ints", "one_bytes", "missing")
    same(fast.parse_example(payload, names), tfrecord.parse_example_pure(payload, names))
    assert set(fast.parse_example(payload, names)) == {"ints", "one_bytes"}
    assert fast.parse_example(b"") == {} == tfrecord.parse_example_pure(b"")
    # decode_example: a single bytes value unwrapped, several kept in a list.
    d, p = fast.decode_example(payload), tfrecord.decode_example_pure(payload)
    assert d["one_bytes"] == p["one_bytes"] == b"\x00\x01\xff"
    assert d["many_bytes"] == p["many_bytes"] == [b"a", b"", b"x" * 300]
    assert d["no_kind"] == p["no_kind"] == [] and d["empty_bytes"] == [] == p["empty_bytes"]
    assert d["ints"].tolist() == p["ints"].tolist() == list(f["ints"].int64_list.value)


def test_random_examples_decode_the_same_in_c_python_and_protobuf(fast, pb):
    rng = np.random.default_rng(11)
    for _ in range(400):
        ex = pb.Example()
        for j in range(rng.integers(0, 6)):
            feat = ex.features.feature[f"f{j}" * int(rng.integers(1, 40))]
            n = int(rng.integers(0, 4) if rng.random() < 0.5 else rng.integers(0, 3000))
            kind = rng.integers(4)
            if kind == 0:
                feat.bytes_list.value.extend(rng.bytes(int(rng.integers(0, 200))) for _ in range(min(n, 20)))
                feat.bytes_list.SetInParent()
            elif kind == 1:
                feat.float_list.value.extend(rng.standard_normal(n).astype(np.float32).tolist())
                feat.float_list.SetInParent()
            elif kind == 2:
                feat.int64_list.value.extend(rng.integers(-2 ** 63, 2 ** 63 - 1, n, dtype=np.int64).tolist())
                feat.int64_list.SetInParent()
            else:
                feat.SetInParent()
        payload = ex.SerializeToString()
        want = protobuf_view(pb.Example.FromString(payload))
        same(want, fast.parse_example(payload))
        same(want, tfrecord.parse_example_pure(payload))


def _varint(v):
    out = bytearray()
    while True:
        if v < 0x80:
            out.append(v)
            return bytes(out)
        out.append(v & 0x7F | 0x80)
        v >>= 7


def _ld(field, b):
    return _varint(field << 3 | 2) + _varint(len(b)) + b


def _entry(name, feature):
    return _ld(1, _ld(1, name) + _ld(2, feature))


def test_hand_encoded_corner_cases_decode_the_same(fast):
    floats = b"\x0d" + struct.pack("<f", 2.5) + b"\x0d" + struct.pack("<f", -1.0)
    ints = b"".join(_varint(1 << 3) + _varint(v & (1 << 64) - 1) for v in (5, -3, 2 ** 63))
    entries = [
        _entry(b"unpacked_floats", _ld(2, floats)),
        _entry(b"unpacked_ints", _ld(3, ints)),
        # Packed and unpacked lists of one kind in one feature: concatenated.
        _entry(b"merged", _ld(3, _ld(1, _varint(9))) + _ld(3, ints) + _ld(3, b"")),
        # A list of another kind replaces what came before it.
        _entry(b"replaced", _ld(2, _ld(1, struct.pack("<f", 1.0))) + _ld(1, _ld(1, b"z")) + _ld(3, ints)),
        # Unknown fields in the entry, the feature and the list are skipped.
        _entry(b"unknown", _varint(4 << 3) + _varint(99) + _ld(1, _varint(7 << 3 | 5) + b"abcd" + _ld(1, b"q"))),
        _ld(1, _ld(2, _ld(3, _ld(1, _varint(1))))),  # an entry without a name: dropped
        _ld(1, _ld(1, b"no_value")),  # an entry without a value: an empty feature
        _entry(b"twice", _ld(3, _ld(1, _varint(1)))),
        _entry(b"twice", _ld(2, _ld(1, struct.pack("<f", 4.0)))),  # the last entry of a name wins
        _varint(5 << 3 | 1) + b"12345678",  # an unknown field of Features
        # An int64 of an 11-byte varint: bits past the 64th dropped.
        _entry(b"long_varint", _ld(3, _ld(1, b"\xff" * 9 + b"\x7f"))),
    ]
    payload = _ld(1, b"".join(entries)) + _varint(3 << 3) + _varint(1)  # and an unknown field of Example
    got = fast.parse_example(payload)
    same(tfrecord.parse_example_pure(payload), got)
    assert got["unpacked_floats"][1].tolist() == [2.5, -1.0]
    assert got["unpacked_ints"][1].tolist() == [5, -3, -2 ** 63]
    assert got["merged"][1].tolist() == [9, 5, -3, -2 ** 63]
    assert got["replaced"][0] == "int64" and got["replaced"][1].tolist() == [5, -3, -2 ** 63]
    assert got["unknown"] == ("bytes", [b"q"]) and got["no_value"] == (None, [])
    assert got["twice"][0] == "float" and "" not in got
    assert got["long_varint"][1].tolist() == [-1]


def test_damaged_examples_fail_or_decode_alike(fast):
    """Every damaged message either raises ValueError in both decoders or
    decodes to the same values in both."""
    good = _ld(1, _entry(b"image", _ld(1, _ld(1, b"\x00" * 60) + _ld(1, b"ab")))
               + _entry(b"features", _ld(2, _ld(1, np.arange(20, dtype="<f4").tobytes())))
               + _entry(b"id", _ld(3, _ld(1, _varint(12345678901) + _varint(2 ** 64 - 1))))
               + _entry(b"label", _ld(3, _varint(1 << 3) + _varint(3))))
    rng = np.random.default_rng(7)
    failed = 0
    for _ in range(4000):
        b = bytearray(good)
        for _ in range(rng.integers(1, 4)):
            b[rng.integers(len(b))] = rng.integers(256)
        b = bytes(b[:rng.integers(len(b) // 2, len(b) + 1)])
        try:
            want = tfrecord.parse_example_pure(b)
        except ValueError:
            with pytest.raises(ValueError):
                fast.parse_example(b)
            failed += 1
            continue
        same(want, fast.parse_example(b))
    assert 0 < failed < 4000


def test_the_package_uses_the_c_decoder_when_it_is_built():
    import corgifs
    if tfrecord.HAVE_FAST_DECODE:
        assert corgifs.decode_example is tfrecord._example.decode_example
    else:
        assert corgifs.decode_example is tfrecord.decode_example_pure


def _float_record(i, n):
    """An Example of int64 "id" and a packed float list "features" of n
    values i, i+1, ... (the layout of `corgifs gen synthetic`)."""
    return _ld(1, _entry(b"id", _ld(3, _ld(1, _varint(i))))
               + _entry(b"features", _ld(2, _ld(1, np.arange(i, i + n, dtype="<f4").tobytes()))))


@pytest.mark.parametrize("decoder", ["c", "pure"])
def test_float_lists_of_a_given_away_record_view_it_writable_and_outlive_it(fast, decoder):
    decode = fast.decode_example if decoder == "c" else tfrecord.decode_example_pure
    forms = [bytearray] + ([lambda p: memoryview(bytearray(p))] if decoder == "c" else [])
    for form in forms:
        recs = [form(_float_record(i, 1000 + i)) for i in range(8)]
        got = [decode(r) for r in recs]
        for i, (r, d) in enumerate(zip(recs, got)):
            a = d["features"]
            assert a.dtype == np.float32 and a.flags.writeable and a.flags.c_contiguous
            assert np.shares_memory(a, np.frombuffer(r, np.uint8)), "a view of the record, not a copy"
            assert a.tolist() == list(range(i, i + 1000 + i)) and d["id"].tolist() == [i]
        # The arrays keep their records alive; a record cannot be resized under them.
        if isinstance(recs[0], bytearray):
            with pytest.raises(BufferError):
                recs[0].extend(b"x")
        del recs, r
        import gc
        gc.collect()
        for i, d in enumerate(got):
            assert d["features"].tolist() == list(range(i, i + 1000 + i))
        # Writing one record's array changes neither another record's nor a later decode of bytes.
        got[0]["features"][:] = -1
        assert got[1]["features"][0] == 1
        assert decode(_float_record(0, 1000))["features"][0] == 0


def test_bytes_and_read_only_records_are_copied_not_viewed(fast):
    rec = _float_record(3, 100)
    for decode in (fast.decode_example, tfrecord.decode_example_pure):
        for form in (rec, memoryview(rec), memoryview(bytearray(rec)).toreadonly()):
            a = decode(form)["features"]
            assert a.flags.writeable and a.flags.owndata, (decode, type(form))
            assert a.tolist() == list(range(3, 103))


def test_read_tfrecords_writable_yields_fresh_bytearrays_that_decode_to_views(fast):
    import io
    payloads = [_float_record(i, 25581) for i in range(5)]
    data = b"".join(tfrecord.frame(p) for p in payloads)
    got = list(tfrecord.read_tfrecords(io.BytesIO(data), writable=True, chunk=1 << 16))
    assert [type(p) for p, _ in got] == [bytearray] * 5 and [bytes(p) for p, _ in got] == payloads
    assert [o for _, o in got] == [o for _, o in tfrecord.read_tfrecords(io.BytesIO(data))]
    arrays = [fast.decode_example(p)["features"] for p, _ in got]
    assert all(np.shares_memory(a, np.frombuffer(p, np.uint8)) for a, (p, _) in zip(arrays, got))
    arrays[0][:] = 0
    assert bytes(got[1][0]) == payloads[1]


def test_a_dataloader_collates_viewed_float_arrays_aligned_or_not(fast):
    try:
        import torch
        from torch.utils.data import default_collate
    except ImportError as e:
        if CI:
            pytest.fail(f"{e} (Debian: apt-get install python3-torch)")
        pytest.skip(str(e))
    # Ids of 1 to 4 varint bytes shift the floats by a byte each: both alignments.
    samples = [fast.decode_example(bytearray(_float_record(i, 300))) for i in (1, 200, 20000, 3000000)]
    assert {s["features"].flags.aligned for s in samples} == {True, False}
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # torch warns on non-writable arrays
        batch = default_collate(samples)
        loader = list(torch.utils.data.DataLoader(samples, batch_size=4))
    want = torch.tensor(np.stack([np.arange(i, i + 300, dtype=np.float32) for i in (1, 200, 20000, 3000000)]))
    assert torch.equal(batch["features"], want) and torch.equal(loader[0]["features"], want)
    assert batch["id"].tolist() == [[1], [200], [20000], [3000000]]
