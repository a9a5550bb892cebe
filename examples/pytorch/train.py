#!/usr/bin/env python3
"""Softmax regression on Fashion-MNIST, read through a corgifs mount by an
unmodified PyTorch DataLoader with several workers.

    corgifs gen fashion-mnist /data/fmnist --order clustered
    corgifs mount /data/fmnist/train /mnt/corgi --parts 2 --block-size 32KiB --buffer 10% --seed 1 &
    python3 train.py --mount /mnt/corgi --test-dir /data/fmnist/test --epochs 5 --workers 2

With --workers W (and one process, R = 1) worker w of epoch e reads
/mnt/corgi/epoch-EEEE/part-w-of-W: mount with --parts W (other part counts
resolve too, they are just not listed). Training follows `corgifs validate
--model softmax`: zero initial weights, mini-batch SGD on the mean
cross-entropy, learning rate lr * decay^epoch.
"""

import argparse
import hashlib
import json
import os
import sys
import time

import numpy as np
import torch
from torch.utils.data import DataLoader

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from corgifs_data import CorgiParts, load_tfrecords  # noqa: E402


def quiet_worker(_):
    torch.set_num_threads(1)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--mount", required=True, help="the corgifs mount point")
    ap.add_argument("--test-dir", required=True, help="directory of test TFRecord files (read directly)")
    ap.add_argument("--epochs", type=int, default=5)
    ap.add_argument("--workers", type=int, default=2, help="DataLoader workers, one part each")
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--lr", type=float, default=0.05)
    ap.add_argument("--decay", type=float, default=0.95, help="learning rate factor per epoch")
    ap.add_argument("--report", help="write per-epoch record ids and test accuracy as JSON to this file")
    args = ap.parse_args()
    torch.set_num_threads(1)

    test_x, test_y, _ = load_tfrecords(args.test_dir)
    test_x, test_y = torch.from_numpy(test_x), torch.from_numpy(test_y)
    classes = int(test_y.max()) + 1

    model = torch.nn.Linear(test_x.shape[1], classes)
    torch.nn.init.zeros_(model.weight)
    torch.nn.init.zeros_(model.bias)
    opt = torch.optim.SGD(model.parameters(), lr=args.lr)
    data = CorgiParts(args.mount)
    report = {"mount": args.mount, "workers": args.workers, "batch": args.batch, "lr": args.lr, "epochs": []}

    for epoch in range(args.epochs):
        start = time.time()
        for g in opt.param_groups:
            g["lr"] = args.lr * args.decay ** epoch
        data.set_epoch(epoch)
        loader = DataLoader(data, batch_size=args.batch, num_workers=args.workers, worker_init_fn=quiet_worker)
        seen, loss_sum = [], 0.0
        for x, y, ids in loader:
            loss = torch.nn.functional.cross_entropy(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            loss_sum += loss.item() * len(y)
            seen.append(ids.numpy())
        with torch.no_grad():
            acc = (model(test_x).argmax(1) == test_y).float().mean().item()
        ids = np.sort(np.concatenate(seen))
        print(f"epoch {epoch}: {len(ids)} records, train loss {loss_sum / len(ids):.4f}, "
              f"test accuracy {100 * acc:.2f}%, {time.time() - start:.1f}s", flush=True)
        report["epochs"].append({
            "epoch": epoch,
            "records": int(len(ids)),
            "distinct_ids": int(len(np.unique(ids))),
            "ids_sha256": hashlib.sha256(ids.astype("<i8").tobytes()).hexdigest(),
            "ids": ids.tolist(),
            "train_loss": loss_sum / len(ids),
            "test_acc": acc,
        })

    if args.report:
        with open(args.report, "w") as f:
            json.dump(report, f)


if __name__ == "__main__":
    main()
