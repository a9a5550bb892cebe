"""The package installs offline: `pip wheel --no-build-isolation` builds a
platform wheel that carries the corgifs binary and the C decoder, and a
fresh venv that sees Debian's numpy and torch installs it with no index;
the venv's `corgifs` command is the binary, and a DataLoader epoch runs
through corgifs.mount() with nothing else on PATH."""

import glob
import os
import shutil
import subprocess
import sys
import textwrap

import pytest

from conftest import CI, RECORDS

PKG = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _need_build_tools():
    try:
        import ensurepip  # noqa: F401
        import setuptools  # noqa: F401
        import wheel  # noqa: F401
    except ImportError as e:
        msg = f"{e} (Debian: apt-get install python3-venv python3-setuptools python3-wheel)"
        if CI:
            pytest.fail(msg)
        pytest.skip(msg)


@pytest.fixture(scope="module")
def wheel(corgifs_bin, tmp_path_factory):
    """The wheel, built from a copy of the package (pip's build directory
    stays out of the repository) with the binary of this test run."""
    _need_build_tools()
    tmp = tmp_path_factory.mktemp("wheel")
    src = tmp / "python"
    shutil.copytree(PKG, src, ignore=shutil.ignore_patterns("build", "*.egg-info", "__pycache__", "tests"))
    env = {**os.environ, "CORGIFS_BIN": corgifs_bin, "PIP_NO_INDEX": "1"}
    p = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-build-isolation", "--no-deps", "--no-index",
                        "-w", str(tmp / "dist"), str(src)], capture_output=True, text=True, env=env)
    assert p.returncode == 0, p.stdout + p.stderr
    wheels = glob.glob(str(tmp / "dist" / "corgifs-*.whl"))
    assert len(wheels) == 1, wheels
    return wheels[0]


@pytest.fixture(scope="module")
def venv(wheel, tmp_path_factory):
    """A fresh venv (seeing the system's numpy and torch) with the wheel
    installed, no index."""
    venv = tmp_path_factory.mktemp("venv") / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--system-site-packages", str(venv)], check=True)
    p = subprocess.run([str(venv / "bin" / "pip"), "install", "--no-index", "--no-deps", wheel],
                       capture_output=True, text=True, env={**os.environ, "PIP_NO_INDEX": "1"})
    assert p.returncode == 0, p.stdout + p.stderr
    return venv


def _clean_env(venv):
    """The environment of a user of the venv: its bin first on PATH, no
    corgifs elsewhere on it, no CORGIFS_BIN."""
    env = {k: v for k, v in os.environ.items() if k not in ("CORGIFS_BIN", "PYTHONPATH")}
    env["PATH"] = f"{venv / 'bin'}:/usr/bin:/bin:/usr/sbin:/sbin"
    return env


def test_the_wheel_is_a_platform_wheel_with_the_binary_and_metadata(wheel):
    import zipfile
    name = os.path.basename(wheel)
    assert not name.endswith("-none-any.whl"), name
    with zipfile.ZipFile(wheel) as z:
        names = z.namelist()
        assert "corgifs/bin/corgifs" in names
        assert z.getinfo("corgifs/bin/corgifs").external_attr >> 16 & 0o111, "the binary is executable"
        assert any(n.startswith("corgifs/_example") and n.endswith(".so") for n in names), names
        meta = z.read(next(n for n in names if n.endswith(".dist-info/METADATA"))).decode()
        entry = z.read(next(n for n in names if n.endswith(".dist-info/entry_points.txt"))).decode()
    assert "corgifs = corgifs.cli:main" in entry
    for want in ("License: Apache-2.0", "Project-URL: Source", "Classifier: License :: OSI Approved"):
        assert want in meta, meta


def test_the_venv_command_is_the_binary_and_the_api_uses_the_c_decoder(venv, tmp_path):
    env = _clean_env(venv)
    p = subprocess.run(["corgifs", "--version"], capture_output=True, text=True, env=env, cwd=tmp_path)
    assert p.returncode == 0 and p.stdout.startswith("corgifs "), p.stdout + p.stderr
    assert subprocess.run(["which", "corgifs"], capture_output=True, text=True, env=env).stdout.startswith(str(venv))
    code = ("import corgifs, numpy; print(corgifs.__file__); print(corgifs.crc32c(b'123456789')); "
            "print(corgifs.HAVE_FAST_DECODE); print(corgifs.binary())")
    p = subprocess.run([str(venv / "bin" / "python"), "-c", code], capture_output=True, text=True, cwd=tmp_path,
                       env=env)
    assert p.returncode == 0, p.stderr
    where, crc, fast, binary = p.stdout.split()
    assert where.startswith(str(venv)) and int(crc) == 0xE3069283 and fast == "True"
    assert binary.startswith(str(venv)) and binary.endswith("corgifs/bin/corgifs")


def test_a_dataloader_epoch_through_corgifs_mount_in_the_venv(venv, source, torch, tmp_path):
    if not os.path.exists("/dev/fuse"):
        pytest.fail("/dev/fuse is missing") if CI else pytest.skip("/dev/fuse is missing")
    script = textwrap.dedent(f"""
        import collections, corgifs, torch
        with corgifs.mount({source!r}, parts=2, seed=4, block_size="16KiB",
                           cache_dir={str(tmp_path / "cache")!r}) as mnt:
            ds = corgifs.Dataset(mnt)
            ids = collections.Counter()
            for batch in corgifs.DataLoader(ds, batch_size=256, num_workers=2):
                ids.update(batch["id"].flatten().tolist())
        print(len(ids), max(ids.values()), min(ids), max(ids))
    """)
    p = subprocess.run([str(venv / "bin" / "python"), "-c", script], capture_output=True, text=True,
                       cwd=tmp_path, env={**_clean_env(venv), "OMP_NUM_THREADS": "1"}, timeout=600)
    assert p.returncode == 0, p.stdout + p.stderr
    assert p.stdout.split() == [str(RECORDS), "1", "0", str(RECORDS - 1)]
