"""The registration options, declared once: a TypedDict for type checkers, one parser.

Priorities are plain ints, higher runs first, with mmengine's names as aliases
(:class:`Priority`).

Every registering method (``EventBus.on`` / ``pre`` / ``post`` / ``exception``,
``Scope``'s, and the torch ``Attachment``'s) takes ``**options:
Unpack[HookOptions]``, so IDEs show the options and type checkers check them, and
every one of them is parsed by :func:`parse_options` at registration time.
"""

from __future__ import annotations

import difflib
import enum
import inspect
from typing import Any, Callable, Mapping, Tuple, Union

from typing_extensions import TypedDict

from ._kinds import hook_kind, hook_kinds

__all__ = [
    "EventHookOptions",
    "HookOptions",
    "ParsedOptions",
    "Priority",
    "PriorityLike",
    "parse_options",
    "spell_out_options",
    "to_priority",
]


class Priority(enum.IntEnum):
    """Named priorities. Higher runs first; the default is ``NORMAL`` (0).

    The names are mmengine's. mmengine runs *lower* numbers first (``HIGHEST = 0``,
    ``LOWEST = 100``); hookbus runs *higher* numbers first, so each name maps to
    ``50 - mmengine_value``. The spacing, and so the relative order of any mix of
    names and ints, is kept.

    Example:
        >>> from hookbus import Priority
        >>> int(Priority.HIGH), int(Priority.NORMAL), int(Priority.LOWEST)
        (20, 0, -50)
        >>> Priority.HIGHEST > Priority.VERY_HIGH > Priority.NORMAL
        True
    """

    HIGHEST = 50
    VERY_HIGH = 40
    HIGH = 20
    ABOVE_NORMAL = 10
    NORMAL = 0
    BELOW_NORMAL = -10
    LOW = -20
    VERY_LOW = -40
    LOWEST = -50


PriorityLike = Union[int, str, Priority]
"""What ``priority=`` accepts: an int, a :class:`Priority`, or one of its names."""

_NAMES = ", ".join(Priority.__members__)


def to_priority(value: object) -> int:
    """Turn a ``priority=`` argument into an int, or say what is accepted.

    Example:
        >>> to_priority("high"), to_priority(7), to_priority(Priority.LOW)
        (20, 7, -20)
    """
    # bool is an int subclass: True would silently mean priority 1.
    if isinstance(value, int) and not isinstance(value, bool):
        return int(value)
    if isinstance(value, str):
        member = Priority.__members__.get(value.upper())
        if member is not None:
            return int(member)
        raise ValueError(
            f"unknown priority name {value!r}; accepted: an int (higher runs first) "
            f"or one of {_NAMES}"
        )
    raise TypeError(
        f"priority must be an int or a priority name, got {type(value).__name__} {value!r}; "
        f"accepted: an int (higher runs first) or one of {_NAMES}"
    )


class HookOptions(TypedDict, total=False):
    """The options every registration takes, all optional.

    Example:
        >>> import hookbus
        >>> options: hookbus.HookOptions = {"priority": "HIGH", "once": True}
        >>> bus = hookbus.EventBus()
        >>> bus.on("saved", print, **options).priority
        20
    """

    priority: PriorityLike
    """Higher runs first; ties run in registration order. An int or a ``Priority`` name."""
    once: bool
    """Remove the hook after its first call (claimed atomically: it runs at most once)."""
    target: Any
    """Fire only for this sender (an event's first argument) or call target."""
    weak: bool
    """Hold the hook by weak reference: it goes when its object is collected."""
    optional: bool
    """The name may never be declared or defined (pluggy's ``optionalhook``): a strict bus
    accepts the hook and ``check_pending()`` does not report it."""


class EventHookOptions(HookOptions, total=False):
    """:class:`HookOptions`, plus the one option only event hooks take.

    Example:
        >>> import hookbus
        >>> options: hookbus.EventHookOptions = {"with_name": True}
        >>> bus = hookbus.EventBus()
        >>> _ = bus.on("*", lambda event, *args: print(event, args), **options)
        >>> bus.emit("saved", 1)
        saved (1,)
    """

    with_name: bool
    """Pass the event's name first: ``hook(event, *args, **kwargs)``."""


OPTION_NAMES: Tuple[str, ...] = tuple(EventHookOptions.__annotations__)
"""Every option name, in the order error messages list them."""

ParsedOptions = Tuple[int, bool, Any, bool, bool, bool]
"""``(priority, once, target, weak, with_name, optional)``, checked."""


_DEFAULTS = {"priority": 0, "target": None}  # the others default to False


def spell_out_options(method: Callable[..., Any], options: Any) -> None:
    """Show ``options`` (a TypedDict) by name in ``method``'s signature, for ``help()``.

    Type checkers read ``**options: Unpack[HookOptions]`` from the overloads; ``help()``
    and ``inspect.signature`` read the implementation, whose ``**options: Any`` would
    hide them. This sets its ``__signature__`` with each option keyword-only, at its
    default, in place of ``**options``.

    Example:
        >>> import inspect, hookbus
        >>> "once: 'bool' = False" in str(inspect.signature(hookbus.EventBus.pre))
        True
    """
    signature = inspect.signature(method)
    parameters = [p for p in signature.parameters.values() if p.kind is not p.VAR_KEYWORD]
    parameters += [
        inspect.Parameter(
            name,
            inspect.Parameter.KEYWORD_ONLY,
            default=_DEFAULTS.get(name, False),
            # as written in the TypedDict ('PriorityLike'), not ForwardRef('PriorityLike')
            annotation=getattr(kind, "__forward_arg__", kind),
        )
        for name, kind in options.__annotations__.items()
    ]
    method.__signature__ = signature.replace(parameters=parameters)  # type: ignore[attr-defined]


def method_name(kind: str) -> str:
    """The registering method's name, for messages (the table's, for a known kind)."""
    try:
        return hook_kind(kind).method
    except ValueError:
        return str(kind)


def parse_options(kind: str, options: Mapping[str, Any]) -> ParsedOptions:
    """Check the options of one registration of ``kind`` against the kind's row of the
    table (an unknown kind is refused); unknown names get a hint."""
    row = hook_kind(kind)
    unknown = [key for key in options if key not in OPTION_NAMES]
    if unknown:
        # The kind's own options: with_name is offered to event hooks alone.
        accepted = [name for name in OPTION_NAMES if name in row.options]
        close = difflib.get_close_matches(unknown[0], accepted, n=1)
        hint = f" (did you mean {close[0]!r}?)" if close else ""
        raise TypeError(
            f"unknown option {unknown[0]!r} for {method_name(kind)}(){hint}; "
            f"accepted: {', '.join(accepted)}"
        )
    priority = to_priority(options.get("priority", 0))
    once, weak = options.get("once", False), options.get("weak", False)
    with_name, optional = options.get("with_name", False), options.get("optional", False)
    checked = (("once", once), ("weak", weak), ("with_name", with_name), ("optional", optional))
    for option, value in checked:
        if not isinstance(value, bool):
            raise TypeError(
                f"option {option}= takes True or False, got {type(value).__name__} {value!r}"
            )
    if with_name and "with_name" not in row.options:
        takers = [each for each in hook_kinds() if "with_name" in each.options]
        names = " and ".join(f"{each.name} hooks ({each.method})" for each in takers)
        article = "an" if row.name[:1] in "aeiou" else "a"
        raise TypeError(
            f"option with_name= is for {names}; {article} {row.name} hook gets the name "
            f"as ctx.name already"
        )
    return priority, once, options.get("target"), weak, with_name, optional
