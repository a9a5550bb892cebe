#!/usr/bin/env python3
"""The same Python TFRecord reader on a warm corgipile mount and on the
source files it serves, and a DataLoader over corgifs.Dataset against the
same DataLoader over the reader on the source files (issue 25, the
reader's side). Passes alternate mount and source, each mount pass reading
an epoch no earlier pass read; the source files are read once before each
pass so that they are in the page cache (other tenants of a shared machine
may drop it).

    /usr/bin/python3 python/bench_reader.py --bin ./corgifs --src DIR [--bin-b OTHER]

SRC is a directory of .tfrecord files (corgifs gen synthetic). With
--bin-b, a second binary is mounted beside the first and every row is
measured for both, alternated, so that the two builds see the same load.

Besides records/s (wall time), each row gives the reader's own CPU time
per record on the source over that through the mount ("CPU ratio"): what
the wall ratio would be for a reader bound by its CPU with the daemon on
another core. On a machine loaded past its cores the wall ratio measures
the scheduler as much as the reader: the daemon's threads take CPU time
of their own for the copies a reader of the source makes itself. The
daemon's CPU per record through the mount is printed too ("daemon us").
"""

import argparse
import glob
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import corgifs  # noqa: E402
from bench_dataset import through_source  # noqa: E402


def warm(files):
    for name in files:
        with open(name, "rb", buffering=0) as f:
            while f.read(1 << 20):
                pass


# The reader on the source files is bench_dataset's, so that both benchmarks
# compare the mount with the same loop.
source_reader = through_source


def mount_reader(mnt, verify, decode, epochs):
    def run():
        ds = corgifs.Dataset(mnt, epoch=next(epochs), verify=verify, decode=decode)
        return sum(1 for _ in ds)
    return run


def source_loader(files, batch):
    import torch.utils.data as tud

    class Source(tud.IterableDataset):
        def __iter__(self):
            r = corgifs.reader("tfrecord")
            for name in files:
                with r.open(name) as f:
                    for rec, _ in r.records_for(f, 0, r.decode):
                        yield r.decode(rec)

    def run():
        return sum(len(b["id"]) for b in tud.DataLoader(Source(), batch_size=batch, num_workers=0))
    return run


def mount_loader(mnt, batch, epochs):
    def run():
        ds = corgifs.Dataset(mnt, epoch=next(epochs))
        return sum(len(b["id"]) for b in corgifs.DataLoader(ds, batch_size=batch, num_workers=0))
    return run


def cpu_seconds(pid):
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def mount(binary, src, tmp, name):
    mnt = os.path.join(tmp, "mnt-" + name)
    os.mkdir(mnt)
    proc = subprocess.Popen([binary, "mount", src, mnt, "--seed", "1", "--cache-dir", os.path.join(tmp, "cache")],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    while not os.path.exists(os.path.join(mnt, ".corgifs", "config.json")):
        if proc.poll() is not None:
            sys.exit(f"corgifs mount of {binary} exited")
        time.sleep(0.05)
    return mnt, proc


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bin", required=True, help="the corgifs binary")
    ap.add_argument("--bin-b", help="a second corgifs binary, measured beside the first")
    ap.add_argument("--src", required=True, help="directory of .tfrecord files")
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument("--no-loader", action="store_true", help="skip the DataLoader rows (no torch)")
    args = ap.parse_args()
    files = sorted(glob.glob(os.path.join(args.src, "*.tfrecord")))
    size = sum(os.path.getsize(f) for f in files)
    tmp = tempfile.mkdtemp(prefix="corgifs-bench-reader-")
    binaries = [("A", args.bin)] + ([("B", args.bin_b)] if args.bin_b else [])
    mounts, procs = {}, []
    epochs = iter(range(1, 1 << 20))
    try:
        for name, binary in binaries:
            mnt, proc = mount(binary, args.src, tmp, name)
            mounts[name] = mnt
            procs.append(proc)
        load0 = open("/proc/loadavg").read().split()[:3]
        print(f"{len(files)} files, {size / 2**20:.0f} MiB in {args.src}; binaries {dict(binaries)}; "
              f"C crc32c: {corgifs.HAVE_FAST_CRC}; C decoder: {corgifs.tfrecord.HAVE_FAST_DECODE}; "
              f"{args.repeat} passes each, alternated; load {' '.join(load0)}")
        rows = [("reader, no CRC check, raw", lambda m: mount_reader(m, False, False, epochs),
                 source_reader(files, False, False)),
                ("reader, CRC checked, raw", lambda m: mount_reader(m, True, False, epochs),
                 source_reader(files, True, False)),
                ("reader, CRC checked, decoded", lambda m: mount_reader(m, True, True, epochs),
                 source_reader(files, True, True))]
        if not args.no_loader:
            rows.append((f"DataLoader, batch {args.batch}, decoded", lambda m: mount_loader(m, args.batch, epochs),
                         source_loader(files, args.batch)))
        for name in mounts:  # the first epoch of each mount loads its blocks once
            mount_reader(mounts[name], False, False, iter([0]))()
        print(f"{'':36s} {'source rec/s':>13s}" + "".join(
            f" {name + ' rec/s':>12s} {name + ' ratio':>8s} {'min-max':>9s} {name + ' CPU ratio':>12s} {'min-max':>9s} {name + ' daemon us':>12s}"
            for name in mounts))
        daemons = dict(zip(mounts, procs))
        for what, on_mount, on_source in rows:
            src_rates = []
            rates, ratios, cpu_ratios, daemon_us = ({n: [] for n in mounts} for _ in range(4))
            for _ in range(args.repeat):
                warm(files)
                t, c = time.perf_counter(), time.process_time()
                n_src = on_source()
                src_rate = n_src / (time.perf_counter() - t)
                src_cpu = time.process_time() - c
                src_rates.append(src_rate)
                for name, mnt in mounts.items():
                    warm(files)
                    run = on_mount(mnt)
                    d = cpu_seconds(daemons[name].pid)
                    t, c = time.perf_counter(), time.process_time()
                    n = run()
                    rate = n / (time.perf_counter() - t)
                    cpu = time.process_time() - c
                    assert n == n_src, (n, n_src)
                    rates[name].append(rate)
                    ratios[name].append(rate / src_rate)
                    cpu_ratios[name].append(src_cpu / cpu)
                    daemon_us[name].append((cpu_seconds(daemons[name].pid) - d) / n * 1e6)
            line = f"{what:36s} {statistics.median(src_rates):13,.0f}"
            for name in mounts:
                r, cr = ratios[name], cpu_ratios[name]
                line += (f" {statistics.median(rates[name]):12,.0f} {statistics.median(r):8.2f} {min(r):4.2f}-{max(r):4.2f}"
                         f" {statistics.median(cr):12.2f} {min(cr):4.2f}-{max(cr):4.2f} {statistics.median(daemon_us[name]):12.2f}")
            print(line, flush=True)
        print(f"load after {' '.join(open('/proc/loadavg').read().split()[:3])}")
    finally:
        for proc in procs:
            proc.send_signal(signal.SIGTERM)
        for proc in procs:
            proc.wait(60)
        subprocess.run(["rm", "-rf", tmp])


if __name__ == "__main__":
    main()
