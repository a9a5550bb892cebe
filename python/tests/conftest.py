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

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
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
