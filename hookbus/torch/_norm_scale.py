"""The scale and the normalized value of one norm (LayerNorm or RMSNorm).

A ``LayerNorm`` never holds them: they are computed from its input while a
hook wants them, and when one was replaced the output is the normalized value
times the weight plus the bias. An RMSNorm holds both: ``1 / rsqrt(...)`` is the
scale, the first ``mul`` the normalized value (operation points).

Either is read only in a call whose forward runs: a call skipped by a pre hook
(on any bus) or replaced by ``patch`` normalizes nothing, so it has neither
value. A LayerNorm's are computed in a bracket of its forward (:class:`Bracketed`),
which such a call never runs; an RMSNorm's operations are not called in it.
"""

from __future__ import annotations

import threading
from typing import Any, Callable, List, Optional, Tuple

import torch
import torch.nn.functional as F
from torch import nn

from ..adapter import CallContext, Handle, Removable
from ._operations import OperationSelection
from ._recipes import Bracketed, Net, Site, quiet, unchanged

__all__ = ["NormScale"]


class NormScale(Site):
    """``hook_scale`` and ``hook_normalized`` of one norm: ``[b, s, 1]`` and ``[b, s, d]``.

    A ``LayerNorm`` never holds them: they are computed from its input, inside its
    forward, while a hook wants them, and when one was replaced the output is the
    normalized value times the weight plus the bias. Any other norm (RMSNorm) holds
    both: ``1 / rsqrt(...)`` is the scale, the first ``mul`` the normalized value.
    """

    SLOTS = ("scale", "normalized")

    def __init__(self, module: nn.Module) -> None:
        super().__init__()
        self.module = module
        self._read = threading.local()  # whether this thread's norm call held the value
        self._check: Optional[Handle] = None
        self._selection: Optional[OperationSelection] = None

    def install_site(self, net: Net) -> List[Removable]:
        if isinstance(self.module, nn.LayerNorm):
            return [Bracketed(self.module, self._layer_norm)]
        # A norm that calls no rsqrt (OLMo's LayerNorm without affine) would leave the
        # names' hooks silent: its first call that ran and held no value is refused.
        self._check = net.post(self.module, self._check_read)
        self._selection = quiet(net.operations(self.module, "rsqrt", "mul"))
        return [self._selection, self._check]

    def _check_read(self, ctx: CallContext) -> None:
        if getattr(self._read, "held", False):
            self._read.held = False
            if self._check is not None:
                self._check.remove()  # a norm that held it once holds it on every call
            return
        selection = self._selection
        if selection is not None and any(site.discovering for site in selection.sites):
            # No forward of the norm ran yet (this call was skipped or replaced): the
            # operation site, whose post hook ran before this one, still discovers.
            return
        raise ValueError(
            f"the norm {ctx.name!r} ({type(self.module).__name__}) holds no "
            f"{' or '.join('hook_' + slot for slot in self.emits)} value: the names "
            "vocabulary reads it from an nn.LayerNorm, or from an RMSNorm's torch.rsqrt "
            "and the first mul after it, and this norm is neither; read its input and "
            "output (its module name) instead"
        )

    def install_slot(self, net: Net, slot: str) -> List[Removable]:
        if isinstance(self.module, nn.LayerNorm):
            return []
        name = net.name_of(self.module)
        if slot == "scale":
            return [net.post(f"{name}:rsqrt.0", self._on_rsqrt)]
        return [net.post(f"{name}:mul.0", self._on_normalized)]

    def _layer_norm(self, run: Callable[..., Any], norm: Any, *args: Any, **kwargs: Any) -> Any:
        """The LayerNorm's forward, bracketed: its values, from the input it normalizes."""
        emits = self.emits
        x = args[0] if args else kwargs["input"]
        shape: Tuple[int, ...] = tuple(norm.normalized_shape)
        if "scale" in emits:
            dims = tuple(range(-len(shape), 0))
            variance = x.var(dim=dims, unbiased=False, keepdim=True)
            scale = (variance + norm.eps).sqrt()
            new_scale = emits["scale"](scale, norm)
            if new_scale is not scale:
                normalized = (x - x.mean(dim=dims, keepdim=True)) / new_scale
                normalized = emits.get("normalized", unchanged)(normalized, norm)
                return _affine(norm, normalized)
        if "normalized" in emits:
            normalized = F.layer_norm(x, shape, None, None, norm.eps)
            new = emits["normalized"](normalized, norm)
            if new is not normalized:
                return _affine(norm, new)
        return run(norm, *args, **kwargs)

    def _on_rsqrt(self, ctx: CallContext) -> None:
        self._read.held = True
        emit = self.emits.get("scale")
        if emit is not None:
            inverse = ctx.result
            scale = 1 / inverse
            new = emit(scale, self.module)
            if new is not scale:
                ctx.result = 1 / new

    def _on_normalized(self, ctx: CallContext) -> None:
        self._read.held = True
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
