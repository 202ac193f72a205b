"""A capture's own native hooks: one plain forward hook per selected module.

A capture needs no bus: nothing but the capture's own record runs on its
modules, and it never changes an output or a gradient. So it installs one
native ``register_forward_hook`` per selected module, as a hand-written capture
does (and, with ``grads=True``, a tensor hook on each output that requires
grad), instead of a hook point per module whose plan is worked out and whose
dispatcher is installed and removed through a private bus (six times the
set-up and tear-down cost of the native hooks alone; see
``docs/performance.md``). What the bus path gave a capture, each kept here:

* names: the adapter's bare names and selection (``_wrappers.walk``,
  ``_select.select``), so a capture names and selects as an attachment does;
* order: each hook goes in at set-up, after the hooks already on the module,
  as a point's dispatcher would;
* checkpointing: a forward that raises (the non-reentrant recomputation's
  internal stop included) runs no hook without ``always_call``, and a point
  dispatcher recorded nothing then either;
* copies: a recorder copies and pickles itself as an inert recorder, which
  removes itself from the copy's hook dicts at its first call (as
  ``_copies.inert_point`` does for points);
* threads: DataParallel replicas share the hook dicts; a recorder knows its
  name, and the capture's cache appends atomically;
* gradients: the tensor hooks hold the call's gradient dict, never a tensor,
  and go when the capture ends, so a graph kept longer keeps no record alive.

A recorder holds its name and the capture's record function, never the module.
"""

from __future__ import annotations

from typing import Any, Callable, Dict, List, Optional, Tuple

import torch
from torch import nn
from torch.utils.hooks import RemovableHandle

from ._copies import remove_dispatchers
from ._grad import handle_alive
from ._tree import Path, iter_tensors

__all__ = ["GradRecorders", "Recorder", "inert_recorder", "install_recorders"]

Record = Callable[[str, Any, Any, Any], Any]
"""``record(name, args, kwargs, output)``: what a recorder calls per module call."""

# torch's register_forward_hook(with_kwargs=True) puts the hook in the module's
# dict first and marks it with_kwargs just after: a forward running in another
# thread in between calls it without kwargs (as for _point's dispatchers).
_WITHOUT_KWARGS: Any = object()


class Recorder:
    """The native forward hook of one captured module.

    ``record`` is ``None`` in an inert copy, which removes itself at its first call.
    """

    __slots__ = ("name", "record")

    def __init__(self, name: str, record: Optional[Record]) -> None:
        self.name = name
        self.record = record

    def on_output(self, module: nn.Module, args: Tuple[Any, ...], output: Any) -> None:
        """The hook of a capture without inputs: ``register_forward_hook(on_output)``."""
        record = self.record
        if record is None:
            remove_dispatchers(module, self, None)
            return
        record(self.name, None, None, output)

    def on_call(
        self, module: nn.Module, args: Tuple[Any, ...], kwargs: Any, output: Any = _WITHOUT_KWARGS
    ) -> None:
        """The hook of a capture of inputs too (registered ``with_kwargs=True``)."""
        if output is _WITHOUT_KWARGS:
            kwargs, output = {}, kwargs
        record = self.record
        if record is None:
            remove_dispatchers(module, self, None)
            return
        record(self.name, args, kwargs, output)

    # A copied or pickled module (deepcopy, torch.save, AveragedModel, mp.spawn)
    # copies its hook dicts, so their recorders: each copy is inert.
    def __reduce_ex__(self, protocol: Any) -> Tuple[Any, ...]:
        return (inert_recorder, (self.name,))

    def __deepcopy__(self, memo: Dict[int, Any]) -> Recorder:
        return Recorder(self.name, None)

    def __repr__(self) -> str:
        return f"<Recorder {self.name!r}{'' if self.record is not None else ' inert'}>"


def _ended(name: str, args: Any, kwargs: Any, output: Any) -> None:
    """The record of a recorder whose capture ended (a thread's call was under way)."""


def inert_recorder(name: str) -> Recorder:
    """The stand-in of a copied module's recorder: it removes itself at its first call.

    Example:
        >>> import copy, torch, hookbus.torch
        >>> from torch import nn
        >>> model = nn.Sequential(nn.Linear(2, 2))
        >>> with hookbus.torch.capture(model) as cache:
        ...     twin = copy.deepcopy(model)
        ...     _ = twin(torch.ones(1, 2))
        >>> len(cache), len(twin[0]._forward_hooks)
        (0, 0)
    """
    return Recorder(name, None)


def install_recorders(
    modules: List[Tuple[str, nn.Module]], record: Record, with_inputs: bool
) -> Tuple[List[Recorder], List[RemovableHandle]]:
    """One recorder per ``(name, module)``, installed; all or none (an error removes them)."""
    recorders: List[Recorder] = []
    handles: List[RemovableHandle] = []
    try:
        for name, module in modules:
            recorder = Recorder(name, record)
            if with_inputs:
                handle = module.register_forward_hook(recorder.on_call, with_kwargs=True)
            else:
                handle = module.register_forward_hook(recorder.on_output)
            recorders.append(recorder)
            handles.append(handle)
    except BaseException:
        remove_recorders(recorders, handles)
        raise
    return recorders, handles


def remove_recorders(recorders: List[Recorder], handles: List[RemovableHandle]) -> None:
    """Remove the native hooks; a call already under way in another thread records nothing."""
    for recorder in recorders:
        recorder.record = _ended
    for handle in handles:
        handle.remove()


Keep = Callable[[Path, torch.Tensor], torch.Tensor]
"""``keep(path, tensor)``: the tensor as the capture stores it (detached, moved, cloned)."""


class GradRecorders:
    """The gradient hooks of one capture, on the outputs it recorded; removed at its end."""

    __slots__ = ("_handles", "keep", "open")

    def __init__(self, keep: Keep) -> None:
        self.keep = keep
        self.open = True
        self._handles: List[RemovableHandle] = []

    def hook(self, grads: Dict[Path, torch.Tensor], output: Any) -> None:
        """Store the gradient of each tensor of ``output`` that requires grad into ``grads``."""
        for path, tensor in iter_tensors(output):
            if tensor.requires_grad:
                register: Any = tensor.register_hook  # untyped in torch  # pyright: ignore[reportUnknownMemberType, reportUnknownVariableType]
                handle: RemovableHandle = register(_GradRecorder(self, grads, path))
                handles = self._handles
                handles.append(handle)
                if len(handles) >= 256 and len(handles) & (len(handles) - 1) == 0:
                    # At each power of two, drop the hooks whose graph is gone already.
                    self._handles = [h for h in handles if handle_alive(h)]

    def remove(self) -> None:
        """Remove every hook; a backward under way in another thread records nothing more."""
        self.open = False
        handles, self._handles = self._handles, []
        for handle in handles:
            handle.remove()


class _GradRecorder:
    """The tensor hook of one output tensor: stores its gradient, leaves it unchanged."""

    __slots__ = ("grads", "owner", "path")

    def __init__(self, owner: GradRecorders, grads: Dict[Path, torch.Tensor], path: Path) -> None:
        self.owner = owner
        self.grads = grads
        self.path = path

    def __call__(self, grad: torch.Tensor) -> None:
        owner = self.owner
        if owner.open:
            self.grads[self.path] = owner.keep(self.path, grad)
