"""Write per-example feedback (gradients, or a sketch of them) through a
corgifs mount, for the strategies that order the next epoch from it
(--strategy grab, cdgrab, corgipile-balance).

    import corgifs
    with corgifs.FeedbackWriter("/mnt/corgi", epoch, part, parts, dim=64) as fb:
        for batch in part_batches:
            grads = per_example_gradients(batch)     # [batch, in_dim]
            fb.write(proj(grads))                     # [batch, 64], in served order

The file MNT/.corgifs/feedback/epoch-EEEE/part-IIIII-of-KKKKK.f32 holds a
16-byte header (b"CGFB", then little-endian uint32 version 1, dimension d,
0) and one little-endian float32 vector of d per record of the part, in
the order the part served them. The mount checks it when it is closed: a
refused file makes close() raise FeedbackRefused with the mount's reason
(from .corgifs/feedback/status.json).
"""

import errno
import json
import os
import struct

import numpy as np

__all__ = ["FeedbackWriter", "FeedbackRefused", "Projection", "feedback_path", "feedback_status", "MAGIC", "VERSION"]

MAGIC = b"CGFB"
VERSION = 1
HEADER = struct.Struct("<4sIII")


class FeedbackRefused(OSError):
    """The mount refused a feedback file; str() says why."""


def feedback_path(mount, epoch, part, parts):
    """MNT/.corgifs/feedback/epoch-EEEE/part-IIIII-of-KKKKK.f32"""
    if not 0 <= part < parts:
        raise ValueError(f"part {part} of {parts}: out of range")
    if epoch < 0:
        raise ValueError(f"epoch {epoch}: must be >= 0")
    return os.path.join(os.fspath(mount), ".corgifs", "feedback", f"epoch-{epoch:04d}",
                        f"part-{part:05d}-of-{parts:05d}.f32")


def feedback_status(mount):
    """The mount's .corgifs/feedback/status.json as a dict."""
    with open(os.path.join(os.fspath(mount), ".corgifs", "feedback", "status.json")) as f:
        return json.load(f)


class FeedbackWriter:
    """Writes the feedback of part `part` of `parts` of `epoch`: write()
    takes vectors of `dim` values (an array [n, dim], any n, several calls),
    in the order the part served its records. close() (or leaving the with
    block without an exception) checks the count when `records` is given,
    and raises FeedbackRefused when the mount refuses the file. Leaving the
    block with an exception abandons the file: the mount refuses the
    incomplete upload and the part may be written again."""

    def __init__(self, mount, epoch, part, parts, dim, records=None):
        if int(dim) < 1:
            raise ValueError(f"dim {dim}: must be >= 1")
        self.mount, self.epoch, self.part, self.parts = os.fspath(mount), epoch, part, parts
        self.dim, self.records, self.count = int(dim), records, 0
        self.path = feedback_path(mount, epoch, part, parts)
        try:
            # Unbuffered: every write goes to the mount as it is made.
            self._f = open(self.path, "wb", buffering=0)
        except OSError as e:
            raise self._refused(e) from None
        self._write(HEADER.pack(MAGIC, VERSION, self.dim, 0))

    def write(self, vectors):
        """Appends vectors (array-like [n, dim], or [dim] for one record)."""
        v = np.asarray(vectors, dtype="<f4")
        if v.ndim == 1:
            v = v.reshape(1, -1)
        if v.ndim != 2 or v.shape[1] != self.dim:
            raise ValueError(f"vectors of shape {v.shape}: want [n, {self.dim}]")
        if not np.isfinite(v).all():
            raise ValueError("vectors hold NaN or infinity; the mount refuses them")
        self._write(np.ascontiguousarray(v).tobytes())
        self.count += v.shape[0]

    def _write(self, b):
        mv = memoryview(b)
        while len(mv):
            try:
                n = self._f.write(mv)
            except OSError as e:
                raise self._refused(e) from None
            mv = mv[n:]

    def close(self):
        """Checks the count (when records was given) and closes the file;
        the mount then accepts or refuses it."""
        if self._f is None:
            return
        f, self._f = self._f, None
        if self.records is not None and self.count != self.records:
            # A short file: the mount refuses it at close, which is what we
            # want (the part may be written again); say why here first.
            try:
                f.close()
            except OSError:
                pass
            raise ValueError(f"{self.count} vectors written for the {self.records} records of "
                             f"epoch {self.epoch} part {self.part} of {self.parts}; the mount refused the file")
        try:
            f.close()
        except OSError as e:
            raise self._refused(e) from None

    def abort(self):
        """Closes the file without checking (the mount refuses it)."""
        if self._f is not None:
            f, self._f = self._f, None
            try:
                f.close()
            except OSError:
                pass

    def __enter__(self):
        return self

    def __exit__(self, exc_type, exc, tb):
        if exc_type is None:
            self.close()
        else:
            self.abort()
        return False

    def _refused(self, e):
        """FeedbackRefused with the mount's reason for e, if it gave one."""
        reason = None
        try:
            st = feedback_status(self.mount)
            for r in reversed(st.get("refusals") or []):
                if r.get("epoch") == self.epoch and r.get("part") in (self.part, -1) and r.get("parts") in (self.parts, -1):
                    reason = r.get("reason")
                    break
        except (OSError, ValueError):
            pass
        msg = f"{self.path}: {os.strerror(e.errno) if e.errno else e}"
        if reason:
            msg += f": {reason}"
        return FeedbackRefused(e.errno or errno.EIO, msg)


class Projection:
    """A seeded Gaussian random projection from in_dim to out_dim (a
    Johnson-Lindenstrauss sketch): the same seed gives the same matrix on
    every machine (numpy's PCG64), entries N(0, 1/out_dim), so that inner
    products are preserved in expectation. Call it on [n, in_dim] arrays."""

    def __init__(self, in_dim, out_dim, seed=0):
        if in_dim < 1 or out_dim < 1:
            raise ValueError("in_dim and out_dim must be >= 1")
        self.in_dim, self.out_dim, self.seed = int(in_dim), int(out_dim), int(seed)
        rng = np.random.Generator(np.random.PCG64(self.seed))
        self.matrix = (rng.standard_normal((self.in_dim, self.out_dim)) / np.sqrt(self.out_dim)).astype(np.float32)

    def __call__(self, x):
        x = np.asarray(x, dtype=np.float32)
        if x.shape[-1] != self.in_dim:
            raise ValueError(f"input of shape {x.shape}: want [..., {self.in_dim}]")
        return x @ self.matrix
