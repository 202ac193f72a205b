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
  ``_attach.select``), so a capture names and selects as an attachment does;
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
    Iterator,
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

from ..adapter import is_pattern, matcher_for
from ._attach import ROOT, Selector, select
from ._grad import hook_output_grads
from ._point import hold_script_refusal, release_script_refusal, remove_dispatchers
from ._tree import Path, iter_tensors, map_tensors
from ._unwrap import ModuleName, is_compiled, stacklevel_outside_hookbus, unwrap, walk
from ._vocabulary import NameHooks, is_names_selector, select_names

__all__ = ["Cache", "Call", "CaptureHook", "Record", "capture", "inert_capture_hook"]

Device = Union[str, torch.device, None]


class Call:
    """What one call of a module produced: ``output``, ``args``, ``kwargs``, ``grad``.

    ``args`` and ``kwargs`` are ``None`` unless the capture asked for inputs.
    ``grad`` has the shape of ``output`` (a tensor, or the same nesting) with each
    tensor's gradient in its place, or ``None`` where none arrived (yet): it fills
    in during backward, when the capture asked for gradients.

    Example:
        >>> import torch, hookbus.torch
        >>> from torch import nn
        >>> model = nn.Sequential(nn.Linear(2, 1))
        >>> with hookbus.torch.capture(model, "0", inputs=True, grads=True) as cache:
        ...     model(torch.ones(1, 2)).sum().backward()
        >>> call = cache["0"].calls[0]
        >>> call.index, call.args[0], call.grad
        (0, tensor([[1., 1.]]), tensor([[1.]]))
    """

    __slots__ = ("_grads", "args", "index", "kwargs", "output")

    def __init__(
        self, index: int, output: Any, args: Optional[Any], kwargs: Optional[Dict[str, Any]]
    ) -> None:
        self.index = index
        self.output = output
        self.args = args
        self.kwargs = kwargs
        self._grads: Dict[Path, torch.Tensor] = {}

    @property
    def grad(self) -> Any:
        """The gradients of the output, in the output's shape (``None`` where missing)."""
        grads = self._grads
        return map_tensors(self.output, lambda path, _: grads.get(path))

    def __repr__(self) -> str:
        return f"<Call {self.index} output={_describe(self.output)}>"


class Record:
    """Every captured call of one module, in call order (the last ones, with ``keep=``).

    ``output`` / ``args`` / ``kwargs`` / ``grad`` are those of the *last* call;
    ``outputs`` / ``grads`` list every kept call's; ``calls`` holds the :class:`Call`
    objects. A module used twice in one forward has two calls. ``len(record)``
    counts the kept calls, ``record.count`` every call.

    Example:
        >>> import torch, hookbus.torch
        >>> from torch import nn
        >>> model = nn.Sequential(nn.Identity())
        >>> with hookbus.torch.capture(model, "0") as cache:
        ...     _ = model(torch.zeros(1)); _ = model(torch.ones(1))
        >>> record = cache["0"]
        >>> len(record), record.output, record.outputs
        (2, tensor([1.]), [tensor([0.]), tensor([1.])])
    """

    __slots__ = ("_calls", "_count", "_indexed", "name")

    def __init__(self, name: str) -> None:
        self.name = name
        self._calls: List[Call] = []
        self._indexed = -1  # the count at which the indices were last checked
        self._count = 0  # calls recorded, kept or not (see Cache._add)

    @property
    def count(self) -> int:
        """How many calls the module made while captured, kept or not (see ``keep=``)."""
        # Counted without a lock (see Cache._add): two threads recording at once may
        # count one call; the kept calls, appended atomically, are a floor.
        return max(self._count, len(self._calls))

    @property
    def calls(self) -> List[Call]:
        """The :class:`Call` of every kept call, in order.

        ``calls[i].index == i`` when every call is kept; with ``keep=`` the oldest
        calls are dropped and ``index`` still counts from the capture's first call.
        """
        calls = self._calls
        count = self.count
        if self._indexed != count:
            # Calls are appended without a lock (see Cache._add): two threads that
            # recorded at once may have taken the same provisional index.
            first = count - len(calls)
            for position, call in enumerate(calls):
                call.index = first + position
            self._indexed = count
        return calls

    @property
    def output(self) -> Any:
        """The output of the last call."""
        return self._calls[-1].output

    @property
    def outputs(self) -> List[Any]:
        """The output of every call, in order."""
        return [call.output for call in self._calls]

    @property
    def args(self) -> Any:
        """The positional arguments of the last call (``inputs=True``)."""
        return self._calls[-1].args

    @property
    def kwargs(self) -> Optional[Dict[str, Any]]:
        """The keyword arguments of the last call (``inputs=True``)."""
        return self._calls[-1].kwargs

    @property
    def grad(self) -> Any:
        """The output gradient of the last call (``grads=True``, after backward)."""
        return self._calls[-1].grad

    @property
    def grads(self) -> List[Any]:
        """The output gradient of every call, in order."""
        return [call.grad for call in self._calls]

    def __len__(self) -> int:
        return len(self._calls)

    def __repr__(self) -> str:
        last = _describe(self.output)
        return f"<Record {self.name!r} {len(self._calls)} calls, last output={last}>"


class Cache(Mapping[str, Record]):
    """What :func:`capture` recorded: module name -> :class:`Record`, in model order.

    ``cache["fc1"].output`` is the last output, ``cache["fc1"].outputs`` all of
    them. Only modules that ran are keys; asking for a selected module that never
    ran, or an unknown name, raises a ``KeyError`` that says which.

    Example:
        >>> import torch, hookbus.torch
        >>> from torch import nn
        >>> model = nn.Sequential(nn.Linear(2, 2), nn.ReLU())
        >>> with hookbus.torch.capture(model, nn.ReLU) as cache:
        ...     _ = model(torch.ones(1, 2))
        >>> list(cache), cache["1"].output.shape
        (['1'], torch.Size([1, 2]))
    """

    def __init__(self, selected: List[str], keep: Optional[int] = None) -> None:
        # Recorded into from any thread (DataParallel replicas run on worker threads)
        # without a lock: a lock per module call cost 2% of a GPT-2 forward, and
        # dict.setdefault and list.append are atomic (also without the GIL).
        self._records: Dict[str, Record] = {}
        self._selected = selected
        self._keep = keep  # the most calls kept per module; None: all
        self._to_sink = False  # a capture with sink= stores nothing here

    def __getitem__(self, name: str) -> Record:
        try:
            return self._records[name]
        except KeyError:
            if name in self._selected and self._to_sink:
                raise KeyError(
                    f"module {name!r}: this capture sends its calls to its sink= and stores none"
                ) from None
            if name in self._selected:
                raise KeyError(f"module {name!r} was selected but not called") from None
            raise KeyError(
                f"module {name!r} was not captured; captured: {', '.join(self._records) or 'none'}"
            ) from None

    def __getstate__(self) -> Dict[str, Any]:
        # A cache is data: it pickles (torch.save too).
        return {
            "_records": dict(self._records),
            "_selected": list(self._selected),
            "_keep": self._keep,
            "_to_sink": self._to_sink,
        }

    def __setstate__(self, state: Dict[str, Any]) -> None:
        self._records = state["_records"]
        self._selected = state["_selected"]
        self._keep = state.get("_keep")
        self._to_sink = state.get("_to_sink", False)

    def __iter__(self) -> Iterator[str]:
        records = self._records
        return iter([name for name in self._selected if name in records])

    def __len__(self) -> int:
        return len(self._records)

    def outputs(self) -> Dict[str, Any]:
        """``{name: last output}`` for every captured module.

        Example:
            >>> import torch, hookbus.torch
            >>> from torch import nn
            >>> model = nn.Sequential(nn.Linear(2, 2), nn.ReLU())
            >>> with hookbus.torch.capture(model, "*") as cache:
            ...     y = model(torch.ones(1, 2))
            >>> list(cache.outputs())
            ['<root>', '0', '1']
        """
        return {name: self._records[name].output for name in self}

    def gather(self, dst: Optional[int] = None, group: Any = None) -> Optional[Cache]:
        """Every rank's records, concatenated along the batch dimension, in rank order.

        Call it on every rank of ``group`` (default: the whole world) at the same
        point. Each name's calls, on every rank, become one :class:`Call` whose
        output (and ``args``, ``kwargs`` and ``grad``, when captured) holds every
        tensor concatenated along dim 0: rank 0's calls first, in call order, then
        rank 1's... Batch sizes may differ; other dimensions, dtypes and the
        output's structure must not (a ``ValueError`` on every rank says where). A
        0-dim tensor (a loss) is stacked, one entry per call. A gradient is kept
        where every call has one. Captured activation gradients are per rank: DDP
        averages parameter gradients only.

        With ``dst`` (a global rank, as in ``torch.distributed.gather``) only that
        rank receives the result and the others get ``None``. The tensors arrive
        on the CPU (on the current GPU with NCCL). It takes two collectives: an
        ``all_gather_object`` of shapes and dtypes, then one ``all_gather`` (or
        ``gather``) of all the data in one buffer. Raises ``RuntimeError`` without
        an initialized process group or on a rank not in ``group``.
        """
        from ._distributed import gather_calls

        calls = {
            name: [(c.output, c.args, c.kwargs, dict(c._grads)) for c in record.calls]
            for name, record in list(self._records.items())
        }
        joined = gather_calls(self._selected, calls, dst, group)
        if joined is None:
            return None
        gathered = Cache(list(self._selected))
        for name in self._selected:
            if name in joined:
                output, args, kwargs, grads = joined[name]
                gathered._add(name, output, args, kwargs)._grads.update(grads)
        return gathered

    def _add(self, name: str, output: Any, args: Any, kwargs: Any) -> Call:
        record = self._records.get(name)
        if record is None:
            record = self._records.setdefault(name, Record(name))
        index = record._count
        record._count = index + 1
        call = Call(index, output, args, kwargs)  # checked by Record.calls
        calls = record._calls
        calls.append(call)
        keep = self._keep
        if keep is not None and len(calls) > keep:
            del calls[:-keep]  # the oldest go: memory stays that of `keep` calls
        return call

    def nbytes(self) -> int:
        """The bytes of the tensor storages the cache holds (each storage counted once).

        Outputs, inputs and gradients of every kept call, on every device. A stored
        view counts its whole storage: that is what it keeps alive.

        Example:
            >>> import torch, hookbus.torch
            >>> from torch import nn
            >>> model = nn.Sequential(nn.Linear(4, 4))
            >>> with hookbus.torch.capture(model, "0", keep="last") as cache:
            ...     for _ in range(3):
            ...         _ = model(torch.ones(2, 4))
            >>> cache.nbytes()  # one call's output: 2 x 4 float32
            32
        """
        seen: Dict[Tuple[torch.device, int], int] = {}
        for record in list(self._records.values()):
            for call in list(record._calls):
                parts = (call.output, call.args, call.kwargs, dict(call._grads))
                for _, tensor in iter_tensors(parts):
                    storage = tensor.untyped_storage()
                    seen[(tensor.device, storage.data_ptr())] = storage.nbytes()
        return sum(seen.values())

    def __repr__(self) -> str:
        return f"<Cache {', '.join(f'{name}:{len(self._records[name])}' for name in self)}>"


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


class capture:
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
    checked when ``capture(...)`` is called. The hooks go in when the ``with``
    block is entered, not before: a capture that is never entered records
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
        self._swaps: List[Any] = []  # a compiled model's forward swaps, held while running
        self._root: Optional[nn.Module] = None  # the model, while it holds our script refusal
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

        # Names of the vocabulary ("blocks.*.hook_z") are values, captured by post hooks
        # on them (a private bus), installed at __enter__.
        self._names: Optional[List[str]] = None
        self._name_hooks: Optional[NameHooks] = None
        if _names_not_modules(selector, modules):
            if inputs:
                raise TypeError(
                    "capture() option inputs= applies to modules: a name of the vocabulary "
                    "is one value, stored as the record's output"
                )
            self._names = select_names(self._model, selector)
            self._expected = [self._names]
            self._compiled = compiled
            self._modules = []
            self.cache = Cache(self._names, kept)
            self.cache._to_sink = sink is not None
            return

        def name_of(module: nn.Module) -> str:
            for entry in found:
                if entry.module is module:
                    return entry.bare or ROOT
            raise ValueError(
                f"{type(module).__name__} module is not part of the captured model "
                f"(a module of another model, or one added to it since capture() started)"
            )

        names = select(modules, selector, name_of)
        # What must run for the capture to have missed nothing (warned at exit).
        self._expected = _expected_groups(modules, selector, name_of)
        self._compiled = compiled
        # Held until __enter__ installs their hooks, dropped at the end.
        self._modules: List[Tuple[str, nn.Module]] = [(n, modules[n].module) for n in names]
        self.cache = Cache(names, kept)
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
            if self._names is not None and self._model is not None:
                self._name_hooks = NameHooks(self._model, self._names, self._name_recorder)
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

    def _name_recorder(self, name: str) -> Callable[[Any], None]:
        def record(ctx: Any) -> None:
            self._record_call(name, None, None, ctx.result)

        return record

    def _end(self) -> None:
        self._state = "ended"
        name_hooks, self._name_hooks = self._name_hooks, None
        if name_hooks is not None:
            name_hooks.remove()
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


def _names_not_modules(selector: Any, modules: Mapping[str, Any]) -> bool:
    """Whether ``selector`` names values of the vocabulary and no module of the model
    (a module may be named ``hook_pattern`` itself: it is then selected as a module)."""
    if not is_names_selector(selector):
        return False
    items: List[str] = [selector] if isinstance(selector, str) else list(selector)
    return not any(
        item in modules or (is_pattern(item) and any(map(matcher_for(item), modules)))
        for item in items
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


def renewed_swaps(modules: List[nn.Module]) -> List[Any]:
    """A forward swap on each module, each a new one: what a compiled model needs.

    torch.compile then compiles again the code that calls these modules, so that
    their new hooks run (see ``ModulePoint._renew_compile_swap``). Give them back
    with :func:`release_swaps`.
    """
    from ._patching import ForwardSwap  # imports this module

    swaps: List[Any] = []
    try:
        for module in modules:
            swap = ForwardSwap.acquire(module)
            swaps.append(swap)
            swap.renew()
    except BaseException:
        release_swaps(swaps)
        raise
    return swaps


def release_swaps(swaps: List[Any]) -> None:
    """Give back :func:`renewed_swaps`' swaps; one still in use elsewhere is renewed."""
    for swap in swaps:
        swap.renew()  # code compiled while the capture's hooks were there goes with it
        swap.release()


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


def _describe(value: Any) -> str:
    if isinstance(value, torch.Tensor):
        return f"Tensor{tuple(value.shape)}"
    return type(value).__name__
