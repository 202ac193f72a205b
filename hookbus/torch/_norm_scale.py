"""The scale and the normalized value of one norm (LayerNorm or RMSNorm).

A ``LayerNorm`` never holds them: they are computed from its input while a
hook wants them, and when one was replaced the output is the normalized value
times the weight plus the bias. An RMSNorm holds both: ``1 / rsqrt(...)`` is the
scale, the first ``mul`` the normalized value (operation points).
"""

from __future__ import annotations

import threading
from typing import Any, List, Optional, Tuple

import torch
import torch.nn.functional as F
from torch import nn

from ..adapter import CallContext, Handle, Removable
from ._operations import OperationSelection
from ._recipes import Net, Site, quiet, unchanged

__all__ = ["NormScale"]


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
        self._read = threading.local()  # whether this thread's norm call held the value
        self._check: Optional[Handle] = None
        self._selection: Optional[OperationSelection] = None

    def install_site(self, net: Net) -> List[Removable]:
        if isinstance(self.module, nn.LayerNorm):
            return [net.post(self.module, self._on_layer_norm)]
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
                normalized = emits.get("normalized", unchanged)(normalized, norm)
                ctx.result = _affine(norm, normalized)
                return
        if "normalized" in emits:
            normalized = F.layer_norm(x, shape, None, None, norm.eps)
            new = emits["normalized"](normalized, norm)
            if new is not normalized:
                ctx.result = _affine(norm, new)

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
