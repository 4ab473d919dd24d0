#!/usr/bin/python3
"""Golden layouts of PyTorch's DistributedSampler (shuffle=False), for dp::data::DistributedSampler.

Run with Debian's PyTorch (1.13, CPU):  /usr/bin/python3 tests/golden/gen_distributed_sampler.py
Writes tests/golden/distributed_sampler.json: {"cases": [{"name", "n", "world", "drop_last",
"size", "ranks": [[indices of rank 0], [indices of rank 1], ...]}]}.
Only shuffle=False: with shuffle PyTorch permutes with its own CPU generator (seed + epoch), which
dparallel does not reproduce; the padding, cutting and striding (the layout) are what must match,
and tests/data/test_distributed_sampler.cpp checks the shuffled layout against a re-implementation
of the same formula on dparallel's permutation.
"""
import json
import os

from torch.utils.data import DistributedSampler

# (n, world, drop_last): even splits, uneven ones, padding that fits in the list, padding that has
# to cycle the list more than once (n < world), an empty dataset, and a single rank.
CASES = [
    (0, 1, False), (0, 3, False), (0, 3, True),
    (1, 1, False), (1, 3, False), (1, 3, True),
    (2, 8, False), (3, 8, False), (3, 8, True),
    (5, 2, False), (5, 2, True),
    (7, 3, False), (7, 3, True),
    (10, 4, False), (10, 4, True),
    (12, 4, False), (12, 4, True),
    (101, 8, False), (101, 8, True),
]

cases = []
for n, world, drop_last in CASES:
    dataset = list(range(n))  # only len() matters to the sampler
    ranks = []
    sizes = set()
    for rank in range(world):
        s = DistributedSampler(dataset, num_replicas=world, rank=rank, shuffle=False, drop_last=drop_last)
        s.set_epoch(3)  # irrelevant without shuffle; recorded layouts must not depend on it
        ranks.append([int(i) for i in s])
        sizes.add(len(s))
    assert len(sizes) == 1
    cases.append({"name": f"n{n}_world{world}_{'drop' if drop_last else 'pad'}", "n": n, "world": world,
                  "drop_last": drop_last, "size": sizes.pop(), "ranks": ranks})

path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "distributed_sampler.json")
with open(path, "w") as f:
    json.dump({"cases": cases}, f, separators=(",", ":"))
print("wrote", path, os.path.getsize(path), "bytes,", len(cases), "cases")
