#!/usr/bin/env python3
"""Softmax regression on Fashion-MNIST, read through a corgifs mount with
the corgifs Python package (python/: corgifs.Dataset and a PyTorch
DataLoader with several workers).

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
import glob
import hashlib
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


def decode_image(payload):
    """(pixels float32 tensor [784] in [0, 1], label, id) of a record made by
    `corgifs gen fashion-mnist`."""
    ex = corgifs.decode_example(payload, ("image", "label", "id"))
    try:
        pixels = np.frombuffer(ex["image"], dtype=np.uint8).astype(np.float32) / 255.0
        return torch.from_numpy(pixels), int(ex["label"][0]), int(ex["id"][0])
    except (KeyError, IndexError) as e:
        raise ValueError(f"record lacks the feature {e}") from None


def load_tfrecords(directory):
    """All records of directory/*.tfrecord, in file-name order, as tensors
    (images [N, 784], labels [N], ids [N])."""
    recs = [decode_image(p) for name in sorted(glob.glob(os.path.join(directory, "*.tfrecord")))
            for p in corgifs.read_records(name, decode=False)]
    if not recs:
        raise FileNotFoundError(f"no *.tfrecord records in {directory}")
    x, y, ids = zip(*recs)
    return torch.stack(x), torch.tensor(y), torch.tensor(ids)


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
    classes = int(test_y.max()) + 1

    model = torch.nn.Linear(test_x.shape[1], classes)
    torch.nn.init.zeros_(model.weight)
    torch.nn.init.zeros_(model.bias)
    opt = torch.optim.SGD(model.parameters(), lr=args.lr)
    data = corgifs.Dataset(args.mount, decode=decode_image)
    report = {"mount": args.mount, "workers": args.workers, "batch": args.batch, "lr": args.lr, "epochs": []}

    for epoch in range(args.epochs):
        start = time.time()
        for g in opt.param_groups:
            g["lr"] = args.lr * args.decay ** epoch
        data.set_epoch(epoch)
        loader = corgifs.DataLoader(data, batch_size=args.batch, num_workers=args.workers, worker_init_fn=quiet_worker)
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
