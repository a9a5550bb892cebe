"""corgifs.Dataset through real mounts: DataLoader workers, DDP with gloo,
resuming mid-epoch."""

import collections
import json
import os
import socket
import subprocess
import sys

import pytest

import corgifs
from conftest import RECORDS

HERE = os.path.dirname(os.path.abspath(__file__))


def quiet(_):
    import torch
    torch.set_num_threads(1)


def ids_of(batch):
    return batch["id"].reshape(-1).tolist()


@pytest.mark.parametrize("workers", [0, 2, 4])
def test_dataloader_workers_see_every_record_exactly_once_per_epoch(torch, mount, workers):
    ds = corgifs.Dataset(mount.dir)
    loader = torch.utils.data.DataLoader(ds, batch_size=64, num_workers=workers, worker_init_fn=quiet)
    orders = []
    for epoch in (0, 1):
        ds.set_epoch(epoch)
        seen = []
        for batch in loader:
            assert batch["features"].shape[1:] == (8,) and batch["features"].dtype == torch.float32
            seen += ids_of(batch)
        assert sorted(seen) == list(range(RECORDS)), f"epoch {epoch}: a record was missed or repeated"
        orders.append(seen)
    assert orders[0] != orders[1], "two epochs came in the same order"


def test_a_worker_reads_its_part_of_the_mount(torch, mount):
    # Every batch holds consecutive records of one part: the part rule.
    ds = corgifs.Dataset(mount.dir, epoch=3)
    parts = {}
    for i in range(4):
        with open(os.path.join(mount.dir, corgifs.part_name(3, i, 4)), "rb") as f:
            parts[i] = [int(corgifs.decode_example(p)["id"][0]) for p, _ in corgifs.read_tfrecords(f)]
    per_worker = {i: [] for i in range(4)}
    where = {rid: i for i, ids in parts.items() for rid in ids}
    for batch in torch.utils.data.DataLoader(ds, batch_size=50, num_workers=4, worker_init_fn=quiet):
        ids = ids_of(batch)
        part = {where[r] for r in ids}
        assert len(part) == 1
        per_worker[part.pop()] += ids
    assert per_worker == parts


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_ddp_with_gloo_sees_every_record_once_per_epoch_with_equal_batches(torch, equal_mount, tmp_path):
    """Two real processes, torch.distributed over gloo, a DDP model stepped
    on every batch (a rank with one batch more would hang the other), two
    DataLoader workers each: K = 4 parts of an --equal-parts mount."""
    env = dict(os.environ, MASTER_ADDR="127.0.0.1", MASTER_PORT=str(_free_port()), WORLD_SIZE="2",
               PYTHONPATH=os.path.dirname(HERE), OMP_NUM_THREADS="1")
    procs = []
    for rank in range(2):
        out = tmp_path / f"rank{rank}.json"
        procs.append((subprocess.Popen([sys.executable, os.path.join(HERE, "ddp_worker.py"), equal_mount.dir,
                                        str(out), "2"], env=dict(env, RANK=str(rank)),
                                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True), out))
    for p, _ in procs:
        try:
            log, _ = p.communicate(timeout=120)
        except subprocess.TimeoutExpired:
            for q, _ in procs:
                q.kill()
            pytest.fail("the DDP run did not finish in 120 s (ranks with unequal batch counts hang)")
        assert p.returncode == 0, log
    reports = [json.loads(out.read_text()) for _, out in procs]
    padding = corgifs.config(equal_mount.dir)["equal_parts_padding_epoch0"]
    assert padding > 0, "the test set needs parts of unequal record counts"
    for epoch in (0, 1):
        batches = [r["epochs"][epoch]["batches"] for r in reports]
        assert batches[0] == batches[1], f"epoch {epoch}: ranks got {batches} batches"
        ids = reports[0]["epochs"][epoch]["ids"] + reports[1]["epochs"][epoch]["ids"]
        assert set(ids) == set(range(RECORDS)), f"epoch {epoch}: some record was never seen"
        repeats = len(ids) - RECORDS
        assert 0 <= repeats < RECORDS // 10
        if epoch == 0:
            assert repeats == padding
        # Padding repeats small records, a part's own first and then, when it has
        # too few, those of the parts after it (README, --equal-parts): ranks
        # share at most the padding records, and only records met more than once.
        counts = collections.Counter(ids)
        shared = set(reports[0]["epochs"][epoch]["ids"]) & set(reports[1]["epochs"][epoch]["ids"])
        assert all(counts[i] > 1 for i in shared)
        assert len(shared) <= repeats
    assert reports[0]["epochs"][0]["ids"] != reports[0]["epochs"][1]["ids"]


def _epoch(torch, ds, workers, stop_after=None, loader_cls=None):
    """Batches (lists of ids) of one pass; the state after stop_after batches."""
    loader_cls = loader_cls or corgifs.DataLoader
    loader = loader_cls(ds, batch_size=32, num_workers=workers, worker_init_fn=quiet)
    out, state = [], None
    for batch in loader:
        out.append(ids_of(batch))
        if stop_after is not None and len(out) == stop_after:
            state = json.loads(json.dumps(ds.state_dict()))  # as saved in a checkpoint
            break
    return out, state


@pytest.mark.parametrize("workers,plain", [(0, True), (0, False), (2, False), (3, False)])
def test_resume_from_a_mid_epoch_state_gives_the_remaining_records(torch, mount, workers, plain):
    loader_cls = torch.utils.data.DataLoader if plain else None
    ds = corgifs.Dataset(mount.dir)
    ds.set_epoch(1)
    full, _ = _epoch(torch, ds, workers, loader_cls=loader_cls)
    assert sorted(sum(full, [])) == list(range(RECORDS))

    ds = corgifs.Dataset(mount.dir)
    ds.set_epoch(1)
    head, state = _epoch(torch, ds, workers, stop_after=23, loader_cls=loader_cls)
    assert state["epoch"] == 1 and sum(n for _, n in state["positions"].values()) == 23 * 32

    resumed = corgifs.Dataset(mount.dir)
    resumed.load_state_dict(state)
    for epoch in range(1, 2):  # the usual loop: set_epoch keeps the state of its epoch
        resumed.set_epoch(epoch)
        tail, _ = _epoch(torch, resumed, workers, loader_cls=loader_cls)
    assert head and tail
    got = sum(head, []) + sum(tail, [])
    assert sorted(got) == list(range(RECORDS)), "resuming missed or repeated records"
    # Each part's records come in the part's order, the resumed run
    # continuing exactly after the last record the first run consumed.
    k = max(1, workers)
    want = {}
    for i in range(k):
        with open(os.path.join(mount.dir, corgifs.part_name(1, i, k)), "rb") as f:
            want[i] = [int(corgifs.decode_example(p)["id"][0]) for p, _ in corgifs.read_tfrecords(f)]
    part_of = {r: i for i, ids in want.items() for r in ids}

    def per_part(*runs):
        out = {i: [] for i in range(k)}
        for run in runs:
            for b in run:
                for r in b:
                    out[part_of[r]].append(r)
        return out

    assert per_part(full) == want
    assert per_part(head, tail) == want
    # The epoch after the resumed one starts from scratch.
    resumed.set_epoch(2)
    nxt, _ = _epoch(torch, resumed, workers, loader_cls=loader_cls)
    assert sorted(sum(nxt, [])) == list(range(RECORDS))


def test_resume_token_is_spelled_as_the_daemon_spells_it():
    # Pinned by shuffler's TestResumeTokenHasOneSpelling too.
    assert corgifs.resume_token([0, 1, 300, 1 << 33]) == "aecaaanmakaibaeaebzxh3a7"


@pytest.mark.parametrize("workers,then", [(4, 3), (4, 0), (2, 6)])
def test_elastic_resume_at_another_worker_count_reads_the_rest_of_the_epoch_once(torch, mount, workers, then):
    ds = corgifs.Dataset(mount.dir)
    ds.set_epoch(1)
    head, state = _epoch(torch, ds, workers, stop_after=29)
    k = max(1, workers)
    assert state["parts"] == k and state["resume"] == []
    consumed = {int(i): n for i, (_, n) in state["positions"].items()}
    assert sum(consumed.values()) == 29 * 32

    resumed = corgifs.Dataset(mount.dir)
    resumed.load_state_dict(state)
    resumed.set_epoch(1)
    tail, state2 = _epoch(torch, resumed, then, stop_after=11)
    assert state2["resume"] == [corgifs.resume_token([consumed.get(i, 0) for i in range(k)])]
    # A checkpoint of the resumed run, resumed again at yet another K.
    again = corgifs.Dataset(mount.dir)
    again.load_state_dict(state2)
    rest, _ = _epoch(torch, again, 2 if max(1, then) != 2 else 3)
    got = sum(head, []) + sum(tail, []) + sum(rest, [])
    assert sorted(got) == list(range(RECORDS)), "the elastic resume missed or repeated records"
    # The epoch after the resumed one is read from the epoch's own parts.
    again.set_epoch(2)
    nxt, _ = _epoch(torch, again, 2)
    assert sorted(sum(nxt, [])) == list(range(RECORDS))


def test_elastic_resume_of_a_world_of_two_needs_every_ranks_state(torch, mount):
    states, head = [], []
    for rank in range(2):
        ds = corgifs.Dataset(mount.dir, rank=rank, world=2, allow_unequal_parts=True)
        ds.set_epoch(1)
        h, st = _epoch(torch, ds, 2, stop_after=5 + 7 * rank)
        states.append(st)
        head += sum(h, [])
    one = corgifs.Dataset(mount.dir)
    one.load_state_dict(states[0])
    with pytest.raises(ValueError, match="all_gather_object"):
        _epoch(torch, one, 3)
    merged = corgifs.Dataset(mount.dir)
    merged.load_state_dict(states)
    tail, _ = _epoch(torch, merged, 3)
    assert sorted(head + sum(tail, [])) == list(range(RECORDS))


def test_decoded_float_arrays_view_their_records_and_a_users_decode_gets_bytes(torch, mount):
    """The package's decoders get each record as a fresh bytearray and view
    it (no copy of the floats, still writable); a decode function of the
    user's gets bytes, as before."""
    for decode in (True, corgifs.decode_example, corgifs.tfrecord.decode_example_pure):
        n = 0
        for rec in corgifs.Dataset(mount.dir, decode=decode):
            a = rec["features"]
            assert a.flags.writeable and not a.flags.owndata and isinstance(a.base, memoryview), decode
            n += 1
        assert n == RECORDS
    assert {t for t in corgifs.Dataset(mount.dir, decode=type)} == {bytes}
