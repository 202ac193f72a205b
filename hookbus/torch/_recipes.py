"""How each value of the names vocabulary is read and written, on module and operation points.

A *recipe* knows where one value lives (a module's input or output, an
operation's argument or result, or values computed from those) and its view
(:mod:`._head_views`). :meth:`Recipe.install` registers the few hooks it needs
on the vocabulary's private attachment (a bus of its own on the same model: the
:class:`Net`), each of which hands the value to ``emit(value, target)``: that
runs the hooks of the name and returns the value to use, the very object it was
given when no hook replaced it, so an unchanged value costs no write.

Values the forward never holds are computed only while a hook wants them: a
head's contribution to the attention output (:class:`HeadResult`), and the
recipes of :mod:`._attention_pattern` and :mod:`._norm_scale`, which several
names share (:class:`Site`). Writing ``hook_resid_mid`` adds what was written
to the block's output too (:class:`ResidMid`).
"""

from __future__ import annotations

import threading
import weakref
from typing import Any, Callable, Dict, Iterator, List, Optional, Tuple, Union

import torch
from torch import nn
from typing_extensions import Protocol, Unpack

from ..adapter import CallContext, Handle, HookOptions, Removable
from ._forward_swap import ForwardSwap
from ._function_swap import Hold
from ._head_views import View
from ._operations import OperationSelection
from ._script_refusal import hold_script_refusal, release_script_refusal

__all__ = [
    "Batched",
    "Bracketed",
    "Emit",
    "Flattened",
    "HeadResult",
    "ModuleInput",
    "ModuleOutput",
    "Net",
    "OperationResult",
    "Recipe",
    "ResidMid",
    "Site",
    "first_item",
    "linear_weight",
    "quiet",
    "swapped",
    "unchanged",
    "with_first_item",
]

Hook = Callable[[CallContext], None]
Emit = Callable[[Any, Any], Any]
"""``emit(value, target)``: runs a name's hooks on ``value``; returns what to use."""


class Net(Protocol):
    """What a recipe registers on: the vocabulary's private
    :class:`~hookbus.torch.Attachment` of the model."""

    def pre(
        self, selector: Union[str, nn.Module], hook: Hook, /, **options: Unpack[HookOptions]
    ) -> Handle:
        """A pre hook on a module or an operation point."""
        ...

    def post(
        self, selector: Union[str, nn.Module], hook: Hook, /, **options: Unpack[HookOptions]
    ) -> Handle:
        """A post hook on a module or an operation point."""
        ...

    def around(
        self,
        selector: Union[str, nn.Module],
        hook: Callable[[CallContext], Iterator[None]],
        /,
        **options: Unpack[HookOptions],
    ) -> Handle:
        """An around hook on a module."""
        ...

    def operations(self, selector: Any, *functions: Any) -> OperationSelection:
        """Operation points inside a module's forward."""
        ...

    def name_of(self, module: nn.Module) -> str:
        """A module's name on the attachment."""
        ...

    def module(self, name: str) -> nn.Module:
        """The module named ``name`` on the attachment (``KeyError`` once collected)."""
        ...

    def detach(self) -> None:
        """Remove every hook registered on it."""
        ...


class Recipe(Protocol):
    """Where one value lives; :meth:`install` hooks it, returning what undoes that."""

    def install(self, net: Net, emit: Emit, slot: str) -> List[Removable]:
        """Register the private hooks that hand the value to ``emit``."""
        ...


def first_item(output: Any) -> Any:
    """A module's output, or the first item of a tuple output (an attention's)."""
    if isinstance(output, tuple):
        items: Tuple[Any, ...] = output  # pyright: ignore[reportUnknownVariableType]
        return items[0]
    return output


def with_first_item(output: Any, value: Any) -> Any:
    """``output`` with ``value`` in place of :func:`first_item`."""
    if isinstance(output, tuple):
        items: Tuple[Any, ...] = output  # pyright: ignore[reportUnknownVariableType]
        return (value, *items[1:])
    return value


def _first_input(ctx: CallContext) -> Any:
    return ctx.args[0] if ctx.args else ctx.kwargs["hidden_states"]


def _with_first_input(ctx: CallContext, value: Any) -> None:
    args = ctx.args
    if args:
        ctx.args = (value, *args[1:])
    else:
        ctx.kwargs = {**ctx.kwargs, "hidden_states": value}


def unchanged(value: Any, target: Any) -> Any:
    """The ``emit`` of a name with no hook: the value as it is."""
    return value


def quiet(selection: OperationSelection) -> OperationSelection:
    """A private operation selection: a function the forward does not call is expected
    (``softmax`` under ``sdpa``), so it does not warn."""
    for site in selection.sites:
        site.warn_missing = False
    return selection


def swapped(selection: OperationSelection, *names: str) -> List[Removable]:
    """A private selection of ``torch.nn.functional`` functions seen through function
    swaps (:mod:`._function_swap`), not a mode: what undoes both (the swaps' hold also
    lets go of them when collected, with a model and bus dropped with their hooks on)."""
    for site in quiet(selection).sites:
        site.see_through_swaps()
    return [selection, Hold(names)]


class ModuleOutput:
    """A module's output (the first item of a tuple), through ``view``."""

    def __init__(self, module: nn.Module, view: View) -> None:
        self.module, self.view = module, view

    def install(self, net: Net, emit: Emit, slot: str) -> List[Removable]:
        view = self.view

        def on_output(ctx: CallContext) -> None:
            output = ctx.result
            first = first_item(output)
            value = view.read(first)
            new = emit(value, ctx.target)
            if new is not value:
                ctx.result = with_first_item(output, view.write(first, new))

        return [net.post(self.module, on_output)]


class ModuleInput:
    """A module's first input (positional, or ``hidden_states=``), through ``view``."""

    def __init__(self, module: nn.Module, view: View) -> None:
        self.module, self.view = module, view

    def install(self, net: Net, emit: Emit, slot: str) -> List[Removable]:
        view = self.view

        def on_input(ctx: CallContext) -> None:
            x = _first_input(ctx)
            value = view.read(x)
            new = emit(value, ctx.target)
            if new is not value:
                _with_first_input(ctx, view.write(x, new))

        return [net.pre(self.module, on_input)]


class OperationResult:
    """The result of call ``index`` of ``operation`` in a module's forward, through ``view``."""

    def __init__(self, module: nn.Module, operation: str, index: int, view: View) -> None:
        self.module, self.operation, self.index, self.view = module, operation, index, view

    def install(self, net: Net, emit: Emit, slot: str) -> List[Removable]:
        view = self.view
        selection = quiet(net.operations(self.module, self.operation))
        point = f"{net.name_of(self.module)}:{self.operation}.{self.index}"

        def on_result(ctx: CallContext) -> None:
            output = ctx.result
            value = view.read(output)
            new = emit(value, ctx.target)
            if new is not value:
                ctx.result = view.write(output, new)

        return [net.post(point, on_result), selection]


class Site:
    """A recipe shared by several names (the scores and the pattern of one layer):
    installed while any of them has hooks, each name's ``emit`` in its slot."""

    def __init__(self) -> None:
        self.emits: Dict[str, Emit] = {}
        self._installed: List[Removable] = []
        self._lock = threading.Lock()

    def install(self, net: Net, emit: Emit, slot: str) -> List[Removable]:
        with self._lock:
            first = not self.emits
            self.emits = {**self.emits, slot: emit}
        if first:
            self._installed = self.install_site(net)
        return [*self.install_slot(net, slot), _SlotHandle(self, slot)]

    def release(self, slot: str) -> None:
        """Take ``slot``'s emit out; the last one out removes the site's hooks."""
        with self._lock:
            emits = dict(self.emits)
            emits.pop(slot, None)
            self.emits = emits
            installed = [] if emits else self._installed
            if not emits:
                self._installed = []
        for handle in installed:
            handle.remove()

    def install_site(self, net: Net) -> List[Removable]:
        """Register what the site's names share (an operation selection), once."""
        return []

    def install_slot(self, net: Net, slot: str) -> List[Removable]:
        """Register the private hooks that one name of the site needs."""
        return []


class _SlotHandle(Removable):
    __slots__ = ("site", "slot")

    def __init__(self, site: Site, slot: str) -> None:
        self.site, self.slot = site, slot

    def remove(self) -> None:
        self.site.release(self.slot)


class ResidMid:
    """``hook_resid_mid``: the residual stream between attention and MLP, ``[b, s, d]``.

    It is read as the input of the norm before the MLP (``mid``). Writing it
    replaces that input, and adds the change to the block's output: the block
    adds the residual to the MLP's output (which ran on the written value), so
    its output is then the written value plus that, as if the block had held it.
    """

    def __init__(self, block: nn.Module, mid: nn.Module) -> None:
        self.block, self.mid = block, mid
        self._local = threading.local()  # this thread's change, within one block call

    def install(self, net: Net, emit: Emit, slot: str) -> List[Removable]:
        local = self._local

        def on_mid(ctx: CallContext) -> None:
            x = _first_input(ctx)
            new = emit(x, ctx.target)
            if new is not x:
                _with_first_input(ctx, new)
                local.change = new - x

        return [net.pre(self.mid, on_mid), Bracketed(self.block, _BlockChange(local).around)]


class Bracketed(Removable):
    """``bracket(run, module, *args, **kwargs)`` around ``module``'s forward until
    removed (:meth:`ForwardSwap.add_bracket`): what a recipe uses to act inside the
    forward itself, only in a call whose forward runs (a call skipped or replaced runs
    none), and in the very call it started, whatever happens to the hooks meanwhile."""

    __slots__ = ("_bracket", "_module", "_swap")

    def __init__(self, module: nn.Module, bracket: Callable[..., Any]) -> None:
        self._bracket = bracket  # held here: the swap holds a bound method weakly
        self._module = weakref.ref(module)
        self._swap: Optional[ForwardSwap] = ForwardSwap.acquire(module)
        self._swap.add_bracket(bracket)
        hold_script_refusal(module)

    def remove(self) -> None:
        swap, self._swap = self._swap, None
        if swap is None:
            return
        swap.remove_bracket(self._bracket)
        swap.release()
        module = self._module()
        if module is not None:
            release_script_refusal(module)


class _BlockChange:
    """Adds a written ``hook_resid_mid``'s change to its block's output, from a bracket of
    the block's forward (:class:`Bracketed`).

    Inside the forward, so every post hook of the block sees the sum (``hook_resid_post``
    included). And in the very call that wrote it, whatever happens to the hooks
    meanwhile: a call already in the bracket finishes there, so a hook removed as it
    writes (``once=True``), or a ``detach()`` from the name's hook, leaves no call half
    written, and no change is left to the next call.
    """

    __slots__ = ("__weakref__", "_local")  # the swap holds the bracket weakly

    def __init__(self, local: threading.local) -> None:
        self._local = local

    def around(self, run: Callable[..., Any], module: nn.Module, *args: Any, **kwargs: Any) -> Any:
        local = self._local
        local.change = None
        try:
            output = run(module, *args, **kwargs)
            change = local.change
            if change is None:
                return output
            first = first_item(output)
            return with_first_item(output, first + change.view(first.shape))
        finally:
            local.change = None


class HeadResult:
    """``hook_result``: each head's part of the attention output, ``[b, s, head, d_model]``.

    The output projection ``o`` is linear in its input ``hook_z``: head ``h``'s part
    is ``hook_z``'s head ``h`` times that head's columns of the weight (no bias), as
    TransformerLens computes it. Computed only while a hook wants it; writing it
    adds the change of the sum over heads to the projection's output.
    """

    def __init__(self, o: nn.Module, heads: int) -> None:
        self.o, self.heads = o, heads

    def install(self, net: Net, emit: Emit, slot: str) -> List[Removable]:
        def on_output(ctx: CallContext) -> None:
            z = _first_input(ctx)
            result = self.split(ctx.target, z)
            new = emit(result, ctx.target)
            if new is not result:
                output = ctx.result
                first = first_item(output)
                changed = (new - result).sum(-2).to(first.dtype)
                ctx.result = with_first_item(output, first + changed)

        return [net.post(self.o, on_output)]

    def split(self, o: nn.Module, z: torch.Tensor) -> torch.Tensor:
        """Each head's part of ``o(z)``, without the bias: ``[..., head, d_model]``."""
        weight = linear_weight(o)
        if weight is None:
            raise RuntimeError(
                f"hookbus.torch: the output projection is now a {type(o).__name__}, whose "
                f"weight cannot be split by head: hook_result needs an nn.Linear, a "
                f"transformers Conv1D, or a PEFT LoRA layer on one"
            )
        heads = torch.unflatten(z, -1, (self.heads, -1))
        per_head = torch.unflatten(weight, -1, (self.heads, -1))  # [d_model, head, d_head]
        return torch.einsum("...hd,mhd->...hm", heads, per_head.to(heads.dtype))


def linear_weight(module: nn.Module) -> Optional[torch.Tensor]:
    """The weight ``[out, in]`` of a linear layer (``nn.Linear``, transformers' ``Conv1D``,
    or a PEFT LoRA layer on one, its active adapters added); ``None`` for anything else
    (a DoRA layer, a quantized one).

    Example:
        >>> from torch import nn
        >>> linear_weight(nn.Linear(3, 2)).shape, linear_weight(nn.ReLU())
        (torch.Size([2, 3]), None)
    """
    base = getattr(module, "base_layer", None)
    delta: Any = getattr(module, "get_delta_weight", None)
    if isinstance(base, nn.Module) and callable(delta):  # PEFT's LoRA: base + B @ A * scale
        dora: Any = getattr(module, "use_dora", {})
        if any(dora.values()):
            return None
        raw: Any = getattr(base, "weight", None)
        if _own_weight(base) is None or not isinstance(raw, torch.Tensor):
            return None
        if getattr(module, "disable_adapters", False) or getattr(module, "merged", False):
            return _own_weight(base)  # merged: the base weight holds the adapters already
        adapters: Any = getattr(module, "active_adapters", ())
        known: Any = getattr(module, "lora_A", {})
        total: torch.Tensor = raw
        for adapter in adapters:
            if adapter in known:
                change: Any = delta(adapter)  # in the base layer's layout
                total = total + change
        return _own_weight(base, total)
    return _own_weight(module)


def _own_weight(
    module: nn.Module, weight: Optional[torch.Tensor] = None
) -> Optional[torch.Tensor]:
    """``module``'s weight (or ``weight`` in its layout) as ``[out, in]``, if it is an
    ``nn.Linear`` or a transformers ``Conv1D`` (which stores ``[in, out]``)."""
    found: Any = getattr(module, "weight", None) if weight is None else weight
    if not isinstance(found, torch.Tensor):
        return None
    if type(module) is nn.Linear:
        return found
    if type(module).__name__ == "Conv1D":
        return found.T
    return None


class Batched:
    """A value the model may compute once for the whole batch (GPT-2's position
    embedding, ``[1, pos, d_model]`` when every sequence has the same positions), seen
    as ``[batch, pos, ...]`` as TransformerLens's ``hook_pos_embed`` is: ``recipe`` with
    the batch size of ``body``'s input (``input_ids`` or ``inputs_embeds``). A written
    value of the batch's size replaces it (the model adds it to the token embeddings)."""

    def __init__(self, recipe: Recipe, body: nn.Module) -> None:
        self.recipe, self.body = recipe, body
        self._local = threading.local()  # this thread's batch size, within one body call

    def install(self, net: Net, emit: Emit, slot: str) -> List[Removable]:
        local = self._local

        def on_body(ctx: CallContext) -> None:
            x = ctx.args[0] if ctx.args else ctx.kwargs.get("input_ids")
            if x is None:
                x = ctx.kwargs.get("inputs_embeds")
            local.batch = x.shape[0] if isinstance(x, torch.Tensor) and x.dim() else None

        def batched(value: Any, target: Any) -> Any:
            batch: Optional[int] = getattr(local, "batch", None)
            if batch is None or value.shape[0] == batch:
                return emit(value, target)
            seen = value.expand(batch, *value.shape[1:])
            new = emit(seen, target)
            return value if new is seen else new

        return [net.pre(self.body, on_body), *self.recipe.install(net, batched, slot)]


class Flattened:
    """A value the block holds as ``[batch * pos, ...]`` (OPT's MLP side), seen as
    ``[batch, pos, ...]``: ``recipe`` with the sizes of the block's input."""

    def __init__(self, recipe: Recipe, block: nn.Module) -> None:
        self.recipe, self.block = recipe, block
        self._local = threading.local()  # this thread's [batch, pos], within one block call

    def install(self, net: Net, emit: Emit, slot: str) -> List[Removable]:
        local = self._local

        def on_block(ctx: CallContext) -> None:
            local.sizes = _first_input(ctx).shape[:-1]

        def unflattened(value: Any, target: Any) -> Any:
            sizes: Optional[Tuple[int, ...]] = getattr(local, "sizes", None)
            if sizes is None or value.dim() == len(sizes) + 1:
                return emit(value, target)  # already [batch, pos, ...]
            seen = value.view(*sizes, *value.shape[1:])
            new = emit(seen, target)
            return value if new is seen else new.reshape(value.shape)

        return [net.pre(self.block, on_block), *self.recipe.install(net, unflattened, slot)]
