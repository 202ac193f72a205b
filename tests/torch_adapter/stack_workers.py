"""What each of the 2 gloo processes of test_training_stacks.py runs: DDP, FSDP2 and FSDP1.

One spawn runs every scenario, since starting processes is the slow part. Each
scenario trains a hooked and an unhooked copy of the same model and reports the
largest difference, so the parent's tests can say which scenario failed and how.
The model itself comes from the parent through ``mp.spawn`` with hooks installed
(a capture is open on it there): passing a hooked model to mp.spawn is checked too.
"""

from __future__ import annotations

import copy
import datetime
import os
import pickle
import traceback
import warnings
from typing import Any, Callable, Dict, List

import torch
import torch.distributed as dist
from torch import nn

import hookbus
import hookbus.torch
from hookbus import CallContext

TIMEOUT = datetime.timedelta(seconds=30)  # each collective: a hang fails, not blocks


def make_model() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 8), nn.ReLU(), nn.Linear(8, 2))


def batches(rank: int, steps: int = 2) -> List[torch.Tensor]:
    generator = torch.Generator().manual_seed(100 + rank)
    return [torch.randn(6, 4, generator=generator) for _ in range(steps)]


def train(model: nn.Module, rank: int, steps: int = 2) -> List[float]:
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    losses = []
    for x in batches(rank, steps):
        optimizer.zero_grad()
        loss = model(x).pow(2).mean()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    return losses


def full_parameters(model: nn.Module) -> List[torch.Tensor]:
    full = []
    for parameter in model.parameters():
        tensor: Any = parameter
        if hasattr(tensor, "full_tensor"):  # a DTensor shard (FSDP2)
            tensor = tensor.full_tensor()
        full.append(tensor.detach().clone())
    return full


def largest_difference(a: List[torch.Tensor], b: List[torch.Tensor]) -> float:
    return max(float((x - y).abs().max()) for x, y in zip(a, b))


def identity_hooks(net: hookbus.torch.Attachment, seen: List[str]) -> None:
    """Hooks that touch every phase but change no number (a value-preserving edit)."""
    net.pre("*", lambda ctx: ctx.data.update(seen=True))

    def post(ctx: CallContext) -> None:
        seen.append(ctx.name)
        ctx.result = ctx.result * 1.0

    net.post(nn.Linear, post)
    net.grad("2", lambda ctx: seen.append(f"grad {ctx.name}"))


# --- DataLoader workers: the documented pattern ------------------------------------------


class AugmentedDataset(torch.utils.data.Dataset):  # type: ignore[type-arg]
    """A dataset that runs a module on each sample and reports which hooks ran on it."""

    def __init__(self) -> None:
        self.augment = nn.Sequential(nn.Linear(2, 2))
        self.seen: List[str] = []  # filled by hooks in the process that runs them

    def __len__(self) -> int:
        return 4

    def __getitem__(self, index: int) -> Dict[str, Any]:
        self.seen = []
        with torch.no_grad():
            out = self.augment(torch.full((1, 2), float(index)))
        return {"out": out, "seen": list(self.seen), "pid": os.getpid()}


def init_worker(worker_id: int) -> None:
    """worker_init_fn: make the bus and register the hooks in the worker."""
    info: Any = torch.utils.data.get_worker_info()
    dataset: AugmentedDataset = info.dataset
    bus = hookbus.EventBus(f"worker {worker_id}")
    hookbus.torch.attach(dataset.augment, bus)
    bus.post("0", lambda ctx: dataset.seen.append(f"worker {worker_id}: {ctx.name}"))


# --- the scenarios: each returns a dict of facts for the parent's tests ------------------


def ddp(rank: int, base: nn.Module) -> Dict[str, Any]:
    from torch.nn.parallel import DistributedDataParallel

    plain = DistributedDataParallel(copy.deepcopy(base))
    plain_losses = train(plain, rank)
    hooked = DistributedDataParallel(copy.deepcopy(base))
    seen: List[str] = []
    with hookbus.torch.attach(hooked, hookbus.EventBus()) as net:
        names = net.names
        raw = net.raw_name("0")
        identity_hooks(net, seen)
        with hookbus.torch.capture(hooked, "4", grads=True) as cache:
            hooked_losses = train(hooked, rank)
    return {
        "names": names,
        "raw": raw,
        "loss_difference": max(abs(a - b) for a, b in zip(plain_losses, hooked_losses)),
        "parameter_difference": largest_difference(
            full_parameters(plain), full_parameters(hooked)
        ),
        "seen": sorted(set(seen)),
        "captured_calls": len(cache["4"]),
        "captured_grad_shape": tuple(cache["4"].grad.shape),
    }


def ddp_graph_cut(rank: int, base: nn.Module) -> Dict[str, Any]:
    from torch.nn.parallel import DistributedDataParallel

    facts: Dict[str, Any] = {}
    for form, find_unused in (("zeros_like", False), ("times_zero", False), ("zeros_like", True)):
        model = DistributedDataParallel(copy.deepcopy(base), find_unused_parameters=find_unused)

        def ablate(ctx: CallContext, form: str = form) -> None:
            ctx.result = torch.zeros_like(ctx.result) if form == "zeros_like" else ctx.result * 0

        with hookbus.torch.attach(model, hookbus.EventBus()) as net:
            net.post("2", ablate)
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                losses = train(
                    model, rank, steps=1 if form == "zeros_like" and not find_unused else 2
                )
        messages = [str(w.message) for w in caught if "hookbus" in str(w.message)]
        facts[f"{form} find_unused={find_unused}"] = {"warnings": messages, "steps": len(losses)}
    return facts


def fsdp2(rank: int, base: nn.Module) -> Dict[str, Any]:
    from torch.distributed.fsdp import fully_shard

    def shard(model: nn.Module) -> nn.Module:
        for layer in model:
            if isinstance(layer, nn.Linear):
                fully_shard(layer)
        fully_shard(model)
        return model

    plain = shard(copy.deepcopy(base))
    plain_losses = train(plain, rank)

    # A post hook registered before sharding sees the full parameter; one
    # registered after sees the local shard (FSDP2 appends its reshard hook).
    hooked = copy.deepcopy(base)
    before_bus = hookbus.EventBus()
    before_net = hookbus.torch.attach(hooked, before_bus)
    weights: Dict[str, Any] = {}

    def weight_seen(when: str) -> Callable[[CallContext], None]:
        def hook(ctx: CallContext) -> None:
            weight: Any = ctx.target.weight
            local = weight.to_local() if hasattr(weight, "to_local") else weight
            weights[when] = (type(weight).__name__, tuple(local.shape))

        return hook

    before_net.post("0", weight_seen("registered before fully_shard"))
    shard(hooked)
    seen: List[str] = []
    with hookbus.torch.attach(hooked, hookbus.EventBus()) as net:
        names = net.names
        net.post("0", weight_seen("registered after fully_shard"))
        identity_hooks(net, seen)
        hooked_losses = train(hooked, rank)
    before_net.detach()
    return {
        "names": names,
        "loss_difference": max(abs(a - b) for a, b in zip(plain_losses, hooked_losses)),
        "parameter_difference": largest_difference(
            full_parameters(plain), full_parameters(hooked)
        ),
        "seen": sorted(set(seen)),
        "weights": weights,
    }


def fsdp1(rank: int, base: nn.Module) -> Dict[str, Any]:
    from torch.distributed.fsdp import FullyShardedDataParallel
    from torch.distributed.fsdp.wrap import ModuleWrapPolicy

    def wrap(model: nn.Module) -> nn.Module:
        return FullyShardedDataParallel(
            model,
            auto_wrap_policy=ModuleWrapPolicy({nn.Linear}),
            use_orig_params=True,
            device_id=torch.device("cpu"),
        )

    plain = wrap(copy.deepcopy(base))
    plain_losses = train(plain, rank)
    hooked = wrap(copy.deepcopy(base))
    seen: List[str] = []
    with hookbus.torch.attach(hooked, hookbus.EventBus()) as net:
        names = net.names
        raw = net.raw_name("2")
        identity_hooks(net, seen)
        hooked_losses = train(hooked, rank)
    return {
        "names": names,
        "raw": raw,
        "loss_difference": max(abs(a - b) for a, b in zip(plain_losses, hooked_losses)),
        "seen": sorted(set(seen)),
    }


SCENARIOS: Dict[str, Callable[[int, nn.Module], Dict[str, Any]]] = {
    "ddp": ddp,
    "ddp_graph_cut": ddp_graph_cut,
    "fsdp2": fsdp2,
    "fsdp1": fsdp1,
}


def run(rank: int, port: int, out_dir: str, base: nn.Module) -> None:
    """The spawned process: every scenario in turn, facts (or the traceback) to a file."""
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    torch.set_num_threads(1)
    results: Dict[str, Any] = {}
    warnings.filterwarnings("ignore", category=FutureWarning)
    dist.init_process_group("gloo", rank=rank, world_size=2, timeout=TIMEOUT)
    try:
        results["received"] = {
            "hook_dicts": sum(
                len(m._forward_hooks) + len(m._forward_pre_hooks) for m in base.modules()
            ),
        }
        base(torch.ones(1, 4))  # the inert stand-ins remove themselves
        results["received"]["after_first_call"] = sum(
            len(m._forward_hooks) + len(m._forward_pre_hooks) for m in base.modules()
        )
        for name, scenario in SCENARIOS.items():
            try:
                results[name] = scenario(rank, base)
            except Exception:
                results[name] = {"error": traceback.format_exc()}
            dist.barrier()
    finally:
        with open(os.path.join(out_dir, f"rank{rank}.pkl"), "wb") as file:
            pickle.dump(results, file)
        dist.destroy_process_group()
    os._exit(0)  # skip interpreter teardown: gloo's threads may abort it
