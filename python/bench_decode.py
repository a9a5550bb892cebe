#!/usr/bin/env python3
"""Records/s of tf.train.Example decoding: the pure-Python decoder against
the C one (corgifs/_example.c), over records of the layout `corgifs gen
synthetic` writes (int64 "id", int64 "label", a float "features" list), of
about 1 KiB and 100 KiB, and 1 KiB records of 128 int64 values.

    /usr/bin/python3 python/bench_decode.py [--repeat 7]
    /usr/bin/python3 python/bench_decode.py --loader [--records 200000] [--features 250]

--loader instead times DataLoader epochs (batch 256) through a mount made
with corgifs.mount() of a `corgifs gen synthetic` set of 1 KiB records, at
num_workers 0 and 4, with each decoder (the C decoder must be installed:
the workers import the package).

Decodes a list of distinct records already in memory (so that a 100 KiB
set does not sit in the CPU cache), median of --repeat passes, the two
decoders alternating; each set as bytes and as bytearrays (which the
decoders take as theirs: float lists view them). Uses the installed C decoder, else builds it into a
temporary directory.
"""

import argparse
import glob
import importlib.util
import os
import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
# The installed package when there is one (with its C decoder and binary;
# DataLoader workers import it too), else the source tree's.
sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != HERE]
try:
    from corgifs import tfrecord
except ImportError:
    sys.path.insert(0, HERE)
    from corgifs import tfrecord


def c_decoder(tmp):
    if tfrecord.HAVE_FAST_DECODE:
        return tfrecord._example
    subprocess.run([sys.executable, "setup.py", "-q", "build_ext", "--build-lib", tmp + "/lib", "--build-temp",
                    tmp + "/tmp"], cwd=HERE, check=True, capture_output=True)
    spec = importlib.util.spec_from_file_location("corgifs._example", glob.glob(tmp + "/lib/corgifs/_example*.so")[0])
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def varint(v):
    out = bytearray()
    v &= (1 << 64) - 1
    while v >= 0x80:
        out.append(v & 0x7F | 0x80)
        v >>= 7
    out.append(v)
    return bytes(out)


def ld(field, b):
    return varint(field << 3 | 2) + varint(len(b)) + b


def example(i, floats=None, ints=None):
    feats = [(b"id", ld(3, ld(1, varint(i)))), (b"label", ld(3, ld(1, varint(i % 4))))]
    if floats is not None:
        feats.append((b"features", ld(2, ld(1, floats.astype("<f4").tobytes()))))
    if ints is not None:
        feats.append((b"values", ld(3, ld(1, b"".join(varint(int(v)) for v in ints)))))
    return ld(1, b"".join(ld(1, ld(1, k) + ld(2, v)) for k, v in feats))


def rate(fn, recs):
    start = time.perf_counter()
    for r in recs:
        fn(r)
    return len(recs) / (time.perf_counter() - start)


def pure_on_bytes(record):
    """The pure decoder as a user's function: Dataset hands it bytes, so it
    copies the floats, as every decoder did before records came as
    bytearrays."""
    return tfrecord.decode_example_pure(record)


def loader(args):
    import torch
    import corgifs
    torch.set_num_threads(1)
    decoders = [("pure-Python, bytes", pure_on_bytes), ("pure-Python", tfrecord.decode_example_pure)]
    if tfrecord.HAVE_FAST_DECODE:
        decoders.append(("C", tfrecord.decode_example))
    with tempfile.TemporaryDirectory() as tmp:
        src = os.path.join(tmp, "src")
        subprocess.run([corgifs.binary(), "gen", "synthetic", src, "--records", str(args.records), "--features", str(args.features),
                        "--files", "8", "--seed", "1"], check=True, capture_output=True)
        print("| num_workers | decoder | epoch s | records/s |")
        print("| ---: | --- | ---: | ---: |")
        with corgifs.mount(src, parts=4, block_size="1MiB", seed=1, cache_dir=os.path.join(tmp, "cache")) as mnt:
            epoch = 0
            for workers in (0, 4):
                for name, decode in decoders:
                    times = []
                    for _ in range(args.repeat):
                        ds = corgifs.Dataset(mnt, epoch=epoch, decode=decode)
                        epoch += 1
                        start = time.perf_counter()
                        n = sum(len(b["id"]) for b in corgifs.DataLoader(ds, batch_size=256, num_workers=workers))
                        times.append(time.perf_counter() - start)
                    t = statistics.median(times)
                    print(f"| {workers} | {name} | {t:.2f} | {n / t:,.0f} |")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repeat", type=int, default=7)
    ap.add_argument("--loader", action="store_true", help="time DataLoader epochs through a mount")
    ap.add_argument("--records", type=int, default=200000, help="records of the --loader set")
    ap.add_argument("--features", type=int, default=250,
                    help="floats per record of the --loader set (25581 for ~100 KiB records)")
    args = ap.parse_args()
    if args.loader:
        return loader(args)
    rng = np.random.default_rng(1)
    sets = [
        ("1 KiB, 250 floats", [example(i, floats=rng.standard_normal(250)) for i in range(20000)]),
        ("100 KiB, 25,581 floats", [example(i, floats=rng.standard_normal(25581)) for i in range(400)]),
        ("1 KiB, 128 int64", [example(i, ints=rng.integers(-2 ** 40, 2 ** 40, 128)) for i in range(5000)]),
    ]
    with tempfile.TemporaryDirectory() as tmp:
        fast = c_decoder(tmp)
        # bytes: records as read_tfrecords yields them by default, decoded
        # into copies; bytearray: as it yields them with writable=True (what
        # corgifs.Dataset does for the package's decoders), float lists
        # viewed, not copied. The × columns are against the pure decoder on
        # bytes, the old decoder's only form.
        print("| records | bytes per record | pure-Python rec/s | C rec/s | × | pure-Python, bytearray rec/s "
              "| C, bytearray rec/s | × |")
        print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
        for name, recs in sets:
            arrays = [bytearray(r) for r in recs]
            runs = {k: [] for k in range(4)}
            for _ in range(args.repeat):
                runs[0].append(rate(tfrecord.decode_example_pure, recs))
                runs[1].append(rate(fast.decode_example, recs))
                runs[2].append(rate(tfrecord.decode_example_pure, arrays))
                runs[3].append(rate(fast.decode_example, arrays))
            p, f, pa, fa = (statistics.median(runs[k]) for k in range(4))
            size = sum(map(len, recs)) // len(recs)
            print(f"| {name} | {size} | {p:,.0f} | {f:,.0f} | {f / p:.1f} | {pa:,.0f} | {fa:,.0f} | {fa / p:.1f} |")

if __name__ == "__main__":
    main()
