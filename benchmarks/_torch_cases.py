"""Row 5: a 4-layer MLP forward on CPU (one thread, no_grad), with and without hooks.

Every variant is its own copy of the same model (same weights) so that hooks on
one never touch another. The per-hook cost compares like with like: the extra
time of a model with a hook on each of its 4 Linear layers over the bare model,
hookbus's post hook against a native ``register_forward_hook``, round by round.
"""

from __future__ import annotations

import copy
import importlib.util
from typing import Any, List, Optional

from _harness import Case, Stat
from _suite import Line, Results

LINEARS = 4


def unavailable() -> Optional[str]:
    """Why the torch rows can't run here, or None."""
    if importlib.util.find_spec("torch") is None:
        return "torch is not installed"
    try:
        import hookbus.torch as adapter
    except ImportError as error:
        return f"hookbus.torch (the adapter) does not import: {error}"
    if not hasattr(adapter, "attach"):
        return "hookbus.torch has no attach() yet"
    return None


def describe() -> str:
    import torch

    return f"torch {torch.__version__}, CPU, torch.set_num_threads(1), under torch.no_grad()"


class _Forward:
    """``model(x)`` under no_grad, as one call (the statement the harness times)."""

    def __init__(self, model: Any, x: Any) -> None:
        import torch

        self.model = model
        self.x = x
        self.no_grad = torch.no_grad

    def __call__(self) -> Any:
        with self.no_grad():
            return self.model(self.x)


class _Capturing:
    """A ``capture()`` of the model, started afresh before each sample (untimed).

    A capture keeps every call's output, so one left open for the whole run would
    hold thousands of tensors; each sample gets a new one instead.
    """

    def __init__(self, capture: Any, model: Any, selector: Any) -> None:
        self.capture = capture
        self.model = model
        self.selector = selector
        self.current: Any = None

    def restart(self) -> None:
        if self.current is not None:
            self.current.__exit__(None, None, None)
        self.current = self.capture(self.model, self.selector)
        self.current.__enter__()


def _noop_native(module: Any, args: Any, output: Any) -> None:
    return None


def _noop_post(ctx: Any) -> None:
    return None


def cases() -> List[Case]:
    import torch
    from torch import nn

    import hookbus
    import hookbus.torch as adapter

    torch.set_num_threads(1)
    torch.manual_seed(0)
    layers: List[nn.Module] = []
    for _ in range(LINEARS):
        layers += [nn.Linear(64, 64), nn.ReLU()]
    base = nn.Sequential(*layers).eval()
    x = torch.randn(32, 64)

    def fresh() -> nn.Module:
        return copy.deepcopy(base)

    none = fresh()
    native = fresh()
    for module in native.modules():
        if isinstance(module, nn.Linear):
            module.register_forward_hook(_noop_native)
    attached = fresh()
    keep: List[Any] = [adapter.attach(attached, hookbus.EventBus())]
    hooked = fresh()
    net = adapter.attach(hooked, hookbus.EventBus())
    net.post(nn.Linear, _noop_post)
    keep.append(net)
    out = [
        Case("torch/none", "forward()", {"forward": _Forward(none, x)}),
        Case("torch/native", "forward()", {"forward": _Forward(native, x)}),
        Case("torch/attached", "forward()", {"forward": _Forward(attached, x), "keep": keep}),
        Case("torch/hookbus", "forward()", {"forward": _Forward(hooked, x), "keep": keep}),
    ]
    # The cost of a hook call alone, where it dominates: modules that do nothing.
    identities = nn.Sequential(*[nn.Identity() for _ in range(LINEARS)])
    bare_ids = copy.deepcopy(identities)
    native_ids = copy.deepcopy(identities)
    for module in native_ids:
        module.register_forward_hook(_noop_native)
    hooked_ids = copy.deepcopy(identities)
    ids_net = adapter.attach(hooked_ids, hookbus.EventBus())
    ids_net.post(nn.Identity, _noop_post)
    keep.append(ids_net)
    out += [
        Case("hookcost/none", "forward()", {"forward": _Forward(bare_ids, x)}),
        Case("hookcost/native", "forward()", {"forward": _Forward(native_ids, x)}),
        Case("hookcost/hookbus", "forward()", {"forward": _Forward(hooked_ids, x), "keep": keep}),
    ]
    capture = getattr(adapter, "capture", None)
    if capture is not None:
        captured = fresh()
        session = _Capturing(capture, captured, nn.Linear)
        out.append(
            Case(
                "torch/capture",
                "forward()",
                {"forward": _Forward(captured, x), "session": session},
                setup=session.restart,
            )
        )
    return out


class _Derived:
    """Per-round values computed from timed cases (read like a Case by the table)."""

    def __init__(self, key: str, samples: List[float]) -> None:
        self.key = key
        self.samples = samples


def derive(results: Results) -> None:
    """The extra time per hook call, per round, of hookbus's and torch's own hooks."""
    for group in ("torch", "hookcost"):
        if not results.has(f"{group}/none", f"{group}/native", f"{group}/hookbus"):
            continue
        none = results.cases[f"{group}/none"].samples
        for name in ("native", "hookbus"):
            timed = results.cases[f"{group}/{name}"].samples
            extra = [(t - n) / LINEARS for t, n in zip(timed, none)]
            key = f"{group}/{name} extra"
            results.cases[key] = _Derived(key, extra)  # type: ignore[assignment]


def _extra_ratio(results: Results, group: str = "torch") -> Stat:
    # A difference of two noisy times is noisier still: compare the medians of the
    # per-round differences rather than taking a ratio in each round.
    hookbus = results.ns(f"{group}/hookbus extra").median
    native = results.ns(f"{group}/native extra").median
    return Stat([hookbus / native])


def _hook_cost_ratio(results: Results) -> Stat:
    return _extra_ratio(results, "hookcost")


def lines() -> List[Line]:
    row = "5. torch MLP forward"
    return [
        Line(row, "no hooks", "torch/none", "torch/none"),
        Line(row, "native no-op forward hook on each Linear", "torch/native", "torch/none"),
        Line(
            row,
            "attached to a bus, no matching hooks",
            "torch/attached",
            "torch/none",
            "<= 1.02x no hooks",
            lambda r: r.ratio("torch/attached", "torch/none").median <= 1.02,
        ),
        Line(row, "hookbus no-op post hook on each Linear", "torch/hookbus", "torch/none"),
        Line(row, "`capture()` of every Linear", "torch/capture", "torch/none"),
        Line(row, "MLP, extra per hook call: native", "torch/native extra", "torch/native extra"),
        Line(
            row,
            "MLP, extra per hook call: hookbus post hook (noisy: a difference of ~45 us times)",
            "torch/hookbus extra",
            "torch/native extra",
            stat=_extra_ratio,
        ),
        Line(row, "4 x `nn.Identity`: no hooks", "hookcost/none", "hookcost/none"),
        Line(
            row,
            "4 x `nn.Identity`, extra per hook call: native",
            "hookcost/native extra",
            "hookcost/native extra",
        ),
        Line(
            row,
            "4 x `nn.Identity`, extra per hook call: hookbus post hook",
            "hookcost/hookbus extra",
            "hookcost/native extra",
            "<= 1.2x native",
            lambda r: _hook_cost_ratio(r).median <= 1.2,
            stat=_hook_cost_ratio,
        ),
    ]
