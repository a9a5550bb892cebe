"""corgifs.Dataset: the parts of a corgifs mount as a PyTorch IterableDataset."""

import collections
import errno
import os

import torch
import torch.utils.data as tud

from .mount import config, part_path, reader_of
from .resume import NO_RESUME_STRATEGIES, resume_part_path, resume_token

__all__ = ["Dataset", "DataLoader", "PartOf", "RECORDS_XATTR"]

# The extended attribute of a part file holding its record count, padding
# included (fs/xattr.go).
RECORDS_XATTR = "user.corgifs.records"

PartOf = collections.namedtuple("PartOf", "epoch part parts")
PartOf.__doc__ = """Where a batch of corgifs.DataLoader(..., with_part=True) came from:
part `part` of `parts` of epoch `epoch` (what FeedbackWriter takes)."""


def _dist_rank_world():
    dist = torch.distributed
    if dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    return None


class Dataset(tud.IterableDataset):
    """Records of a corgifs mount, each DataLoader worker of each rank
    reading its own part of the epoch:

        K = world * W parts (W = the DataLoader's num_workers, 0 counts as 1);
        worker w of rank r reads part r*W + w.

    rank and world are torch.distributed's when it is initialised (create
    the Dataset after init_process_group), else 0 and 1. Call
    set_epoch(e) before iterating epoch e, as with DistributedSampler.
    Mount with --parts world*W (other K resolve too, they are just not
    listed) and, for DDP, --equal-parts so that every rank gets as many
    batches.

    format: the mount's (from .corgifs/config.json; TFRecord by default).
    verify: check TFRecord CRCs. verify=False skips them: the mount already
    verified every record's CRC when it loaded the record's block from the
    source, and never serves a block that failed.
    decode: True for the format's decoding (a TFRecord record becomes a
    dict of numpy arrays, see decode_example), False for raw records, or a
    function of the raw record.

    len(ds) is the records this rank reads in the epoch with the
    num_workers of the corgifs.DataLoader it was given to (1 before),
    padding included, from the exact part sizes the mount states (the
    user.corgifs.records attribute of each part file); len() of a
    corgifs.DataLoader is its steps per epoch.

    With world > 1 the mount must have been made with --equal-parts, else
    the ranks get different numbers of batches and the one with fewer
    leaves the others waiting at their last collective: ValueError, unless
    allow_unequal_parts=True (ranks that do not step in lock-step).

    state_dict()/load_state_dict() resume mid-epoch at the exact record:
    the state holds, for every part read so far, the byte offset of the next
    record and the count of records consumed. The Dataset knows what the
    training loop consumed when it is iterated in the training process
    (num_workers=0) or through corgifs.DataLoader (a torch DataLoader that
    tells the Dataset, with any num_workers).

    Resume with another world size or num_workers (elastic resume,
    docs/elastic.md): the records of the epoch not consumed are read from
    the mount's resume parts, exactly once across the new K' parts. The
    checkpoint must then hold the positions of every part: with world 1
    one rank's state_dict(); with world > 1 the list of every rank's
    state_dict() (torch.distributed.all_gather_object), given to
    load_state_dict() as a list.
    """

    def __init__(self, mount, epoch=0, rank=None, world=None, format=None, verify=True, decode=True,
                 allow_unequal_parts=False, **format_options):
        super().__init__()
        self.mount = os.fspath(mount)
        self.epoch = epoch
        self._rank_arg, self._world_arg = rank, world
        self.rank, self.world = rank, world
        self.reader = reader_of(self.mount, format=format, verify=verify, **format_options)
        self.decode = decode
        self.allow_unequal_parts = allow_unequal_parts
        try:
            self._equal_parts = config(self.mount).get("equal_parts")
        except (OSError, ValueError):
            self._equal_parts = None  # no config.json: nothing to check against
        self._workers = 1     # num_workers of the corgifs.DataLoader given this Dataset
        self._resume = None   # the state loaded, until its epoch is over
        self._consumed = {}   # part -> (next offset, records): consumed this epoch
        self._parts = None    # K of the epoch being read
        self._here = None     # (part, K, next offset, records) of the last record yielded
        self._chain = []      # resume tokens of the epoch being read (elastic resume)
        self._resolve()

    def _resolve(self):
        rw = _dist_rank_world() if self._rank_arg is None or self._world_arg is None else None
        self.rank = self._rank_arg if self._rank_arg is not None else (rw[0] if rw else 0)
        self.world = self._world_arg if self._world_arg is not None else (rw[1] if rw else 1)
        if not 0 <= self.rank < self.world:
            raise ValueError(f"rank {self.rank} of world {self.world}: out of range")
        if self.world > 1 and self._equal_parts is False and not self.allow_unequal_parts:
            raise ValueError(
                f"corgifs.Dataset: rank {self.rank} of a world of {self.world} reads {self.mount}, whose parts are "
                "not of equal length (its .corgifs/config.json says equal_parts: false): the ranks would get "
                "different numbers of batches, and the one with fewer would leave the others waiting at their "
                "last collective until the timeout. Mount with --equal-parts (corgifs.mount(..., "
                "equal_parts=True)), or pass allow_unequal_parts=True if the ranks do not step in lock-step")

    def set_epoch(self, epoch):
        """Reads epoch `epoch` on the next iteration. A state loaded for
        another epoch is dropped."""
        self.epoch = epoch
        self._resolve()
        if self._resume is not None and self._resume["epoch"] != epoch:
            self._resume = None
        if self._resume is None:
            self._chain = []

    def part(self, worker=0, workers=1):
        """The path of the part that `worker` of `workers` of this rank reads."""
        chain = self._chain_for(workers)
        if chain:
            if not (0 <= self.rank < self.world and 0 <= worker < workers):
                raise ValueError(f"rank {self.rank} of {self.world}, worker {worker} of {workers}: out of range")
            return resume_part_path(self.mount, self.epoch, chain, self.rank * workers + worker,
                                    self.world * workers, self.reader.ext)
        return part_path(self.mount, self.epoch, self.rank, self.world, worker, workers, self.reader.ext)

    def part_records(self, worker=0, workers=1):
        """The records (padding included) of the part that `worker` of
        `workers` of this rank reads in this epoch, as the mount states."""
        path = self.part(worker, workers)
        try:
            return int(os.getxattr(path, RECORDS_XATTR))
        except OSError as e:
            if e.errno not in (errno.ENODATA, errno.ENOTSUP):
                raise
            raise ValueError(
                f"{path}: the mount does not state its record count ({RECORDS_XATTR}: {os.strerror(e.errno)}): "
                "a corgifs daemon older than this package, or a probed index (--index probe, the default for "
                "s3:// sources) that has not counted every block yet; mount with --index full") from None

    def __len__(self):
        self._resolve()
        return sum(self.part_records(w, self._workers) for w in range(self._workers))

    def _start(self, workers):
        """Sets up the consumption record for an iteration of this epoch
        with `workers` workers per rank."""
        k = self.world * workers
        self._consumed = {}
        self._chain = []
        r = self._resume
        if r is not None and r["epoch"] == self.epoch:
            if r["parts"] not in (None, k):
                # From now on the state is the resume's, at K = k.
                r.update(parts=k, chain=self._chain_for(workers), positions={})
            self._chain = list(r["chain"])
            self._consumed = {int(i): tuple(p) for i, p in r["positions"].items()}
        self._parts = k

    def _chain_for(self, workers):
        """The resume tokens of the parts read with `workers` workers per
        rank: those of the epoch being read, or, for a state loaded with
        another K, the loaded ones and the token of that state (elastic
        resume: the records it had not consumed, read as the new parts)."""
        r = self._resume
        k = self.world * workers
        if r is None or r["epoch"] != self.epoch:
            return self._chain
        kk = r["parts"]
        if kk in (None, k):
            return list(r["chain"])
        if not r["complete"]:
            raise ValueError(
                f"the state was taken with {kk} parts (world {r['world']} x workers) and this iteration reads {k}: "
                "a resume at another K needs the positions of every part, and this state holds one rank's only. "
                "Gather every rank's ds.state_dict() (torch.distributed.all_gather_object) and pass the list to "
                "load_state_dict(), or resume with the same world size and num_workers")
        try:
            strategy = config(self.mount).get("strategy")
        except (OSError, ValueError):
            strategy = None
        if strategy in NO_RESUME_STRATEGIES:
            raise ValueError(f"{self.mount} serves strategy {strategy}, whose epochs cannot be resumed at another "
                             f"number of parts (docs/elastic.md): resume with the same world size and num_workers "
                             f"({kk} parts), or start the epoch {self.epoch} over")
        counts = [int(r["positions"].get(i, (0, 0))[1]) for i in range(kk)]
        return list(r["chain"]) + [resume_token(counts)]

    def _end(self):
        if self._resume is not None and self._resume["epoch"] == self.epoch:
            self._resume = None

    def __iter__(self):
        info = tud.get_worker_info()
        if info is None:
            self._resolve()
            worker, workers = 0, 1
            self._start(1)
        else:
            worker, workers = info.id, info.num_workers
            self._start(workers)
        i, k = self.rank * workers + worker, self.world * workers
        offset, count = self._consumed.get(i, (0, 0))
        path = self.part(worker, workers)
        decode = self.reader.decode if self.decode is True else self.decode
        with self.reader.open_ahead(path) as f:  # a mount's part: read ahead (readahead.py)
            recs = self.reader.records_for(f, offset, decode) if decode else self.reader.records(f, offset)
            for rec, nxt in recs:
                count += 1
                # Before the yield: once yielded, the record counts as consumed.
                self._here = (i, k, nxt, count)
                self._consumed[i] = (nxt, count)
                yield decode(rec) if decode else rec
        if info is None:
            self._end()

    def state_dict(self):
        """Where this rank is in the epoch: {"epoch", "rank", "world",
        "parts" (K), "positions": {part: [next offset, records consumed]},
        "resume": the resume tokens of the parts read (elastic resume;
        [] for the epoch's own parts)}."""
        return {
            "version": 2,
            "epoch": self.epoch,
            "rank": self.rank,
            "world": self.world,
            "parts": self._parts,
            "positions": {str(i): list(p) for i, p in sorted(self._consumed.items())},
            "resume": list(self._chain),
        }

    def load_state_dict(self, state):
        """Resumes at the record after the last one consumed when state was
        taken, on the next iteration of state's epoch. state is one
        state_dict(), or the list of every rank's (needed to resume a
        world > 1 at another world size or num_workers)."""
        states = list(state) if isinstance(state, (list, tuple)) else [state]
        if not states:
            raise ValueError("load_state_dict: no state")
        for s in states:
            if s.get("version") not in (1, 2):
                raise ValueError(f"unknown corgifs.Dataset state version {s.get('version')!r}")
        first = states[0]
        for s in states[1:]:
            for key in ("epoch", "world", "parts", "resume"):
                if s.get(key) != first.get(key):
                    raise ValueError(f"load_state_dict: the states differ in {key}: {first.get(key)!r} and "
                                     f"{s.get(key)!r}; pass the states of one checkpoint")
        positions = {}
        for s in states:
            positions.update({int(i): tuple(p) for i, p in s.get("positions", {}).items()})
        world = first.get("world") or 1
        ranks = {s.get("rank", 0) for s in states}
        self.epoch = first["epoch"]
        self._resume = {"epoch": first["epoch"], "parts": first.get("parts"), "world": world,
                        "complete": ranks >= set(range(world)), "chain": list(first.get("resume", [])),
                        "positions": positions}
        self._parts = first.get("parts")
        self._chain = list(self._resume["chain"])
        self._consumed = dict(positions)


_Tagged = collections.namedtuple("_Tagged", "where batch")


class _TaggingCollate:
    """Runs the user's collate in the worker and adds where the worker's
    part stands after the batch's last record."""

    def __init__(self, collate, dataset):
        self.collate, self.dataset = collate, dataset

    def __call__(self, samples):
        info = tud.get_worker_info()
        ds = info.dataset if info is not None else self.dataset
        return _Tagged(ds._here, self.collate(samples))


class DataLoader(tud.DataLoader):
    """torch.utils.data.DataLoader, with the same arguments, that tells a
    corgifs.Dataset which records the training loop has taken, so that its
    state_dict() is exact with any num_workers. Every batch comes from
    one worker: the worker adds its part's position to the batch, and the
    loader strips it before the training loop sees the batch.

    with_part=True yields (PartOf(epoch, part, parts), batch) instead of
    the batch: the part the batch's records came from, in the order the
    part served them, so that per-example feedback goes to that part's
    FeedbackWriter with any num_workers:

        for where, batch in corgifs.DataLoader(ds, batch_size=64, num_workers=4, with_part=True):
            writers[where.part].write(vectors_of(batch))

    len(loader) is the steps of the epoch: each worker batches its own
    part, so it is the sum over the parts of ceil(records / batch_size)
    (floor with drop_last)."""

    def __init__(self, dataset, *args, collate_fn=None, with_part=False, **kwargs):
        self._corgi = isinstance(dataset, Dataset)
        self.with_part = with_part
        if with_part and not self._corgi:
            raise ValueError("corgifs.DataLoader: with_part=True needs a corgifs.Dataset")
        if self._corgi:
            if kwargs.get("persistent_workers"):
                raise ValueError("corgifs.DataLoader: persistent_workers would keep the workers' epoch; "
                                 "leave it False so set_epoch reaches them")
            if collate_fn is None:
                batched = kwargs.get("batch_size", args[0] if args else 1) is not None
                collate_fn = tud.default_collate if batched else tud.default_convert
            collate_fn = _TaggingCollate(collate_fn, dataset)
        super().__init__(dataset, *args, collate_fn=collate_fn, **kwargs)
        if self._corgi:
            dataset._workers = max(1, self.num_workers)

    def __len__(self):
        if not self._corgi:
            return super().__len__()
        ds = self.dataset
        ds._resolve()
        workers = max(1, self.num_workers)
        counts = [ds.part_records(w, workers) for w in range(workers)]
        # What torch.utils.data.DataLoader.__len__ records, in samples.
        self._IterableDataset_len_called = sum(counts)
        if self.batch_size is None:
            return sum(counts)
        if self.drop_last:
            return sum(n // self.batch_size for n in counts)
        return sum(-(-n // self.batch_size) for n in counts)

    def __iter__(self):
        if not self._corgi:
            yield from super().__iter__()
            return
        ds = self.dataset
        ds._resolve()
        ds._start(max(1, self.num_workers))
        epoch = ds.epoch
        for where, batch in super().__iter__():
            if where is not None:
                i, k, nxt, count = where
                ds._consumed[int(i)] = (int(nxt), int(count))
            if self.with_part:
                yield PartOf(epoch, int(where[0]), int(where[1])), batch
            else:
                yield batch
        ds._end()
