"""One rank of the DDP test: MOUNT OUT WORKERS; rank and world from the
environment (torch.distributed's env:// rendezvous)."""

import datetime
import json
import sys

import torch
import torch.distributed as dist

import corgifs


def quiet(_):
    torch.set_num_threads(1)


def main():
    mount, out, workers = sys.argv[1], sys.argv[2], int(sys.argv[3])
    torch.set_num_threads(1)
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=60))
    ds = corgifs.Dataset(mount)  # rank and world from torch.distributed
    model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(8, 4))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    loader = corgifs.DataLoader(ds, batch_size=64, num_workers=workers, worker_init_fn=quiet)
    report = {"rank": dist.get_rank(), "epochs": []}
    for epoch in range(2):
        ds.set_epoch(epoch)
        ids, batches = [], 0
        for batch in loader:
            loss = torch.nn.functional.cross_entropy(model(batch["features"]), batch["label"].reshape(-1))
            opt.zero_grad()
            loss.backward()  # an all-reduce across the ranks
            opt.step()
            ids += batch["id"].reshape(-1).tolist()
            batches += 1
        report["epochs"].append({"ids": ids, "batches": batches})
    dist.barrier()
    dist.destroy_process_group()
    with open(out, "w") as f:
        json.dump(report, f)


if __name__ == "__main__":
    main()
