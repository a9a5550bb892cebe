"""corgifs: read the parts of a corgifs mount from Python.

    import corgifs, torch
    ds = corgifs.Dataset("/mnt/corgi")            # rank/world from torch.distributed
    loader = corgifs.DataLoader(ds, batch_size=64, num_workers=4)
    for epoch in range(10):
        ds.set_epoch(epoch)
        for batch in loader: ...

corgifs.mount() starts a daemon (the binary the wheel carries) for the
length of a with block:

    with corgifs.mount("/data/train", parts=4, equal_parts=True) as mnt:
        ds = corgifs.Dataset(mnt)

Trainers of feedback strategies write per-example vectors back with
FeedbackWriter (and, optionally, a seeded Projection to sketch them).

The readers (read_records, read_tfrecords, decode_example, reader) need
only numpy; Dataset and DataLoader import torch when first used.
"""

from .crc import HAVE_FAST_CRC, crc32c, masked_crc32c
from .feedback import FeedbackRefused, FeedbackWriter, Projection, feedback_path, feedback_status
from .formats import EXTENSIONS, FORMATS, Reader, read_records, reader
from .mount import config, order, part_name, part_path, reader_of
from .resume import resume_dir, resume_part_path, resume_token
# After .mount: the name corgifs.mount is the function, not the module
# (whose functions are all re-exported here).
from .daemon import MountError, binary, flag_args, mount
from .tfrecord import HAVE_FAST_DECODE, CorruptRecord, decode_example, frame, parse_example, read_tfrecords

try:  # the installed distribution's, which setup.py takes from version.go
    from importlib.metadata import PackageNotFoundError, version as _dist_version
    __version__ = _dist_version("corgifs")
except PackageNotFoundError:  # run from the source tree
    __version__ = "0.1.0"

__all__ = [
    "mount", "MountError", "binary", "flag_args",
    "Dataset", "DataLoader", "config", "order", "part_name", "part_path", "reader", "reader_of",
    "read_records", "read_tfrecords", "decode_example", "parse_example", "frame", "CorruptRecord",
    "crc32c", "masked_crc32c", "HAVE_FAST_CRC", "HAVE_FAST_DECODE", "FORMATS", "EXTENSIONS", "Reader",
    "FeedbackWriter", "FeedbackRefused", "Projection", "feedback_path", "feedback_status",
    "resume_token", "resume_dir", "resume_part_path",
]


def __getattr__(name):
    # torch is optional: only the Dataset needs it.
    if name in ("Dataset", "DataLoader"):
        from . import dataset
        return getattr(dataset, name)
    raise AttributeError(f"module 'corgifs' has no attribute {name!r}")
