"""The hook point of one name of the vocabulary (``"blocks.0.attn.hook_z"``).

A :class:`NamePoint` is a value, not a call: its hooks are ``post`` hooks that
read ``ctx.result`` and may replace it. While it has hooks, its recipe's private
hooks run on the model (:mod:`._recipes`) and hand it the value; with none,
nothing runs. Made on demand by the :class:`~hookbus.torch.Vocabulary`.
"""

from __future__ import annotations

import itertools
import threading
from typing import Any, Callable, List, Optional

from ..adapter import (
    CallContext,
    EventBus,
    Layout,
    PointPlan,
    PostRunner,
    Removable,
    compile_post_phase,
    layout_of,
    run_phase,
)
from ._module_kinds import NAME_POINT
from ._recipes import Net, Recipe

__all__ = ["NAME_KINDS", "NamePoint", "is_name"]

_for_call = CallContext.for_call

NAME_KINDS = NAME_POINT.runs
"""The hook kind a name takes (its row of the table): its hooks see the value as
``ctx.result``."""


def is_name(name: str) -> bool:
    """Whether a name or pattern is meant for the vocabulary (it names a ``hook_``).

    Example:
        >>> is_name("blocks.*.hook_z"), is_name("transformer.h.*")
        (True, False)
    """
    return "hook_" in name


class NamePoint:
    """The hook point of one name of the vocabulary (``"blocks.0.attn.hook_z"``).

    Its hooks are ``post`` hooks: ``ctx.result`` is the value, and assigning it
    replaces the value in the forward (keeping its shape). ``ctx.target`` is the
    module whose hook found the value. While it has hooks, its recipe's private
    hooks run on the model; with none, nothing does.

    Example:
        >>> import transformers, hookbus, hookbus.torch
        >>> config = transformers.GPT2Config(n_layer=1, n_head=2, n_embd=8, vocab_size=10)
        >>> bus = hookbus.EventBus()
        >>> net = hookbus.torch.attach(
        ...     transformers.GPT2LMHeadModel(config), bus, names="transformer")
        >>> bus.registry.points("blocks.0.attn.hook_z")
        [<NamePoint 'blocks.0.attn.hook_z' no hooks>]
    """

    __slots__ = (
        "__weakref__", "_calls", "_fast", "_installed", "_lock", "_net", "bus", "name",
        "on_hooked", "plan", "recipe", "registry", "slot",
    )  # fmt: skip

    kinds = NAME_KINDS
    kind = NAME_POINT.name
    is_async = False
    skip_refusal = NAME_POINT.skip_refusal

    def __init__(self, bus: EventBus, net: Net, name: str, recipe: Recipe, slot: str) -> None:
        self.bus = bus
        self.registry = bus.registry
        self.name = name
        self.recipe = recipe
        self.slot = slot
        self.plan: Optional[PointPlan] = None
        # The post phase generated for the plan when its hooks are plain (on a plain bus):
        # set whole, read once per value.
        self._fast: Optional[PostRunner] = None
        self._net: Optional[Net] = net
        self._installed: List[Removable] = []
        self._calls = itertools.count()
        self._lock = threading.Lock()
        #: Called with ``True`` when the name comes to have hooks (its recipe installed),
        #: ``False`` when it has none any more (the vocabulary watches what it reads).
        self.on_hooked: Optional[Callable[[NamePoint, bool], None]] = None

    @property
    def where(self) -> str:
        """How the value is read (the recipe's name)."""
        return type(self.recipe).__name__

    def layout(self) -> Layout:
        """A value has no arguments: ``ctx.arguments`` is empty."""
        return layout_of(_no_arguments, self.name)

    def invalidate(self) -> None:
        """Take the plan of the hooks that match now; install or remove the recipe."""
        plan = self.registry.plan(self) if self._net is not None else None
        if plan is not None:
            hooks = {
                kind: tuple(h for h in handles if h.match is None or is_name(h.name))
                for kind, handles in plan.hooks.items()
            }  # a pattern without "hook_" is meant for modules: it skips names
            if not any(hooks.values()):
                plan = None
            elif hooks != plan.hooks:
                registry = self.registry
                plan = PointPlan(hooks, registry.errors == "raise" and registry.tracer is None)
        fast = plan.fast.get("post") if plan is not None else None
        with self._lock:
            self._fast = None
            self.plan = plan
            self._fast = (
                compile_post_phase(fast, plan.post, name=self.name, counter=self._calls)
                if fast and plan is not None
                else None
            )
            net = self._net
            was_hooked = bool(self._installed)
            if plan is not None and not self._installed and net is not None:
                self._installed = self.recipe.install(net, self.emit, self.slot)
            elif plan is None and self._installed:
                installed, self._installed = self._installed, []
                for handle in installed:
                    handle.remove()
            hooked = bool(self._installed)
            on_hooked = self.on_hooked
            if hooked != was_hooked and on_hooked is not None:  # in order: under the lock
                on_hooked(self, hooked)

    def emit(self, value: Any, target: Any) -> Any:
        """Run this name's hooks on ``value``; what they left in ``ctx.result``."""
        run = self._fast
        if run is not None:  # the common case (plain hooks): the generated post phase
            new = run(self, target, (), {}, value)
        else:
            plan = self.plan
            if plan is None:
                return value
            ctx = _for_call(self.name, target, (), {}, next(self._calls), "post", self, value)
            run_phase(self.registry, plan.post, ctx)
            new = ctx.result
        if new is not value:
            _check_written(self.name, value, new)
        return new

    def uninstall(self) -> None:
        """No hook of this point runs any more, and its recipe's hooks are gone."""
        with self._lock:
            self._net = None
            self.plan = self._fast = None
            installed, self._installed = self._installed, []
        for handle in installed:
            handle.remove()

    def __repr__(self) -> str:
        return f"<NamePoint {self.name!r} {'hooked' if self.plan else 'no hooks'}>"


def _no_arguments() -> None:
    """What a name's ``ctx.arguments`` binds to: nothing."""


def _check_written(name: str, value: Any, new: Any) -> None:
    shape = getattr(value, "shape", None)
    if getattr(new, "shape", None) != shape:
        got = f"shape {tuple(new.shape)}" if hasattr(new, "shape") else type(new).__name__
        raise ValueError(
            f"a hook on {name!r} set ctx.result to {got}; the value it replaces has "
            f"shape {tuple(shape) if shape is not None else '?'}, and a replacement must "
            f"keep it"
        )
