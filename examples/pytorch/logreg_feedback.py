#!/usr/bin/env python3
"""Logistic regression trained through a corgifs mount whose epochs are
ordered from the previous epoch's per-example gradients (GraB; CD-GraB with
several parts): the script reads each part of an epoch in served order,
takes an SGD step per mini-batch, and writes every example's gradient
(exact, or a seeded random projection of it) back through the mount's
feedback files; the next epoch's parts then come in the balanced order.

    corgifs gen synthetic /data/tab --records 20000 --features 18 --classes 2 --order clustered --seed 3
    corgifs mount /data/tab /mnt/corgi --strategy grab --feedback-dim 19 --seed 1 &
    python3 logreg_feedback.py --mount /mnt/corgi --epochs 10

With --strategy cdgrab --parts K the script reads the K parts of an epoch
in turn, as K workers would, each writing its own part's feedback. The
gradient of example i is (sigmoid(w.x_i + b) - y_i) * [x_i, 1]: exact, of
dimension features + 1 (mount with --feedback-dim at least that), or
projected to --dim values with corgifs.Projection (for models whose
gradients are large; any framework's per-example gradients, such as
torch.func.vmap(torch.func.grad(loss)), fit the same way). Labels are
the record's "label" mod 2; features its "features".
"""

import argparse
import json
import os
import sys
import time

import numpy as np
import torch

try:
    import corgifs
except ImportError:  # not installed: the package in this repository
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "python"))
    import corgifs


def part_records(mount, epoch, part, parts, ext):
    """(features [n, f] float32, labels [n] float32, ids [n]) of one part,
    in served order."""
    path = os.path.join(mount, corgifs.part_name(epoch, part, parts, ext))
    xs, ys, ids = [], [], []
    for ex in corgifs.read_records(path, verify=False):
        xs.append(ex["features"])
        ys.append(float(ex["label"][0] % 2))
        ids.append(int(ex["id"][0]))
    return np.asarray(xs, dtype=np.float32), np.asarray(ys, dtype=np.float32), ids


def full_loss(w, x, y):
    """The mean logistic loss of the model w (bias last) over all records."""
    z = x @ w[:-1] + w[-1]
    return float(torch.nn.functional.binary_cross_entropy_with_logits(z, y))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--mount", required=True, help="a corgifs mount with --strategy grab, cdgrab or corgipile-balance")
    ap.add_argument("--epochs", type=int, default=5)
    ap.add_argument("--parts", type=int, help="parts of an epoch (default: the mount's --parts)")
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--lr", type=float, default=0.1)
    ap.add_argument("--decay", type=float, default=0.95, help="learning rate factor per epoch")
    ap.add_argument("--dim", type=int, default=0, help="project the gradients to this many values (0: exact)")
    ap.add_argument("--seed", type=int, default=0, help="seed of the projection")
    ap.add_argument("--report", help="write per-epoch full training loss and record order as JSON to this file")
    args = ap.parse_args()
    torch.set_num_threads(1)

    cfg = corgifs.config(args.mount)
    parts = args.parts or cfg.get("parts", 1)
    ext = cfg.get("extension", ".tfrecord")
    w, proj = None, None
    all_x, all_y = {}, {}
    report = {"strategy": cfg.get("strategy"), "parts": parts, "epochs": []}
    for epoch in range(args.epochs):
        start = time.time()
        lr = args.lr * args.decay ** epoch
        order = []
        for part in range(parts):
            x, y, ids = part_records(args.mount, epoch, part, parts, ext)
            order.extend(ids)
            for i, rid in enumerate(ids):
                all_x.setdefault(rid, x[i])
                all_y.setdefault(rid, y[i])
            x, y = torch.from_numpy(x), torch.from_numpy(y)
            if w is None:
                w = torch.zeros(x.shape[1] + 1)
                dim = args.dim or x.shape[1] + 1
                if args.dim:
                    proj = corgifs.Projection(x.shape[1] + 1, args.dim, seed=args.seed)
            with corgifs.FeedbackWriter(args.mount, epoch, part, parts, dim=dim, records=len(ids)) as fb:
                for lo in range(0, len(ids), args.batch):
                    xb, yb = x[lo:lo + args.batch], y[lo:lo + args.batch]
                    xb1 = torch.cat([xb, torch.ones(len(xb), 1)], dim=1)
                    # Per-example gradients of the logistic loss, at the
                    # model the batch was trained with (GraB's stale
                    # gradients).
                    g = (torch.sigmoid(xb1 @ w) - yb)[:, None] * xb1
                    w -= lr * g.mean(0)
                    fb.write(proj(g.numpy()) if proj else g.numpy())
        ids = sorted(all_x)
        loss = full_loss(w, torch.from_numpy(np.stack([all_x[i] for i in ids])),
                         torch.from_numpy(np.asarray([all_y[i] for i in ids], dtype=np.float32)))
        print(f"epoch {epoch}: {len(order)} records, full training loss {loss:.5f} ({time.time() - start:.1f}s)", flush=True)
        report["epochs"].append({"epoch": epoch, "records": len(order), "train_loss": loss, "ids": order})
    st = corgifs.feedback_status(args.mount)
    print(f"feedback: {st['accepted']} parts accepted, {st['refused']} refused, {st['fallbacks']} epochs served as a random reshuffle")
    report["feedback"] = {k: st[k] for k in ("accepted", "refused", "fallbacks")}
    if args.report:
        with open(args.report, "w") as f:
            json.dump(report, f)


if __name__ == "__main__":
    main()
