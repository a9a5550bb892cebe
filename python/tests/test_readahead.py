"""corgifs.readahead: a file read ahead by a thread gives a forward reader
exactly the bytes, records, offsets and errors of the file read directly."""

import io
import os
import random
import threading

import pytest

from corgifs.formats import reader
from corgifs.readahead import ReadAhead
from corgifs.tfrecord import CorruptRecord, frame


def tfrecord_file(tmp_path, n=3000, seed=1):
    rnd = random.Random(seed)
    payloads = [rnd.randbytes(rnd.randrange(0, 3000)) for _ in range(n)]
    p = tmp_path / "a.tfrecord"
    p.write_bytes(b"".join(frame(x) for x in payloads))
    return p, payloads


def test_read_ahead_returns_the_files_bytes_in_order_then_eof(tmp_path):
    data = os.urandom(5 * 65536 + 123)
    p = tmp_path / "f"
    p.write_bytes(data)
    with ReadAhead(open(p, "rb", buffering=0), chunk=65536) as f:
        got = b"".join(iter(lambda: f.read(65536), b""))
        assert f.read(1) == b""
    assert got == data


@pytest.mark.parametrize("chunk", [64, 4096, 1 << 20])
@pytest.mark.parametrize("offset_record", [0, 1, 1777])
def test_tfrecord_records_and_offsets_through_read_ahead_equal_a_direct_read(tmp_path, chunk, offset_record):
    p, payloads = tfrecord_file(tmp_path)
    r = reader("tfrecord", chunk=chunk)
    with r.open(p) as f:
        direct = list(r.records(f))
    offset = 0 if offset_record == 0 else direct[offset_record - 1][1]
    with r.open(p) as f:
        want = list(r.records(f, offset))
    with r.open_ahead(p) as f:
        assert isinstance(f, ReadAhead)
        got = list(r.records(f, offset))
    assert [bytes(x) for x, _ in got] == [bytes(x) for x, _ in want]
    assert [o for _, o in got] == [o for _, o in want]
    assert [bytes(x) for x, _ in direct] == payloads


def test_a_truncated_file_read_ahead_raises_the_same_error_with_file_and_offset(tmp_path):
    p, _ = tfrecord_file(tmp_path, n=200)
    data = p.read_bytes()
    p.write_bytes(data[:-7])
    r = reader("tfrecord")
    errs = []
    for opener in (r.open, r.open_ahead):
        with opener(p) as f, pytest.raises(CorruptRecord) as e:
            for _ in r.records(f):
                pass
        errs.append(str(e.value))
    assert errs[0] == errs[1]
    assert "a.tfrecord" in errs[0] and "offset" in errs[0]


def test_a_read_error_of_the_thread_is_raised_by_the_reader_after_the_bytes_before_it():
    class Failing(io.RawIOBase):
        def __init__(self):
            self.n = 0

        def read(self, size=-1):
            self.n += 1
            if self.n > 2:
                raise OSError(5, "Input/output error")
            return b"x" * 10

    f = ReadAhead(Failing(), chunk=10)
    assert f.read() == b"x" * 10 and f.read() == b"x" * 10
    with pytest.raises(OSError, match="Input/output"):
        f.read()
    assert f.read() == b""
    f.close()


def test_close_before_the_end_stops_the_thread_and_closes_the_file(tmp_path):
    p = tmp_path / "big"
    p.write_bytes(os.urandom(1 << 20))
    before = threading.active_count()
    f = ReadAhead(open(p, "rb", buffering=0), chunk=4096, depth=2)
    f.read()
    f.close()
    assert f.closed and threading.active_count() == before


def test_seek_after_the_first_read_is_refused(tmp_path):
    p = tmp_path / "f"
    p.write_bytes(b"abcdef")
    with ReadAhead(open(p, "rb", buffering=0), chunk=2) as f:
        f.seek(2)
        assert f.read() == b"cd"
        with pytest.raises(io.UnsupportedOperation):
            f.seek(0)


def test_formats_that_seek_while_reading_are_not_read_ahead(tmp_path):
    p = tmp_path / "a.csv"
    p.write_bytes(b"a,b\n1,2\n")
    with reader("csv").open_ahead(p) as f:
        assert not isinstance(f, ReadAhead)
