"""Record readers for every format a corgifs mount serves.

Each reader yields (record, next_offset) from a byte offset that is a record
boundary, so that a consumer can stop after any record and resume at exactly
the next one (Dataset.state_dict does). The offset 0 is the start of the
file: a reader reads the file's prologue (CSV header, .npy header) itself,
also when it starts at a later offset. Records are raw (bytes, or a row
array for .npy); each reader's decode turns one into what a training loop
wants.
"""

import csv
import json
import tarfile

import numpy as np

from . import tfrecord as _tfrecord
from .tfrecord import CHUNK, CorruptRecord, decode_example, read_tfrecords
from .readahead import ReadAhead as _ReadAhead

# The decoders that take a bytearray record as theirs to keep.
_VIEWING = (_tfrecord.decode_example, _tfrecord.parse_example, _tfrecord.decode_example_pure,
            _tfrecord.parse_example_pure)

__all__ = ["Reader", "reader", "canonical", "FORMATS", "EXTENSIONS", "read_records"]


def _lines(f, offset, chunk):
    """Yields (line without its "\\n", next_offset) from offset on. The last
    line may lack a "\\n"."""
    f.seek(offset)
    data, pos, base = b"", 0, offset
    while True:
        nl = data.find(b"\n", pos)
        if nl >= 0:
            yield data[pos:nl], base + nl + 1
            pos = nl + 1
            continue
        more = f.read(chunk)
        if not more:
            if pos < len(data):
                yield data[pos:], base + len(data)
            return
        base += pos
        data = data[pos:] + more
        pos = 0


class Reader:
    """A format: its name, the extension of its served parts, how to read
    its records from a binary file object, and the default decoding."""

    name = ext = ""
    #: bytes of the buffer of files opened by open(); 0 where the reader
    #: reads large chunks itself.
    buffering = 0

    def __init__(self, verify=True, chunk=CHUNK, **options):
        self.verify, self.chunk, self.options = verify, chunk, options

    def records(self, f, offset=0):
        """Yields (raw record, offset of the next record)."""
        raise NotImplementedError

    def decode(self, record):
        return record

    def records_for(self, f, offset, decode):
        """records(f, offset) whose records go to decode and nowhere else: a
        reader may then yield buffers the decoding can keep."""
        return self.records(f, offset)

    #: whether records() only seeks before it reads and then reads forward
    #: with read(), so that a file can be read ahead of it (open_ahead).
    forward = False

    def open(self, path):
        return open(path, "rb", buffering=self.buffering)

    def open_ahead(self, path):
        """open(path), read one chunk ahead by a thread where the format
        reads forward (readahead.py says why: a mount's parts)."""
        f = self.open(path)
        if not self.forward:
            return f
        return _ReadAhead(f, chunk=self.chunk)


class TFRecord(Reader):
    """TFRecord frames; decode gives a tf.train.Example as {name: value}
    (see decode_example). verify=False skips the CRC checks, which a corgifs
    mount already made when it loaded each record's block."""

    name, ext = "tfrecord", ".tfrecord"
    forward = True

    def records(self, f, offset=0):
        return read_tfrecords(f, offset, verify=self.verify, chunk=self.chunk)

    def records_for(self, f, offset, decode):
        # Fresh bytearrays for the package's decoders, whose float arrays
        # then view the record instead of copying it (the same one copy per
        # record as bytes); a user's function gets bytes as before.
        writable = decode == self.decode or decode in _VIEWING
        return read_tfrecords(f, offset, verify=self.verify, chunk=self.chunk, writable=writable)

    def decode(self, record):
        return decode_example(record)


class Lines(Reader):
    """Text lines; decode gives the line as str (without "\\n" or "\\r\\n")."""

    name, ext = "lines", ".txt"
    forward = True

    def records(self, f, offset=0):
        return _lines(f, offset, self.chunk)

    def decode(self, record):
        return record.decode().rstrip("\r")


class JSONL(Lines):
    """One JSON value per line; decode gives it parsed."""

    name, ext = "jsonl", ".jsonl"

    def decode(self, record):
        return json.loads(record)


class LibSVM(Lines):
    """LIBSVM lines 'label index:value ...'; decode gives (label float,
    indices int64 array, values float32 array). A 'qid:' token and a
    '#' comment are ignored; a multi-label 'a,b' label gives a float array."""

    name, ext = "libsvm", ".libsvm"

    def decode(self, record):
        text = record.decode().split("#", 1)[0].split()
        if not text:
            raise ValueError(f"empty LIBSVM line {record!r}")
        label = text[0]
        label = np.array([float(x) for x in label.split(",")], dtype=np.float32) if "," in label else float(label)
        pairs = [t.split(":", 1) for t in text[1:] if not t.startswith("qid:")]
        idx = np.array([int(i) for i, _ in pairs], dtype=np.int64)
        val = np.array([float(v) for _, v in pairs], dtype=np.float32)
        return label, idx, val


class CSV(Reader):
    """RFC 4180 rows (a quoted field may hold newlines). With header (the
    default, as the mount's), the first row of the file names the columns
    and decode gives {column: str}; without, a list of str."""

    name, ext = "csv", ".csv"

    def __init__(self, verify=True, chunk=CHUNK, header=True, **options):
        super().__init__(verify, chunk, **options)
        self.header = header
        self.columns = None

    def _rows(self, f, offset):
        # A row ends at the first "\n" after an even number of quotes.
        row, start, quotes = [], offset, 0
        for line, nxt in _lines(f, offset, self.chunk):
            row.append(line)
            quotes += line.count(b'"')
            if quotes % 2 == 0:
                yield b"\n".join(row), nxt
                row, start, quotes = [], nxt, 0
        if row:
            raise CorruptRecord(f"{getattr(f, 'name', '<stream>')}: unterminated quoted field in the row at offset {start}")

    def records(self, f, offset=0):
        first = 0
        if self.header:
            rows = self._rows(f, 0)
            head = next(rows, None)
            if head is None:
                return
            self.columns = self._fields(head[0])
            first = head[1]
        return_from = max(offset, first)
        yield from self._rows(f, return_from)

    @staticmethod
    def _fields(row):
        return next(csv.reader([row.decode().rstrip("\r")]))

    def decode(self, record):
        fields = self._fields(record)
        if self.columns is None:
            return fields
        if len(fields) != len(self.columns):
            raise ValueError(f"CSV row has {len(fields)} fields, the header {len(self.columns)}")
        return dict(zip(self.columns, fields))


class WDS(Reader):
    """WebDataset tar shards: a sample is the run of consecutive members
    whose names share a key (the path up to the first dot of the last path
    component); the record is {"__key__": key, ext: bytes, ...}. Members
    that are not files or whose name has no dot are skipped, as WebDataset
    does."""

    name, ext = "wds", ".tar"
    buffering = CHUNK  # tarfile reads 512-byte headers

    def records(self, f, offset=0):
        f.seek(offset)
        tar = tarfile.open(fileobj=f, mode="r:")
        sample, key, end = None, None, offset
        for m in tar:
            if not m.isfile():
                continue
            d = m.name.rfind("/") + 1
            dot = m.name.find(".", d)
            if dot < 0:
                continue
            k, ext = m.name[:dot], m.name[dot + 1:]
            if k != key and sample is not None:
                yield sample, end
                sample = None
            if sample is None:
                sample, key = {"__key__": k}, k
            sample[ext] = tar.extractfile(m).read()
            end = m.offset_data + (m.size + 511) // 512 * 512
        if sample is not None:
            yield sample, end


class NPY(Reader):
    """Rows of a .npy array (C order): the record is one element along the
    first axis, a numpy array (writable, so torch.from_numpy takes it)."""

    name, ext = "npy", ".npy"

    def records(self, f, offset=0):
        f.seek(0)
        fmt = np.lib.format
        version = fmt.read_magic(f)
        if version == (1, 0):
            shape, fortran, dtype = fmt.read_array_header_1_0(f)
        elif version == (2, 0):
            shape, fortran, dtype = fmt.read_array_header_2_0(f)
        else:
            shape, fortran, dtype = fmt._read_array_header(f, version)
        if fortran and len(shape) > 1:
            raise ValueError(f"{getattr(f, 'name', '<stream>')}: Fortran-order .npy rows are not contiguous")
        start = f.tell()
        row_shape = tuple(shape[1:])
        row = dtype.itemsize * int(np.prod(row_shape, dtype=np.int64))
        rows = shape[0] if shape else 1
        i = 0 if offset <= start else (offset - start) // row
        f.seek(start + i * row)
        per = max(1, self.chunk // max(row, 1))
        while i < rows:
            n = min(per, rows - i)
            buf = bytearray(n * row)
            got = f.readinto(buf)
            if got != len(buf):
                raise CorruptRecord(f"{getattr(f, 'name', '<stream>')}: truncated .npy: row {i + got // max(row, 1)} "
                                    f"of {rows} ends past the end of the file")
            a = np.frombuffer(buf, dtype=dtype).reshape((n,) + row_shape)
            for j in range(n):
                i += 1
                yield a[j, ...], start + i * row  # an array also for 1-D files


class Fixed(Reader):
    """Fixed-size records: header_bytes of file header, then records of
    record_size bytes each; the record is bytes."""

    name, ext = "fixed", ".bin"

    def __init__(self, verify=True, chunk=CHUNK, record_size=None, header_bytes=0, **options):
        super().__init__(verify, chunk, **options)
        if not record_size or record_size <= 0:
            raise ValueError("format fixed needs record_size > 0")
        self.size, self.header_bytes = int(record_size), int(header_bytes)

    def records(self, f, offset=0):
        off = max(offset, self.header_bytes)
        f.seek(off)
        per = max(1, self.chunk // self.size) * self.size
        while True:
            buf = f.read(per)
            if len(buf) % self.size:
                raise CorruptRecord(f"{getattr(f, 'name', '<stream>')}: the file ends inside a record "
                                    f"({len(buf) % self.size} bytes of {self.size}) after offset {off}")
            for p in range(0, len(buf), self.size):
                off += self.size
                yield buf[p:p + self.size], off
            if len(buf) < per:
                return


FORMATS = {r.name: r for r in (TFRecord, CSV, JSONL, LibSVM, Lines, WDS, NPY, Fixed)}
EXTENSIONS = {r.ext: r.name for r in FORMATS.values()}
_ALIASES = {"txt": "lines", "text": "lines", "tar": "wds", "webdataset": "wds", "bin": "fixed"}


def canonical(format):
    """The name of a format given by name, alias or extension."""
    name = str(format).lower().lstrip(".")
    name = _ALIASES.get(name, EXTENSIONS.get("." + name, name))
    if name not in FORMATS:
        raise ValueError(f"unknown format {format!r}; known formats: {', '.join(FORMATS)}")
    return name


def reader(format="tfrecord", **options):
    """The Reader of a format named as the mount names it (tfrecord, csv,
    jsonl, libsvm, lines, wds, npy, fixed) or by its extension."""
    return FORMATS[canonical(format)](**options)


def read_records(path, format=None, offset=0, decode=True, verify=True, **options):
    """Yields the records of one file (a served part or a source file), decoded
    by the format's default decoding unless decode=False. The format defaults
    to the file's extension."""
    if format is None:
        ext = "." + str(path).rsplit(".", 1)[-1]
        if ext not in EXTENSIONS:
            raise ValueError(f"{path}: cannot tell the format from the extension; pass format=")
        format = EXTENSIONS[ext]
    r = reader(format, verify=verify, **options)
    with r.open(path) as f:
        if not decode:
            yield from (rec for rec, _ in r.records(f, offset))
            return
        for rec, _ in r.records_for(f, offset, r.decode):
            yield r.decode(rec)
