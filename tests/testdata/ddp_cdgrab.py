"""One rank of the multi-node test (tests/netns_test.go): logistic regression
trained by synchronous SGD over torch.distributed (gloo), reading part
rank of world through corgifs.Dataset, and with --feedback writing this
part's per-example gradients through corgifs.FeedbackWriter every epoch.

    ddp_cdgrab.py MOUNT OUT EPOCHS [--feedback] [--late-epoch E]

Rank and world come from the environment (env:// rendezvous: MASTER_ADDR,
MASTER_PORT, RANK, WORLD_SIZE). Each step takes the next --batch records
of every part (lock-step, as `corgifs validate --workers K`): the parts
of cdgrab and D-RR (local) hold a few records more or less than each
other, so a rank whose part is over contributes nothing while the others
finish. OUT gets per epoch the record ids this rank consumed, in order,
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
    p.add_argument("--batch", type=int, default=4, help="records of each part per step")
    p.add_argument("--lr", type=float, default=0.05)
    a = p.parse_args()
    torch.set_num_threads(1)
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=120))
    rank, world = dist.get_rank(), dist.get_world_size()
    ds = corgifs.Dataset(a.mount, allow_unequal_parts=True)
    w = None
    report = {"rank": rank, "world": world, "epochs": []}
    for epoch in range(a.epochs):
        ds.set_epoch(epoch)
        it = iter(ds)
        ids, xs, ys, grads = [], [], [], []
        while True:
            recs = list(itertools.islice(it, a.batch))
            if w is None:  # the first step: every part has records
                w = np.zeros(len(recs[0]["features"]) + 1)
            d = len(w)
            buf = torch.zeros(d + 1, dtype=torch.float64)
            if recs:
                x = np.array([r["features"] for r in recs], dtype=np.float64)
                xb = np.hstack([x, np.ones((len(recs), 1))])
                y = np.array([r["label"][0] for r in recs], dtype=np.float64)
                # Per-example gradients of the logistic loss at the current
                # model: CD-GraB orders the next epoch by these, in served order.
                g = ((1 / (1 + np.exp(-xb @ w))) - y)[:, None] * xb
                buf[:d] = torch.from_numpy(g.sum(0))
                buf[d] = len(recs)
            # Synchronous SGD: the step is the mean gradient of this step's
            # records of every part (a part that is over adds nothing).
            dist.all_reduce(buf)
            if buf[d] == 0:  # every part is over
                break
            w -= a.lr * (buf[:d] / buf[d]).numpy()
            if not recs:
                continue
            ids += [int(r["id"][0]) for r in recs]
            xs.append(xb)
            ys.append(y)
            grads.append(g)
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
