"""The `corgifs` command of the wheel: runs the Go binary it carries."""

import os
import sys

from .daemon import _PACKAGED


def main():
    # Only $CORGIFS_BIN or the packaged binary, never PATH: the first
    # corgifs on PATH may be this very script.
    exe = os.environ.get("CORGIFS_BIN") or _PACKAGED
    if not os.access(exe, os.X_OK):
        sys.exit(f"corgifs: {exe} is missing or not executable: this corgifs Python package was installed "
                 "without its binary (install the corgifs wheel, or build it with "
                 "`go build ./cmd/corgifs` and set CORGIFS_BIN to its path)")
    os.execv(exe, [exe, *sys.argv[1:]])


if __name__ == "__main__":
    main()
