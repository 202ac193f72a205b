"""Declared events, and what a bus knows of names: its declarations and the names emitted.

A declaration (``@bus.event`` on a stub) gives a name a spec (:class:`Declared`).
:class:`Declarations` is the state a registry keeps of them: the specs, the past
emissions of historic events, the names emitted so far, and whether the bus is
strict. It holds no lock of its own: the registry changes it under the bus lock,
and runs the slow checks (``inspect.signature``, which may run user code) without
it. :class:`UnknownNameError` and the messages here are what a strict bus and
``check_pending()`` raise.
"""

from __future__ import annotations

import difflib
import itertools
from inspect import Parameter, Signature
from types import FunctionType
from typing import (
    TYPE_CHECKING,
    Any,
    Callable,
    Dict,
    Iterable,
    List,
    Optional,
    Set,
    Tuple,
    cast,
)

from ._spec import (
    CallerFactory,
    bad_arguments,
    by_name,
    code_shape,
    format_spec,
    make_binder,
    make_checking_call,
)

if TYPE_CHECKING:
    from ._handle import Handle
    from ._names import Matcher

__all__ = [
    "Declarations",
    "Declared",
    "Emission",
    "ResultCallback",
    "UnknownNameError",
    "did_you_mean",
    "mismatch_message",
    "unknown_emitted",
]

# Names emitted so far, kept for check_pending(); a program emitting ever-new names
# (f"user.{id}") must not grow this forever.
_EMITTED_LIMIT = 65_536

ResultCallback = Optional[Callable[[Any], Any]]

# One past emission of a historic event: (order across events, args, kwargs, and the
# callback that gets each hook's result, replays included: Event.emit_with_results).
Emission = Tuple[int, Tuple[Any, ...], Dict[str, Any], ResultCallback]


class UnknownNameError(LookupError):
    """Hooks registered for names that nothing declares, defines or emits.

    Raised by :meth:`EventBus.check_pending` (listing every such hook), and at
    registration on a bus made with ``strict=True``. Each entry names the hook,
    where it was defined, and the known names closest to its own. ``handles``
    holds the hooks' handles.

    Example:
        >>> import hookbus
        >>> bus = hookbus.EventBus(strict=True)
        >>> @bus.event
        ... def motor_spin(rpm: int) -> None: ...
        >>> try:
        ...     bus.on("motor_spn", print)
        ... except hookbus.UnknownNameError as error:
        ...     print(str(error).splitlines()[1].split(": ", 1)[1])
        no declared event is named 'motor_spn'; did you mean 'motor_spin'?
    """

    def __init__(self, message: str, handles: Iterable[Handle] = ()) -> None:
        super().__init__(message)
        self.handles: List[Handle] = list(handles)

    def __str__(self) -> str:
        return str(self.args[0])


UnknownNameError.__module__ = "hookbus"  # tracebacks show where users import it from


class Declared:
    """One declared event: its spec, and the function that checks emit's arguments."""

    __slots__ = (
        "binder",
        "binder_shape",
        "checking_call",
        "historic",
        "name",
        "sender_keyword",
        "signature",
        "text",
    )

    def __init__(self, name: str, signature: Signature, historic: bool) -> None:
        self.name = name
        self.signature = signature
        self.historic = historic
        self.text = format_spec(name, signature)
        #: Called with emit's arguments before any hook: raises TypeError if they
        #: don't bind to the spec, at the cost of one call of an empty function.
        self.binder: Callable[..., None] = make_binder(signature, name)
        self.binder_shape = code_shape(cast(FunctionType, self.binder))
        #: Where a positional emission binds exactly when it passes as many arguments as
        #: the spec has parameters: makes, for a hook that doesn't check itself, one
        #: caller that checks and calls it (``_spec.make_checking_call``); else ``None``.
        self.checking_call: Optional[CallerFactory] = make_checking_call(signature, name)
        #: The sender is the spec's first parameter, however it is passed: its name,
        #: when an emission may pass it by keyword (else ``None``).
        self.sender_keyword = _sender_keyword(signature)

    def checks_itself(self, hook: Any) -> bool:
        """Whether calling ``hook`` fails exactly when the arguments don't bind to the spec.

        True for a plain function with the spec's parameters: called first, its own
        argument binding is the check, and the binder can be left out of the plan.
        """
        return hook.__class__ is FunctionType and code_shape(hook) == self.binder_shape

    def same_as(self, other: Declared) -> bool:
        """Whether re-declaring ``other`` over this one is harmless (a module re-import)."""
        return self.text == other.text and self.historic == other.historic

    def described(self) -> str:
        return self.text + (" (historic)" if self.historic else "")


def _sender_keyword(signature: Signature) -> Optional[str]:
    """The name of the spec's first parameter if it may be passed by keyword.

    Example:
        >>> import inspect
        >>> def saved(doc, path=""): ...
        >>> def ping(n, /): ...
        >>> _sender_keyword(inspect.signature(saved)), _sender_keyword(inspect.signature(ping))
        ('doc', None)
    """
    for parameter in signature.parameters.values():
        if parameter.kind in (Parameter.POSITIONAL_OR_KEYWORD, Parameter.KEYWORD_ONLY):
            return parameter.name
        return None
    return None


def did_you_mean(name: str, known: Iterable[str]) -> str:
    """``"; did you mean 'a' or 'b'?"``, or ``""`` when no known name is close.

    Example:
        >>> did_you_mean("Motr.spin", ["Motor.spin", "eval"])
        "; did you mean 'Motor.spin'?"
        >>> did_you_mean("Motr.spin", ["Motor.spin", "Motor.stop", "eval"])
        "; did you mean 'Motor.spin' or 'Motor.stop'?"
    """
    close = difflib.get_close_matches(name, sorted(set(known)), n=3, cutoff=0.6)
    if not close:
        return ""
    return f"; did you mean {' or '.join(map(repr, close))}?"


class Declarations:
    """The declared events of one bus, historic emissions, and the names emitted so far.

    Changed only with the bus lock held; read without it where noted.
    """

    __slots__ = (
        "_emissions",
        "emitted",
        "emitted_overflow",
        "history",
        "specs",
        "strict",
    )

    def __init__(self) -> None:
        self.specs: Dict[str, Declared] = {}
        #: The past emissions of each historic event, oldest first.
        self.history: Dict[str, List[Emission]] = {}
        self._emissions = itertools.count()
        # A dict, not a set: a set's table takes more than twice the bytes per name.
        self.emitted: Dict[str, None] = {}
        self.emitted_overflow = False
        #: ``EventBus(strict=True)``: a hook for an unknown name is refused at once.
        self.strict = False

    # --- declaring (lock held) ----------------------------------------------------------

    def already(self, declared: Declared) -> bool:
        """True if the same spec is declared already; raise if a different one is."""
        existing = self.specs.get(declared.name)
        if existing is None:
            return False
        if existing.same_as(declared):
            return True  # a module imported again, or reloaded
        raise TypeError(
            f"event {declared.name!r} is already declared as {existing.described()}; it "
            f"can't be declared again as {declared.described()}. A second declaration must "
            f"be the same (as when a module is imported again): use another name for "
            f"another event"
        )

    def add(self, declared: Declared) -> None:
        self.specs[declared.name] = declared
        if declared.historic:
            self.history[declared.name] = []

    def forget(self, name: str) -> List[Emission]:
        """Drop the past emissions of ``name``; return them, for the caller to let go of
        once it released its lock (their arguments' finalizers may use the bus)."""
        history = self.history.get(name)
        if history is None:
            historic = ", ".join(map(repr, sorted(self.history))) or "none"
            raise ValueError(
                f"{name!r} is not a historic event, so there is nothing to forget; "
                f"historic events of this bus: {historic}"
            )
        self.history[name] = []
        return history

    def refuse_mismatches(self, declared: Declared, handles: Iterable[Handle]) -> None:
        """Raise listing every hook among ``handles`` that doesn't fit ``declared`` (no lock)."""
        handles = tuple(handles)
        lines = self.mismatches(declared, handles)
        if not lines:
            return
        for handle in handles:  # the name stays undeclared: no hook takes it by name
            handle.bind_by_name(declared.name, None)
        many = len(lines) != 1
        raise TypeError(
            f"cannot declare event {declared.name!r} as {declared.text}: {len(lines)} "
            f"hook{'s' if many else ''} registered before the declaration "
            f"{'do' if many else 'does'} not accept what it passes:\n"
            + "\n".join(lines)
            + f"\nRemove or change {'them' if many else 'it'}, or give the event another name"
        )

    # --- checking hooks -------------------------------------------------------------------

    def specs_for(self, name: str, match: Optional[Matcher]) -> List[Declared]:
        """The declared events that a hook registered for ``name`` would run for."""
        if match is None:
            declared = self.specs.get(name)
            return [] if declared is None else [declared]
        return [declared for event, declared in list(self.specs.items()) if match(event)]

    @staticmethod
    def fit(handle: Handle, hook: Callable[..., Any], declared: Declared) -> Optional[str]:
        """Why ``hook`` can't take what ``declared`` passes, or None.

        A hook that takes the spec's arguments by name gets its caller recorded on
        ``handle`` (worked out once here, before any plan runs it).
        """
        name = declared.name
        reason, factory = by_name(hook, name, declared.signature, with_name=handle.with_name)
        if reason is None:
            handle.bind_by_name(name, factory)
        return reason

    def mismatches(self, declared: Declared, handles: Iterable[Handle]) -> List[str]:
        """One line per hook among ``handles`` that can't take what ``declared`` passes."""
        lines: List[str] = []
        for handle in handles:
            hook = handle.hook
            if hook is None:
                continue  # a weak hook whose object died: it will never run
            reason = self.fit(handle, hook, declared)
            if reason is None and handle.is_async and declared.historic:
                reason = (
                    "an async hook, which the synchronous replay of past emissions can't await"
                )
            if reason is not None:
                lines.append(f"  - {handle!r} ({handle.where}): {reason}")
        return lines

    def refuse_arguments(
        self, error: BaseException, event: str, args: Tuple[Any, ...], kwargs: Dict[str, Any]
    ) -> None:
        """If ``error`` says the arguments of a declared event don't bind, raise that.

        ``error`` must come from the call itself (no hook frame in its traceback):
        the binder's, or the first hook's when its parameters are the spec's. The
        error raised instead names the event, its spec and what was passed.
        """
        declared = self.specs.get(event)
        traceback = error.__traceback__
        if declared is None or not isinstance(error, TypeError) or traceback is None:
            return
        if traceback.tb_next is not None:
            return  # a hook ran, and raised this itself
        wrong = bad_arguments(event, declared.signature, args, kwargs)
        if wrong is not None:
            try:
                raise wrong from None
            finally:
                # Its traceback holds this frame: without this, the cycle would keep
                # the emitted arguments alive until a collection.
                del wrong

    # --- historic events --------------------------------------------------------------------

    def record(
        self,
        event: str,
        args: Tuple[Any, ...],
        kwargs: Dict[str, Any],
        result_callback: ResultCallback = None,
    ) -> None:
        """Keep an emission of a historic event (lock held)."""
        self.history[event].append((next(self._emissions), args, dict(kwargs), result_callback))

    def history_for(
        self, name: str, match: Optional[Matcher]
    ) -> List[Tuple[str, Tuple[Any, ...], Dict[str, Any], ResultCallback]]:
        """The past emissions a new hook for ``name`` must get, oldest first (lock held)."""
        found = [
            (order, event, args, kwargs, callback)
            for event, emissions in self.history.items()
            if event == name or (match is not None and match(event))
            for order, args, kwargs, callback in emissions
        ]
        found.sort(key=lambda entry: entry[0])
        return [(event, args, kwargs, callback) for _, event, args, kwargs, callback in found]

    # --- names ----------------------------------------------------------------------------

    def saw_emitted(self, event: str) -> None:
        """Remember that ``event`` was emitted (called when its plan is worked out)."""
        if event in self.emitted:
            return
        if len(self.emitted) >= _EMITTED_LIMIT:
            self.emitted_overflow = True
            return
        self.emitted[event] = None

    def known_events(self) -> Set[str]:
        """Declared and emitted event names."""
        return {*self.specs, *self.emitted}


def mismatch_message(what: str, declared: Declared, reason: str, with_name: bool) -> str:
    """The registration error: which hook, which event and spec, and why."""
    first = " after the event's name (with_name=True)" if with_name else ""
    return (
        f"{what} does not accept what event {declared.name!r} passes, {declared.text}"
        f"{first}: {reason}. A hook takes the spec's parameters it names (any of them, "
        f"by name), or every one (at their places, or through *args / **kwargs), and "
        f"needs no argument the spec doesn't give"
    )


def unknown_emitted(bus_name: str, event: str, known: Iterable[str]) -> UnknownNameError:
    """``strict=True``: the error for emitting a name that is neither declared nor a point."""
    return UnknownNameError(
        f"strict bus {bus_name!r} refuses to emit {event!r}: no declared event or hook "
        f"point has that name{did_you_mean(event, known)}\nDeclare the event with @bus.event "
        f"before emitting it (or make the bus with strict=False)"
    )
