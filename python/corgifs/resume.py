"""Elastic resume: the names of the parts that serve the rest of an epoch
after a checkpoint taken with K parts, at any K' (docs/elastic.md).

A checkpoint of epoch e says how many records of each of its K parts were
consumed; the mount serves the records not consumed as
epoch-EEEE/resume-TOKEN/part-JJJJJ-of-KKKKK.ext for any K', exactly once
across the K' parts. TOKEN is computed here exactly as the daemon decodes
it (shuffler/resume.go): lower-case base32, without padding, of
uvarint(1) uvarint(K) uvarint(c_0) ... uvarint(c_{K-1}) and the CRC-32 of
those bytes (little-endian).
"""

import base64
import os
import struct
import zlib

__all__ = ["resume_token", "resume_dir", "resume_part_path", "NO_RESUME_STRATEGIES"]

# Strategies whose epochs cannot be resumed at another K: mrs serves a
# record in this epoch or the next; the feedback strategies order the next
# epoch from this one's feedback, part by part.
NO_RESUME_STRATEGIES = ("mrs", "grab", "cdgrab", "corgipile-balance")

_VERSION = 1
_CHUNK = 200  # shuffler.MaxTokenChunk: the longest piece of a token in one name


def _uvarint(n):
    out = bytearray()
    while True:
        b = n & 0x7F
        n >>= 7
        if n:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def resume_token(consumed):
    """The token of a checkpoint: consumed[i] records of part i of
    K = len(consumed) were consumed."""
    if not consumed:
        raise ValueError("a checkpoint of no parts")
    body = _uvarint(_VERSION) + _uvarint(len(consumed)) + b"".join(_uvarint(int(c)) for c in consumed)
    raw = body + struct.pack("<I", zlib.crc32(body) & 0xFFFFFFFF)
    return base64.b32encode(raw).decode("ascii").rstrip("=").lower()


def resume_dir(chain):
    """The path, relative to an epoch directory, of the resume named by the
    chain of tokens (a resume of a resume after the first). A token longer
    than 200 characters continues in subdirectories named by its next
    pieces."""
    parts = []
    for tok in chain:
        pieces = [tok[i:i + _CHUNK] for i in range(0, len(tok), _CHUNK)] or [""]
        parts.append("resume-" + pieces[0])
        parts.extend(pieces[1:])
    return os.path.join(*parts)


def resume_part_path(mount, epoch, chain, part, parts, ext=".tfrecord"):
    """The path of part `part` of `parts` of the resume of `epoch` named by
    chain, under the mount."""
    if not 0 <= part < parts:
        raise ValueError(f"part {part} of {parts}: out of range")
    return os.path.join(os.fspath(mount), f"epoch-{epoch:04d}", resume_dir(chain), f"part-{part:05d}-of-{parts:05d}{ext}")
