"""Many workers (issue 26 item 4): a batch of a 4-worker corgifs.DataLoader
says which part it came from, so that FeedbackWriter works with workers;
len() is the exact records and steps of an epoch; a DDP world refuses a
mount whose parts are not of equal length."""

import collections
import os
import re
import subprocess

import numpy as np
import pytest

import corgifs
from conftest import FLAGS, RECORDS


def quiet(_):
    import torch
    torch.set_num_threads(1)


def _parts(mnt, epoch, k):
    """{part: [ids]} read straight from the part files."""
    out = {}
    for i in range(k):
        with open(os.path.join(mnt, corgifs.part_name(epoch, i, k)), "rb") as f:
            out[i] = [int(corgifs.decode_example(p)["id"][0]) for p, _ in corgifs.read_tfrecords(f)]
    return out


def test_each_batch_of_4_workers_names_its_part_and_len_is_exact(torch, mount):
    ds = corgifs.Dataset(mount.dir)
    loader = corgifs.DataLoader(ds, batch_size=50, num_workers=4, worker_init_fn=quiet, with_part=True)
    for epoch in (0, 1):
        ds.set_epoch(epoch)
        want = _parts(mount.dir, epoch, 4)
        assert len(set(map(len, want.values()))) > 1, "the parts of a mount without --equal-parts differ in length"
        assert len(ds) == RECORDS
        assert [ds.part_records(w, 4) for w in range(4)] == [len(want[i]) for i in range(4)]
        assert len(loader) == sum(-(-len(v) // 50) for v in want.values())
        got, steps = collections.defaultdict(list), 0
        for where, batch in loader:
            assert isinstance(where, corgifs.dataset.PartOf) and (where.epoch, where.parts) == (epoch, 4)
            got[where.part] += batch["id"].reshape(-1).tolist()
            steps += 1
        assert dict(got) == want, "every batch's records come from the part it names, in the part's order"
        assert steps == len(loader)
    # The default batch type is unchanged.
    plain = next(iter(corgifs.DataLoader(ds, batch_size=8, num_workers=0)))
    assert isinstance(plain, dict) and plain["id"].shape == (8, 1)


def test_len_of_an_equal_parts_mount_and_drop_last(torch, equal_mount):
    ds = corgifs.Dataset(equal_mount.dir, epoch=2)
    loader = corgifs.DataLoader(ds, batch_size=64, num_workers=4, worker_init_fn=quiet, drop_last=True)
    want = _parts(equal_mount.dir, 2, 4)
    n = len(want[0])
    assert all(len(v) == n for v in want.values()) and 4 * n >= RECORDS
    assert len(ds) == 4 * n and len(loader) == 4 * (n // 64)
    assert sum(1 for _ in loader) == len(loader)
    # Rank 1 of 2 with 2 workers reads parts 2 and 3 of K = 4.
    r1 = corgifs.Dataset(equal_mount.dir, epoch=2, rank=1, world=2)
    l1 = corgifs.DataLoader(r1, batch_size=64, num_workers=2, worker_init_fn=quiet)
    assert len(r1) == 2 * n and len(l1) == 2 * -(-n // 64)


def test_a_ddp_world_refuses_a_mount_of_unequal_parts(torch, mount, equal_mount):
    with pytest.raises(ValueError, match=r"rank 1 of a world of 2 reads .* not of equal length.*--equal-parts"):
        corgifs.Dataset(mount.dir, rank=1, world=2)
    corgifs.Dataset(mount.dir, rank=1, world=2, allow_unequal_parts=True)
    corgifs.Dataset(equal_mount.dir, rank=1, world=2)
    corgifs.Dataset(mount.dir, rank=0, world=1)


@pytest.fixture(scope="module")
def grab_mount(mounter, source, corgifs_bin):
    helptext = subprocess.run([corgifs_bin, "mount", "-h"], capture_output=True, text=True).stderr
    if not re.search(r"^\s+grab\s", helptext, re.M):
        pytest.skip("this corgifs has no --strategy grab")
    return mounter(source, *FLAGS, "--parts", "4", "--feedback-dim", "8", "--strategy", "grab",
                   "--feedback-timeout", "60s")


def test_feedback_from_4_workers_is_accepted_for_every_part(torch, grab_mount):
    """The trainer's loop: each batch's vectors go to the FeedbackWriter of
    the part the batch names; the mount accepts all 4 files and serves
    epoch 1."""
    mnt = grab_mount.dir
    ds = corgifs.Dataset(mnt)
    loader = corgifs.DataLoader(ds, batch_size=32, num_workers=4, worker_init_fn=quiet, with_part=True)
    counts = [ds.part_records(w, 4) for w in range(4)]
    writers = {}
    for where, batch in loader:
        if where.part not in writers:
            writers[where.part] = corgifs.FeedbackWriter(mnt, where.epoch, where.part, where.parts, dim=8,
                                                         records=counts[where.part])
        writers[where.part].write(batch["features"].numpy().astype(np.float32))
    for w in writers.values():
        w.close()
    assert sorted(writers) == [0, 1, 2, 3]
    st = corgifs.feedback_status(mnt)
    assert not st.get("refusals"), st
    assert sorted((p["part"], p["state"]) for p in st["parts"] if p["epoch"] == 0) == [
        (i, "accepted") for i in range(4)], st
    ds.set_epoch(1)
    assert sorted(i for batch in corgifs.DataLoader(ds, batch_size=500, num_workers=4, worker_init_fn=quiet)
                  for i in batch["id"].reshape(-1).tolist()) == list(range(RECORDS))
    assert corgifs.feedback_status(mnt)["fallbacks"] == 0, "epoch 1 was ordered by the feedback"
