"""One rank of the multi-node test (tests/netns_test.go): logistic regression
trained by synchronous SGD over torch.distributed (gloo), reading part
rank of world through corgifs.Dataset, and with --feedback writing this
part's per-example gradients through corgifs.FeedbackWriter every epoch.

    ddp_cdgrab.py MOUNT OUT EPOCHS [--feedback] [--late-epoch E]

Rank and world come from the environment (env:// rendezvous: MASTER_ADDR,
MASTER_PORT, RANK, WORLD_SIZE). The training is `corgifs validate
--model logistic --workers K`'s (synchronous SGD, --batch records of
every part a step, lr * decay^epoch, every record of the epoch trained
on), so the losses compare with its tables in VALIDATION.md. OUT gets per epoch the record ids this rank consumed, in order,
and the full-training loss of the model at the end of the epoch (every
record of the epoch, summed over the ranks).

--late-epoch E: this rank writes no feedback for epoch E (a late node)."""

import argparse
import datetime
import itertools
import json

import numpy as np
import torch
import torch.distributed as dist

import corgifs


def main():
    p = argparse.ArgumentParser()
    p.add_argument("mount")
    p.add_argument("out")
    p.add_argument("epochs", type=int)
    p.add_argument("--feedback", action="store_true")
    p.add_argument("--late-epoch", type=int, default=-1)
    p.add_argument("--batch", type=int, default=8, help="records of each part per step")
    p.add_argument("--lr", type=float, default=0.05)
    p.add_argument("--decay", type=float, default=0.95, help="the learning rate of epoch e is lr * decay^e")
    a = p.parse_args()
    torch.set_num_threads(1)
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=120))
    rank, world = dist.get_rank(), dist.get_world_size()
    ds = corgifs.Dataset(a.mount, allow_unequal_parts=True)
    w = None
    report = {"rank": rank, "world": world, "epochs": []}
    for epoch in range(a.epochs):
        ds.set_epoch(epoch)
        lr = a.lr * a.decay**epoch
        # Lock-step as data-parallel ranks, every record trained on, as
        # `corgifs validate --workers K` does (PyTorch's uneven-inputs
        # Join): every step takes --batch records of every part, or what
        # a part has left, until the longest part ends; a part that has
        # ended gives a zero gradient. A step where every part gives as
        # many records is their mean; an uneven one is the sum over
        # --batch × world, so that every record weighs what it weighs in
        # a full step. Every rank knows every part's length, hence the
        # number of steps and which are even.
        mine = torch.tensor([len(ds)])
        lens = [torch.zeros(1, dtype=mine.dtype) for _ in range(world)]
        dist.all_gather(lens, mine)
        lens = [int(n) for n in lens]
        steps = max(-(-n // a.batch) for n in lens)
        ids, xs, ys, grads = [], [], [], []
        it = iter(ds)
        for step in range(steps):
            counts = [min(a.batch, max(0, n - step * a.batch)) for n in lens]
            recs = list(itertools.islice(it, a.batch))
            if len(recs) != counts[rank]:
                raise SystemExit(f"rank {rank}: step {step} read {len(recs)} records, want {counts[rank]} of a part of {len(ds)}")
            if recs:
                x = np.array([r["features"] for r in recs], dtype=np.float64)
                xb = np.hstack([x, np.ones((len(recs), 1))])
                y = np.array([r["label"][0] for r in recs], dtype=np.float64)
                if w is None:
                    w = np.zeros(xb.shape[1])
                # Per-example gradients of the logistic loss at the current
                # model: CD-GraB orders the next epoch by these, in served order.
                g = ((1 / (1 + np.exp(-xb @ w))) - y)[:, None] * xb
                ids += [int(r["id"][0]) for r in recs]
                xs.append(xb)
                ys.append(y)
                grads.append(g)
                buf = torch.from_numpy(g.sum(0))
            elif w is None:
                raise SystemExit(f"rank {rank}: part {rank} of epoch {epoch} is empty before the model's size is known")
            else:
                buf = torch.zeros(len(w), dtype=torch.float64)
            # Synchronous SGD over the step's records of every part.
            dist.all_reduce(buf)
            even = all(c == counts[0] for c in counts)
            w -= lr * buf.numpy() / (sum(counts) if even else a.batch * world)
        if a.feedback and epoch != a.late_epoch:
            with corgifs.FeedbackWriter(a.mount, epoch, rank, world, dim=len(w), records=len(ids)) as fb:
                fb.write(np.vstack(grads).astype(np.float32))
        xb, y = np.vstack(xs), np.concatenate(ys)
        z = xb @ w
        # log(1 + e^z) - y z, summed over this part's records
        loss = torch.tensor([float((np.logaddexp(0, z) - y * z).sum()), float(len(y))], dtype=torch.float64)
        dist.all_reduce(loss)
        report["epochs"].append({"ids": ids, "loss": float(loss[0] / loss[1])})
    dist.barrier()
    dist.destroy_process_group()
    with open(a.out, "w") as f:
        json.dump(report, f)


if __name__ == "__main__":
    main()
