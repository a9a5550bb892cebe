"""Fixtures: the corgifs binary (built once, or $CORGIFS_BIN), a synthetic
TFRecord dataset and real FUSE mounts of it, served by separate processes
(a process reading its own mount can deadlock) and unmounted at the end,
also when a test fails."""

import os
import signal
import subprocess
import sys
import time

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.dirname(HERE))  # the package, also when not installed

RECORDS = 6000
CI = os.environ.get("CI") == "true"


def _need(what, why):
    if CI:
        pytest.fail(f"{what} is missing under CI: {why}")
    pytest.skip(f"{what}: {why}")


@pytest.fixture(scope="session")
def corgifs_bin(tmp_path_factory):
    b = os.environ.get("CORGIFS_BIN")
    if b:
        return b
    out = str(tmp_path_factory.mktemp("bin") / "corgifs")
    go = "go" if subprocess.run(["which", "go"], capture_output=True).returncode == 0 else "/usr/local/go/bin/go"
    try:
        subprocess.run([go, "build", "-o", out, "./cmd/corgifs"], cwd=REPO, check=True)
    except (OSError, subprocess.CalledProcessError) as e:
        _need("go", f"cannot build corgifs: {e}")
    return out


def run(bin, *args):
    p = subprocess.run([bin, *args], capture_output=True, text=True)
    if p.returncode != 0:
        raise RuntimeError(f"corgifs {' '.join(args)}: {p.returncode}\n{p.stderr}")
    return p.stdout


@pytest.fixture(scope="session")
def source(corgifs_bin, tmp_path_factory):
    """A clustered synthetic set: RECORDS records with ids 0..RECORDS-1."""
    d = str(tmp_path_factory.mktemp("data") / "src")
    run(corgifs_bin, "gen", "synthetic", d, "--records", str(RECORDS), "--features", "8", "--classes", "4",
        "--files", "4", "--order", "clustered", "--seed", "3")
    return d


class Mount:
    def __init__(self, bin, src, base, flags):
        self.dir = os.path.join(base, "mnt")
        self.cache = os.path.join(base, "cache")
        os.mkdir(self.dir)
        self.log = open(os.path.join(base, "log"), "w+")
        self.proc = subprocess.Popen([bin, "mount", src, self.dir, "--cache-dir", self.cache, *flags],
                                     stdout=self.log, stderr=subprocess.STDOUT)
        deadline = time.time() + 60
        while not os.path.exists(os.path.join(self.dir, ".corgifs", "config.json")):
            if self.proc.poll() is not None:
                raise RuntimeError(f"corgifs mount exited early: {self.proc.returncode}\n{self.text()}")
            if time.time() > deadline:
                self.stop()
                raise RuntimeError(f"mount did not come up in 60 s\n{self.text()}")
            time.sleep(0.02)

    def text(self):
        self.log.seek(0)
        return self.log.read()

    def terminate(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)

    def stop(self):
        if self.proc.poll() is None:
            self.terminate()
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        if os.path.ismount(self.dir):
            subprocess.run(["umount", "-l", self.dir])


@pytest.fixture(scope="session")
def mounter(corgifs_bin, tmp_path_factory):
    if not os.path.exists("/dev/fuse"):
        _need("/dev/fuse", "FUSE cannot be mounted")
    mounts = []

    def start(src, *flags):
        m = Mount(corgifs_bin, src, str(tmp_path_factory.mktemp("mount")), flags)
        mounts.append(m)
        return m

    yield start
    for m in mounts:  # all at once: each takes a moment to unmount
        m.terminate()
    for m in mounts:
        m.stop()


# Small blocks so that a 600 KB set has dozens of them and parts differ.
FLAGS = ("--block-size", "16KiB", "--buffer", "20%", "--seed", "1")


@pytest.fixture(scope="session")
def mount(mounter, source):
    return mounter(source, *FLAGS, "--parts", "4")


@pytest.fixture(scope="session")
def equal_mount(mounter, source):
    return mounter(source, *FLAGS, "--parts", "4", "--equal-parts")


@pytest.fixture(scope="session")
def torch():
    try:
        import torch
    except ImportError as e:
        _need("torch", f"{e} (Debian: apt-get install python3-torch)")
    torch.set_num_threads(1)
    return torch


# One small source of every format but TFRecord, mounted once per session
# (the first test that asks for a format mounts it): what each reader is
# tested against. Sizes keep the whole suite short on a loaded machine.
FORMAT_RECORDS = {"csv": 1500, "jsonl": 1200, "libsvm": 1200, "wds": 240, "npy": 1500, "lines": 900,
                  "fixed": 1000}
GENERATED = ("csv", "jsonl", "libsvm", "wds", "npy")
FIXED_RECORD, FIXED_HEADER = 24, 16
FORMAT_PARTS = 3
FORMAT_FLAGS = ("--block-size", "2KiB", "--buffer", "20%", "--seed", "5", "--parts", str(FORMAT_PARTS))


def _write_lines(d, n):
    """Three .txt files of n lines "rec-ID ..." in all, varied lengths; one
    CRLF line, and the last file's last line without a line end (the mount
    serves it with one)."""
    os.makedirs(d)
    per = n // 3
    for k in range(3):
        ids = range(k * per, n if k == 2 else (k + 1) * per)
        lines = [f"rec-{i} " + "xyz"[i % 3] * (i % 41) for i in ids]
        if k == 0:
            lines[3] += "\r"
        text = "\n".join(lines) + ("" if k == 2 else "\n")
        with open(os.path.join(d, f"lines-{k}.txt"), "w", newline="") as f:
            f.write(text)


def _write_fixed(d, n):
    """Three .bin files: a FIXED_HEADER-byte header, then records of
    FIXED_RECORD bytes: the id (uint64 LE) and 16 bytes made from it."""
    import struct
    os.makedirs(d)
    per = n // 3
    for k in range(3):
        ids = range(k * per, n if k == 2 else (k + 1) * per)
        with open(os.path.join(d, f"fixed-{k}.bin"), "wb") as f:
            f.write(b"HEADER-%08d\n" % k)
            for i in ids:
                f.write(struct.pack("<Q", i) + bytes((i * 7 + j) % 256 for j in range(FIXED_RECORD - 8)))


class Served:
    """A source of one format and its mount."""

    def __init__(self, fmt, src, mount, records, source_options):
        self.format, self.src, self.mount, self.records = fmt, src, mount, records
        self.source_options = source_options  # the reader's options for the source files

    @property
    def dir(self):
        return self.mount.dir


@pytest.fixture(scope="session")
def served(corgifs_bin, mounter, tmp_path_factory):
    """served(fmt): the Served of a format, made and mounted on first use."""
    made = {}

    def get(fmt):
        if fmt in made:
            return made[fmt]
        n = FORMAT_RECORDS[fmt]
        src = str(tmp_path_factory.mktemp("src-" + fmt) / "src")
        flags, opts = list(FORMAT_FLAGS), {}
        if fmt in GENERATED:
            run(corgifs_bin, "gen", "synthetic", src, "--format", fmt, "--records", str(n), "--features", "4",
                "--classes", "3", "--files", "3", "--order", "clustered", "--seed", "4")
        elif fmt == "lines":
            _write_lines(src, n)
        else:
            _write_fixed(src, n)
            flags += ["--format", "fixed", "--record-size", str(FIXED_RECORD), "--header-bytes", str(FIXED_HEADER)]
            opts = {"record_size": FIXED_RECORD, "header_bytes": FIXED_HEADER}
        made[fmt] = Served(fmt, src, mounter(src, *flags), n, opts)
        return made[fmt]

    return get
