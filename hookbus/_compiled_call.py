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
plan at its second call (the first runs the reference), so a plan that lives for
one call (a hook added and removed around each call) costs no compile and no
closure. The point and the plan are passed in, ``run(point, plan, args, kwargs)``:
a plan kept by its point holds its code, and the code holds neither, so no
reference cycle keeps a removed hook alive until the garbage collector runs.

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
from typing import (
    TYPE_CHECKING,
    Any,
    Callable,
    Dict,
    Generator,
    List,
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
    "compile_call",
    "compile_post_phase",
    "explain",
    "native_post_hook",
    "native_post_plan",
]

MAX_HOOKS = 8
"""The most around (or pre, or post) hooks a generated call binds; more run the loop."""

Runner = Callable[[Any, Any, Tuple[Any, ...], Dict[str, Any]], Any]
"""What a point's wrapper calls for one call: ``run(point, plan, args, kwargs)``."""

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
}

# The factory of each shape compiled so far, with its source. A dict store is atomic:
# two threads compiling one shape at once both get a working factory.
_FACTORIES: Dict[Union[Shape, AroundShape], Tuple[Callable[..., Runner], str]] = {}


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


def _hook_block(kind: str, index: int, indent: str, on_error: List[str]) -> List[str]:
    """Call one hook on ``ctx``: refuse what it returns, name it in what it raises."""
    hook = f"{kind}_{index}"
    return [
        f"{indent}try:",
        f"{indent}    returned = {hook}(ctx)",
        f"{indent}    if returned is not None:",
        f"{indent}        reject_returned({hook}_handle, ctx, returned)",
        f"{indent}except Exception as error:",
        f"{indent}    add_note(error, describe({hook}_handle, name))",
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


def _context_lines(indent: str, phase: str = "pre", result: str = "None") -> List[str]:
    """Build the call's context, ``ctx``: what ``CallContext.for_call`` builds, inline.

    Every shape (and the post phase alone) fills the context here, from ``name``,
    ``target``, ``args``, ``kwargs``, ``counter`` and ``point``; it starts in
    ``phase``, its result the expression ``result``."""
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
            ("_data", "None"),
            ("_rare", "None"),
            ("_point", "point"),
        )
    ]
    return lines


def _call_header(arounds: int, pre: int, post: int, bound: bool) -> List[str]:
    """The start of every call shape's factory: ``make`` takes the point's constants and
    each hook with its handle; ``hooked_call`` finds the target and builds the context."""
    hooks = [f"{kind}_{i}, {kind}_{i}_handle"
             for kind, n in (("around", arounds), ("pre", pre), ("post", post))
             for i in range(n)]  # fmt: skip
    params = ", ".join(["call", "name", "target", "counter", "registry", "reference", *hooks])
    lines = [f"def make({params}):", "    def hooked_call(point, plan, args, kwargs):"]
    if bound:
        lines += _target_lines("        ")
    return lines + _context_lines("        ")


def source_of(shape: Shape) -> str:
    """The Python source of the factory for ``shape``: ``make(...)`` returns the call."""
    pre, post, exception, bound = shape
    lines = _call_header(0, pre, post, bound)
    body = "        "
    inner = body + "    " if exception else body
    if exception:
        lines.append(f"{body}try:")
    for i in range(pre):
        lines += _hook_block("pre", i, inner, ["raise"])
    arguments = "target, *ctx._args, **ctx._kwargs" if bound else "*ctx._args, **ctx._kwargs"
    if pre:  # only a pre hook can skip the call (ctx.skipped, read inline)
        lines += [
            f"{inner}if ctx._rare is not None and ctx._rare.skipped:",
            f"{inner}    result = ctx._result",
            f"{inner}else:",
            f"{inner}    result = call({arguments})",
        ]
    else:
        lines.append(f"{inner}result = call({arguments})")
    if exception:  # a pre hook or the call raised: the exception hooks
        lines += [
            f"{body}except Exception as error:",
            f"{body}    return recover_or_raise(registry, plan, ctx, error)",
        ]
    if not post:
        lines.append(f"{body}return result")
    else:
        lines += [f'{body}ctx.phase = "post"', f"{body}ctx._result = result"]
        recover = "return recover_or_raise(registry, plan, ctx, error, True)"
        on_error = [recover] if exception else ["raise"]
        for i in range(post):
            lines += _hook_block("post", i, body, on_error)
        lines.append(f"{body}return ctx._result")
    lines.append("    return hooked_call")
    return "\n".join(lines) + "\n"


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
    lines = _call_header(arounds, pre, post, bound)
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
        lines += _hook_block("pre", i, core, ["raise"])
    arguments = "target, *ctx._args, **ctx._kwargs" if bound else "*ctx._args, **ctx._kwargs"
    lines += [
        f"{core}if ctx._rare is not None and ctx._rare.skipped:",  # ctx.skipped, inline
        f"{core}    result = ctx._result",
        f"{core}else:",
        f"{core}    result = call({arguments})",
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
            lines += _hook_block("post", i, posts, ["raise"])
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
    lines += [f"{body}return result", "    return hooked_call"]
    return "\n".join(lines) + "\n"


def _factory(shape: Union[Shape, AroundShape]) -> Tuple[Callable[..., Runner], str]:
    made = _FACTORIES.get(shape)
    if made is None:
        if len(shape) == 5:
            checked, pre, post, exception, bound = shape
            source = around_source_of((checked, pre, post, exception, bound))
            refused = ", ".join(str(i) for i, check in enumerate(checked) if check)
            arounds = (
                f"{len(checked)} around{f' (returns refused: {refused})' if refused else ''}, "
            )
        else:
            pre, post, exception, bound = shape
            source, arounds = source_of((pre, post, exception, bound)), ""
        filename = (
            f"<hookbus compiled call: {arounds}{pre} pre, {post} post"
            f"{', exception' if exception else ''}{', method' if bound else ''}>"
        )
        made = _FACTORIES[shape] = (_compiled_make(source, filename), source)
    return made


def _compiled_make(source: str, filename: str) -> Callable[..., Any]:
    """The ``make`` factory that ``source`` defines, compiled as ``filename``."""
    namespace: Dict[str, Any] = dict(_GLOBALS)
    exec(compile(source, filename, "exec"), namespace)  # our own source, from a shape alone
    # Tracebacks read the lines from here (mtime None: checkcache keeps the entry).
    linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
    make: Callable[..., Any] = namespace["make"]
    return make


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
    """
    shape = shape_of(plan, bound)
    if shape is None:
        return reference
    make, _ = _factory(shape)
    hooks: List[Any] = []
    phases = ((plan.around_hooks or (), plan.around), (plan.pre_hooks, plan.pre),
              (plan.post_hooks, plan.post))  # fmt: skip
    for bare, handles in phases:
        for hook, handle in zip(bare, handles):
            hooks += (hook, handle)
    return make(call, name, target, counter, registry, reference, *hooks)


def explain(plan: Optional[PointPlan], name: str, bound: bool) -> str:
    """What a call of a point named ``name`` runs under ``plan``: the generated source with
    what each of its names is bound to, or why the reference sequence runs instead."""
    if plan is None:
        return f"# {name!r}: no hooks; the wrapper calls the function straight through\n"
    shape = shape_of(plan, bound)
    if shape is None:
        return f"# {name!r}: call_with_hooks runs the plan ({_why_reference(plan)})\n"
    _, source = _factory(shape)
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

# The factory of each post phase compiled so far, by its number of hooks and whether it is
# a native hook (native_post_hook), with its source.
_POST_FACTORIES: Dict[Tuple[int, bool], Tuple[Callable[..., Any], str]] = {}


def post_source_of(count: int, native: bool = False) -> str:
    """The Python source of the factory of a post phase of ``count`` plain hooks.

    With ``native``, the factory of :func:`native_post_hook`'s function: the same
    context and hook lines, but the hooks, the name and the counter read from the
    owner's :attr:`NativePostOwner.native_post` at each call, the framework's error
    path handed to the owner, and ``None`` returned for a result left as it was."""
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
            "    def native_post(point, target, args, kwargs, result):",
            f"{body}try:",
            f"{body}    {bound} = point.native_post",
            f"{body}except (TypeError, ValueError):  # the plan changed shape, or there is none",
            otherwise,
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


def _post_factory(count: int, native: bool = False) -> Tuple[Callable[..., Any], str]:
    made = _POST_FACTORIES.get((count, native))
    if made is None:
        source = post_source_of(count, native)
        kind = "native post hook" if native else "post phase"
        filename = f"<hookbus compiled {kind}: {count} post>"
        made = _POST_FACTORIES[(count, native)] = (_compiled_make(source, filename), source)
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
    framework may be calling from its error path), called from the generated
    code, or by the framework itself: pickled, the bound method comes back as the
    owner's ``post_otherwise`` (pickle keeps a method's object and name only);
    ``post_replaced`` checks and returns a result a hook assigned. The owner is
    also ``ctx._point``.
    """

    native_post: Optional[Tuple[Any, ...]]

    def post_otherwise(self, target: Any, args: Any, kwargs: Any, result: Any) -> Any: ...

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


def native_post_hook(count: int) -> Optional[Callable[..., Any]]:
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
    handled. Returns ``None`` for more than :data:`MAX_HOOKS` hooks.

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
    made = _NATIVE_POST_HOOKS.get(count)
    if made is None:
        make, _ = _post_factory(count, native=True)
        made = make()
        # Pickle stores a bound method as its object and its function's __name__: the
        # copy gets the owner's post_otherwise, which runs any call (NativePostOwner).
        made.__name__ = "post_otherwise"
        made = _NATIVE_POST_HOOKS.setdefault(count, made)
    return made


# The function native_post_hook made for each number of hooks: one, shared by every owner.
_NATIVE_POST_HOOKS: Dict[int, Callable[..., Any]] = {}
