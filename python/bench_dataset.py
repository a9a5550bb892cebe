#!/usr/bin/env python3
"""Records/s of corgifs.Dataset through a warm corgipile mount, against the
same reader on the source files in source order, and against a map-style
dataset doing one pread per record in a random order on a cold page cache
(the source files' pages dropped with posix_fadvise, nobody else's, and
each record's pages dropped again after its read, as for a dataset much
larger than memory).

    /usr/bin/python3 python/bench_dataset.py --bin ./corgifs [--records 300000 --features 32]

Generates a synthetic TFRecord set and mounts it in a temporary directory
(both removed at the end). Each figure is the median of --repeat passes.
"""

import argparse
import glob
import os
import random
import shutil
import signal
import statistics
import struct
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import corgifs  # noqa: E402


def timed(fn, repeat):
    rates = []
    for _ in range(repeat):
        start = time.perf_counter()
        n = fn()
        rates.append(n / (time.perf_counter() - start))
    return n, statistics.median(rates)


def paired(a, b, repeat):
    """Medians of a and b run alternately, so that a change of the machine's
    load hits both alike."""
    ra, rb = [], []
    for _ in range(repeat):
        for fn, rates in ((a, ra), (b, rb)):
            start = time.perf_counter()
            n = fn()
            rates.append(n / (time.perf_counter() - start))
    return n, statistics.median(ra), statistics.median(rb)


def through_dataset(mount, verify, decode):
    def run():
        ds = corgifs.Dataset(mount, verify=verify, decode=decode)
        return sum(1 for _ in ds)
    return run


def through_source(files, verify, decode):
    def run():
        r = corgifs.reader("tfrecord", verify=verify)
        n = 0
        for name in files:
            with r.open(name) as f:
                for rec, _ in r.records(f):
                    if decode:
                        r.decode(rec)
                    n += 1
        return n
    return run


def frames_of(files):
    """(file, offset of the payload, length) of every record."""
    out = []
    for name in files:
        with open(name, "rb") as f:
            b = f.read()
        off = 0
        while off < len(b):
            (n,) = struct.unpack_from("<Q", b, off)
            out.append((name, off + 12, n))
            off += n + 16
    return out


def drop_pages(files):
    """Evicts the files' pages from the page cache (theirs only)."""
    for name in files:
        fd = os.open(name, os.O_RDONLY)
        try:
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)


def map_style_pread(files, frames, decode, sample):
    """A map-style Dataset's __getitem__ on a cold cache: one pread per
    record, in a random order, each record's pages evicted after its read,
    as when the dataset is much larger than memory (so a record's page is
    never still cached from a neighbour's read)."""
    def run():
        drop_pages(files)
        fds = {name: os.open(name, os.O_RDONLY) for name in files}
        try:
            for fd in fds.values():
                os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_RANDOM)
            order = random.Random(1).sample(range(len(frames)), min(sample, len(frames)))
            for i in order:
                name, off, n = frames[i]
                fd = fds[name]
                payload = os.pread(fd, n, off)
                if decode:
                    corgifs.decode_example(payload)
                os.posix_fadvise(fd, off & ~4095, n + (off & 4095), os.POSIX_FADV_DONTNEED)
            return len(order)
        finally:
            for fd in fds.values():
                os.close(fd)
    return run


def cold_epoch(mount, files, epoch, decode):
    """corgifs.Dataset on an epoch not read before, the source's pages
    evicted: every block comes from the disk."""
    def run():
        drop_pages(files)
        ds = corgifs.Dataset(mount, epoch=epoch, decode=decode)
        return sum(1 for _ in ds)
    return run


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bin", default=shutil.which("corgifs"), help="the corgifs binary")
    ap.add_argument("--records", type=int, default=300000)
    ap.add_argument("--features", type=int, default=32)
    ap.add_argument("--files", type=int, default=8)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--sample", type=int, default=20000, help="records read by the cold map-style pass")
    ap.add_argument("--mount-flags", default="--block-size 1MiB --buffer 10% --seed 1",
                    help="flags of corgifs mount (default: %(default)s)")
    args = ap.parse_args()
    if not args.bin:
        sys.exit("no corgifs binary: pass --bin")
    tmp = tempfile.mkdtemp(prefix="corgifs-bench-")
    src, mnt = os.path.join(tmp, "src"), os.path.join(tmp, "mnt")
    os.mkdir(mnt)
    subprocess.run([args.bin, "gen", "synthetic", src, "--records", str(args.records), "--features",
                    str(args.features), "--files", str(args.files), "--order", "clustered"], check=True,
                   stdout=subprocess.DEVNULL)
    files = sorted(glob.glob(os.path.join(src, "*.tfrecord")))
    size = sum(os.path.getsize(f) for f in files)
    proc = subprocess.Popen([args.bin, "mount", src, mnt, "--cache-dir", os.path.join(tmp, "cache"),
                             *args.mount_flags.split()], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        while not os.path.exists(os.path.join(mnt, ".corgifs", "config.json")):
            if proc.poll() is not None:
                sys.exit("corgifs mount exited")
            time.sleep(0.05)
        print(f"{args.records} records, {size / 2**20:.1f} MiB in {len(files)} files; mount {args.mount_flags}; "
              f"C crc32c module: {corgifs.HAVE_FAST_CRC}; median of {args.repeat}")
        through_dataset(mnt, True, False)()  # warm: the page cache holds the part
        frames = frames_of(files)
        rows = []
        for verify, decode in [(True, False), (False, False), (True, True)]:
            what = f"{'CRC checked' if verify else 'no CRC check'}, {'Example decoded' if decode else 'raw records'}"
            n, mount_rate, src_rate = paired(through_dataset(mnt, verify, decode),
                                             through_source(files, verify, decode), args.repeat)
            assert n == args.records, n
            rows.append((what, mount_rate, src_rate))
        for k, decode in enumerate((False, True)):
            _, cold = timed(cold_epoch(mnt, files, 50 + k, decode), 1)
            rows.append((f"Dataset, unread epoch, source pages dropped, {'decoded' if decode else 'raw'}", cold, None))
        for decode in (False, True):
            _, cold = timed(map_style_pread(files, frames, decode, args.sample), 1)
            rows.append((f"map-style pread per record, random, cold, {'decoded' if decode else 'raw'}", None, cold))
        print(f"{'':56s} {'mount rec/s':>12s} {'source rec/s':>13s} {'ratio':>6s}")
        for what, m, s in rows:
            ms = f"{m:12,.0f}" if m is not None else " " * 12
            ss = f"{s:13,.0f}" if s is not None else " " * 13
            ratio = f"{m / s:6.2f}" if m is not None and s is not None else ""
            print(f"{what:56s} {ms} {ss} {ratio}")
        print(f"warm corgifs.Dataset vs cold map-style pread: raw {rows[0][1] / rows[5][2]:.1f}x, "
              f"decoded {rows[2][1] / rows[6][2]:.1f}x")
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(30)
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
