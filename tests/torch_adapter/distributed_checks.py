"""Checks that run on every rank of a 2-process gloo group (see test_distributed.py).

Each check runs on both ranks, one after the other, in one spawned group (so
the group starts once). Data are made from a seed and the rank, so every rank
can rebuild every rank's batches and compute, alone, what one process over all
the data gives: the reference the reduced and gathered results must match.
"""

from __future__ import annotations

import copy
import os
import re
import traceback
from datetime import timedelta
from typing import Any, Callable, Dict, List, Tuple, Type

import pytest
import torch
import torch.distributed as dist
from torch import nn

import hookbus.torch as ht

WORLD = 2
BATCHES = {0: [3, 9, 1], 1: [5, 2, 4]}  # uneven sizes; as many per rank, for DDP
TIMEOUT = timedelta(seconds=30)  # a collective left waiting raises instead of hanging


class Offset(nn.Module):
    """Values far from zero with a small spread: the naive E[x^2] - E[x]^2 fails here."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * 1e-2 + 1e3


class Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.inp = nn.Linear(8, 16)
        self.act = nn.ReLU()
        self.shift = Offset()
        self.out = nn.Linear(16, 4)
        self.side = nn.Linear(16, 3)  # runs on rank 0 only
        self.never = nn.Linear(16, 2)  # runs nowhere

    def forward(self, x: torch.Tensor, side: bool = False) -> torch.Tensor:
        hidden = self.shift(self.act(self.inp(x)))
        y = self.out(hidden - 1e3)
        if side:
            y = y + self.side(hidden - 1e3).sum(-1, keepdim=True)
        return y


def make_net() -> Net:
    torch.manual_seed(0)
    return Net()


def batches(rank: int) -> List[torch.Tensor]:
    generator = torch.Generator().manual_seed(100 + rank)
    return [torch.randn(n, 8, generator=generator) * 3 + 1 for n in BATCHES[rank]]


def run_rank(model: nn.Module, rank: int, grads: bool = False) -> None:
    for x in batches(rank):
        y = model(x, side=rank == 0)
        if grads:
            (y * y).sum().backward()


def reference(names: List[str], of: str = "output") -> Dict[str, torch.Tensor]:
    """name -> every value the module saw on every rank, in rank order, float64 (N, F)."""
    model = make_net()
    seen: Dict[str, List[torch.Tensor]] = {}
    with ht.capture(model, names, inputs=of == "input", grads=of == "grad") as cache:
        for rank in range(WORLD):
            run_rank(model, rank, grads=of == "grad")
    for name in cache:
        record = cache[name]
        if of == "output":
            values = record.outputs
        elif of == "input":
            values = [call.args[0] for call in record.calls]
        else:
            values = record.grads
        seen[name] = [v.detach().double().reshape(-1, v.shape[-1]) for v in values]
    return {name: torch.cat(parts) for name, parts in seen.items()}


def assert_exact(stat: ht.Moments, values: torch.Tensor) -> None:
    """``stat`` matches a two-pass float64 computation over ``values`` to 1e-10."""
    count = values.shape[0]
    mean = values.mean(0)
    centred = values - mean
    m2 = (centred * centred).sum(0) - centred.sum(0) ** 2 / count
    assert stat.count == count
    scale = values.abs().amax(0)
    torch.testing.assert_close(stat.mean, mean, rtol=1e-10, atol=1e-13 * float(scale.max()))
    torch.testing.assert_close(stat.var, m2 / count, rtol=1e-10, atol=0.0)
    assert torch.equal(stat.min, values.amin(0))
    assert torch.equal(stat.max, values.amax(0))


# --- the checks ------------------------------------------------------------------------


def check_reduce_output_uneven(rank: int) -> None:
    model = make_net()
    names = ["inp", "shift", "out", "side", "never"]
    with ht.stats(model, names) as st:
        run_rank(model, rank)
    assert ("side" in st) == (rank == 0)
    st.reduce()
    expected = reference(names)
    assert sorted(st) == sorted(expected) == ["inp", "out", "shift", "side"]
    for name, values in expected.items():
        assert_exact(st[name], values)
    assert "never" not in st
    assert "reduced" in repr(st)
    with pytest.raises(RuntimeError, match="reduced across ranks already"):
        st.reduce()


def check_reduce_input_and_grad(rank: int) -> None:
    for of in ("input", "grad"):
        model = make_net()
        names = ["inp", "out", "side"]
        with ht.stats(model, names, of=of) as st:
            run_rank(model, rank, grads=True)
        st.reduce()
        expected = reference(names, of)
        assert sorted(st) == sorted(expected) == ["inp", "out", "side"], (of, list(st))
        for name, values in expected.items():
            assert_exact(st[name], values)


def check_reduce_scalar(rank: int) -> None:
    model = make_net()
    with ht.stats(model, "shift", dim=None) as st:
        run_rank(model, rank)
    st.reduce()
    values = reference(["shift"])["shift"].reshape(-1, 1)
    stat = st["shift"]
    assert stat.shape == ()
    assert_exact(ht.Moments(stat.count, *(t.reshape(1) for t in (
        stat.mean, stat.m2, stat.min, stat.max))), values)  # fmt: skip


def check_ddp(rank: int) -> None:
    from torch.nn.parallel import DistributedDataParallel

    model = DistributedDataParallel(make_net(), find_unused_parameters=True)
    with ht.stats(model, nn.Linear) as outputs, ht.stats(model, nn.Linear, of="grad") as grads:
        run_rank(model, rank, grads=True)
    # The bare model's names: DDP's own "module." level is left out.
    assert outputs.selected == grads.selected == ["inp", "out", "side", "never"]
    for st, of in ((outputs, "output"), (grads, "grad")):
        st.reduce()
        expected = reference(["inp", "out", "side"], of)
        assert sorted(st) == sorted(expected)
        for name, values in expected.items():
            assert_exact(st[name], values)


def check_fsdp2(rank: int) -> None:
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard

    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4))
    plain = copy.deepcopy(model)
    mesh = init_device_mesh("cpu", (WORLD,))
    fully_shard(model[0], mesh=mesh)
    fully_shard(model[2], mesh=mesh)
    fully_shard(model, mesh=mesh)
    with ht.stats(model, nn.Linear) as outputs, ht.stats(model, nn.Linear, of="grad") as grads:
        for x in batches(rank):
            (model(x) ** 2).sum().backward()
    assert outputs.selected == ["0", "2"]
    outputs.reduce()
    grads.reduce()
    with ht.capture(plain, nn.Linear, grads=True) as cache:
        for other in range(WORLD):
            for x in batches(other):
                (plain(x) ** 2).sum().backward()
    for name in ("0", "2"):
        for st, values in ((outputs, cache[name].outputs), (grads, cache[name].grads)):
            assert_exact(st[name], torch.cat([v.double() for v in values]))


def check_gather(rank: int) -> None:
    model = make_net()
    names = ["inp", "out", "side", "never"]
    with ht.capture(model, names, grads=True, inputs=True) as cache:
        run_rank(model, rank, grads=True)
    everything = cache.gather()
    assert everything is not None
    reference_model = make_net()
    with ht.capture(reference_model, ["inp", "out", "side"], grads=True) as full:
        for other in range(WORLD):
            run_rank(reference_model, other, grads=True)
    assert list(everything) == ["inp", "out", "side"]
    for name in everything:
        gathered = everything[name]
        assert len(gathered) == 1
        assert torch.equal(gathered.output, torch.cat(full[name].outputs))
        assert torch.equal(gathered.grad, torch.cat(full[name].grads))
    assert torch.equal(everything["inp"].args[0], torch.cat([*batches(0), *batches(1)]))
    assert everything["inp"].kwargs == {}
    assert everything["out"].output.shape[0] == sum(sum(b) for b in BATCHES.values())
    assert everything["side"].output.shape[0] == sum(BATCHES[0])
    at_one = cache.gather(dst=1)
    if rank == 1:
        assert at_one is not None
        assert torch.equal(at_one["out"].output, everything["out"].output)
    else:
        assert at_one is None


def check_errors(rank: int) -> None:
    model = make_net()
    alone = dist.new_group([0])  # every rank takes part in making it
    with ht.stats(model, "out") as st:
        run_rank(model, rank)
    if rank == 1:
        expect(RuntimeError, "not in the process group", lambda: st.reduce(group=alone))
        expect(RuntimeError, "not in the process group", lambda: ht.capture(model).cache.gather(
            group=alone))  # fmt: skip
    else:
        st.reduce(group=alone)  # a group of one: its own statistics
        assert st["out"].count == sum(BATCHES[0])
    # Ranks that disagree fail together, at the same point, instead of hanging.
    disagree = ht.stats(model, "out", dim=-1 if rank == 0 else None)
    expect(ValueError, "disagree", disagree.reduce)
    per_batch = ht.stats(model, "out", dim=0)  # features = the batch size: 3 or 5
    with per_batch:
        model(batches(rank)[0])
    expect(ValueError, "features on some rank", per_batch.reduce)
    expect(ValueError, "dst is the global rank", lambda: ht.capture(model).cache.gather(dst=7))


def check_nan_and_inf_reduce_as_one_process(rank: int) -> None:
    # A NaN on one rank once vanished from the reduced min and max.
    model = nn.Sequential(nn.Identity())

    def rows(of: int) -> torch.Tensor:
        x = torch.tensor([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]]) + 10 * of
        x[1, 0] = float("nan") if of == 0 else x[1, 0]  # feature 0: a NaN on rank 0 only
        x[0, 1] = float("inf") if of == 0 else -float("inf")  # feature 1: +inf and -inf
        x[0, 2] = float("nan") if of == 1 else x[0, 2]  # feature 2: a NaN on rank 1 only
        return x

    with ht.stats(model, "0") as st:
        model(rows(rank))
    st.reduce()
    values = torch.cat([rows(0), rows(1)]).double()
    stat = st["0"]
    assert stat.count == 4
    torch.testing.assert_close(stat.min, values.amin(0), equal_nan=True, rtol=0, atol=0)
    torch.testing.assert_close(stat.max, values.amax(0), equal_nan=True, rtol=0, atol=0)
    assert stat.min[1] == -float("inf")
    assert stat.max[1] == float("inf")
    torch.testing.assert_close(stat.mean, values.mean(0), equal_nan=True, rtol=1e-12, atol=0)


def check_merge_then_reduce_never_counts_twice(rank: int) -> None:
    # local.merge(reduced) once dropped the mark, and local.reduce() then
    # counted the reduced part once per rank.
    model = nn.Sequential(nn.Identity())
    with ht.stats(model, "0") as local:
        model(torch.ones(3 if rank == 0 else 1, 2))
    reduced = ht.stats(model, "0")
    reduced.load_state_dict(local.state_dict())
    reduced.reduce()
    assert reduced["0"].count == 4
    expect(ValueError, "reduced across ranks", lambda: local.merge(reduced))
    total = ht.stats(model, "0")
    total.merge(reduced)  # an empty one takes reduced statistics, and the mark
    expect(RuntimeError, "reduced across ranks already", total.reduce)
    assert total["0"].count == 4
    local.reduce()  # untouched by the refused merge: its own values, once per rank
    assert local["0"].count == 4


def check_ranks_that_select_different_modules_fail_together(rank: int) -> None:
    # One rank once raised at once while the other waited for the timeout.
    model = make_net()
    names = ["out"] if rank == 0 else ["inp", "out"]
    with ht.stats(model, names) as st:
        run_rank(model, rank)
    expect(ValueError, "disagree", st.reduce)
    # The ranks stay in step: the next reduce works.
    with ht.stats(model, "out") as same:
        run_rank(model, rank)
    same.reduce()
    assert same["out"].count == sum(sum(sizes) for sizes in BATCHES.values())


def expect(kind: Type[Exception], text: str, call: Callable[[], Any]) -> None:
    with pytest.raises(kind, match=re.escape(text)):
        call()


CHECKS: Dict[str, Callable[[int], None]] = {
    name[len("check_") :]: value for name, value in globals().items() if name.startswith("check_")
}


def worker(rank: int, port: int, queue: Any) -> None:
    """Run every check on this rank; report (rank, check, None or traceback) per check."""
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    torch.set_num_threads(1)
    dist.init_process_group(
        "gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=WORLD,
        timeout=TIMEOUT,
    )  # fmt: skip
    try:
        for name, check in CHECKS.items():
            outcome: Tuple[int, str, Any]
            try:
                check(rank)
                outcome = (rank, name, None)
            except BaseException:
                outcome = (rank, name, traceback.format_exc())
            queue.put(outcome)
            # Agree on the outcome: after a failure the ranks may be out of step.
            failed = torch.tensor([0 if outcome[2] is None else 1])
            dist.all_reduce(failed)
            if failed.item():
                break
    finally:
        dist.destroy_process_group()
