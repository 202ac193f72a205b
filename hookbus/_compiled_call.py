"""A hook point's call, compiled to straight-line code for its plan.

What attrs and dataclasses do for ``__init__``: when a hook point's plan is worked out,
:func:`compile_call` returns the function that runs one call of that plan. For a
*direct* plan (``PointPlan.direct``: sync around, pre and post hooks with no option,
errors raise, no trace open) it is Python source written for the plan's shape (how
many around, pre and post hooks, whether there are exception hooks, whether the
wrapped callable takes self or cls first, which around hooks' code may return a
value): no loop, no per-hook test, the context filled inline (:func:`source_of`
without around hooks, :func:`around_source_of` with them). Each shape is compiled
once and cached; the plan's hooks and the point's constants are bound as closure
cells, so a plan is swapped whole (one attribute store). A hook point compiles a
plan at its second call; the first runs the same lines in the shape's
``first_call``, which reads the hooks from the plan and takes the point's constants
as arguments (:func:`first_call_of`), so a plan that lives for one call (a hook
added and removed around each call) costs no compile, no closure and no reference
loop. The point and the plan are passed in, ``run(point, plan, args, kwargs)``:
a plan kept by its point holds its code, and the code holds neither, so no
reference cycle keeps a removed hook alive until the garbage collector runs.

The same source also defines the shape's code for the point's own function (the
one a user holds, :func:`point_function`): ``call_point(*args, **kwargs)`` reads the
point's plan once and, when the plan was compiled to that shape (``plan.shape``),
runs the same body in its own frame with what ``plan.bindings`` holds; any other
plan runs ``plan.run``. Compiling a plan gives the function that code
(:func:`run_in_wrapper`): one ``__code__`` store, so a caller runs one code whole,
and the code checks the plan it read, so a caller sees one plan whole. Its only
free names are ``call`` and ``point``, as every shape's, so any shape's code fits.

Every other plan runs the reference sequence, ``call_with_hooks`` (the ``reference``
each point passes in): async hooks, hooks with an option (``once``, ``weak``,
``target``, ``with_name``), an error policy other than ``"raise"``, an open trace
(so the generated code records nothing), or more than :data:`MAX_HOOKS` hooks of a
kind. ``call_with_hooks`` stays the semantics; the generated code is checked against
it for any plan (``tests/test_compiled_call.py``).

An adapter whose framework calls it after the call (torch's forward hooks) runs the
post phase alone: :func:`compile_post_phase` generates it for plain post hooks, the
context built inline and the hooks called one after another, and returns the
result they leave (``run(point, target, args, kwargs, result)``). The same lines,
made by :func:`native_post_hook`, can be the framework's native hook itself, bound
to the adapter's point: no dispatcher frame between the framework and the hooks.

The source of each shape is registered with :mod:`linecache`, so a traceback through
a generated call shows its lines, and :func:`explain` returns it for a plan.
"""

from __future__ import annotations

import linecache
import sys
from types import CodeType, FunctionType
from typing import (
    TYPE_CHECKING,
    Any,
    Callable,
    Dict,
    Generator,
    List,
    NamedTuple,
    Optional,
    Tuple,
    Union,
)

from typing_extensions import Protocol

from ._arounds import FINISHED, Started, did_not_yield, refusing_a_returned_value, yielded_twice
from ._context import CallContext, reject_returned
from ._errors import add_note, describe
from ._sync_dispatch import recover_or_raise, resume_arounds

if TYPE_CHECKING:
    from ._handle import Handle
    from ._plan import PointPlan

__all__ = [
    "MAX_HOOKS",
    "NativePostOwner",
    "PostRunner",
    "Runner",
    "added_hook_first_call",
    "call_straight_through",
    "compile_call",
    "compile_post_phase",
    "explain",
    "first_call_of",
    "native_post_hook",
    "native_post_plan",
    "point_function",
    "run_in_wrapper",
]

MAX_HOOKS = 8
"""The most around (or pre, or post) hooks a generated call binds; more run the loop."""

Runner = Callable[[Any, Any, Tuple[Any, ...], Dict[str, Any]], Any]
"""What a point's wrapper calls for one call: ``run(point, plan, args, kwargs)``."""

FirstCall = Callable[..., Any]
"""A plan's first call, generated: ``first(point, plan, args, kwargs, call, name, counter,
target, registry, reference)`` (see :func:`first_call_of`)."""

Shape = Tuple[int, int, bool, bool]  # pre hooks, post hooks, exception hooks, bound
# Plans with around hooks: whether each around hook's returned value is refused (one
# per around hook, outermost first), then as Shape.
AroundShape = Tuple[Tuple[bool, ...], int, int, bool, bool]


def _yielded_again(
    handle: Handle, around: Generator[Any, Any, Any], ctx: CallContext, outer: List[Started]
) -> Any:
    """An around hook yielded a second time after the call's success: close it, and the
    hooks around it (``outer``) get the error, as ``resume_arounds`` would give them."""
    try:
        around.close()
    except BaseException as failure:  # it ignored the close, or a finally block raised
        error = yielded_twice(handle, ctx, None, failure)
    else:
        error = yielded_twice(handle, ctx, None, None)
    try:
        return resume_arounds(outer, ctx, None, error)
    finally:
        del error  # this frame is in the error's traceback: no cycle through it


# What generated code reads as globals: bound once, the same for every shape.
# A native post hook's ``result`` when the framework called it without kwargs: torch
# reads a hook's with_kwargs mark after taking the hook from the module's dict, so a
# hook removed meanwhile by another thread is called as ``hook(module, args, output)``.
_NO_KWARGS: Any = object()

_GLOBALS: Dict[str, Any] = {
    "new": object.__new__,
    "CallContext": CallContext,
    "reject_returned": reject_returned,
    "add_note": add_note,
    "describe": describe,
    "recover_or_raise": recover_or_raise,
    "FINISHED": FINISHED,
    "did_not_yield": did_not_yield,
    "refusing_a_returned_value": refusing_a_returned_value,
    "resume_arounds": resume_arounds,
    "yielded_again": _yielded_again,
    # The error being handled: sys.exception() from Python 3.11, sys.exc_info() before.
    "handled_error": getattr(sys, "exception", lambda: sys.exc_info()[1]),
    "NO_KWARGS": _NO_KWARGS,
}

# The factory of each shape compiled so far, with its source. A dict store is atomic:
# two threads compiling one shape at once both get a working factory.
_FACTORIES: Dict[Union[Shape, AroundShape], Factory] = {}
# The same factories by the code of the runner each makes (``hooked_call``).
_BY_RUNNER: Dict[Any, Factory] = {}


def shape_of(plan: PointPlan, bound: bool) -> Union[Shape, AroundShape, None]:
    """The shape a generated call needs for ``plan``, or ``None``: the reference runs it."""
    if not plan.direct:
        return None
    pre, post = len(plan.pre_hooks), len(plan.post_hooks)
    if pre > MAX_HOOKS or post > MAX_HOOKS or len(plan.around) > MAX_HOOKS:
        return None
    if plan.around:
        checked = tuple(handle.may_return_value for handle in plan.around)
        return (checked, pre, post, bool(plan.exception), bound)
    return (pre, post, bool(plan.exception), bound)


def _hook_block(
    kind: str, index: int, indent: str, on_error: List[str], handle: Optional[str] = None
) -> List[str]:
    """Call one hook on ``ctx``: refuse what it returns, name it in what it raises.

    ``handle`` is the expression of the hook's handle, read only then; by default the
    name ``{kind}_{index}_handle``."""
    hook = f"{kind}_{index}"
    handle = handle or f"{hook}_handle"
    return [
        f"{indent}try:",
        f"{indent}    returned = {hook}(ctx)",
        f"{indent}    if returned is not None:",
        f"{indent}        reject_returned({handle}, ctx, returned)",
        f"{indent}except Exception as error:",
        f"{indent}    add_note(error, describe({handle}, name))",
        *(f"{indent}    {line}" for line in on_error),
    ]


def _target_lines(indent: str) -> List[str]:
    """A method point: self or cls is the target, not an argument."""
    return [
        f"{indent}if not args:",
        f"{indent}    return reference(point, plan, args, kwargs)",
        f"{indent}target = args[0]",
        f"{indent}args = args[1:]",
    ]


def _context_lines(indent: str, phase: str = "pre", result: Optional[str] = "None") -> List[str]:
    """Build the call's context, ``ctx``: what ``CallContext.for_call`` builds, inline.

    Every shape (and the post phase alone) fills the context here, from ``name``,
    ``target``, ``args``, ``kwargs``, ``counter`` and ``point``; it starts in
    ``phase``, its result the expression ``result``. With ``result`` ``None`` the
    result is left unset: for a shape whose code stores it before any hook can see
    the context (no pre, around or exception hook), so that no call stores it twice."""
    lines = [f"{indent}ctx = new(CallContext)"]
    lines += [
        f"{indent}ctx.{field} = {value}"
        for field, value in (
            ("name", "name"),
            ("target", "target"),
            ("_args", "args"),
            ("_kwargs", "kwargs"),
            ("call_index", "next(counter)"),
            ("phase", f'"{phase}"'),
            ("_result", result),
            ("_rare", "point"),  # the point, until a hook needs a RareState
        )
        if value is not None
    ]
    return lines


def _hook_names(arounds: int, pre: int, post: int) -> List[str]:
    """The names a call shape binds its hooks to: each around hook with its handle, then
    each pre and post hook alone. The pre and post hooks' handles are needed only when a
    hook fails or returns a value: the code reads them from the plan then
    (``plan.pre[i]``, :func:`_handle_of`), and a call reads and stores two names less."""
    names = [f"around_{i}{handle}" for i in range(arounds) for handle in ("", "_handle")]
    return names + [f"{kind}_{i}" for kind, n in (("pre", pre), ("post", post)) for i in range(n)]


def _handle_of(kind: str, index: int) -> str:
    """The expression of a call shape's pre or post hook's handle: in ``plan``, in hook order."""
    return f"plan.{kind}[{index}]"


def _call_header(arounds: int, pre: int, post: int, bound: bool) -> List[str]:
    """The start of every call shape's factory: ``make`` takes the point's constants and
    the hooks (:func:`_hook_names`); ``hooked_call`` runs one call of the plan it is given."""
    hooks = _hook_names(arounds, pre, post)
    params = ", ".join(["call", "name", "target", "counter", "registry", "reference", *hooks])
    return [f"def make({params}):", "    def hooked_call(point, plan, args, kwargs):"]


def _call_start(bound: bool, result: Optional[str]) -> List[str]:
    """What every call shape does first: find the target, build the context (its result
    ``result``; with ``None``, in the post phase, see :func:`_context_lines`)."""
    phase = "pre" if result is not None else "post"
    target = _target_lines("        ") if bound else []
    return [*target, *_context_lines("        ", phase, result)]


def _call_lines(indent: str, into: str, bound: bool) -> List[str]:
    """Call the wrapped callable with the context's arguments, the result into ``into``.

    Without keyword arguments (most calls) it passes none: ``f(*args, **{})`` builds
    and merges a dict for nothing, which costs about as much as two slot stores."""
    target = "target, " if bound else ""
    return [
        f"{indent}if ctx._kwargs:",
        f"{indent}    {into} = call({target}*ctx._args, **ctx._kwargs)",
        f"{indent}else:",
        f"{indent}    {into} = call({target}*ctx._args)",
    ]


def _wrapper_lines(check: Optional[Tuple[str, List[str]]]) -> List[str]:
    """The start of the point's own function, ``call_point(*args, **kwargs)``.

    It reads the point's plan once (another thread may swap it meanwhile) and calls
    straight through when there is none. With ``check``, ``(key, names)``, the code
    is the call shape ``key``'s: a plan compiled to that shape (``plan.shape``) gives
    its constants and hooks, ``names``, in one read (``plan.bindings``), and the call
    runs here, in this frame; any other plan runs ``plan.run``. Its only free names
    are ``call`` and ``point``, so the code of any shape may replace the point's."""
    lines = [
        "def make_wrapper(call, point):",
        "    def call_point(*args, **kwargs):",
        "        plan = point.plan",
        "        if plan is None:",
        "            return call(*args, **kwargs)",
    ]
    if check is None:
        return [*lines, "        return plan.run(point, plan, args, kwargs)"]
    key, names = check
    return [
        *lines,
        f"        if plan.shape != {key!r}:",
        "            return plan.run(point, plan, args, kwargs)",
        f"        {', '.join(names)} = plan.bindings",
    ]


def _binding_names(arounds: int, pre: int, post: int, exception: bool, bound: bool) -> List[str]:
    """What a call shape's wrapper code reads from ``plan.bindings``, in order."""
    names = ["name", "counter", "reference" if bound else "target"]
    if exception:
        names.append("registry")
    return names + _hook_names(arounds, pre, post)


# Where the source of a call shape defines ``make_first`` (:func:`_both_functions`).
_FIRST_CALL_START = "\n\n\ndef make_first():"


def _both_functions(
    header: List[str],
    body: List[str],
    key: str,
    names: List[str],
    bound: bool,
    result: Optional[str] = "None",
) -> str:
    """The source of a call shape: ``make`` (the runner, ``hooked_call``), then
    ``make_wrapper`` (the same call in the point's own function), then ``make_first``
    (the same call for a plan's first call, :func:`first_call_of`), one body for all;
    the context's first result is ``result`` (see :func:`_context_lines`)."""
    start = _call_start(bound, result)
    runner = [*header, *start, *body, "    return hooked_call"]
    wrapper = [*_wrapper_lines((key, names)), *start, *body, "    return call_point"]
    # The hooks, read from the plan itself: a plan's first call makes no bindings.
    hooks = [
        (source, [n for n in names if n.startswith(prefix) and n.endswith("_handle") == handle])
        for source, prefix, handle in (
            ("plan.around_hooks", "around_", False),
            ("plan.around", "around_", True),
            ("plan.pre_hooks", "pre_", False),
            ("plan.post_hooks", "post_", False),
        )
    ]
    unpack = [f"        ({', '.join(group)},) = {source}" for source, group in hooks if group]
    first = [
        _FIRST_CALL_START.lstrip("\n"),
        "    def first_call(point, plan, args, kwargs, call, name, counter, target, registry,",
        "                   reference):",
        *unpack,
        *start,
        *body,
        "    return first_call",
    ]
    # The same first call, the point's constants bound: what a plan made by adding a hook
    # to a compiled plan runs at its first call (:func:`added_hook_first_call`).
    added = [
        "def make_added_first(call, name, target, counter, registry, reference, compiling):",
        "    def added_first_call(point, plan, args, kwargs):",
        "        plan.run = compiling",
        *unpack,
        *start,
        *body,
        "    return added_first_call",
    ]
    return "\n".join([*runner, "", "", *wrapper, "", "", *first, "", "", *added]) + "\n"


def source_of(shape: Shape) -> str:
    """The Python source of the factories for ``shape``: ``make(...)`` returns the call,
    ``make_wrapper(call, point)`` the point's function that runs it in its own frame."""
    pre, post, exception, bound = shape
    lines: List[str] = []
    body = "        "
    inner = body + "    " if exception else body
    if exception:
        lines.append(f"{body}try:")
    for i in range(pre):
        lines += _hook_block("pre", i, inner, ["raise"], _handle_of("pre", i))
    # With post hooks the result goes straight to ctx._result, where a skip left its value.
    into = "ctx._result" if post else "result"
    if pre:  # only a pre hook can skip the call (ctx.skipped, read inline)
        if post:
            lines.append(f"{inner}if ctx._rare is point or not ctx._rare.skipped:")
        else:
            lines += [
                f"{inner}if ctx._rare is not point and ctx._rare.skipped:",
                f"{inner}    result = ctx._result",
                f"{inner}else:",
            ]
        lines += _call_lines(inner + "    ", into, bound)
    else:
        lines += _call_lines(inner, into, bound)
    if exception:  # a pre hook or the call raised: the exception hooks
        lines += [
            f"{body}except Exception as error:",
            f"{body}    return recover_or_raise(registry, plan, ctx, error)",
        ]
    # Without pre or exception hooks no hook sees the context before the call's result:
    # it is built in the post phase, its result unset until the call's is stored.
    first = "None" if pre or exception else None
    if not post:
        lines.append(f"{body}return result")
    else:
        if first is not None:
            lines.append(f'{body}ctx.phase = "post"')
        recover = "return recover_or_raise(registry, plan, ctx, error, True)"
        on_error = [recover] if exception else ["raise"]
        for i in range(post):
            lines += _hook_block("post", i, body, on_error, _handle_of("post", i))
        lines.append(f"{body}return ctx._result")
    names = _binding_names(0, pre, post, exception, bound)
    header = _call_header(0, pre, post, bound)
    return _both_functions(header, lines, key_of(shape), names, bound, first)


def around_source_of(shape: AroundShape) -> str:
    """The source of the factory for a plan with around hooks: ``make(...)`` returns the call.

    Straight-line, as :func:`call_with_hooks` runs it: each around hook started up to
    its ``yield`` (``next(gen, FINISHED)``, no ``StopIteration`` raised and caught),
    the pre hooks, the call, the exception or post hooks, then each around hook resumed
    in turn, innermost first, with the result. Every other way out (an error or an
    interrupt anywhere, a hook that yields twice) hands the started hooks, as
    ``_arounds.Started`` entries, to ``resume_arounds``, which throws the error in; an
    around hook whose code may return a value is wrapped so that the value is refused.
    """
    checked, pre, post, exception, bound = shape
    arounds = len(checked)
    lines: List[str] = []
    body = "        "

    def started(count: int) -> str:  # the around hooks started so far, as resume_arounds takes
        return (
            "[" + ", ".join(f"(around_{i}_handle, gen_{i}, None, 0)" for i in range(count)) + "]"
        )

    def hand_over(count: int) -> str:  # the error goes on, through the started hooks
        if not count:
            return "raise"
        return f"return resume_arounds({started(count)}, ctx, None, error)"

    for i in range(arounds):  # 1. set-up, outermost first
        made = f"around_{i}(ctx)"
        if checked[i]:
            made = f"refusing_a_returned_value({made}, around_{i}_handle, ctx)"
        lines += [
            f"{body}try:",
            f"{body}    gen_{i} = {made}",
            f"{body}    if next(gen_{i}, FINISHED) is FINISHED:",
            f"{body}        raise did_not_yield(around_{i}_handle, ctx)",
            f"{body}except BaseException as error:",
            f"{body}    add_note(error, describe(around_{i}_handle, name))",
            f"{body}    {hand_over(i)}",
        ]
    lines.append(f"{body}try:")  # 2.-4., as source_of, the result left in ``result``
    inner = body + "    "
    core = inner + "    " if exception else inner
    if exception:
        lines.append(f"{inner}try:")
    for i in range(pre):
        lines += _hook_block("pre", i, core, ["raise"], _handle_of("pre", i))
    lines += [
        f"{core}if ctx._rare is not point and ctx._rare.skipped:",  # ctx.skipped, inline
        f"{core}    result = ctx._result",
        f"{core}else:",
        *_call_lines(core + "    ", "result", bound),
    ]
    if exception:  # a pre hook or the call raised: the exception hooks
        lines += [
            f"{inner}except Exception as error:",
            f"{inner}    result = recover_or_raise(registry, plan, ctx, error)",
        ]
        if post:
            lines.append(f"{inner}else:")
    if post:
        lines += [f'{core}ctx.phase = "post"', f"{core}ctx._result = result"]
        posts = core + "    " if exception else core
        if exception:  # a post hook raised: the exception hooks, and no post hook after it
            lines.append(f"{core}try:")
        for i in range(post):
            lines += _hook_block("post", i, posts, ["raise"], _handle_of("post", i))
        if exception:
            lines += [
                f"{core}except Exception as error:",
                f"{core}    result = recover_or_raise(registry, plan, ctx, error, True)",
                f"{core}else:",
                f"{core}    result = ctx._result",
            ]
        else:
            lines.append(f"{core}result = ctx._result")
    lines += [
        f"{body}except BaseException as error:",
        f"{body}    {hand_over(arounds)}",
    ]
    for i in reversed(range(arounds)):  # 5. teardown, innermost first
        lines += [
            f'{body}ctx.phase = "post"',
            f"{body}ctx._result = result",
            f"{body}try:",
            f"{body}    resumed = next(gen_{i}, FINISHED)",
            f"{body}except BaseException as error:",
            f"{body}    add_note(error, describe(around_{i}_handle, name))",
            f"{body}    {hand_over(i)}",
            f"{body}if resumed is not FINISHED:",
            f"{body}    return yielded_again(around_{i}_handle, gen_{i}, ctx, {started(i)})",
            f"{body}result = ctx._result",
        ]
    lines.append(f"{body}return result")
    names = _binding_names(arounds, pre, post, exception, bound)
    header = _call_header(arounds, pre, post, bound)
    return _both_functions(header, lines, key_of(shape), names, bound)


def key_of(shape: Union[Shape, AroundShape]) -> str:
    """What a call shape is, in words: its file name in tracebacks, and ``plan.shape``."""
    if len(shape) == 5:
        checked, pre, post, exception, bound = shape
        refused = ", ".join(str(i) for i, check in enumerate(checked) if check)
        arounds = f"{len(checked)} around{f' (returns refused: {refused})' if refused else ''}, "
    else:
        pre, post, exception, bound = shape
        arounds = ""
    return (
        f"{arounds}{pre} pre, {post} post"
        f"{', exception' if exception else ''}{', method' if bound else ''}"
    )


class Factory(NamedTuple):
    """A call shape, compiled: ``make(...)`` returns the call, ``wrapper_code`` is the
    code of the point's function that runs it in its own frame (``make_wrapper``)."""

    make: Callable[..., Runner]
    source: str
    key: str
    wrapper_code: CodeType
    first_call: FirstCall
    make_added_first: Callable[..., Runner]


def _factory(shape: Union[Shape, AroundShape]) -> Factory:
    made = _FACTORIES.get(shape)
    if made is None:
        if len(shape) == 5:
            checked, pre, post, exception, bound = shape
            source = around_source_of((checked, pre, post, exception, bound))
        else:
            pre, post, exception, bound = shape
            source = source_of((pre, post, exception, bound))
        key = key_of(shape)
        namespace = _compiled(source, f"<hookbus compiled call: {key}>")
        # What explain shows: the runner and the point's function (a plan's first call
        # runs the same lines, in make_first's function, defined after them).
        source = source[: source.index(_FIRST_CALL_START)] + "\n"
        make, wrapper_code = namespace["make"], namespace["make_wrapper"](None, None).__code__
        # The wrapper code's own constant: ``plan.shape != key`` is then an identity test.
        key = next(c for c in wrapper_code.co_consts if c == key)
        made = Factory(
            make, source, key, wrapper_code, namespace["make_first"](),
            namespace["make_added_first"],
        )  # fmt: skip
        runner_code = make(*[None] * make.__code__.co_argcount).__code__
        _BY_RUNNER[runner_code] = made  # before _FACTORIES: a factory found is complete
        _FACTORIES[shape] = made
    return made


def _compiled_make(source: str, filename: str) -> Callable[..., Any]:
    """The ``make`` factory that ``source`` defines, compiled as ``filename``."""
    make: Callable[..., Any] = _compiled(source, filename)["make"]
    return make


def _compiled(source: str, filename: str) -> Dict[str, Any]:
    """The names that ``source``, compiled as ``filename``, defines (with ``_GLOBALS``)."""
    namespace: Dict[str, Any] = dict(_GLOBALS)
    exec(compile(source, filename, "exec"), namespace)  # our own source, from a shape alone
    # Tracebacks read the lines from here (mtime None: checkcache keeps the entry).
    linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
    return namespace


# The function a sync hook point returns: ``make_wrapper``'s code, then (once a plan
# is compiled) the code of its call shape. Its globals are these: every shape's code
# reads the names it needs (``_GLOBALS``) from them.
_WRAPPER_SOURCE = "\n".join(_wrapper_lines(None)) + "\n    return call_point\n"
_make_wrapper: Callable[[Any, Any], FunctionType] = _compiled(
    _WRAPPER_SOURCE, "<hookbus point call>"
)["make_wrapper"]
_WRAPPER_CODE: CodeType = _make_wrapper(None, None).__code__


def point_function(point: Any, call: Callable[..., Any]) -> FunctionType:
    """The function a sync hook point hands out: ``call_point(*args, **kwargs)``.

    It calls ``call`` straight through while ``point.plan`` is ``None``, else runs
    ``plan.run(point, plan, args, kwargs)``; :func:`compile_call`, given it as
    ``wrapper``, gives it the code of a compiled plan's call shape, so that such a
    plan's calls run in its own frame, with no second one."""
    return _make_wrapper(call, point)


def call_straight_through(wrapper: FunctionType) -> None:
    """Give ``wrapper`` (:func:`point_function`) its first code back: for a point with no
    hooks left, whose calls then run a frame of two locals, not a shape's dozen."""
    _use_code(wrapper, _WRAPPER_CODE)


def _use_code(wrapper: FunctionType, code: CodeType) -> None:
    """Give ``wrapper`` the code of another shape: one store, any caller's code is whole
    (and any code runs any plan right: it checks the plan's shape)."""
    if wrapper.__code__ is not code:
        wrapper.__code__ = code


def compile_call(
    plan: PointPlan,
    *,
    call: Callable[..., Any],
    name: str,
    target: Any,
    counter: Any,
    registry: Any,
    bound: bool,
    reference: Runner,
) -> Runner:
    """The function that runs one call of ``plan``: generated for a direct plan, else
    ``reference`` (which runs ``call_with_hooks`` on the plan).

    ``call`` is what the point wraps; ``target`` what ``ctx.target`` is when ``bound``
    is false (with ``bound``, ``call`` takes self or cls first, which becomes the
    target); ``counter`` numbers the calls (``ctx.call_index``); ``registry`` holds
    the settings the exception hooks run under.

    It leaves in ``plan.bindings`` what the point's function reads to run the plan
    itself: :func:`run_in_wrapper` lets it, once the point keeps the returned runner.
    """
    shape = shape_of(plan, bound)
    if shape is None:
        return reference
    factory = _factory(shape)
    values: Dict[str, Any] = {"name": name, "counter": counter, "target": target,
                              "registry": registry, "reference": reference}  # fmt: skip
    phases = (("around", plan.around_hooks or (), plan.around), ("pre", plan.pre_hooks, plan.pre),
              ("post", plan.post_hooks, plan.post))  # fmt: skip
    for kind, bare, handles in phases:
        for i, (hook, handle) in enumerate(zip(bare, handles)):
            values[f"{kind}_{i}"], values[f"{kind}_{i}_handle"] = hook, handle
    arounds, pre, post = len(plan.around), len(plan.pre), len(plan.post)
    hooks = [values[n] for n in _hook_names(arounds, pre, post)]
    names = _binding_names(arounds, pre, post, bool(plan.exception), bound)
    plan.bindings = tuple(values[n] for n in names)  # read only once plan.shape says so
    run: Runner = factory.make(call, name, target, counter, registry, reference, *hooks)
    return run


def first_call_of(plan: PointPlan, bound: bool) -> Optional[FirstCall]:
    """What runs ``plan``'s first call: its shape's generated code, with no closure made.

    ``None`` when the reference must run the plan (:func:`shape_of`). Otherwise the
    shape's ``first(point, plan, args, kwargs, call, name, counter, target, registry,
    reference)``: the lines of the compiled call, which read the plan's hooks from the
    plan itself and take the point's constants (:func:`compile_call`'s) as arguments.
    A plan that lives for one call (a hook added and removed around each call) then
    pays neither the reference loop nor a closure of a dozen cells; a shape compiles
    once, at the first plan that takes it.
    """
    shape = shape_of(plan, bound)
    if shape is None:
        return None
    made = _FACTORIES.get(shape)  # _factory's common case, without its frame
    return (made or _factory(shape)).first_call


def added_hook_first_call(
    plan: PointPlan,
    *,
    call: Callable[..., Any],
    name: str,
    target: Any,
    counter: Any,
    registry: Any,
    bound: bool,
    reference: Runner,
    compiling: Runner,
) -> Optional[Runner]:
    """The first call of ``plan``'s shape with the point's constants bound (as
    :func:`compile_call` takes them), the hooks read from the plan it is given:
    ``run(point, plan, args, kwargs)``, which first sets ``plan.run = compiling``, so
    that the plan's next call compiles. ``None`` when the reference must run the plan.

    One such function serves every plan of the shape at one point: a point whose plan
    changes at every call (a hook added to a compiled plan and removed after the call,
    a benchmark row) keeps it for the plans that adding a hook of one kind makes, and
    their first call then runs it directly (``plan.run``), no frame in between.
    """
    first = first_call_of(plan, bound)
    if first is None:
        return None
    make = _FACTORIES[shape_of(plan, bound)].make_added_first  # type: ignore[index]
    run: Runner = make(call, name, target, counter, registry, reference, compiling)
    return run


def run_in_wrapper(wrapper: FunctionType, plan: PointPlan, run: Runner) -> None:
    """Let ``wrapper`` (:func:`point_function`) run ``plan``'s calls in its own frame,
    when ``run`` is what :func:`compile_call` generated for the plan: the wrapper gets
    the code of the plan's shape, and ``plan.shape`` says the plan may run there (set
    after ``plan.bindings``, so a call that sees it finds them). Any other ``run`` (the
    reference) gives the wrapper its first code back, which runs ``plan.run``."""
    factory = _BY_RUNNER.get(getattr(run, "__code__", None))
    if factory is None:
        call_straight_through(wrapper)
        return
    plan.shape = factory.key
    _use_code(wrapper, factory.wrapper_code)


def explain(plan: Optional[PointPlan], name: str, bound: bool) -> str:
    """What a call of a point named ``name`` runs under ``plan``: the generated source with
    what each of its names is bound to, or why the reference sequence runs instead."""
    if plan is None:
        return f"# {name!r}: no hooks; the wrapper calls the function straight through\n"
    shape = shape_of(plan, bound)
    if shape is None:
        return f"# {name!r}: call_with_hooks runs the plan ({_why_reference(plan)})\n"
    source = _factory(shape).source
    bindings = [
        f"#   {kind}_{i} = {handle!r}"
        for kind, handles in (("around", plan.around), ("pre", plan.pre), ("post", plan.post))
        for i, handle in enumerate(handles)
    ]
    if plan.exception:
        bindings.append(f"#   exception hooks (run by recover_or_raise) = {plan.exception!r}")
    header = [f"# {name!r}: a compiled call", *bindings]
    return "\n".join(header) + "\n" + source


def _why_reference(plan: PointPlan) -> str:
    if plan.has_async:
        return "async hooks"
    if not plan.direct:
        return "a hook with an option, an error policy other than 'raise', or a trace open"
    return f"more than {MAX_HOOKS} hooks of a kind"


PostRunner = Callable[[Any, Any, Tuple[Any, ...], Dict[str, Any], Any], Any]
"""A compiled post phase: ``run(point, target, args, kwargs, result)`` returns the result
the hooks leave (``result`` itself unless one assigned ``ctx.result``)."""

# The factory of each post phase compiled so far, by its number of hooks, whether it is a
# native hook (native_post_hook) and whether that checks for the framework's error path,
# with its source.
_POST_FACTORIES: Dict[Tuple[int, bool, bool], Tuple[Callable[..., Any], str]] = {}


def post_source_of(count: int, native: bool = False, error_path: bool = True) -> str:
    """The Python source of the factory of a post phase of ``count`` plain hooks.

    With ``native``, the factory of :func:`native_post_hook`'s function: the same
    context and hook lines, but the hooks, the name and the counter read from the
    owner's :attr:`NativePostOwner.native_post` at each call, the framework's error
    path handed to the owner (unless ``error_path`` is false: the framework never
    calls the function from there), and ``None`` returned for a result left as it was."""
    hooks = [f"post_{i}, post_{i}_handle" for i in range(count)]
    body = "        "
    if not native:
        params = ", ".join(["name", "counter", *hooks])
        lines = [f"def make({params}):", "    def run_post(point, target, args, kwargs, result):"]
    else:
        bound = ", ".join(["name", "counter", *hooks])
        otherwise = f"{body}    return point.post_otherwise(target, args, kwargs, result)"
        lines = [
            "def make():",
            "    def native_post(point, target, args, kwargs, result=NO_KWARGS):",
            f"{body}if result is NO_KWARGS:  # (module, args, output): the owner sorts it out",
            f"{body}    return point.post_otherwise(target, args, kwargs)",
            f"{body}try:",
            f"{body}    {bound} = point.native_post",
            f"{body}except (TypeError, ValueError):  # the plan changed shape, or there is none",
            otherwise,
        ]
        if error_path:
            lines += [
                f"{body}if handled_error() is not None:  # the framework's error path, say",
                otherwise,
            ]
    lines += _context_lines(body, "post", "result")
    for i in range(count):
        lines += _hook_block("post", i, body, ["raise"])
    if not native:
        lines += [f"{body}return ctx._result", "    return run_post"]
    else:
        lines += [
            f"{body}if ctx._result is result:",
            f"{body}    return None",
            f"{body}return point.post_replaced(result, ctx._result)",
            "    return native_post",
        ]
    return "\n".join(lines) + "\n"


def _post_factory(
    count: int, native: bool = False, error_path: bool = True
) -> Tuple[Callable[..., Any], str]:
    key = (count, native, native and error_path)
    made = _POST_FACTORIES.get(key)
    if made is None:
        source = post_source_of(count, native, error_path)
        kind = "native post hook" if native else "post phase"
        if native and not error_path:
            kind += " off the error path"
        filename = f"<hookbus compiled {kind}: {count} post>"
        made = _POST_FACTORIES[key] = (_compiled_make(source, filename), source)
    return made


def compile_post_phase(
    hooks: Tuple[Callable[..., Any], ...],
    handles: Tuple[Any, ...],
    *,
    name: str,
    counter: Any,
) -> Optional[PostRunner]:
    """The post phase of plain hooks, generated: ``run(point, target, args, kwargs, result)``.

    ``hooks`` are the bare callables of a plan's plain post hooks (``plan.fast["post"]``,
    which is ``None`` when any hook has an option, a trace is open, or errors don't
    raise), ``handles`` their handles, in the same order; ``name`` is the point's
    name and ``counter`` numbers its calls (``ctx.call_index``). Each call builds one
    :class:`CallContext` in the post phase (``ctx.result`` starts as ``result``),
    calls the hooks in order, refuses a returned value and names a failing hook as
    :func:`run_phase` does, and returns the result they leave. Returns ``None`` for
    more than :data:`MAX_HOOKS` hooks: run the phase with :func:`run_phase` then.

    Example:
        >>> import itertools
        >>> from hookbus import adapter
        >>> bus = adapter.EventBus()
        >>> def double(ctx):
        ...     ctx.result = ctx.result * 2
        >>> handle = adapter.Handle.plain(bus.registry, "post", "job", double)
        >>> run = adapter.compile_post_phase(
        ...     (double,), (handle,), name="job", counter=itertools.count()
        ... )
        >>> run(None, None, (), {}, 21)
        42
    """
    count = len(hooks)
    if count > MAX_HOOKS:
        return None
    make, _ = _post_factory(count)
    bound: List[Any] = []
    for hook, handle in zip(hooks, handles):
        bound += (hook, handle)
    run: PostRunner = make(name, counter, *bound)
    return run


class NativePostOwner(Protocol):
    """What a :func:`native_post_hook` function reads of the object it is bound to.

    ``native_post`` is the plan it runs (:func:`native_post_plan`), or ``None`` when
    there is none; ``post_otherwise`` runs a call the generated code leaves (the
    plan changed shape or there is none, or an error is being handled: the
    framework may be calling from its error path), or a call without kwargs,
    ``(target, args, result)`` (torch makes one when another thread removes the hook
    while a forward runs), called from the generated code, or by the framework
    itself: pickled, the bound method comes back as the owner's ``post_otherwise``
    (pickle keeps a method's object and name only);
    ``post_replaced`` checks and returns a result a hook assigned. The owner is
    also ``ctx._point``.
    """

    native_post: Optional[Tuple[Any, ...]]

    def post_otherwise(self, target: Any, args: Any, kwargs: Any, result: Any = ...) -> Any: ...

    def post_replaced(self, result: Any, replaced: Any) -> Any: ...


def native_post_plan(
    hooks: Tuple[Callable[..., Any], ...],
    handles: Tuple[Any, ...],
    *,
    name: str,
    counter: Any,
) -> Tuple[Any, ...]:
    """The plan a :func:`native_post_hook` function reads from its owner's ``native_post``:
    ``name``, ``counter``, then each bare hook with its handle (as :func:`compile_post_phase`
    takes them). One tuple, stored in one attribute: a plan swap is atomic."""
    plan: List[Any] = [name, counter]
    for hook, handle in zip(hooks, handles):
        plan += (hook, handle)
    return tuple(plan)


def native_post_hook(count: int, error_path: bool = True) -> Optional[Callable[..., Any]]:
    """The post phase of ``count`` plain hooks, generated to be a framework's native post
    hook itself, bound to its owner: ``fn(owner, target, args, kwargs, result)``.

    An adapter registers ``types.MethodType(fn, owner)`` with its framework, so the
    framework's call runs the generated code directly, with no dispatcher frame in
    between. One function per ``count``, shared by every owner: it binds nothing, and
    reads the plan from ``owner.native_post`` (:func:`native_post_plan`) at each call,
    so a copy of the bound method holds nothing of the plan, and a plan of the same
    shape is swapped by one attribute store. It runs the hooks as
    :func:`compile_post_phase`'s function does (the same generated lines), and returns
    ``None`` when they left the result as it was (``ctx.result is result``), else what
    ``owner.post_replaced(result, new)`` returns. What it cannot run it hands, unrun,
    to ``owner.post_otherwise(target, args, kwargs, result)``: a plan of another shape
    (it changed meanwhile, or there is none), or a call while an error is being
    handled; and a call without kwargs, ``fn(owner, target, args, result)``, as
    ``owner.post_otherwise(target, args, result)``. Returns ``None`` for more than
    :data:`MAX_HOOKS` hooks.

    With ``error_path=False``, the function leaves out the check for an error being
    handled (a call costs that much less): for an adapter that registers it only where
    the framework never calls it from its error path (torch: a forward hook without the
    ``always_call`` mark), and hands that path to another hook whenever it needs it.

    Example:
        >>> import itertools, types
        >>> from hookbus import adapter
        >>> bus = adapter.EventBus()
        >>> def double(ctx):
        ...     ctx.result = ctx.result * 2
        >>> handle = adapter.Handle.plain(bus.registry, "post", "job", double)
        >>> class Owner:
        ...     native_post = adapter.native_post_plan(
        ...         (double,), (handle,), name="job", counter=itertools.count()
        ...     )
        ...     def post_otherwise(self, target, args, kwargs, result):
        ...         return "otherwise"
        ...     def post_replaced(self, result, replaced):
        ...         return replaced
        >>> hook = types.MethodType(adapter.native_post_hook(1), Owner())
        >>> hook(None, (), {}, 21)
        42
    """
    if count > MAX_HOOKS:
        return None
    made = _NATIVE_POST_HOOKS.get((count, error_path))
    if made is None:
        make, _ = _post_factory(count, native=True, error_path=error_path)
        made = make()
        # Pickle stores a bound method as its object and its function's __name__: the
        # copy gets the owner's post_otherwise, which runs any call (NativePostOwner).
        made.__name__ = "post_otherwise"
        made = _NATIVE_POST_HOOKS.setdefault((count, error_path), made)
    return made


# The function native_post_hook made for each number of hooks and error_path: one, shared
# by every owner.
_NATIVE_POST_HOOKS: Dict[Tuple[int, bool], Callable[..., Any]] = {}
