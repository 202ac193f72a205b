"""The recorder behind the pytest plugin's ``bus_recorder``: it needs no pytest.

:class:`BusRecorder` listens to every emission and hook-point call on some buses and
asserts on them with readable messages; an :class:`Occurrence` is one of those (an
emission or a call: not a ``TraceRecord``, which times one hook). Both are public as
``hookbus.pytest_plugin.BusRecorder`` and ``Occurrence``; they live here so that
code without pytest (the demo, a script) can record too.
"""

from __future__ import annotations

import difflib
import fnmatch
import re
import reprlib
from typing import (
    TYPE_CHECKING,
    Any,
    Dict,
    List,
    Optional,
    Sequence,
    Tuple,
    Type,
    Union,
)

from . import default_bus
from ._bus import EventBus
from ._context import CallContext
from ._dispatch import NOT_COLLECTED
from ._handle import HandleGroup

if TYPE_CHECKING:
    from typing_extensions import Self

__all__ = ["BusRecorder", "Occurrence"]

# The recorder must see a call before any other hook changes it, and its result
# after every post hook ran: priorities beyond any a user would pick.
_FIRST = 1 << 40
_LAST = -(1 << 40)
_RECORD_KEY = "hookbus.pytest_plugin.record"

_repr = reprlib.Repr()
_repr.maxstring = _repr.maxother = 60
_repr.maxlist = _repr.maxtuple = _repr.maxdict = 6


class Occurrence:
    """One emitted event (``kind == "event"``) or one hook-point call (``"call"``).

    What a :class:`BusRecorder` records. ``hookbus.pytest_plugin.BusRecord`` is the
    same class, under the name it had first.

    ``args`` and ``kwargs`` are as the emitter or caller passed them. For a call,
    ``result`` is what it finally returned (after post hooks), ``exception`` what
    it raised (if an exception hook recovered, ``recovered`` is True and
    ``result`` holds the recovered value), and ``done`` whether it finished.

    Example:
        >>> import hookbus
        >>> from hookbus.pytest_plugin import BusRecorder
        >>> bus = hookbus.EventBus()
        >>> with BusRecorder(bus) as recorder:
        ...     bus.emit("saved", "a.txt", size=3)
        >>> record = recorder.records[0]
        >>> record.kind, record.name, record.args, record.kwargs
        ('event', 'saved', ('a.txt',), {'size': 3})
        >>> record
        <emit saved('a.txt', size=3)>
    """

    __slots__ = (
        "args",
        "bus",
        "done",
        "exception",
        "kind",
        "kwargs",
        "name",
        "recovered",
        "result",
        "target",
    )

    def __init__(
        self,
        kind: str,
        name: str,
        args: Tuple[Any, ...],
        kwargs: Dict[str, Any],
        bus: EventBus,
        target: Any = None,
    ) -> None:
        self.kind = kind
        self.name = name
        self.args = args
        self.kwargs = dict(kwargs)
        self.bus = bus
        self.target = target
        self.result: Any = None
        self.exception: Optional[BaseException] = None
        self.recovered = False
        self.done = kind == "event"

    @property
    def raised(self) -> bool:
        """Whether the call ended by raising (an error that no hook recovered)."""
        return self.exception is not None and not self.recovered

    def describe(self) -> str:
        """One line: ``emit name(args)`` or ``call name(args) -> result``."""
        arguments = _format_arguments(self.args, self.kwargs)
        line = f"{'emit' if self.kind == 'event' else 'call'} {self.name}({arguments})"
        if self.kind == "event":
            return line
        if self.exception is not None:
            line += f" raised {type(self.exception).__name__}({_repr.repr(str(self.exception))})"
            if self.recovered:
                line += f", recovered -> {_repr.repr(self.result)}"
            return line
        return line + (f" -> {_repr.repr(self.result)}" if self.done else " (not finished)")

    def __repr__(self) -> str:
        return f"<{self.describe()}>"


class BusRecorder:
    """Records the events emitted and the hook points called on some buses.

    It listens with hooks of its own (to ``"*"``, at the extreme priorities), so
    it sees every emission and call that dispatches; those hooks show in
    ``bus.hooks()`` and in traces, but never in ``collect()`` results. A paused
    name dispatches nothing, so it isn't recorded. ``BusRecorder()`` with no bus
    records :data:`hookbus.default_bus`. Use it as a context manager, or call
    :meth:`stop`. Names given to the helpers may be glob patterns.

    Example:
        >>> import hookbus
        >>> from hookbus.pytest_plugin import BusRecorder
        >>> bus = hookbus.EventBus()
        >>> @bus.hookable("double")
        ... def double(x):
        ...     return 2 * x
        >>> with BusRecorder(bus) as recorder:
        ...     bus.emit("tick", 1)
        ...     bus.emit("tick", 2)
        ...     double(21)
        42
        >>> recorder.assert_emitted("tick", times=2)
        >>> recorder.assert_returned("double", 42)
        >>> recorder.assert_emitted("tick", times=3)
        Traceback (most recent call last):
        ...
        AssertionError: expected `tick` emitted 3 times, got 2:
          emit tick(1)
          emit tick(2)
    """

    def __init__(self, *buses: EventBus) -> None:
        self.records: List[Occurrence] = []
        self._hooks = HandleGroup()
        self._watched: List[EventBus] = []
        for bus in buses or (default_bus,):
            self.watch(bus)

    def watch(self, bus: EventBus) -> None:
        """Record ``bus`` too (watching a bus twice records it once)."""
        if any(watched is bus for watched in self._watched):
            return
        self._watched.append(bus)
        records = self.records

        def on_event(event: str, *args: Any, **kwargs: Any) -> Any:
            records.append(Occurrence("event", event, args, kwargs, bus))
            return NOT_COLLECTED

        def on_pre(ctx: CallContext) -> None:
            record = Occurrence("call", ctx.name, ctx.args, ctx.kwargs, bus, ctx.target)
            ctx.data[_RECORD_KEY] = record
            records.append(record)

        def on_exception(ctx: CallContext) -> None:
            record: Optional[Occurrence] = ctx.data.get(_RECORD_KEY)
            if record is not None:
                record.exception = ctx.exception
                record.done = True

        def on_post(ctx: CallContext) -> None:
            record: Optional[Occurrence] = ctx.data.get(_RECORD_KEY)
            if record is not None:
                record.result = ctx.result
                record.recovered = ctx.exception is not None
                record.done = True

        self._hooks.add(bus.on("*", on_event, priority=_FIRST, with_name=True))
        self._hooks.add(bus.pre("*", on_pre, priority=_FIRST))
        self._hooks.add(bus.exception("*", on_exception, priority=_FIRST))
        self._hooks.add(bus.post("*", on_post, priority=_LAST))

    def stop(self) -> None:
        """Stop recording (the records stay)."""
        self._hooks.remove()
        self._watched.clear()

    def clear(self) -> None:
        """Forget what was recorded so far."""
        self.records.clear()

    # --- queries --------------------------------------------------------------------

    def events(self, name: Optional[str] = None) -> List[Occurrence]:
        """The recorded emissions, all or those of ``name`` (a name or glob pattern)."""
        return self._select("event", name)

    def calls(self, name: Optional[str] = None) -> List[Occurrence]:
        """The recorded hook-point calls, all or those of ``name`` (a name or pattern)."""
        return self._select("call", name)

    def names(self) -> List[str]:
        """The names of every record, in order: events and calls interleaved."""
        return [record.name for record in self.records]

    # --- assertions -----------------------------------------------------------------

    def assert_emitted(self, name: str, /, times: Optional[int] = None) -> None:
        """Assert ``name`` was emitted: at least once, or exactly ``times`` times."""
        __tracebackhide__ = True
        self._assert_count("event", name, times)

    def assert_not_emitted(self, name: str, /) -> None:
        """Assert ``name`` was never emitted."""
        __tracebackhide__ = True
        self._assert_count("event", name, 0)

    def assert_emitted_with(self, name: str, /, *args: Any, **kwargs: Any) -> None:
        """Assert some emission of ``name`` had exactly these arguments."""
        __tracebackhide__ = True
        self._assert_with("event", name, args, kwargs)

    def assert_called(self, name: str, /, times: Optional[int] = None) -> None:
        """Assert the hook point ``name`` was called: at least once, or ``times`` times."""
        __tracebackhide__ = True
        self._assert_count("call", name, times)

    def assert_not_called(self, name: str, /) -> None:
        """Assert the hook point ``name`` was never called."""
        __tracebackhide__ = True
        self._assert_count("call", name, 0)

    def assert_called_with(self, name: str, /, *args: Any, **kwargs: Any) -> None:
        """Assert some call of ``name`` had exactly these arguments."""
        __tracebackhide__ = True
        self._assert_with("call", name, args, kwargs)

    def assert_returned(self, name: str, value: Any, /) -> None:
        """Assert some call of ``name`` returned ``value`` (after its post hooks)."""
        __tracebackhide__ = True
        calls = self._require("call", name)
        if not any(call.done and not call.raised and _equal(call.result, value) for call in calls):
            raise AssertionError(
                f"expected `{name}` to return {_repr.repr(value)}, but it didn't:\n"
                + _listing(calls)
            )

    def assert_raised(
        self,
        name: str,
        exception: Union[Type[BaseException], Tuple[Type[BaseException], ...]] = Exception,
        /,
        *,
        match: Optional[str] = None,
    ) -> None:
        """Assert some call of ``name`` raised ``exception`` (its message matching ``match``).

        A call whose error an exception hook recovered counts: it raised.
        """
        __tracebackhide__ = True
        calls = self._require("call", name)
        for call in calls:
            error = call.exception
            if isinstance(error, exception) and (match is None or re.search(match, str(error))):
                return
        wanted = (
            " or ".join(e.__name__ for e in exception)
            if isinstance(exception, tuple)
            else exception.__name__
        )
        raise AssertionError(
            f"expected `{name}` to raise {wanted}"
            + (f" matching {match!r}" if match else "")
            + ", but it didn't:\n"
            + _listing(calls)
        )

    def assert_order(self, *names: str) -> None:
        """Assert these names were emitted or called in this order (others may come between)."""
        __tracebackhide__ = True
        position = 0
        for index, name in enumerate(names):
            while position < len(self.records) and not _matches(self.records[position], name):
                position += 1
            if position == len(self.records):
                after = f" after `{names[index - 1]}`" if index else ""
                raise AssertionError(
                    f"expected in order: {', '.join(f'`{n}`' for n in names)}; "
                    f"found no `{name}`{after}. Recorded:\n" + _listing(self.records)
                )
            position += 1

    # --- helpers --------------------------------------------------------------------

    def _select(self, kind: str, name: Optional[str]) -> List[Occurrence]:
        return [
            record
            for record in self.records
            if record.kind == kind and (name is None or _matches(record, name))
        ]

    def _assert_count(self, kind: str, name: str, times: Optional[int]) -> None:
        __tracebackhide__ = True
        found = self._select(kind, name)
        if (times is None and found) or (times is not None and len(found) == times):
            return
        verb = "emitted" if kind == "event" else "called"
        expected = "at least once" if times is None else _times(times)
        if not found:
            message = f"expected `{name}` {verb} {expected}, got 0"
            raise AssertionError(message + self._instead(kind, name))
        raise AssertionError(
            f"expected `{name}` {verb} {expected}, got {len(found)}:\n" + _listing(found)
        )

    def _assert_with(
        self, kind: str, name: str, args: Tuple[Any, ...], kwargs: Dict[str, Any]
    ) -> None:
        __tracebackhide__ = True
        found = self._require(kind, name)
        if any(_equal(r.args, args) and _equal(r.kwargs, kwargs) for r in found):
            return
        verb = "emitted" if kind == "event" else "called"
        raise AssertionError(
            f"expected `{name}` {verb} with ({_format_arguments(args, kwargs)}), but no "
            f"{'emission' if kind == 'event' else 'call'} matched:\n" + _listing(found)
        )

    def _require(self, kind: str, name: str) -> List[Occurrence]:
        __tracebackhide__ = True
        found = self._select(kind, name)
        if not found:
            verb = "emitted" if kind == "event" else "called"
            raise AssertionError(f"expected `{name}` {verb}, got 0" + self._instead(kind, name))
        return found

    def _instead(self, kind: str, name: str) -> str:
        """What was recorded instead, with a close name if there is one."""
        seen = list(dict.fromkeys(r.name for r in self.records if r.kind == kind))
        if not seen:
            return f"; nothing was {'emitted' if kind == 'event' else 'called'}"
        close = difflib.get_close_matches(name, seen, n=1)
        hint = f" (did you mean `{close[0]}`?)" if close else ""
        counts = {n: sum(1 for r in self.records if r.kind == kind and r.name == n) for n in seen}
        listed = ", ".join(f"`{n}`" + (f" x{c}" if c > 1 else "") for n, c in counts.items())
        return f"{hint}; {'emitted' if kind == 'event' else 'called'} instead: {listed}"

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    def __repr__(self) -> str:
        state = "recording" if self._hooks.active else "stopped"
        return f"<BusRecorder {len(self.records)} records, {state}>"


def _matches(record: Occurrence, name: str) -> bool:
    return record.name == name or fnmatch.fnmatchcase(record.name, name)


def _equal(left: Any, right: Any) -> bool:
    # Tensors and arrays compare element-wise; an ambiguous answer is not a match.
    try:
        return bool(left == right)
    except Exception:
        return left is right


def _times(times: int) -> str:
    return "once" if times == 1 else f"{times} times"


def _format_arguments(args: Tuple[Any, ...], kwargs: Dict[str, Any]) -> str:
    return ", ".join(
        [_repr.repr(arg) for arg in args]
        + [f"{key}={_repr.repr(value)}" for key, value in kwargs.items()]
    )


def _listing(records: Sequence[Occurrence], limit: int = 20) -> str:
    lines = [f"  {record.describe()}" for record in records[:limit]]
    if len(records) > limit:
        lines.append(f"  ... and {len(records) - limit} more")
    return "\n".join(lines)
