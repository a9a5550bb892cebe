"""corgifs.mount(): a corgifs daemon for the length of a with block.

    with corgifs.mount("/data/train", parts=4, block_size="1MiB", equal_parts=True) as mnt:
        ds = corgifs.Dataset(mnt)
        ...

The daemon is the `corgifs` binary: $CORGIFS_BIN, else the one the wheel
carries (corgifs/bin/corgifs), else the first on PATH. It runs as a child
process in its own session (so that Ctrl-C reaches Python, which then stops
it, rather than the daemon first, under a DataLoader still reading), with
its log in a temporary file that error messages quote.
"""

import contextlib
import os
import shutil
import signal
import subprocess
import tempfile
import time

__all__ = ["mount", "binary", "MountError", "flag_args"]

_PACKAGED = os.path.join(os.path.dirname(os.path.abspath(__file__)), "bin", "corgifs")


class MountError(RuntimeError):
    """A corgifs daemon that did not start serving, or that stopped while
    the mount was in use; str() holds the daemon's log."""


def binary():
    """The path of the corgifs binary: $CORGIFS_BIN, the one this package
    carries, or the first `corgifs` on PATH. FileNotFoundError says where
    it looked."""
    env = os.environ.get("CORGIFS_BIN")
    if env:
        if not os.access(env, os.X_OK):
            raise FileNotFoundError(f"$CORGIFS_BIN={env}: not an executable file")
        return env
    if os.access(_PACKAGED, os.X_OK):
        return _PACKAGED
    found = shutil.which("corgifs")
    if found:
        return found
    raise FileNotFoundError(
        f"no corgifs binary: $CORGIFS_BIN is unset, this package carries none ({_PACKAGED}: install the "
        "corgifs wheel, which does) and there is no corgifs on PATH; build one with "
        "`go build -o ~/bin/corgifs ./cmd/corgifs` in the corgifs repository and put it on PATH, "
        "or set CORGIFS_BIN")


def flag_args(options):
    """Command-line flags of keyword options: block_size="1MiB" gives
    --block-size 1MiB, True a bare --flag, False --flag=false, a list or
    tuple the flag once per element; None leaves the flag out."""
    args = []
    for k, v in options.items():
        name = "--" + k.replace("_", "-")
        if v is None:
            continue
        if v is True:
            args.append(name)
        elif v is False:
            args.append(name + "=false")
        elif isinstance(v, (list, tuple)):
            for x in v:
                args += [name, os.fspath(x) if isinstance(x, os.PathLike) else str(x)]
        else:
            args += [name, os.fspath(v) if isinstance(v, os.PathLike) else str(v)]
    return args


def _log(path, head=2000, tail=6000):
    """The daemon's log; of a long one its start (where a flag error is)
    and its end (where the last error is)."""
    try:
        with open(path, errors="replace") as f:
            text = f.read().strip()
    except OSError as e:
        return f"(no log: {e})"
    if len(text) <= head + tail:
        return text
    return text[:head] + "\n...\n" + text[-tail:]


@contextlib.contextmanager
def mount(src, mnt=None, *, timeout=120, binary_path=None, **options):
    """Starts `corgifs mount SRC MNT --flags...` (options as flag_args
    maps them), waits until MNT serves (its .corgifs/config.json appears),
    yields MNT, and at the end of the block stops the daemon (SIGTERM, which
    unmounts) also when the block raised. mnt=None mounts at a new temporary
    directory, removed afterwards. timeout bounds the wait for the mount to
    serve (indexing a large source takes a while the first time).

    Raises FileNotFoundError when there is no corgifs binary (see binary())
    and MountError, with the daemon's log, when the mount fails or does not
    serve within timeout, or when the daemon stopped while the block ran."""
    exe = binary_path or binary()
    made = None
    if mnt is None:
        mnt = made = tempfile.mkdtemp(prefix="corgifs-mnt-")
    mnt = os.fspath(mnt)
    logf = tempfile.NamedTemporaryFile(prefix="corgifs-log-", suffix=".txt", delete=False)
    args = [exe, "mount", *flag_args(options), "--", os.fspath(src), mnt]
    try:
        proc = subprocess.Popen(args, stdin=subprocess.DEVNULL, stdout=logf, stderr=subprocess.STDOUT,
                                start_new_session=True)
    except OSError as e:
        logf.close()
        os.unlink(logf.name)
        if made:
            os.rmdir(made)
        raise MountError(f"cannot run {exe}: {e}") from e
    logf.close()
    cmd = " ".join(args)
    try:
        ready = os.path.join(mnt, ".corgifs", "config.json")
        deadline = time.monotonic() + timeout
        while not os.path.exists(ready):
            if proc.poll() is not None:
                raise MountError(f"{cmd} exited with status {proc.returncode} before serving:\n{_log(logf.name)}")
            if time.monotonic() > deadline:
                raise MountError(f"{cmd} did not serve within {timeout} s (pass timeout= for a source that "
                                 f"takes longer to index); its log:\n{_log(logf.name)}")
            time.sleep(0.02)
        body_failed = False
        try:
            yield mnt
        except BaseException:
            body_failed = True
            raise
        finally:
            died = proc.poll()
            _stop(proc, exe, mnt)
            if died is not None and not body_failed:
                raise MountError(f"{cmd} stopped with status {died} while the mount was in use:\n{_log(logf.name)}")
    finally:
        if proc.poll() is None:  # the wait failed: stop the daemon that never served
            _stop(proc, exe, mnt)
        os.unlink(logf.name)
        if made:
            try:
                os.rmdir(made)
            except OSError:
                pass


def _stop(proc, exe, mnt, wait=20):
    """Ends the daemon: SIGTERM (it unmounts), SIGKILL after `wait` s, and
    `corgifs unmount` for a mount a killed daemon left behind."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(wait)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    if os.path.ismount(mnt):
        subprocess.run([exe, "unmount", mnt], capture_output=True)
