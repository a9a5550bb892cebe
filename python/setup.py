"""The parts of the build pyproject.toml cannot state:

- the version: the Go program's release, from the repository's version.go;
- the corgifs binary, put into the package as corgifs/bin/corgifs (so the
  wheel is a platform wheel): $CORGIFS_BIN when set, else built with
  `go build` from the repository this directory is in;
- the C decoder of tf.train.Example (optional: without a compiler or
  numpy's headers the package installs with its pure-Python decoder).

    pip wheel --no-build-isolation --no-deps ./python
"""

import os
import re
import shutil
import subprocess

from setuptools import Distribution, Extension, setup
from setuptools.command.build_py import build_py

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
DEFAULT_VERSION = "0.1.0"  # when built outside the repository


def version():
    """The release in version.go (the repository root's, or cmd/corgifs')."""
    for path in ("version.go", "cmd/corgifs/version.go"):
        try:
            with open(os.path.join(REPO, path)) as f:
                m = re.search(r'\bVersion\s*=\s*"v?([^"]+)"', f.read())
        except OSError:
            continue
        if m:
            return m.group(1)
    return DEFAULT_VERSION


def _go():
    return shutil.which("go") or ("/usr/local/go/bin/go" if os.access("/usr/local/go/bin/go", os.X_OK) else None)


class BuildWithBinary(build_py):
    """build_py that also puts the corgifs binary into the package."""

    def run(self):
        super().run()
        out = os.path.abspath(os.path.join(self.build_lib, "corgifs", "bin", "corgifs"))
        os.makedirs(os.path.dirname(out), exist_ok=True)
        given = os.environ.get("CORGIFS_BIN")
        if given:
            if not os.access(given, os.X_OK):
                raise SystemExit(f"CORGIFS_BIN={given}: not an executable file")
            shutil.copyfile(given, out)
        else:
            go = _go()
            if not os.path.exists(os.path.join(REPO, "go.mod")) or not go:
                raise SystemExit(
                    f"cannot put the corgifs binary into the package: {REPO} is not the corgifs repository "
                    f"or there is no go command ({go}); build it (go build ./cmd/corgifs in the repository) "
                    "and set CORGIFS_BIN to its path")
            ldflags = "-s -w"
            rev = subprocess.run(["git", "rev-parse", "HEAD"], cwd=REPO, capture_output=True, text=True)
            if rev.returncode == 0:  # stamped where version.go has the variable; ignored otherwise
                ldflags += " -X main.commit=" + rev.stdout.strip()
            env = {**os.environ, "CGO_ENABLED": "0"}
            subprocess.run([go, "build", "-trimpath", "-buildvcs=false", "-ldflags", ldflags, "-o", out,
                            "./cmd/corgifs"], cwd=REPO, env=env, check=True)
        os.chmod(out, 0o755)


def _extensions():
    try:
        import numpy
    except ImportError:
        return []
    return [Extension("corgifs._example", ["corgifs/_example.c"], include_dirs=[numpy.get_include()],
                      extra_compile_args=["-O2"], optional=True)]


class BinaryDistribution(Distribution):
    """A platform wheel even when the C decoder could not be built: the
    binary is one."""

    def has_ext_modules(self):
        return True


setup(version=version(), ext_modules=_extensions(), cmdclass={"build_py": BuildWithBinary},
      distclass=BinaryDistribution)
