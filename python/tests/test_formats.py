"""Every record reader against the parts of a real mount of its format, the
Dataset over non-TFRecord mounts (format from config.json, DataLoader
workers, resuming inside a part with a prologue), and corgifs.order() against
the served parts."""

import collections
import glob
import json
import os
import struct

import numpy as np
import pytest

import corgifs
from conftest import FORMAT_PARTS, FORMAT_RECORDS

FORMATS = sorted(FORMAT_RECORDS)
TEXT = ("csv", "jsonl", "libsvm", "lines")
TAR_END = 1024  # a served tar part ends with the end-of-archive marker


def canon(x):
    """A hashable, exact form of a raw or decoded record."""
    if isinstance(x, dict):
        return tuple(sorted((k, canon(v)) for k, v in x.items()))
    if isinstance(x, np.ndarray):
        return ("ndarray", x.dtype.str, x.shape, x.tobytes())
    if isinstance(x, (list, tuple)):
        return tuple(canon(v) for v in x)
    return x


def id_of(fmt, rec):
    """The record id of a decoded record; None where the format's decoding
    keeps none (LIBSVM drops the qid that holds it)."""
    if fmt in ("csv", "jsonl"):
        return int(rec["id"])
    if fmt == "wds":
        return int(rec["id"])
    if fmt == "npy":
        return int(rec[1])  # columns label, id, f0, ...
    if fmt == "lines":
        return int(rec.split()[0][len("rec-"):])
    if fmt == "fixed":
        return struct.unpack_from("<Q", rec)[0]
    return None


def source_records(s, decode):
    """The records of the source files, read by the same reader."""
    files = sorted(f for f in glob.glob(os.path.join(s.src, "*")) if os.path.isfile(f))
    assert len(files) == 3, files
    out = []
    for path in files:
        out += list(corgifs.read_records(path, format=s.format, decode=decode, **s.source_options))
    assert len(out) == s.records
    return out


def read_part(r, path):
    """(raw records, next offsets) of a served part, read to its end."""
    recs, ends = [], []
    with r.open(path) as f:
        for rec, nxt in r.records(f):
            recs.append(rec)
            ends.append(nxt)
    return recs, ends


def part_path(s, epoch, i, k):
    return os.path.join(s.dir, corgifs.part_name(epoch, i, k, corgifs.config(s.dir)["extension"]))


def prologue_len(fmt, path):
    """Bytes before a part's first record, found without the package's
    readers."""
    if fmt == "csv":
        with open(path, "rb") as f:
            return len(f.readline())
    if fmt == "npy":
        with open(path, "rb") as f:
            v = np.lib.format.read_magic(f)
            np.lib.format._read_array_header(f, v)
            return f.tell()
    return 0


@pytest.mark.parametrize("fmt", FORMATS)
def test_every_reader_reads_the_parts_of_a_mount_as_the_source_records(served, fmt):
    """The records of all K parts of an epoch are the source records (a
    multiset; every id once), every part parses to its end and every record
    decodes, with the mount's K and another K, in two epochs."""
    s = served(fmt)
    cfg = corgifs.config(s.dir)
    assert cfg["format"] == fmt and cfg["dataset"]["records"] == s.records
    r = corgifs.reader_of(s.dir)
    assert r.name == fmt and r.ext == cfg["extension"]
    want = collections.Counter(canon(x) for x in source_records(s, decode=False))
    assert sum(want.values()) == s.records
    # Epoch 1 is read in chunks of 777 bytes: records across chunk ends.
    small = corgifs.reader_of(s.dir, chunk=777)
    assert small.chunk == 777
    orders = []
    for epoch, k in ((0, FORMAT_PARTS), (1, FORMAT_PARTS), (0, 2)):
        got, order = collections.Counter(), []
        for i in range(k):
            path = part_path(s, epoch, i, k)
            recs, ends = read_part(small if epoch == 1 else r, path)
            size = os.path.getsize(path)
            if fmt == "npy":
                assert np.load(path, mmap_mode="r").shape[0] == len(recs), "the .npy header's row count"
            if fmt == "csv":
                with open(path, "rb") as f:
                    assert f.readline() == b"id,label,f0,f1,f2,f3\n", "a CSV part starts with the header"
            start = prologue_len(fmt, path)
            end = ends[-1] if ends else start
            assert size - end == (TAR_END if fmt == "wds" else 0), f"{path}: {size - end} bytes after the last record"
            assert len(recs) > 0, f"{path}: an empty part"
            for rec in recs:
                order.append(id_of(fmt, r.decode(rec)))
            got.update(canon(x) for x in recs)
        assert got == want, f"epoch {epoch}, K={k}: the parts do not hold the source records"
        if fmt != "libsvm":
            assert sorted(order) == list(range(s.records)), f"epoch {epoch}, K={k}: an id missed or repeated"
        orders.append(order)
    if fmt != "libsvm":
        assert orders[0] != orders[1], "two epochs came in the same order"


def quiet(_):
    import torch
    torch.set_num_threads(1)


@pytest.mark.parametrize("workers", [0, 2])
@pytest.mark.parametrize("fmt", FORMATS)
def test_dataset_picks_the_mounts_format_and_yields_every_record_once(torch, served, fmt, workers):
    s = served(fmt)
    ds = corgifs.Dataset(s.dir)
    assert ds.reader.name == fmt
    assert ds.part(0, 1).endswith(corgifs.config(s.dir)["extension"])
    want = collections.Counter(canon(x) for x in source_records(s, decode=True))
    loader = torch.utils.data.DataLoader(ds, batch_size=50, num_workers=workers, collate_fn=list,
                                         worker_init_fn=quiet)
    ds.set_epoch(1)
    seen = [rec for batch in loader for rec in batch]
    assert collections.Counter(canon(x) for x in seen) == want, "a record was missed or repeated"
    if fmt != "libsvm":
        assert sorted(id_of(fmt, x) for x in seen) == list(range(s.records))


def offset_after(fmt, path, count):
    """The offset of record `count` (from 0) of a generated CSV or .npy
    part, computed from the bytes without the package's readers."""
    start = prologue_len(fmt, path)
    if fmt == "csv":  # generated rows have no quoted newlines
        with open(path, "rb") as f:
            f.readline()
            return start + sum(len(f.readline()) for _ in range(count))
    with open(path, "rb") as f:
        v = np.lib.format.read_magic(f)
        shape, _, dtype = np.lib.format._read_array_header(f, v)
    return start + count * dtype.itemsize * int(np.prod(shape[1:]))


@pytest.mark.parametrize("workers", [0, 2])
@pytest.mark.parametrize("fmt", ["csv", "npy"])
def test_resume_inside_a_part_with_a_prologue_gives_the_remaining_records(torch, served, fmt, workers):
    """A state taken mid-epoch holds the true offsets of the next records
    (past the CSV header or the .npy header), and resuming from it gives
    each part's remaining records, in the part's order, exactly once."""
    s = served(fmt)
    k = max(1, workers)

    def run(ds, stop_after=None):
        loader = corgifs.DataLoader(ds, batch_size=40, num_workers=workers, collate_fn=list,
                                    worker_init_fn=quiet)
        out, state = [], None
        for batch in loader:
            out.append([id_of(fmt, x) for x in batch])
            if len(out) == stop_after:
                state = json.loads(json.dumps(ds.state_dict()))
                break
        return out, state

    ds = corgifs.Dataset(s.dir, epoch=2)
    head, state = run(ds, stop_after=9)
    assert state["parts"] == k and sum(n for _, n in state["positions"].values()) == 9 * 40
    for i, (off, n) in state["positions"].items():
        path = part_path(s, 2, int(i), k)
        assert off == offset_after(fmt, path, n), f"part {i}: the state's offset after {n} records"

    resumed = corgifs.Dataset(s.dir)
    resumed.load_state_dict(state)
    resumed.set_epoch(2)
    tail, _ = run(resumed)
    assert head and tail

    r = corgifs.reader_of(s.dir)
    want = {}
    for i in range(k):
        recs, _ = read_part(r, part_path(s, 2, i, k))
        want[i] = [id_of(fmt, r.decode(x)) for x in recs]
    part_of = {rid: i for i, ids in want.items() for rid in ids}
    got = {i: [] for i in range(k)}
    for batch in head + tail:
        for rid in batch:
            got[part_of[rid]].append(rid)
    assert got == want, "resuming missed, repeated or reordered records"


def check_order(corgifs_bin, mount, src, fmt, epoch, i, k):
    """corgifs.order(mount) names, line by line, the source bytes of the
    records served in part i of k, which tile the part after its prologue."""
    r = corgifs.reader_of(mount.dir)
    path = os.path.join(mount.dir, corgifs.part_name(epoch, i, k, r.ext))
    with open(path, "rb") as f:
        part = f.read()
    _, ends = read_part(r, path)
    order = corgifs.order(mount.dir, epoch=epoch, part=i, binary=corgifs_bin, cache_dir=mount.cache)
    assert len(order) == len(ends)
    prev = prologue_len(fmt, path) if getattr(r, "header", True) else 0  # a headerless CSV has none
    for (name, off, n), end in zip(order, ends):
        with open(os.path.join(src, name), "rb") as f:
            f.seek(off)
            data = f.read(n)
        assert len(data) == n
        if fmt in TEXT and not data.endswith(b"\n"):
            data += b"\n"  # a file's last line is served with a line end
        assert end - prev == len(data), f"{name}@{off}: served as {end - prev} bytes, source {len(data)}"
        assert part[prev:end] == data, f"{name}@{off}: the served bytes differ from the source's"
        prev = end


@pytest.mark.parametrize("fmt", FORMATS)
def test_order_agrees_with_the_served_parts(served, corgifs_bin, fmt):
    """corgifs.order(mount) passes the mount's data format flags from
    config.json (format, CSV header, record size, source header bytes, block
    size): each line names the source bytes of the record served at that
    place, and the records tile the part after its prologue."""
    s = served(fmt)
    for epoch, i in ((1, 2),) + (((0, 0),) if fmt in ("csv", "npy") else ()):
        check_order(corgifs_bin, s.mount, s.src, fmt, epoch, i, FORMAT_PARTS)


def test_order_reproduces_a_headerless_csv_mount_with_a_chosen_block_size(served, mounter, corgifs_bin):
    """--header=false makes every file's first row a record, and the block
    size and buffer are chosen by the mount (package sizing): order() must
    pass all three."""
    s = served("csv")
    m = mounter(s.src, "--header=false", "--seed", "6", "--parts", "2")
    cfg = corgifs.config(m.dir)
    assert cfg["header"] is False and cfg["dataset"]["records"] == s.records + 3
    assert cfg["sizing"]["block_size_given"] is False, "the test needs a block size the mount chose"
    assert corgifs.reader_of(m.dir).header is False
    for epoch, i in ((0, 1), (3, 0)):
        check_order(corgifs_bin, m, s.src, "csv", epoch, i, 2)


def test_order_of_a_source_directory_takes_the_format_flags_as_keywords(served, corgifs_bin):
    """Given the source instead of the mount, order() passes its keywords
    as flags (--format=fixed --record-size=24 --header-bytes=16 ...): the
    same order as the mount's."""
    from conftest import FIXED_HEADER, FIXED_RECORD
    s = served("fixed")
    want = corgifs.order(s.dir, epoch=1, part=1, binary=corgifs_bin, cache_dir=s.mount.cache)
    got = corgifs.order(s.src, epoch=1, part=1, parts=FORMAT_PARTS, binary=corgifs_bin, cache_dir=s.mount.cache,
                        seed=5, block_size="2KiB", buffer="20%", format="fixed", record_size=FIXED_RECORD,
                        header_bytes=FIXED_HEADER, equal_parts=False)
    assert got == want and len(got) > 0
    with pytest.raises(RuntimeError, match="record-size"):
        corgifs.order(s.src, binary=corgifs_bin, cache_dir=s.mount.cache, seed=5, format="fixed")
