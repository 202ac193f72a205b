"""How each value of the names vocabulary is read and written, on module and operation points.

A *recipe* knows where one value lives (a module's input or output, an
operation's argument or result, or values computed from those) and its
*view*: how the value, in TransformerLens's layout, is cut from what the point
gives and put back. :meth:`Recipe.install` registers the few hooks it needs on
the vocabulary's private attachment (a bus of its own on the same model), each
of which hands the value to ``emit(value, target)``: that runs the hooks of the
name and returns the value to use, the very object it was given when no hook
replaced it, so an unchanged value costs no write.

Values that the forward never holds are computed only while a hook wants them:
the attention pattern under ``sdpa`` (from the arguments of
``scaled_dot_product_attention``; writing it runs that attention from the
pattern and the values instead), a LayerNorm's normalized input and scale, and
``hook_resid_mid``'s write (the block's output is then the written value plus
the MLP's output, as the block would add them).
"""

from __future__ import annotations

import threading
from typing import Any, Callable, Dict, List, Optional, Tuple

import torch
import torch.nn.functional as F
from torch import nn

from ..adapter import CallContext, Removable

__all__ = [
    "AttentionPattern",
    "HeadsFirst",
    "LastDimSlice",
    "ModuleInput",
    "ModuleOutput",
    "NormScale",
    "OperationResult",
    "PerHeadPart",
    "Recipe",
    "ResidMid",
    "Site",
    "View",
    "Whole",
    "attention_scores",
]

Emit = Callable[[Any, Any], Any]
"""``emit(value, target)``: runs a name's hooks on ``value``; returns what to use."""

Net = Any
"""The private :class:`~hookbus.torch.Attachment` a recipe registers on."""


# --- views: a value in TransformerLens's layout, and back -------------------------------


class View:
    """The whole tensor, as it is (``[batch, pos, d_model]`` for the residual stream)."""

    def read(self, x: torch.Tensor) -> torch.Tensor:
        """The value, cut from ``x``."""
        return x

    def write(self, x: torch.Tensor, value: torch.Tensor) -> torch.Tensor:
        """``x`` with the value replaced by ``value``."""
        return value


Whole = View


class LastDimSlice(View):
    """``x[..., start:stop]``, split into ``heads`` heads when given (``[b, s, h, d]``)."""

    def __init__(self, start: int, stop: int, heads: Optional[int] = None) -> None:
        self.start, self.stop, self.heads = start, stop, heads

    def read(self, x: torch.Tensor) -> torch.Tensor:
        value = (
            x if self.start == 0 and self.stop == x.shape[-1] else x[..., self.start : self.stop]
        )
        return value if self.heads is None else value.unflatten(-1, (self.heads, -1))

    def write(self, x: torch.Tensor, value: torch.Tensor) -> torch.Tensor:
        flat = value if self.heads is None else value.flatten(-2)
        if self.start == 0 and self.stop == x.shape[-1]:
            return flat
        return torch.cat([x[..., : self.start], flat.to(x.dtype), x[..., self.stop :]], dim=-1)


class PerHeadPart(View):
    """Part ``part`` of each head's ``[q k v]`` (GPT-NeoX's ``query_key_value``), as
    ``[b, s, h, d]``."""

    def __init__(self, part: int, heads: int, parts: int = 3) -> None:
        self.part, self.heads, self.parts = part, heads, parts

    def read(self, x: torch.Tensor) -> torch.Tensor:
        return x.unflatten(-1, (self.heads, self.parts, -1))[..., self.part, :]

    def write(self, x: torch.Tensor, value: torch.Tensor) -> torch.Tensor:
        split = x.unflatten(-1, (self.heads, self.parts, -1)).clone()
        split[..., self.part, :] = value
        return split.flatten(-3)


class HeadsFirst(View):
    """An attention tensor ``[b, h, s, d]`` seen as ``[b, s, h, d]``."""

    def read(self, x: torch.Tensor) -> torch.Tensor:
        return x.transpose(1, 2)

    def write(self, x: torch.Tensor, value: torch.Tensor) -> torch.Tensor:
        return value.transpose(1, 2)


# --- recipes --------------------------------------------------------------------------


class Recipe:
    """Where one value lives; :meth:`install` hooks it, returning what undoes that."""

    def install(self, net: Net, emit: Emit, slot: str) -> List[Removable]:
        """Register the private hooks that hand the value to ``emit``."""
        raise NotImplementedError


def _first(output: Any) -> Any:
    return output[0] if isinstance(output, tuple) else output


def _with_first(output: Any, value: Any) -> Any:
    if isinstance(output, tuple):
        items: Tuple[Any, ...] = output  # pyright: ignore[reportUnknownVariableType]
        return (value, *items[1:])
    return value


class ModuleOutput(Recipe):
    """A module's output (the first item of a tuple), through ``view``."""

    def __init__(self, module: nn.Module, view: View) -> None:
        self.module, self.view = module, view

    def install(self, net: Net, emit: Emit, slot: str) -> List[Removable]:
        view = self.view

        def on_output(ctx: CallContext) -> None:
            output = ctx.result
            first = _first(output)
            value = view.read(first)
            new = emit(value, ctx.target)
            if new is not value:
                ctx.result = _with_first(output, view.write(first, new))

        return [net.post(self.module, on_output)]


class ModuleInput(Recipe):
    """A module's first input (positional, or ``hidden_states=``), through ``view``."""

    def __init__(self, module: nn.Module, view: View) -> None:
        self.module, self.view = module, view

    def install(self, net: Net, emit: Emit, slot: str) -> List[Removable]:
        view = self.view

        def on_input(ctx: CallContext) -> None:
            args = ctx.args
            x = args[0] if args else ctx.kwargs["hidden_states"]
            value = view.read(x)
            new = emit(value, ctx.target)
            if new is not value:
                replaced = view.write(x, new)
                if args:
                    ctx.args = (replaced, *args[1:])
                else:
                    ctx.kwargs = {**ctx.kwargs, "hidden_states": replaced}

        return [net.pre(self.module, on_input)]


def _quiet(selection: Any) -> Any:
    """A private operation selection: a function the forward does not call is expected
    (``softmax`` under ``sdpa``), so it does not warn."""
    for site in selection.sites:
        site.warn_missing = False
    return selection


class OperationResult(Recipe):
    """The result of call ``index`` of ``operation`` in a module's forward, through ``view``."""

    def __init__(self, module: nn.Module, operation: str, index: int, view: View) -> None:
        self.module, self.operation, self.index, self.view = module, operation, index, view

    def install(self, net: Net, emit: Emit, slot: str) -> List[Removable]:
        view = self.view
        selection = _quiet(net.operations(self.module, self.operation))
        point = f"{net.name_of(self.module)}:{self.operation}.{self.index}"

        def on_result(ctx: CallContext) -> None:
            output = ctx.result
            value = view.read(output)
            new = emit(value, ctx.target)
            if new is not value:
                ctx.result = view.write(output, new)

        return [net.post(point, on_result), selection]


class Site(Recipe):
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
        raise NotImplementedError


class _SlotHandle(Removable):
    __slots__ = ("site", "slot")

    def __init__(self, site: Site, slot: str) -> None:
        self.site, self.slot = site, slot

    def remove(self) -> None:
        self.site.release(self.slot)


def _unchanged(value: Any, target: Any) -> Any:
    return value


class AttentionPattern(Site):
    """``hook_attn_scores`` and ``hook_pattern`` of one attention module, ``[b, h, q, k]``.

    Under ``eager`` they are the input and output of the attention's ``softmax``.
    Under ``sdpa`` the forward holds neither: they are computed from the
    arguments of ``scaled_dot_product_attention`` (only while a hook wants
    them), and when a hook replaced one, that call returns the pattern times
    the values instead of running.
    """

    SLOTS = ("scores", "pattern")
    OPERATIONS = ("softmax", "scaled_dot_product_attention")

    def __init__(self, module: nn.Module, heads: int) -> None:
        super().__init__()
        self.module, self.heads = module, heads

    def install_site(self, net: Net) -> List[Removable]:
        selection = _quiet(net.operations(self.module, *self.OPERATIONS))
        name = net.name_of(self.module)
        return [net.pre(f"{name}:scaled_dot_product_attention.0", self._on_sdpa), selection]

    def install_slot(self, net: Net, slot: str) -> List[Removable]:
        softmax = f"{net.name_of(self.module)}:softmax.0"
        if slot == "scores":
            return [net.pre(softmax, self._on_softmax_input)]
        return [net.post(softmax, self._on_softmax_output)]

    def _on_softmax_input(self, ctx: CallContext) -> None:
        emit = self.emits.get("scores")
        if emit is not None:
            args = ctx.args
            new = emit(args[0], self.module)
            if new is not args[0]:
                ctx.args = (new, *args[1:])

    def _on_softmax_output(self, ctx: CallContext) -> None:
        emit = self.emits.get("pattern")
        if emit is not None:
            pattern = ctx.result
            new = emit(pattern, self.module)
            if new is not pattern:
                ctx.result = new

    def _on_sdpa(self, ctx: CallContext) -> None:
        emits = self.emits
        if not emits:
            return
        call = _sdpa_arguments(ctx.args, ctx.kwargs)
        q, k, v = call["query"], call["key"], call["value"]
        scores = attention_scores(
            q, k, call["attn_mask"], call["is_causal"], call["scale"], call["enable_gqa"]
        )
        shape = scores.shape
        packed = q.dim() == 4 and q.shape[1] != self.heads  # one query, GQA packed by heads
        seen = scores.reshape(shape[0], self.heads, -1, shape[-1]) if packed else scores
        new_scores = emits.get("scores", _unchanged)(seen, self.module)
        pattern = torch.softmax(new_scores.float(), dim=-1).to(q.dtype)
        new_pattern = emits.get("pattern", _unchanged)(pattern, self.module)
        if new_scores is seen and new_pattern is pattern:
            return  # read only: sdpa runs as it would have
        if call["dropout_p"]:
            raise RuntimeError(
                "hookbus.torch: a hook replaced the attention scores or pattern of "
                f"{ctx.name.partition(':')[0]!r} under sdpa attention with dropout "
                f"(training mode): the pattern is computed outside sdpa and cannot drop "
                f"out as sdpa would. Call model.eval(), or load the model with "
                f"attn_implementation='eager'"
            )
        if new_pattern is pattern:  # the scores were replaced
            new_pattern = torch.softmax(new_scores.float(), dim=-1).to(q.dtype)
        weights = new_pattern.reshape(shape) if packed else new_pattern
        ctx.skip(weights.to(v.dtype) @ _repeat_heads(v, weights.shape[-3]))


_SDPA_PARAMETERS = ("query", "key", "value", "attn_mask", "dropout_p", "is_causal", "scale")


def _sdpa_arguments(args: Tuple[Any, ...], kwargs: Dict[str, Any]) -> Dict[str, Any]:
    call: Dict[str, Any] = {
        "attn_mask": None, "dropout_p": 0.0, "is_causal": False, "scale": None,
        "enable_gqa": False,
    }  # fmt: skip
    call.update(zip(_SDPA_PARAMETERS, args))
    call.update(kwargs)
    return call


def _repeat_heads(x: torch.Tensor, heads: int) -> torch.Tensor:
    """Key-value heads repeated to ``heads`` (GQA), as ``repeat_kv`` and sdpa do."""
    have = x.shape[-3]
    return x if have == heads else x.repeat_interleave(heads // have, dim=-3)


def attention_scores(
    q: torch.Tensor,
    k: torch.Tensor,
    mask: Optional[torch.Tensor],
    is_causal: bool,
    scale: Optional[float],
    enable_gqa: bool = False,
) -> torch.Tensor:
    """The scores ``scaled_dot_product_attention`` takes the softmax of, ``[..., q, k]``.

    Masked positions hold the dtype's minimum, as Hugging Face's eager attention
    adds to them (not ``-inf``).

    Example:
        >>> import torch
        >>> q = k = torch.ones(1, 1, 2, 4)
        >>> attention_scores(q, k, None, True, None)[0, 0, 0]
        tensor([ 2.0000e+00, -3.4028e+38])
    """
    if enable_gqa:
        k = _repeat_heads(k, q.shape[-3])
    factor = scale if scale is not None else q.shape[-1] ** -0.5
    scores = torch.matmul(q, k.transpose(-1, -2)) * factor
    lowest = torch.finfo(scores.dtype).min
    if is_causal:
        keep = torch.ones(q.shape[-2], k.shape[-2], dtype=torch.bool, device=q.device).tril()
        scores = scores.masked_fill(~keep, lowest)
    if mask is not None:
        is_bool = mask.dtype == torch.bool
        scores = scores.masked_fill(~mask, lowest) if is_bool else scores + mask
    return scores


class NormScale(Site):
    """``hook_scale`` and ``hook_normalized`` of one norm: ``[b, s, 1]`` and ``[b, s, d]``.

    A ``LayerNorm`` never holds them: they are computed from its input while a
    hook wants them, and when one was replaced the output is the normalized
    value times the weight plus the bias. Any other norm (RMSNorm) holds both:
    ``1 / rsqrt(...)`` is the scale, the first ``mul`` the normalized value.
    """

    SLOTS = ("scale", "normalized")

    def __init__(self, module: nn.Module) -> None:
        super().__init__()
        self.module = module

    def install_site(self, net: Net) -> List[Removable]:
        if isinstance(self.module, nn.LayerNorm):
            return [net.post(self.module, self._on_layer_norm)]
        return [_quiet(net.operations(self.module, "rsqrt", "mul"))]

    def install_slot(self, net: Net, slot: str) -> List[Removable]:
        if isinstance(self.module, nn.LayerNorm):
            return []
        name = net.name_of(self.module)
        if slot == "scale":
            return [net.post(f"{name}:rsqrt.0", self._on_rsqrt)]
        return [net.post(f"{name}:mul.0", self._on_normalized)]

    def _on_layer_norm(self, ctx: CallContext) -> None:
        emits = self.emits
        norm: Any = self.module
        x = ctx.args[0]
        shape: Tuple[int, ...] = tuple(norm.normalized_shape)
        if "scale" in emits:
            dims = tuple(range(-len(shape), 0))
            variance = x.var(dim=dims, unbiased=False, keepdim=True)
            scale = (variance + norm.eps).sqrt()
            new_scale = emits["scale"](scale, norm)
            if new_scale is not scale:
                normalized = (x - x.mean(dim=dims, keepdim=True)) / new_scale
                normalized = emits.get("normalized", _unchanged)(normalized, norm)
                ctx.result = _affine(norm, normalized)
                return
        if "normalized" in emits:
            normalized = F.layer_norm(x, shape, None, None, norm.eps)
            new = emits["normalized"](normalized, norm)
            if new is not normalized:
                ctx.result = _affine(norm, new)

    def _on_rsqrt(self, ctx: CallContext) -> None:
        emit = self.emits.get("scale")
        if emit is not None:
            inverse = ctx.result
            scale = 1 / inverse
            new = emit(scale, self.module)
            if new is not scale:
                ctx.result = 1 / new

    def _on_normalized(self, ctx: CallContext) -> None:
        emit = self.emits.get("normalized")
        if emit is not None:
            normalized = ctx.result
            new = emit(normalized, self.module)
            if new is not normalized:
                ctx.result = new


def _affine(norm: Any, normalized: torch.Tensor) -> torch.Tensor:
    if norm.weight is not None:
        normalized = normalized * norm.weight
    if norm.bias is not None:
        normalized = normalized + norm.bias
    return normalized


class ResidMid(Recipe):
    """``hook_resid_mid``: the residual stream between attention and MLP, ``[b, s, d]``.

    It is read as the input of the module before the MLP (``mid``, the norm).
    Writing it replaces that input and the block's output, which is then the
    written value plus the output of ``added`` (the MLP), as the block adds them.
    """

    def __init__(self, block: nn.Module, mid: nn.Module, added: nn.Module) -> None:
        self.block, self.mid, self.added = block, mid, added
        self._local = threading.local()  # this thread's written value, within one block call

    def install(self, net: Net, emit: Emit, slot: str) -> List[Removable]:
        local = self._local

        def on_mid(ctx: CallContext) -> None:
            args = ctx.args
            x = args[0] if args else ctx.kwargs["hidden_states"]
            new = emit(x, ctx.target)
            if new is not x:
                if args:
                    ctx.args = (new, *args[1:])
                else:
                    ctx.kwargs = {**ctx.kwargs, "hidden_states": new}
                local.written = new

        def on_added(ctx: CallContext) -> None:
            if getattr(local, "written", None) is not None:
                local.added = _first(ctx.result)

        def on_block(ctx: CallContext) -> None:
            written = getattr(local, "written", None)
            if written is not None:
                local.written = None
                added, local.added = local.added, None
                output = ctx.result
                first = _first(output)
                ctx.result = _with_first(output, (written + added).view(first.shape))

        return [
            net.pre(self.mid, on_mid),
            net.post(self.added, on_added),
            # before the block's other post hooks: hook_resid_post sees the written sum
            net.post(self.block, on_block, priority=1_000_000),
        ]
