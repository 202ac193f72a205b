"""Activation patching: the modules it is given output what a cache holds.

:func:`patch` without positions puts a replacement on each module's forward
swap (``_forward_swap``: the hand-written ``module.forward = lambda *a, **k:
stored``, owned and put back); with positions, the forward runs and one native
forward hook overwrites those positions of its output. Like
:func:`~hookbus.torch.capture`, a patch needs no bus, and leaves the model's
hook dicts and attributes as they were on exit. Names of the vocabulary
(``"blocks.0.hook_resid_post"``) are values: post hooks on a private bus replace
them, the model attached to it with ``names="transformer"`` while the patch holds.
"""

from __future__ import annotations

from typing import (
    Any,
    Dict,
    List,
    Mapping,
    Optional,
    Sequence,
    Tuple,
    Union,
    cast,
)

import torch
from torch import nn
from torch.utils.hooks import RemovableHandle

from ..adapter import EventBus, Removable, is_pattern
from ._attach import Attachment, attach
from ._cache import Cache, CapturedCalls
from ._call_frames import runs_hooks
from ._forward_swap import ForwardSwap, Replacement

# A model pickled while a module of it had pre hooks or a patch names the stand-in
# of its forward here, where it lived before: so files saved then still load.
from ._forward_swap import _CopiedForward as _CopiedForward
from ._selection import ROOT, Selector, close_or_first_names, select
from ._tree import Path
from ._unwrap import ModuleName, unwrap, walk, wrapped_attribute, wrapper_attributes
from ._vocabulary import split_names

__all__ = ["Patch", "Positions", "patch"]

Positions = Union[int, slice, Sequence[int], torch.Tensor]
"""What :func:`patch` takes as ``positions``: any index of one dimension."""


def patch(
    model: nn.Module,
    cache: Mapping[str, Any],
    selector: Optional[Selector] = None,
    *,
    positions: Optional[Positions] = None,
    dim: int = 1,
    call: int = -1,
) -> Patch:
    """Activation patching: the selected modules output what ``cache`` holds for them.

    ``cache`` is what :func:`capture` returned (or any mapping of module name to
    an output, or to a :class:`CapturedCalls`); ``selector`` picks the modules to
    patch (a name, glob, module, type or list, as for :func:`attach`), by default
    every module the cache holds. Of a :class:`CapturedCalls`, the output of call
    ``call`` is used (default ``-1``: the last).

    * ``positions=None``: the module's forward does not run; the call returns the
      stored output, as a hand-written ``module.forward = lambda *a, **k: stored``
      would (the module's hooks still run around it; its submodules don't run,
      its parameters get no gradient, and a key-value cache it would have
      updated is not updated).
    * ``positions=`` an index along ``dim`` (default ``1``, the sequence of a
      ``[batch, seq, ...]`` activation): the forward runs, and only those
      positions of its output are replaced by the stored ones (of a tuple,
      namedtuple or list output, each tensor item the stored output has too,
      and the output keeps its type; shapes that differ raise a ``ValueError``
      naming the module and both shapes).

    ``selector`` (or the cache's keys) may also name values of the names
    vocabulary (``"blocks.1.hook_resid_post"``, a pattern, a list; docs/torch.md,
    "Names"), as :func:`capture` records them: each value is replaced in the
    forward by the stored one (``positions=`` then replaces those positions only).

    Without positions a call returns the stored object itself, as a hand-written
    replacement would: capture with ``clone=True`` if later in-place ops would
    change it. Everything is put back on exit, even if the block raised;
    :meth:`Patch.remove` does the same without a ``with``. Patches nest: the innermost
    wins.

    Example:
        >>> import torch, hookbus.torch
        >>> from torch import nn
        >>> torch.manual_seed(0)  # doctest: +ELLIPSIS
        <torch._C.Generator object at ...>
        >>> model = nn.Sequential(nn.Linear(2, 2), nn.ReLU(), nn.Linear(2, 1))
        >>> clean, corrupt = torch.ones(1, 2), torch.zeros(1, 2)
        >>> with hookbus.torch.capture(model, "0") as cache:
        ...     clean_out = model(clean)
        >>> with hookbus.torch.patch(model, cache):
        ...     patched_out = model(corrupt)
        >>> torch.equal(patched_out, clean_out)
        True
        >>> "forward" in vars(model[0])  # put back
        False
    """
    return Patch(model, cache, selector, positions=positions, dim=dim, call=call)


class Patch(Removable):  # remove(), and ``with`` removes on exit
    """An activation patch in place: what :func:`patch` returns.

    :meth:`remove` (or the end of its ``with`` block) puts every patched module
    back as it was.

    Example:
        >>> import torch, hookbus.torch
        >>> from torch import nn
        >>> model = nn.Sequential(nn.Linear(2, 2))
        >>> patched = hookbus.torch.patch(model, {"0": torch.zeros(1, 2)})
        >>> isinstance(patched, hookbus.torch.Patch), model(torch.ones(1, 2))
        (True, tensor([[0., 0.]]))
        >>> patched.remove()
        >>> "forward" in vars(model[0])
        False
    """

    def __init__(
        self,
        model: nn.Module,
        cache: Mapping[str, Any],
        selector: Optional[Selector] = None,
        *,
        positions: Optional[Positions] = None,
        dim: int = 1,
        call: int = -1,
    ) -> None:
        if not isinstance(model, nn.Module):  # pyright: ignore[reportUnnecessaryIsInstance]
            raise TypeError(f"patch() needs a torch.nn.Module, got {type(model).__name__}")
        if not isinstance(cache, Mapping):  # pyright: ignore[reportUnnecessaryIsInstance]
            raise TypeError(
                f"patch() needs a cache: what capture() returned, or a mapping of module name "
                f"to output; got {type(cache).__name__}"
            )
        checked: Tuple[Tuple[str, object], ...] = (("dim", dim), ("call", call))
        for option, value in checked:
            if not isinstance(value, int) or isinstance(value, bool):  # pyright: ignore[reportUnnecessaryIsInstance]
                raise TypeError(
                    f"patch() option {option}= takes an int, got {type(value).__name__}"
                )
        self._swaps: List[ForwardSwap] = []
        self._replacements: List[Replacement] = []
        self._handles: List[RemovableHandle] = []
        self._names_net: Optional[Attachment] = None
        root = unwrap(model)
        literal = list(cache) if selector is None else selector
        chosen = _by_literal_names(root, literal)  # the common case, without a walk
        if chosen is None:
            values, module_selector = split_names(root, literal)
            if module_selector is None:
                chosen = {}
            else:  # every module chosen before the names' hooks go in: nothing half-made
                chosen = _by_walking(root, cache, module_selector if values else selector)
            if values:
                kept = {name: _stored_output(cache, name, call) for name in values}
                self._patch_names(model, kept, positions, dim)
        names = list(chosen)
        try:
            stored = {name: _stored_output(cache, name, call) for name in names}
            for name in names:
                module = chosen[name]
                if positions is None:
                    swap = ForwardSwap.acquire(module)
                    self._swaps.append(swap)
                    replacement = _returning(stored[name])
                    swap.add_replacement(replacement)
                    self._replacements.append(replacement)
                else:
                    hook = _PositionPatch(name, stored[name], positions, dim)
                    self._handles.append(module.register_forward_hook(hook))
        except BaseException:
            self.remove()
            raise

    def _patch_names(
        self, model: nn.Module, kept: Dict[str, Any], positions: Optional[Positions], dim: int
    ) -> None:
        private = EventBus(f"hookbus.torch patch of names of {type(model).__name__}")
        net = self._names_net = attach(model, private, names="transformer")
        try:
            for name, stored in kept.items():
                net.post(name, _NamePatch(name, stored, positions, dim))
        except BaseException:
            self.remove()
            raise

    def remove(self) -> None:
        """Put every patched module back as it was; idempotent."""
        names_net, self._names_net = self._names_net, None
        if names_net is not None:
            names_net.detach()
        swaps, self._swaps = self._swaps, []
        replacements, self._replacements = self._replacements, []
        handles, self._handles = self._handles, []
        for position, swap in enumerate(swaps):
            try:
                if position < len(replacements):
                    swap.remove_replacement(replacements[position])
            finally:
                swap.release()
        for handle in handles:
            handle.remove()


def _by_literal_names(root: nn.Module, selector: Any) -> Optional[Dict[str, nn.Module]]:
    """The modules named literally by ``selector`` (a name or list of names), if all are
    reached by a path through no see-through wrapper (their bare name is then their
    ``named_modules()`` name); else ``None``, and :func:`_by_walking` decides.

    Walking a 60-module GPT-2 costs about 70 us, a third of a patch's cost
    otherwise; looking up one path a few.
    """
    if isinstance(selector, str):
        names: List[Any] = [selector]
    elif isinstance(selector, list) and selector:
        names = cast("List[Any]", selector)  # type: ignore[redundant-cast]  # for pyright
    else:
        return None
    found: Dict[str, nn.Module] = {}
    wrappers = wrapper_attributes()  # once, not once per module
    for name in names:
        if not isinstance(name, str) or is_pattern(name):
            return None
        module: Optional[nn.Module] = root
        if name != ROOT:
            for part in name.split("."):
                if module is None or wrapped_attribute(module, wrappers) is not None:
                    return None
                module = module._modules.get(part)
        if module is None or wrapped_attribute(module, wrappers) is not None:
            return None
        found[name] = module
    return found


def _by_walking(
    root: nn.Module, cache: Mapping[str, Any], selector: Optional[Selector]
) -> Dict[str, nn.Module]:
    """The selected modules by bare name, in model order, with selection's errors."""
    found = walk(root)
    modules: Dict[str, ModuleName] = {
        entry.bare or ROOT: entry for entry in found if not entry.is_wrapper
    }

    def name_of(module: nn.Module) -> str:
        for entry in found:
            if entry.module is module:
                return entry.bare or ROOT
        raise ValueError(f"{type(module).__name__} module is not part of the patched model")

    if selector is None:
        names = [name for name in modules if name in cache]
        if not names:
            raise ValueError(
                f"patch(): the cache holds no module of this model; cache: "
                f"{', '.join(map(repr, list(cache)[:8])) or 'empty'}"
                f"{close_or_first_names(modules, next(iter(cache), ''))}"
            )
    else:
        names = select(modules, selector, name_of)
    return {name: modules[name].module for name in names}


def _stored_output(cache: Mapping[str, Any], name: str, call: int) -> Any:
    """The output ``cache`` holds for module ``name``: a record's call ``call``, or the value."""
    try:
        value = cache[name]
    except KeyError as error:
        message = error.args[0] if error.args and isinstance(cache, Cache) else None
        raise KeyError(
            message or f"patch(): the cache holds no output for module {name!r}"
        ) from None
    if isinstance(value, CapturedCalls):
        calls = value.calls
        if not -len(calls) <= call < len(calls):
            raise IndexError(
                f"patch(): call={call} is out of range for module {name!r}, which has "
                f"{len(calls)} recorded calls"
            )
        return calls[call].output
    return value


def _returning(value: Any) -> Replacement:
    def replacement(module: nn.Module, args: Tuple[Any, ...], kwargs: Dict[str, Any]) -> Any:
        return value

    return replacement


class _PositionPatch:
    """The forward hook of :func:`patch` with positions: the output with some positions stored."""

    __slots__ = ("dim", "name", "positions", "stored", "value")

    def __init__(
        self, name: str, stored: Any, positions: Positions, dim: int, value: str = "output"
    ) -> None:
        self.name = name
        # What is patched: a module's "output", or the "value" of a name of the vocabulary.
        self.value = value
        self.stored = stored
        self.positions = positions
        self.dim = dim

    @runs_hooks
    def __call__(self, module: nn.Module, args: Tuple[Any, ...], output: Any) -> Any:
        stored = self.stored
        if isinstance(output, torch.Tensor):
            return self._patched((), output, stored)
        items, kept = _as_sequence(output), _as_sequence(stored)
        if items is not None and kept is not None:
            new: List[Any] = []
            for i, item in enumerate(items):
                if isinstance(item, torch.Tensor) and i < len(kept):
                    item = self._patched((i,), item, kept[i])
                new.append(item)
            kind: Any = output.__class__
            if kind is tuple:
                return tuple(new)
            if hasattr(output, "_fields"):  # a namedtuple takes its fields as arguments
                return kind(*new)
            return kind(new)  # a list, or a tuple type built from one (torch.return_types)
        raise TypeError(
            f"patch(positions=...) on {self._patched_what}: its output is "
            f"{type(output).__name__} and the stored one {type(stored).__name__}; positions "
            f"are patched in a tensor, or in the tensors of a tuple or list"
        )

    def _patched(self, path: Path, output: torch.Tensor, stored: Any) -> torch.Tensor:
        if not isinstance(stored, torch.Tensor) or stored.shape != output.shape:
            got = (
                tuple(stored.shape) if isinstance(stored, torch.Tensor) else type(stored).__name__
            )
            raise ValueError(
                f"patch(positions=...) on {self._patched_what}{_where(path)}: the {self.value} "
                f"has shape {tuple(output.shape)} and the stored one {got}; positions are "
                f"patched between {self.value}s of one shape"
            )
        if not -output.dim() <= self.dim < output.dim():  # % alone would wrap round
            raise IndexError(
                f"patch(positions=...) on {self._patched_what}{_where(path)}: dim={self.dim} "
                f"is out of range for {'an' if self.value == 'output' else 'a'} {self.value} "
                f"of shape {tuple(output.shape)}; pass the dim= that holds the positions"
            )
        dim = self.dim % output.dim()
        index = (slice(None),) * dim + (self.positions,)
        patched = output.clone()
        try:
            patched[index] = stored[index].to(device=output.device, dtype=output.dtype)
        except IndexError as error:  # torch's own names the wrong dimension for a list
            raise IndexError(
                f"patch(positions=...) on {self._patched_what}{_where(path)}: a position is "
                f"out of range for dim {dim} of the {self.value}, of size {output.shape[dim]} "
                f"(shape {tuple(output.shape)})"
            ) from error
        return patched

    @property
    def _patched_what(self) -> str:
        return f"{'module' if self.value == 'output' else 'name'} {self.name!r}"


class _NamePatch:
    """The post hook of :func:`patch` on a name of the vocabulary: the stored value, or
    the value with some positions stored."""

    __slots__ = ("positions", "stored")

    def __init__(self, name: str, stored: Any, positions: Optional[Positions], dim: int) -> None:
        self.stored = stored
        self.positions = (
            None if positions is None else _PositionPatch(name, stored, positions, dim, "value")
        )

    def __call__(self, ctx: Any) -> None:
        if self.positions is None:
            ctx.result = self.stored
        else:
            ctx.result = self.positions._patched((), ctx.result, self.stored)


def _as_sequence(value: Any) -> Optional[Sequence[Any]]:
    """``value`` if it is a tuple or list (a module's output of several tensors), else None."""
    return cast("Sequence[Any]", value) if isinstance(value, (tuple, list)) else None


def _where(path: Path) -> str:
    return f" (output item {path[0]})" if path else ""
