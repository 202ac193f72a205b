"""Row 6: ``hookbus.torch.stats()`` on every Linear of the row-5 MLP, against a native hook.

The native hook is what users write by hand: per Linear, a forward hook that
adds the float64 sum and sum of squares of the output to two tensors. ``stats()``
does more per call (min and max too, and a shifted sum of squares that stays
exact), through the bus. Both run the same model (a copy each, same weights)
under no_grad, timed in the same rounds.

Memory: ``stats()`` keeps O(features) per module, never O(batches): its state
and a buffer of per-call rows allocated at the first call. Measured as the bytes
of every live tensor (by storage), after 10 forwards and after 1,000, each time
with the statistics read, and Python's traced allocations alongside.
"""

from __future__ import annotations

import copy
import gc
import tracemalloc
from typing import Any, Dict, List

from _harness import Case
from _suite import Line

ROW = "6. torch stats()"


class _SumAndSquares:
    """The hand-written native hook: float64 sum and sum of squares of the output."""

    def __init__(self) -> None:
        import torch

        self.f64 = torch.float64
        self.count = 0
        self.sum: Any = 0.0
        self.squares: Any = 0.0

    def __call__(self, module: Any, args: Any, output: Any) -> None:
        values = output.detach().to(self.f64).reshape(-1, output.shape[-1])
        self.sum = self.sum + values.sum(0)
        self.squares = self.squares + (values * values).sum(0)
        self.count += values.shape[0]


def _mlp() -> Any:
    import torch
    from torch import nn

    torch.manual_seed(0)
    layers: List[nn.Module] = []
    for _ in range(4):
        layers += [nn.Linear(64, 64), nn.ReLU()]
    return nn.Sequential(*layers).eval(), torch.randn(32, 64)


def cases() -> List[Case]:
    from _torch_cases import _Forward
    from torch import nn

    import hookbus.torch as adapter

    base, x = _mlp()
    native = copy.deepcopy(base)
    for module in native.modules():
        if isinstance(module, nn.Linear):
            module.register_forward_hook(_SumAndSquares())
    streamed = copy.deepcopy(base)
    running = adapter.stats(streamed, nn.Linear)
    running.start()
    return [
        Case("stats/native", "forward()", {"forward": _Forward(native, x)}),
        Case("stats/hookbus", "forward()", {"forward": _Forward(streamed, x), "keep": running}),
    ]


def _tensor_bytes() -> int:
    """Bytes of every live tensor, each storage counted once."""
    import torch

    gc.collect()
    storages: Dict[int, int] = {}
    for obj in gc.get_objects():
        if isinstance(obj, torch.Tensor):
            storage = obj.untyped_storage()
            storages[storage.data_ptr()] = storage.nbytes()
    return sum(storages.values())


def measure(*, quick: bool) -> Dict[str, float]:
    """Tensor bytes and Python allocations after 10 and 1,000 forwards."""
    import torch
    from torch import nn

    import hookbus.torch as adapter

    model, x = _mlp()
    held: Dict[str, float] = {}
    tracemalloc.start()
    try:
        with adapter.stats(model, nn.Linear) as running, torch.no_grad():
            done = 0
            for count in (10, 1_000):
                while done < count:
                    model(x)
                    done += 1
                _ = dict(running)  # read: merges the buffered rows (the first read makes
                # the statistics' own tensors; before, there are only buffered rows)
                held[f"stats/tensors after {count}"] = float(_tensor_bytes())
                held[f"stats/python after {count}"] = float(tracemalloc.get_traced_memory()[0])
    finally:
        tracemalloc.stop()
    held["stats/python growth"] = held["stats/python after 1000"] - held["stats/python after 10"]
    return held


def lines() -> List[Line]:
    return [
        Line(ROW, "native hook: float64 sum and sum of squares on each Linear", "stats/native",
             "stats/native"),
        Line(
            ROW,
            "`stats()` of every Linear (count, mean, var, min, max), per forward",
            "stats/hookbus",
            "stats/native",
            "<= 1.2x native",
            lambda r: r.ratio("stats/hookbus", "stats/native").median <= 1.2,
        ),
        Line(ROW, "live tensor bytes after 10 forwards", "stats/tensors after 10", None),
        Line(
            ROW,
            "live tensor bytes after 1,000 forwards",
            "stats/tensors after 1000",
            None,
            "= after 10",
            lambda r: r.values["stats/tensors after 1000"] == r.values["stats/tensors after 10"],
        ),
        Line(ROW, "Python allocations, change from 10 to 1,000 forwards (interpreter caches, "
             "not per forward: 70 more blocks from 1,000 to 40,000 forwards)",
             "stats/python growth", None),
    ]  # fmt: skip
