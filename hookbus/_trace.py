"""Tracing: which hook ran on which name, and how long it took."""

from __future__ import annotations

from typing import TYPE_CHECKING, Dict, List, NamedTuple, Optional, Tuple, Union

from typing_extensions import Protocol

if TYPE_CHECKING:
    from typing_extensions import Self

    from ._handle import Handle, Owner

__all__ = ["Trace", "TraceGroup", "TraceRecord", "TraceSwitch", "tracer_for"]


class TraceRecord(NamedTuple):
    """One hook call seen by a :class:`Trace`.

    Example:
        >>> import hookbus
        >>> bus = hookbus.EventBus()
        >>> def audit(user):
        ...     pass
        >>> _ = bus.on("login", audit)
        >>> with bus.trace() as trace:
        ...     bus.emit("login", "ada")
        >>> record = trace.records[0]
        >>> record.name, record.kind, record.handle.hook is audit, record.duration_ns >= 0
        ('login', 'event', True, True)
    """

    name: str
    """The event or hook point dispatched."""
    kind: str
    """``"event"``, or the phase of a hook around a call (``"pre"``, ``"post"``...)."""
    handle: Handle
    """The hook's handle (``record.handle.hook`` is the callable)."""
    duration_ns: int
    """How long the hook ran, in nanoseconds."""


class TraceSwitch(Protocol):
    """What a :class:`Trace` needs of the registry: ``bus.registry`` is one."""

    @property
    def bus(self) -> Owner:
        """The bus the registry serves."""
        ...

    def set_trace(self, trace: Trace, is_open: bool) -> bool:
        """Open or close ``trace``; False if it already was."""
        ...


class Trace:
    """Records every hook call on a bus while open. Made by :meth:`EventBus.trace`.

    Traces may overlap, nested or not, opened and closed in any order and in any
    thread: each records the dispatches that begin between its own enter and exit
    (all the hooks of each), and none after the last one closes.

    Example:
        >>> import time, hookbus
        >>> bus = hookbus.EventBus()
        >>> _ = bus.on("save", lambda: time.sleep(0.001))
        >>> with bus.trace() as trace:
        ...     bus.emit("save")
        >>> trace.records[0].duration_ns > 500_000
        True
        >>> print(trace.summary())  # doctest: +ELLIPSIS
        event 'save' <lambda> ...: 1 call(s), ... us in all
    """

    def __init__(self, registry: TraceSwitch) -> None:
        self.registry = registry
        self.records: List[TraceRecord] = []

    def _record(self, name: str, kind: str, handle: Handle, duration_ns: int) -> None:
        self.records.append(TraceRecord(name, kind, handle, duration_ns))

    def summary(self) -> str:
        """One line per hook: calls and total time, the most expensive first."""
        first: Dict[int, TraceRecord] = {}
        calls: Dict[int, int] = {}
        total_ns: Dict[int, int] = {}
        for record in self.records:
            key = id(record.handle)
            first.setdefault(key, record)
            calls[key] = calls.get(key, 0) + 1
            total_ns[key] = total_ns.get(key, 0) + record.duration_ns
        lines: List[str] = []
        for key in sorted(first, key=lambda key: -total_ns[key]):
            record = first[key]
            hook = record.handle.hook
            label = getattr(hook, "__qualname__", None) or repr(hook)
            lines.append(
                f"{record.kind} {record.name!r} {label} ({record.handle.where}): "
                f"{calls[key]} call(s), {total_ns[key] / 1000:.1f} us in all"
            )
        return "\n".join(lines)

    def __enter__(self) -> Self:
        if not self.registry.set_trace(self, True):
            raise RuntimeError("this trace is already open; make a new one with bus.trace()")
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.registry.set_trace(self, False)  # closing a closed trace does nothing

    def __repr__(self) -> str:
        return f"<Trace {len(self.records)} records on {self.registry.bus!r}>"


class TraceGroup:
    """The open traces of a bus when there are several: a dispatch records into each."""

    __slots__ = ("traces",)

    def __init__(self, traces: Tuple[Trace, ...]) -> None:
        self.traces = traces

    def _record(self, name: str, kind: str, handle: Handle, duration_ns: int) -> None:
        record = TraceRecord(name, kind, handle, duration_ns)
        for trace in self.traces:
            trace.records.append(record)


Tracer = Union[Trace, TraceGroup]
"""What dispatch records hook calls into: ``tracer._record(name, kind, handle, ns)``."""


def tracer_for(traces: Tuple[Trace, ...]) -> Optional[Tracer]:
    """The tracer of these open traces: none, the one trace, or a group of them."""
    if not traces:
        return None
    return traces[0] if len(traces) == 1 else TraceGroup(traces)
