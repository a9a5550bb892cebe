#!/usr/bin/env python3
"""Records/s of corgifs.Dataset through a warm corgipile mount, against the
same reader on the source files in source order, and against a map-style
dataset doing one pread per record in a random order on a cold page cache
(the source files' pages dropped with posix_fadvise, nobody else's).

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


def map_style_pread(files, frames, decode, cold):
    """A map-style Dataset's __getitem__: one pread per record, random order."""
    def run():
        fds = {name: os.open(name, os.O_RDONLY) for name in files}
        try:
            if cold:
                for fd in fds.values():
                    os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            order = list(range(len(frames)))
            random.Random(1).shuffle(order)
            for i in order:
                name, off, n = frames[i]
                payload = os.pread(fds[name], n, off)
                if decode:
                    corgifs.decode_example(payload)
            return len(order)
        finally:
            for fd in fds.values():
                os.close(fd)
    return run


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bin", default=shutil.which("corgifs"), help="the corgifs binary")
    ap.add_argument("--records", type=int, default=300000)
    ap.add_argument("--features", type=int, default=32)
    ap.add_argument("--files", type=int, default=8)
    ap.add_argument("--repeat", type=int, default=3)
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
            n1, mount_rate = timed(through_dataset(mnt, verify, decode), args.repeat)
            n2, src_rate = timed(through_source(files, verify, decode), args.repeat)
            assert n1 == n2 == args.records, (n1, n2)
            rows.append((what, mount_rate, src_rate))
        for decode in (False, True):
            _, cold = timed(map_style_pread(files, frames, decode, True), 1)
            rows.append((f"map-style pread, random order, cold, {'decoded' if decode else 'raw'}", None, cold))
        print(f"{'':48s} {'mount rec/s':>12s} {'source rec/s':>13s} {'ratio':>6s}")
        for what, m, s in rows:
            if m is None:
                print(f"{what:48s} {'':>12s} {s:13,.0f}")
            else:
                print(f"{what:48s} {m:12,.0f} {s:13,.0f} {m / s:6.2f}")
        mount_dec = rows[2][1]
        print(f"corgifs.Dataset (decoded) vs cold map-style pread (decoded): {mount_dec / rows[4][2]:.1f}x")
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(30)
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
