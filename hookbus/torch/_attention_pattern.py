"""The attention scores and pattern of one layer, under eager and sdpa attention.

Under ``eager`` they are the input and output of the attention's ``softmax``
(operation points). Under ``sdpa`` the forward holds neither: they are computed
from the arguments of ``scaled_dot_product_attention`` only while a hook wants
them, and when a hook replaced one, that call returns the pattern times the
values instead of running, so writing works under both implementations.

Both functions are seen through function swaps (:mod:`._function_swap`), as a
hand-written monkeypatch of ``F.softmax`` would see them: a mode would tax every
other torch call of the attention. An attention that calls neither (flash or flex
attention) is warned of at its first call whose forward ran (a skipped or patched call
runs none): its pattern hooks would never run.
"""

from __future__ import annotations

import warnings
import weakref
from typing import Any, Dict, List, Optional, Tuple

import torch
from torch import nn

from ..adapter import CallContext, Removable
from ._operations import RUN, ArgumentsReader, ResultReader
from ._recipes import Net, Site, swapped
from ._user_line import stacklevel_outside_hookbus

__all__ = ["AttentionPattern", "attention_scores"]


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
        self.name = ""  # the attention's name on the private attachment, once installed

    def install_site(self, net: Net) -> List[Removable]:
        selection = net.operations(self.module, *self.OPERATIONS)
        name = net.name_of(self.module)

        def check_seen(ctx: CallContext) -> None:  # after the first call whose forward ran
            if any(site.discovering for site in selection.sites):
                return  # skipped or replaced: no forward ran, so none is judged
            held = check()
            if held is not None:
                held.remove()
            found = selection.names
            if not any(f"{name}:{operation}.0" in found for operation in self.OPERATIONS):
                _warn_unseen(name)

        self.name = name
        handle = net.post(self.module, check_seen)
        check = weakref.ref(handle)  # the hook holding its handle would make a cycle
        # Read straight from the call of the operation (no context of their own) while
        # they are its only private hooks, as they are unless both names are hooked.
        return [
            net.pre(f"{name}:scaled_dot_product_attention.0", ArgumentsReader(self._on_sdpa)),
            handle,
            *swapped(selection, *self.OPERATIONS),
        ]

    def install_slot(self, net: Net, slot: str) -> List[Removable]:
        softmax = f"{net.name_of(self.module)}:softmax.0"
        if slot == "scores":
            return [net.pre(softmax, self._on_softmax_input)]
        # The pattern's emit itself reads the result (its target: this attention).
        return [net.post(softmax, ResultReader(self.emits[slot]))]

    def _on_softmax_input(self, ctx: CallContext) -> None:
        emit = self.emits.get("scores")
        if emit is not None:
            args = ctx.args
            new = emit(args[0], self.module)
            if new is not args[0]:
                ctx.args = (new, *args[1:])

    def _on_sdpa(self, args: Tuple[Any, ...], kwargs: Dict[str, Any], module: Any) -> Any:
        emits = self.emits
        if not emits:
            return RUN
        call = _sdpa_arguments(args, kwargs)
        q, k, v = call["query"], call["key"], call["value"]
        scores = attention_scores(
            q, k, call["attn_mask"], call["is_causal"], call["scale"], call["enable_gqa"]
        )
        shape = scores.shape
        packed = q.dim() == 4 and q.shape[1] != self.heads  # one query, GQA packed by heads
        seen = scores.reshape(shape[0], self.heads, -1, shape[-1]) if packed else scores
        on_scores, on_pattern = emits.get("scores"), emits.get("pattern")
        new_scores = seen if on_scores is None else on_scores(seen, self.module)
        pattern = _softmax(new_scores, q.dtype)
        new_pattern = pattern if on_pattern is None else on_pattern(pattern, self.module)
        if new_scores is seen and new_pattern is pattern:
            return RUN  # read only: sdpa runs as it would have
        if call["dropout_p"]:
            raise RuntimeError(
                "hookbus.torch: a hook replaced the attention scores or pattern of "
                f"{self.name!r} under sdpa attention with dropout "
                f"(training mode): the pattern is computed outside sdpa and cannot drop "
                f"out as sdpa would. Call model.eval(), or load the model with "
                f"attn_implementation='eager'"
            )
        if new_pattern is pattern:  # the scores were replaced
            new_pattern = _softmax(new_scores, q.dtype)
        weights = new_pattern.reshape(shape) if packed else new_pattern
        return weights.to(v.dtype) @ _repeat_heads(v, weights.shape[-3])


def _softmax(scores: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """The pattern of ``scores``, computed in float32 and given ``dtype``: the conversions
    skipped where they change nothing (each is a call through torch's dispatcher)."""
    if scores.dtype == dtype == torch.float32:
        return torch.softmax(scores, dim=-1)
    return torch.softmax(scores.float(), dim=-1).to(dtype)


def _warn_unseen(name: str) -> None:
    warnings.warn(
        f"hookbus.torch: the attention {name!r} called neither "
        f"torch.nn.functional.softmax nor scaled_dot_product_attention (flash or flex "
        f"attention computes its pattern out of sight), so hook_attn_scores and "
        f"hook_pattern never run on it. Load the model with attn_implementation='eager' "
        f"or 'sdpa' to read or write them",
        RuntimeWarning,
        stacklevel=stacklevel_outside_hookbus(),
    )


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
        scores = scores.masked_fill(_above_diagonal(q.shape[-2], k.shape[-2], q.device), lowest)
    if mask is not None:
        is_bool = mask.dtype == torch.bool
        scores = scores.masked_fill(~mask, lowest) if is_bool else scores + mask
    return scores


# The last causal mask made, ((queries, keys, device), mask): a forward asks each layer
# for the same one. Only small ones are kept (a long context's would hold memory), and
# none made under inference mode (autograd refuses to save an inference tensor) or
# while torch.compile traces (the tensor would be the graph's).
_last_mask: Optional[Tuple[Tuple[int, int, torch.device], torch.Tensor]] = None
_KEPT_MASK_SIZE = 1 << 16


def _above_diagonal(queries: int, keys: int, device: torch.device) -> torch.Tensor:
    """The positions ``is_causal`` masks, ``[queries, keys]``: above the diagonal, as
    ``scaled_dot_product_attention`` aligns it (top left)."""
    global _last_mask
    key = (queries, keys, device)
    last = _last_mask
    if last is not None and last[0] == key:
        return last[1]
    keep = torch.ones(queries, keys, dtype=torch.bool, device=device).tril()
    above = ~keep
    if (
        queries * keys <= _KEPT_MASK_SIZE
        and not torch.is_inference_mode_enabled()
        and not torch.compiler.is_compiling()
    ):
        _last_mask = (key, above)
    return above
