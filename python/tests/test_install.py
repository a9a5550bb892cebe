"""The install line of the README works offline: a venv that sees Debian's
numpy and torch, and pip building the package with the system's setuptools."""

import os
import shutil
import subprocess
import sys

import pytest

from conftest import CI

PKG = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_pip_install_into_a_venv_offline(tmp_path):
    try:
        import ensurepip  # noqa: F401
        import setuptools  # noqa: F401
        import wheel  # noqa: F401
    except ImportError as e:
        msg = f"{e} (Debian: apt-get install python3-venv python3-setuptools python3-wheel)"
        if CI:
            pytest.fail(msg)
        pytest.skip(msg)
    src = tmp_path / "python"  # a copy: pip's build directory stays out of the repository
    shutil.copytree(PKG, src, ignore=shutil.ignore_patterns("build", "*.egg-info", "__pycache__", "tests"))
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--system-site-packages", str(venv)], check=True)
    p = subprocess.run([str(venv / "bin" / "pip"), "install", "--no-build-isolation", "--no-index", str(src)],
                       capture_output=True, text=True)
    assert p.returncode == 0, p.stdout + p.stderr
    code = "import corgifs, numpy; print(corgifs.__file__); print(corgifs.crc32c(b'123456789'))"
    p = subprocess.run([str(venv / "bin" / "python"), "-c", code], capture_output=True, text=True, cwd=tmp_path)
    assert p.returncode == 0, p.stderr
    where, crc = p.stdout.split()
    assert where.startswith(str(venv)) and int(crc) == 0xE3069283
