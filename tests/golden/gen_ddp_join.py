"""Golden values for DDP with uneven inputs under Join (tests/distributed/test_ddp_join.cpp).

Three processes (gloo, loopback) train Sequential(Linear(4, 3), Tanh, Linear(3, 1)) with MSE and
SGD(lr 0.1, momentum 0.9); rank r has BATCHES[r] batches of 4 rows. Inside `model.join(...)`
ranks that run out shadow the others. Run with Debian's PyTorch 1.13:
    python3 tests/golden/gen_ddp_join.py   # writes tests/golden/ddp_join.json
"""
import json
import os
import sys
import tempfile

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn as nn

BATCHES = [3, 5, 0]
ROWS = 4


def x_value(rank, batch, row, col):
    return ((rank * 7 + batch * 5 + row * 3 + col) % 11 - 5) / 4.0


def y_value(rank, batch, row):
    return ((rank * 3 + batch * 2 + row) % 7 - 3) / 2.0


def init_value(index, k):
    return ((index * 13 + k * 7) % 17 - 8) / 20.0


def make_model():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 3), nn.Tanh(), nn.Linear(3, 1)).double()
    with torch.no_grad():
        for index, p in enumerate(model.parameters()):
            flat = p.view(-1)
            for k in range(flat.numel()):
                flat[k] = init_value(index, k)
    return model


def batch(rank, b):
    x = torch.tensor([[x_value(rank, b, i, j) for j in range(4)] for i in range(ROWS)], dtype=torch.float64)
    y = torch.tensor([[y_value(rank, b, i)] for i in range(ROWS)], dtype=torch.float64)
    return x, y


def worker(rank, world, init_file, divide, out_file):
    dist.init_process_group("gloo", init_method="file://" + init_file, rank=rank, world_size=world)
    model = make_model()
    ddp = nn.parallel.DistributedDataParallel(model)
    opt = torch.optim.SGD(ddp.parameters(), lr=0.1, momentum=0.9)
    with ddp.join(divide_by_initial_world_size=divide):
        for b in range(BATCHES[rank]):
            x, y = batch(rank, b)
            opt.zero_grad()
            loss = nn.functional.mse_loss(ddp(x), y)
            loss.backward()
            opt.step()
    params = [p.detach().reshape(-1).tolist() for p in model.parameters()]
    with open(out_file + "." + str(rank), "w") as f:
        json.dump(params, f)
    dist.destroy_process_group()


def run(divide):
    world = len(BATCHES)
    with tempfile.TemporaryDirectory() as d:
        init_file = os.path.join(d, "init")
        out_file = os.path.join(d, "out")
        mp.spawn(worker, args=(world, init_file, divide, out_file), nprocs=world, join=True)
        results = []
        for r in range(world):
            with open(out_file + "." + str(r)) as f:
                results.append(json.load(f))
    for r in range(1, world):
        assert results[r] == results[0], "ranks differ after join"
    return results[0]


def main():
    out = {
        "batches": BATCHES,
        "rows": ROWS,
        "lr": 0.1,
        "momentum": 0.9,
        "divide_by_initial_world_size": run(True),
        "divide_by_active_ranks": run(False),
        "torch": torch.__version__,
    }
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "ddp_join.json")
    with open(path, "w") as f:
        json.dump(out, f, indent=1)
    print("wrote", path)


if __name__ == "__main__":
    sys.exit(main())
