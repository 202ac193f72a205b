"""Activation statistics across ranks: stream them per rank, reduce them exactly.

Shows:
* ``hookbus.torch.stats(model, nn.Linear)`` on a ``DistributedDataParallel``
  model: per-feature count, mean, variance, min and max of every Linear's
  output, in float64, with no activation kept;
* uneven data per rank (each rank sees a different number of rows), and a
  module that only one rank runs;
* ``Stats.reduce()``: every rank ends with the statistics of all the data, as
  one process would compute them over everything; rank 0 checks that, to
  1e-10, against a single-process run over every rank's batches.

Run it on 2 CPU processes (gloo):
``torchrun --nproc_per_node=2 examples/distributed_stats.py``. Started with
plain ``python examples/distributed_stats.py`` it says so and exits.
"""

from __future__ import annotations

import gc
import os
import sys
from typing import Dict, List

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel

import hookbus.torch

ROWS = {0: [32, 32, 7], 1: [16, 16, 16]}  # rows per batch, per rank: uneven


class Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.body = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 32), nn.ReLU())
        self.head = nn.Linear(32, 4)
        self.probe = nn.Linear(32, 2)  # an extra head that only rank 0 runs

    def forward(self, x: torch.Tensor, probe: bool = False) -> torch.Tensor:
        hidden = self.body(x)
        out = self.head(hidden)
        return out + self.probe(hidden).mean() if probe else out


def make_model() -> Net:
    torch.manual_seed(0)  # the same weights on every rank, and in the reference
    return Net().eval()


def batches(rank: int) -> List[torch.Tensor]:
    generator = torch.Generator().manual_seed(1000 + rank)
    return [torch.randn(n, 16, generator=generator) for n in ROWS[rank]]


def main() -> None:
    if "RANK" not in os.environ:
        print("run me with: torchrun --nproc_per_node=2 examples/distributed_stats.py")
        sys.exit(0)
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    model = DistributedDataParallel(make_model())

    with torch.no_grad(), hookbus.torch.stats(model, nn.Linear) as stats:
        for x in batches(rank):
            model(x, probe=rank == 0)
    # Names are those of the bare model ("body.0"), without DDP's "module." level.
    local_rows = {name: stat.count for name, stat in stats.items()}
    stats.reduce()  # every rank takes part; afterwards every rank holds the global result
    reduced = dict(stats)

    if rank == 0:
        # The reference: one process, every rank's batches, no DDP.
        single = make_model()
        with torch.no_grad(), hookbus.torch.stats(single, nn.Linear) as everything:
            for other in range(dist.get_world_size()):
                for x in batches(other):
                    single(x, probe=other == 0)
        expected: Dict[str, hookbus.torch.Moments] = dict(everything)
        assert sorted(reduced) == sorted(expected) == ["body.0", "body.2", "head", "probe"]
        print(f"{'module':8} {'rows here':>9} {'rows all':>8} {'mean':>8} {'std':>8} {'dead':>4}")
        for name, stat in reduced.items():
            want = expected[name]
            assert stat.count == want.count
            torch.testing.assert_close(stat.mean, want.mean, rtol=1e-10, atol=1e-12)
            torch.testing.assert_close(stat.var, want.var, rtol=1e-10, atol=0.0)
            assert torch.equal(stat.min, want.min)
            assert torch.equal(stat.max, want.max)
            dead = int((stat.max <= 0).sum())  # features never positive: dead after a ReLU
            print(
                f"{name:8} {local_rows.get(name, 0):9d} {stat.count:8d} "
                f"{stat.mean.mean():8.4f} {stat.std.mean():8.4f} {dead:4d}"
            )
        print("example: ok")
    dist.barrier()  # rank 1 waits for rank 0's check: gloo aborts a group torn down early
    # DDP holds the process group in reference cycles. Freed only at exit, after
    # destroy_process_group(), gloo's threads went late, and about one run in twenty
    # aborted ("terminate called without an active exception"). Free it first.
    del model
    gc.collect()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
