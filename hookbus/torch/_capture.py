"""``capture``: record what chosen modules output (and take, and get as gradients).

A capture needs no bus: nothing but the capture's own record runs on its
modules, and it never changes an output or a gradient. So it installs one
native ``register_forward_hook`` per selected module (a :class:`CaptureHook`),
as a hand-written capture
does (and, with ``grads=True``, a tensor hook on each output that requires
grad), instead of a hook point per module whose plan is worked out and whose
dispatcher is installed and removed through a private bus (six times the
set-up and tear-down cost of the native hooks alone; see
``docs/performance.md``). What the bus path gave a capture, each kept here:

* names: the adapter's bare names and selection (``_unwrap.walk``,
  ``_selection.select``), so a capture names and selects as an attachment does;
* order: each hook goes in at set-up, after the hooks already on the module,
  as a point's dispatcher would;
* checkpointing: a forward that raises (the non-reentrant recomputation's
  internal stop included) runs no hook without ``always_call``, and a point
  dispatcher recorded nothing then either;
* copies: a capture hook copies and pickles itself as an inert capture hook, which
  removes itself from the copy's hook dicts at its first call (as
  ``_point.inert_point`` does for points);
* threads: DataParallel replicas share the hook dicts; a capture hook knows
  its name, and the capture's cache appends atomically;
* gradients: the tensor hooks hold the call's gradient dict, never a tensor,
  and go when the capture ends, so a graph kept longer keeps no record alive.

Names of the vocabulary (``"blocks.*.hook_resid_post"``) are values, not modules:
a capture records them with post hooks on a private bus, the model attached to it
with ``names="transformer"`` from ``__enter__`` to the end.

A capture hook holds its name and the capture's record function, never the module.
"""

from __future__ import annotations

import functools
import warnings
from types import TracebackType
from typing import (
    Any,
    Callable,
    Dict,
    Iterable,
    List,
    Mapping,
    Optional,
    Sequence,
    Tuple,
    Type,
    Union,
)

import torch
from torch import nn
from torch.utils.hooks import RemovableHandle

from ..adapter import CallContext, EventBus
from ._attach import Attachment, attach
from ._cache import Cache, Call, CapturedCalls
from ._call_frames import runs_hooks
from ._forward_swap import ForwardSwap, release_swaps, renewed_swaps
from ._grad import hook_output_grads
from ._native_hooks import remove_dispatchers
from ._script_refusal import hold_script_refusal, release_script_refusal
from ._selection import ROOT, Selector, select
from ._tree import Path, map_tensors
from ._unwrap import ModuleName, is_compiled, unwrap, walk
from ._user_line import stacklevel_outside_hookbus
from ._vocabulary import split_names

__all__ = ["Capture", "CaptureHook", "capture", "inert_capture_hook"]

# A cache pickled before its classes had a module of their own names them here, as
# Cache, Call and Record (now CapturedCalls): so files saved then still load.
Record = CapturedCalls

Device = Union[str, torch.device, None]


RecordCall = Callable[[str, Any, Any, Any], Any]
"""``record(name, args, kwargs, output)``: what a capture hook calls per module call."""

# torch's register_forward_hook(with_kwargs=True) puts the hook in the module's
# dict first and marks it with_kwargs just after: a forward running in another
# thread in between calls it without kwargs (as for a module point's dispatchers).
_WITHOUT_KWARGS: Any = object()


class CaptureHook:
    """The native forward hook of one captured module.

    ``record`` is ``None`` in an inert copy, which removes itself at its first call.
    """

    __slots__ = ("name", "record")

    def __init__(self, name: str, record: Optional[RecordCall]) -> None:
        self.name = name
        self.record = record

    @runs_hooks
    def on_output(self, module: nn.Module, args: Tuple[Any, ...], output: Any) -> None:
        """The hook of a capture without inputs: ``register_forward_hook(on_output)``."""
        record = self.record
        if record is None:
            remove_dispatchers(module, self, None)
            return
        record(self.name, None, None, output)

    @runs_hooks
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
    # copies its hook dicts, so their capture hooks: each copy is inert.
    def __reduce_ex__(self, protocol: Any) -> Tuple[Any, ...]:
        return (inert_capture_hook, (self.name,))

    def __deepcopy__(self, memo: Dict[int, Any]) -> CaptureHook:
        return CaptureHook(self.name, None)

    def __repr__(self) -> str:
        return f"<CaptureHook {self.name!r}{'' if self.record is not None else ' inert'}>"


def _ended(name: str, args: Any, kwargs: Any, output: Any) -> None:
    """The record of a capture hook whose capture ended (a thread's call was under way)."""


def inert_capture_hook(name: str) -> CaptureHook:
    """The stand-in of a copied module's capture hook: it removes itself at its first call.

    Example:
        >>> import copy, torch, hookbus.torch
        >>> from torch import nn
        >>> model = nn.Sequential(nn.Linear(2, 2))
        >>> with hookbus.torch.capture(model, "0") as cache:
        ...     twin = copy.deepcopy(model)
        ...     _ = twin(torch.ones(1, 2))  # records nothing
        ...     _ = model(torch.ones(1, 2))
        >>> len(cache["0"]), len(twin[0]._forward_hooks)
        (1, 0)
    """
    return CaptureHook(name, None)


def install_capture_hooks(
    modules: List[Tuple[str, nn.Module]], record: RecordCall, with_inputs: bool
) -> Tuple[List[CaptureHook], List[RemovableHandle]]:
    """One capture hook per ``(name, module)``, installed; all or none (an error removes them)."""
    hooks: List[CaptureHook] = []
    handles: List[RemovableHandle] = []
    try:
        for name, module in modules:
            hook = CaptureHook(name, record)
            if with_inputs:
                handle = module.register_forward_hook(hook.on_call, with_kwargs=True)
            else:
                handle = module.register_forward_hook(hook.on_output)
            hooks.append(hook)
            handles.append(handle)
    except BaseException:
        remove_capture_hooks(hooks, handles)
        raise
    return hooks, handles


def remove_capture_hooks(hooks: List[CaptureHook], handles: List[RemovableHandle]) -> None:
    """Remove the native hooks; a call already under way in another thread records nothing."""
    for hook in hooks:
        hook.record = _ended
    for handle in handles:
        handle.remove()


Keep = Union[str, int]
"""What ``capture(keep=...)`` takes: ``"all"``, ``"last"`` or a positive int."""

Positions = Union[int, slice, Sequence[int]]
"""What ``capture(positions=...)`` takes: an index, a slice or a list of indices."""

Sink = Callable[[str, Call], Any]
"""``sink(name, call)``: receives each call of a capture made with ``sink=``."""


def capture(
    model: nn.Module,
    selector: Selector = "*",
    *,
    detach: bool = True,
    clone: bool = False,
    device: Device = None,
    inputs: bool = False,
    grads: bool = False,
    keep: Keep = "all",
    dtype: Optional[torch.dtype] = None,
    positions: Optional[Positions] = None,
    dim: int = 1,
    sink: Optional[Sink] = None,
) -> Capture:
    """Record the outputs of the selected modules while the block runs.

    ``selector`` is a name or glob (``"layers.*"``), a module, a module type or a
    list of those (see :class:`Attachment`); by default every module. Options:

    * ``detach=True``: store tensors cut from the graph (``detach=False`` keeps
      the graph alive, as long as the cache);
    * ``clone=False``: ``True`` copies, so that later in-place ops don't change
      what was stored;
    * ``device=None``: move stored tensors, say to ``"cpu"``;
    * ``inputs=False``: also store each call's ``args`` and ``kwargs``;
    * ``grads=False``: also store the gradient of each output, at backward (run
      ``backward()`` inside the block).

    Bounded memory:

    * ``keep="all"``: ``"last"`` or an int ``n`` keeps the last ``n`` calls of each
      module (``record.count`` still counts every call);
    * ``dtype=None``: store floating-point tensors in this floating dtype (say
      ``torch.float16``); other tensors are stored as they are;
    * ``positions=None``: store only these positions (an index, a slice or a list)
      along dimension ``dim`` (default 1, the sequence of a ``(batch, seq, hidden)``
      tensor) of every tensor that has that dimension, as a copy (a stored slice
      keeps nothing else alive); an index keeps the dimension, with size 1;
    * ``sink=None``: a callable ``sink(name, call)`` that receives each
      :class:`Call` (its tensors processed as above) instead of the cache storing
      it: write it to disk, or reduce it on the fly. The cache then stays empty.
      With ``grads=True``, ``call.grad`` fills in at backward if the sink keeps the
      call. The sink runs inside the module's forward hook: an error it raises
      propagates from the model's call.

    Names and selection are those of :func:`attach` (the bare model's names),
    checked when ``capture(...)`` is called. ``selector`` may also name values of
    the names vocabulary (``"blocks.*.hook_resid_post"``, ``["blocks.0.attn.hook_z",
    "hook_embed"]``; docs/torch.md, "Names") on a model of a layout it knows: each
    is recorded as a call's ``output`` (``inputs=True`` is refused). The hooks go
    in when the ``with`` block is entered, not before: a capture that is never entered records
    nothing and holds nothing. Each selected module gets one native forward
    hook, as in a capture written by hand (and, with ``grads=True``, each output
    tensor that requires grad a tensor hook). Every hook is removed on exit, even
    if the block raised; the model's hook dicts are then exactly as before. A
    capture runs once: enter a new one to capture again. On exit (unless the
    block raised) it warns, ``RuntimeWarning``, when a module it was given by name
    or object never ran, or none of the modules a pattern or type selected did
    (a compiled model called through another object, a branch not taken, the
    wrong model). On a ``torch.compile``'d model its hooks take effect even if the
    model ran compiled before.

    Example:
        >>> import torch, hookbus.torch
        >>> from torch import nn
        >>> model = nn.Sequential(nn.Linear(2, 2), nn.ReLU(), nn.Linear(2, 1))
        >>> x = torch.ones(1, 2)
        >>> with hookbus.torch.capture(model, nn.Linear, grads=True) as cache:
        ...     model(x).sum().backward()
        >>> list(cache), cache["2"].output.shape, cache["2"].grad
        (['0', '2'], torch.Size([1, 1]), tensor([[1.]]))

        Bounded: the last call only, half precision, the last position:

        >>> seq = torch.ones(1, 5, 2)  # (batch, seq, features)
        >>> with hookbus.torch.capture(
        ...     model, "0", keep="last", dtype=torch.float16, positions=-1
        ... ) as cache:
        ...     for _ in range(100):
        ...         _ = model(seq)
        >>> record = cache["0"]
        >>> len(record), record.count, record.output.shape, record.output.dtype
        (1, 100, torch.Size([1, 1, 2]), torch.float16)
    """
    return Capture(
        model,
        selector,
        detach=detach,
        clone=clone,
        device=device,
        inputs=inputs,
        grads=grads,
        keep=keep,
        dtype=dtype,
        positions=positions,
        dim=dim,
        sink=sink,
    )


class Capture:
    """A capture of the selected modules' calls: what :func:`capture` returns.

    A context manager: entering installs its hooks and gives its ``cache``,
    leaving removes them. It runs once (see :func:`capture`).

    Example:
        >>> import torch, hookbus.torch
        >>> from torch import nn
        >>> model = nn.Sequential(nn.Linear(2, 2), nn.ReLU())
        >>> recording = hookbus.torch.capture(model, "1")
        >>> isinstance(recording, hookbus.torch.Capture), len(recording.cache)
        (True, 0)
        >>> with recording as cache:
        ...     _ = model(torch.ones(1, 2))
        >>> cache is recording.cache, list(cache)
        (True, ['1'])
    """

    def __init__(
        self,
        model: nn.Module,
        selector: Selector = "*",
        *,
        detach: bool = True,
        clone: bool = False,
        device: Device = None,
        inputs: bool = False,
        grads: bool = False,
        keep: Keep = "all",
        dtype: Optional[torch.dtype] = None,
        positions: Optional[Positions] = None,
        dim: int = 1,
        sink: Optional[Sink] = None,
    ) -> None:
        for option, value in (
            ("detach", detach), ("clone", clone), ("inputs", inputs), ("grads", grads),
        ):  # fmt: skip
            if not isinstance(value, bool):  # pyright: ignore[reportUnnecessaryIsInstance]
                raise TypeError(f"capture() option {option}= takes True or False, got {value!r}")
        kept = _kept_calls(keep)
        self._dtype = _float_dtype(dtype)
        self._positions = _positions(positions, dim)
        self._dim = dim
        if sink is not None and not callable(sink):
            raise TypeError(
                f"capture() option sink= takes a callable sink(name, call), "
                f"got {type(sink).__name__}"
            )
        self._sink = sink
        self._sink_counts: Dict[str, int] = {}  # each module's calls sent to the sink
        self._device = torch.device(device) if device is not None else None
        self._detach, self._clone = detach, clone
        self._only_detach = (
            detach and not clone and self._device is None
            and self._dtype is None and self._positions is None
        )  # fmt: skip
        self._inputs = inputs
        self._hooks: List[CaptureHook] = []
        self._handles: List[RemovableHandle] = []
        self._grads = grads
        self._grad_handles: List[RemovableHandle] = []  # tensor hooks, removed at the end
        self._state = "ready"  # then "running", then "ended"
        self._swaps: List[ForwardSwap] = []  # a compiled model's forward swaps, while running
        self._root: Optional[nn.Module] = None  # the model, while it holds our script refusal
        self._names_model: Optional[nn.Module] = None  # compiled or not, for attach()
        if not isinstance(model, nn.Module):  # pyright: ignore[reportUnnecessaryIsInstance]
            raise TypeError(f"capture() needs a torch.nn.Module, got {type(model).__name__}")
        compiled = is_compiled(model)
        self._model: Optional[nn.Module] = unwrap(model)  # dropped at the end, as _modules
        found = walk(self._model)
        modules: Dict[str, ModuleName] = {}
        for entry in found:
            if entry.is_wrapper:  # no hook point of its own, as in attach()
                compiled = compiled or "_orig_mod" in entry.module._modules
            else:
                modules[entry.bare or ROOT] = entry

        def name_of(module: nn.Module) -> str:
            for entry in found:
                if entry.module is module:
                    return entry.bare or ROOT
            raise ValueError(
                f"{type(module).__name__} module is not part of the captured model "
                f"(a module of another model, or one added to it since capture() started)"
            )

        self._compiled = compiled
        # Held until __enter__ installs their hooks, dropped at the end.
        self._modules: List[Tuple[str, nn.Module]] = []
        self._names: Optional[List[str]] = None  # names of the vocabulary, if selected
        self._names_net: Optional[Attachment] = None  # their private attachment, running
        vocabulary, module_selector = split_names(self._model, selector)
        if vocabulary:
            if inputs:
                raise TypeError(
                    "capture() option inputs= applies to modules: a name of the vocabulary "
                    "is one value, recorded as the call's output"
                )
            self._names = vocabulary
            self._names_model = model
        names: List[str] = []
        # What must run for the capture to have missed nothing (warned at exit).
        self._expected = [self._names] if self._names else []
        if module_selector is not None:
            names = select(modules, module_selector, name_of)
            self._expected += _expected_groups(modules, module_selector, name_of)
        self._modules = [(n, modules[n].module) for n in names]
        self.cache = Cache(names + (self._names or []), kept)
        self.cache._to_sink = sink is not None

    def _store_tensor(self, _: Path, tensor: torch.Tensor) -> torch.Tensor:
        if self._detach:
            tensor = tensor.detach()
        positions = self._positions
        if positions is not None and tensor.dim() > self._dim:
            index = positions(tensor.shape[self._dim])
            tensor = tensor.index_select(self._dim, index.to(tensor.device))  # a copy
        if self._dtype is not None and tensor.is_floating_point():
            tensor = tensor.to(self._dtype)
        if self._device is not None:
            tensor = tensor.to(self._device)
        if self._clone:
            tensor = tensor.clone()
        return tensor

    def _store(self, value: Any) -> Any:
        return map_tensors(value, self._store_tensor)

    def _record_call(self, name: str, args: Any, kwargs: Any, output: Any) -> None:
        """Store one call (``args`` is ``None`` unless inputs are captured): per module call."""
        if self._only_detach and type(output) is torch.Tensor:
            stored = output.detach()
        else:
            stored = map_tensors(output, self._store_tensor)
        if args is not None:
            args, kwargs = self._store(args), self._store(kwargs)
        sink = self._sink
        if sink is None:
            call = self.cache._add(name, stored, args, kwargs)
        else:
            counts = self._sink_counts
            index = counts[name] = counts.get(name, -1) + 1
            call = Call(index, stored, args, kwargs)
        if self._grads:
            handles = self._grad_handles
            store = functools.partial(self._store_grad, call._grads)
            kept = hook_output_grads(output, store, call.index, handles)
            if kept is not handles:
                self._grad_handles = kept
        if sink is not None:
            sink(name, call)

    def _store_grad(
        self, grads: Dict[Path, torch.Tensor], grad: torch.Tensor, call_index: int, path: Path
    ) -> None:
        """The gradient of one captured output tensor (a ``GradHook``): stored, unchanged."""
        if self._grads:  # False once the capture ended: a backward under way stores no more
            grads[path] = self._store_tensor(path, grad)

    def __enter__(self) -> Cache:
        if self._state != "ready":
            raise RuntimeError(
                "this capture is already running; leave its with block first"
                if self._state == "running"
                else "this capture has ended; start a new one"
            )
        self._state = "running"
        try:
            self._hooks, self._handles = install_capture_hooks(
                self._modules, self._record_call, self._inputs
            )
            names_model, self._names_model = self._names_model, None
            if self._names is not None and names_model is not None:
                self._names_net = self._attach_names(names_model, self._names)
            # torch.jit.script of the model refuses clearly while the hooks are on (one
            # refusal for the model, not one per module: a capture's set-up stays cheap).
            if self._model is not None:
                hold_script_refusal(self._model)
                self._root = self._model
            if self._compiled:  # taking effect even if the model ran compiled without them
                self._swaps = renewed_swaps([module for _, module in self._modules])
        except BaseException:  # nothing stays installed
            self._end()
            raise
        return self.cache

    def __exit__(
        self,
        exc_type: Optional[Type[BaseException]],
        exc: Optional[BaseException],
        tb: Optional[TracebackType],
    ) -> None:
        self._end()
        if exc_type is None:  # else the block's error says what went wrong
            self._warn_never_ran()

    def _attach_names(self, model: nn.Module, names: List[str]) -> Attachment:
        """The model attached to a private bus with names, a post hook recording each."""
        private = EventBus(f"hookbus.torch capture of names of {type(model).__name__}")
        net = attach(model, private, names="transformer")
        try:
            for name in names:
                net.post(name, functools.partial(self._record_value, name))
        except BaseException:
            net.detach()
            raise
        return net

    def _record_value(self, name: str, ctx: CallContext) -> None:
        """The post hook of a name of the vocabulary: its value, stored as an output."""
        value = ctx.result
        if self._grads and type(value) is torch.Tensor and value._base is not None:
            # A view of a forward tensor (hook_z splits the projection's input by head) is
            # on no gradient's path: handing the forward the recorded view puts it there.
            # A value computed for the hooks alone is left unwritten: a write would
            # recompute the call from it, over another bus's edit of that value.
            value = ctx.result = value.view_as(value)
        self._record_call(name, None, None, value)

    def _end(self) -> None:
        self._state = "ended"
        self._names_model = None
        names_net, self._names_net = self._names_net, None
        if names_net is not None:
            names_net.detach()
        self._modules = []  # an ended capture holds no module
        self._model = None
        hooks, handles = self._hooks, self._handles
        self._hooks, self._handles = [], []
        remove_capture_hooks(hooks, handles)
        root, self._root = self._root, None
        if root is not None:
            release_script_refusal(root)
        swaps, self._swaps = self._swaps, []
        release_swaps(swaps)
        self._grads = False  # first: a backward under way in another thread stores no more
        grad_handles, self._grad_handles = self._grad_handles, []
        for handle in grad_handles:
            handle.remove()

    def _warn_never_ran(self) -> None:
        """Warn when selected modules never ran: a capture that silently missed them."""
        ran = self.cache._records.keys() | self._sink_counts.keys()
        left = {name for group in self._expected if ran.isdisjoint(group) for name in group}
        if not left:
            return
        missed = [name for name in self.cache._selected if name in left]
        if ROOT in missed:  # the model itself never ran: its name stands for every module
            outermost = [ROOT]
        else:  # a module stands for its submodules that never ran either
            left = set(missed)
            outermost = [
                name for name in missed
                if not any(name[:i] in left for i, c in enumerate(name) if c == ".")
            ]  # fmt: skip
        shown = ", ".join(map(repr, outermost[:8]))
        more = f" and {len(outermost) - 8} more" if len(outermost) > 8 else ""
        inside = " (or their submodules)" if len(outermost) < len(missed) else ""
        warnings.warn(
            f"hookbus.torch: capture() selected modules that never ran: {shown}{more}"
            f"{inside}, so the cache has no record of them. Likely causes: a "
            f"torch.compile'd model that first ran without hooks and was then called "
            f"through another object than the one captured (capture the compiled model "
            f"itself); a branch of forward that these inputs did not take; "
            f"module.forward(x) called directly (it skips hooks: call module(x)); or the "
            f"wrong model (a copy, or another instance)",
            RuntimeWarning,
            stacklevel=stacklevel_outside_hookbus(),
        )


def _expected_groups(
    modules: Mapping[str, Any], selector: Selector, name_of: Callable[[nn.Module], str]
) -> List[List[str]]:
    """The groups of names of which at least one must run, one per item of ``selector``.

    A module given by name or object is a group of its own: it must run. A glob
    pattern or a type is one group: some module it selects must run (a pattern
    such as ``"layers.*"`` also selects submodules that a forward may skip, a
    dropout that an attention implementation does not call, say).
    """
    if isinstance(selector, (list, tuple, set, frozenset)):
        items: Iterable[Any] = selector  # pyright: ignore[reportUnknownVariableType]
        return [group for item in items for group in _expected_groups(modules, item, name_of)]
    names = select(modules, selector, name_of)
    if isinstance(selector, nn.Module) or (isinstance(selector, str) and selector in modules):
        return [[name] for name in names]
    return [names]


def _as_any(value: Any) -> Any:
    return value


def _kept_calls(keep: Any) -> Optional[int]:
    """``keep=`` as the most calls kept per module, ``None`` for all."""
    if keep == "all":
        return None
    if keep == "last":
        return 1
    if isinstance(keep, int) and not isinstance(keep, bool) and keep > 0:
        return keep
    raise ValueError(f"capture() option keep= takes 'all', 'last' or a positive int, got {keep!r}")


def _float_dtype(dtype: Any) -> Optional[torch.dtype]:
    if dtype is None:
        return None
    if not isinstance(dtype, torch.dtype) or not dtype.is_floating_point:
        raise TypeError(
            f"capture() option dtype= takes a floating-point torch.dtype such as "
            f"torch.float16, got {dtype!r}"
        )
    return dtype


def _positions(positions: Any, dim: Any) -> Optional[Callable[[int], torch.Tensor]]:
    """``positions=`` as a function of a dimension's size to the indices to keep."""
    if not isinstance(dim, int) or isinstance(dim, bool) or dim < 0:
        raise TypeError(f"capture() option dim= takes an int >= 0, got {dim!r}")
    if positions is None:
        return None
    if isinstance(positions, bool) or not isinstance(positions, (int, slice, list, tuple)):
        raise TypeError(
            f"capture() option positions= takes an int, a slice or a list of ints, "
            f"got {type(positions).__name__}"
        )
    if isinstance(positions, (list, tuple)):
        chosen: List[Any] = list(positions)  # pyright: ignore[reportUnknownArgumentType]
        if not chosen or not all(isinstance(p, int) and not isinstance(p, bool) for p in chosen):
            raise TypeError("capture() option positions= takes a non-empty list of ints")
        selection: Any = chosen
    elif isinstance(positions, int):
        selection = [positions]  # an index keeps the dimension, with size 1
    else:
        selection = _as_any(positions)  # a slice
    cached: Dict[int, torch.Tensor] = {}

    def indices(size: int) -> torch.Tensor:
        index = cached.get(size)
        if index is None:
            try:
                index = torch.arange(size)[selection]
            except IndexError:
                raise IndexError(
                    f"capture() positions= selects past a dimension {dim} of size {size}"
                ) from None
            cached[size] = index
        return index

    return indices
