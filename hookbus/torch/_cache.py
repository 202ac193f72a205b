"""What a capture recorded: a :class:`Cache` of :class:`CapturedCalls`, each of calls.

A :class:`Cache` maps a module's name to its :class:`CapturedCalls`, in model order; a
record holds every kept call of that module, each a :class:`Call` with its
output (and its inputs and gradient, when captured). A cache is data: it
pickles, and :meth:`Cache.gather` joins every rank's.
"""

from __future__ import annotations

from typing import Any, Dict, Iterator, List, Mapping, Optional, Tuple

import torch

from ._tree import Path, iter_tensors, map_tensors

__all__ = ["Cache", "Call", "CapturedCalls"]


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


class CapturedCalls:
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
        return f"<CapturedCalls {self.name!r} {len(self._calls)} calls, last output={last}>"


class Cache(Mapping[str, CapturedCalls]):
    """What :func:`capture` recorded: module name -> :class:`CapturedCalls`, in model order.

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
        self._records: Dict[str, CapturedCalls] = {}
        self._selected = selected
        self._keep = keep  # the most calls kept per module; None: all
        self._to_sink = False  # a capture with sink= stores nothing here

    def __getitem__(self, name: str) -> CapturedCalls:
        try:
            return self._records[name]
        except KeyError:
            if name in self._selected and self._to_sink:
                raise KeyError(
                    f"module {name!r}: this capture sends its calls to its sink= and stores none"
                ) from None
            if name in self._selected:
                raise KeyError(f"module {name!r} was selected but not called") from None
            captured = ", ".join(map(repr, self._records)) or "none"  # names, quoted: '0'
            raise KeyError(f"module {name!r} was not captured; captured: {captured}") from None

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
            record = self._records.setdefault(name, CapturedCalls(name))
        index = record._count
        record._count = index + 1
        call = Call(index, output, args, kwargs)  # checked by CapturedCalls.calls
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


def _describe(value: Any) -> str:
    if isinstance(value, torch.Tensor):
        return f"Tensor{tuple(value.shape)}"
    return type(value).__name__
