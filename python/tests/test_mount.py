"""corgifs.mount(): the daemon serves for the with block and is gone after
it, also when the block raises; failures say why with the daemon's log."""

import os
import subprocess

import pytest

import corgifs
from corgifs import daemon

from conftest import RECORDS


@pytest.fixture
def env_bin(corgifs_bin, monkeypatch):
    monkeypatch.setenv("CORGIFS_BIN", corgifs_bin)
    return corgifs_bin


def _daemons(mnt):
    """Processes whose command line holds mnt (the daemon of that mount)."""
    p = subprocess.run(["pgrep", "-f", "--", mnt], capture_output=True, text=True)
    return p.stdout.split()


def test_options_become_flags():
    assert corgifs.flag_args({"block_size": "1MiB", "equal_parts": True, "header": False, "include": ["*.a", "*.b"],
                              "seed": None, "parts": 4}) == [
        "--block-size", "1MiB", "--equal-parts", "--header=false", "--include", "*.a", "--include", "*.b",
        "--parts", "4"]


def test_mount_serves_in_the_block_and_is_gone_after_it(env_bin, source, tmp_path):
    with corgifs.mount(source, parts=4, block_size="16KiB", equal_parts=True, seed=1,
                       cache_dir=str(tmp_path / "cache")) as mnt:
        assert os.path.ismount(mnt) and os.path.basename(mnt).startswith("corgifs-mnt-")
        cfg = corgifs.config(mnt)
        assert (cfg["parts"], cfg["block_size"], cfg["equal_parts"], cfg["seed"]) == (4, 16384, True, 1)
        ids = []
        for i in range(4):
            for ex in corgifs.read_records(os.path.join(mnt, corgifs.part_name(0, i, 4))):
                ids.append(int(ex["id"][0]))
        assert set(ids) == set(range(RECORDS))
        assert _daemons(mnt)
    assert not os.path.exists(mnt), "the temporary mount point is removed"
    assert not _daemons(mnt)


def test_mount_stops_the_daemon_when_the_block_raises(env_bin, source, tmp_path):
    target = tmp_path / "mnt"
    target.mkdir()
    with pytest.raises(KeyError, match="from the block"):
        with corgifs.mount(source, target, parts=2, cache_dir=str(tmp_path / "cache")) as mnt:
            assert mnt == str(target) and os.path.ismount(mnt)
            f = open(os.path.join(mnt, corgifs.part_name(0, 0, 2)), "rb")  # an open file does not keep it
            f.read(10)
            raise KeyError("from the block")
    try:
        f.close()  # the daemon is gone: closing may say so
    except OSError:
        pass
    assert not os.path.ismount(target) and target.is_dir(), "a given mount point is kept, unmounted"
    assert not _daemons(str(target))


def test_a_failing_mount_raises_with_the_daemons_message(env_bin, tmp_path):
    with pytest.raises(corgifs.MountError) as e:
        with corgifs.mount(tmp_path / "missing", parts=2, cache_dir=str(tmp_path / "cache")):
            pytest.fail("the block ran")
    msg = str(e.value)
    assert "exited with status" in msg and "missing" in msg and "no such file or directory" in msg, msg
    with pytest.raises(corgifs.MountError, match="flag provided but not defined|not defined"):
        with corgifs.mount(tmp_path, no_such_flag=3):
            pass


def test_a_missing_binary_says_where_it_looked(monkeypatch, tmp_path):
    monkeypatch.delenv("CORGIFS_BIN", raising=False)
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.setattr(daemon, "_PACKAGED", str(tmp_path / "bin" / "corgifs"))
    with pytest.raises(FileNotFoundError, match="CORGIFS_BIN is unset.*no corgifs on PATH.*go build"):
        with corgifs.mount(tmp_path, parts=2):
            pass
    monkeypatch.setenv("CORGIFS_BIN", str(tmp_path / "nope"))
    with pytest.raises(FileNotFoundError, match="not an executable"):
        corgifs.binary()
