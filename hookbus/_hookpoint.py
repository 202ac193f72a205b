"""Hook points: the wrapper that runs pre, post and exception hooks around a callable.

And what type checkers see of one (:class:`TypedPoint`): typing only, and free at run
time. ``@bus.hookable`` returns the plain wrapper function that :func:`make_hookable`
builds, with ``pre``, ``post`` and ``exception`` set to its :class:`HookPoint`'s
methods; the protocols say so to mypy and pyright: calling the point takes ``f``'s
parameters and returns its result, and a hook registered through it must take a
``CallContext[R]`` (``R`` being what ``f`` returns, awaited for an ``async def``) and
return ``None``.
"""

from __future__ import annotations

import functools
import inspect
import itertools
import types
import warnings
import weakref
from types import FunctionType
from typing import (
    TYPE_CHECKING,
    Any,
    AsyncIterator,
    Awaitable,
    Callable,
    Coroutine,
    Dict,
    Iterator,
    Optional,
    Tuple,
    Type,
    TypeVar,
    Union,
    cast,
    overload,
)

from typing_extensions import Concatenate, ParamSpec, Protocol, Self, Unpack

from ._async_dispatch import call_with_hooks_async
from ._compiled_call import (
    Runner,
    added_hook_first_call,
    call_straight_through,
    compile_call,
    explain,
    first_call_of,
    point_function,
    run_in_wrapper,
)
from ._context import CallContext, Layout, layout_of
from ._handle import where_defined
from ._kinds import point_kind
from ._names import check_name
from ._plan import PointPlan
from ._sync_dispatch import call_with_hooks

if TYPE_CHECKING:
    from ._handle import Handle
    from ._options import HookOptions
    from ._registry import Registry


# The fast constructor, bound once: a classmethod is bound again at each access.
_for_call = CallContext.for_call

__all__ = [
    "AsyncTypedPoint",
    "Decorator",
    "HookPoint",
    "SharedNameWarning",
    "TypedClassPoint",
    "TypedPoint",
    "make_hookable",
]

P = ParamSpec("P")
R = TypeVar("R")
T = TypeVar("T")
S = TypeVar("S")
Q = ParamSpec("Q")
C = TypeVar("C", contravariant=True)


class _Unresolved:
    __slots__ = ()

    shape = ""  # compiled to no call shape (see PointPlan.shape)

    def __repr__(self) -> str:
        return "<unresolved>"

    @staticmethod
    def run(point: HookPoint, plan: Any, args: Tuple[Any, ...], kwargs: Dict[str, Any]) -> Any:
        """Work the point's plan out again, then run the call under it."""
        plan = point.current_plan()
        if plan is None:
            return point._fn(*args, **kwargs)
        return plan.run(point, plan, args, kwargs)


UNRESOLVED: Any = _Unresolved()
"""A point's plan after its hooks changed: the next call works it out again."""


class HookPoint:
    """A named place where pre, post and exception hooks run around calls.

    The bus's registry keeps every point weakly, by name, and calls
    :meth:`invalidate` (after releasing its lock) when a hook that may match the
    point is added or removed. The plan is then worked out again at the next call,
    so registering costs no call. ``plan is None`` means "no hooks": the wrapper
    then calls straight through. (The torch adapter's module points have the same
    shape, ``hookbus._plan.Point``, without being HookPoints.)

    Example:
        >>> import hookbus
        >>> bus = hookbus.EventBus()
        >>> @bus.hookable("double")
        ... def double(x):
        ...     return 2 * x
        >>> point = double.__hookbus_point__
        >>> point.name, point.is_async
        ('double', False)
        >>> double(1), point  # the first call worked out the plan: no hooks
        (2, <HookPoint 'double' no hooks>)
        >>> _ = bus.post("double", lambda ctx: None)
        >>> point  # registering only invalidated it; the next call works it out
        <HookPoint 'double' unresolved>
        >>> double(1), point
        (2, <HookPoint 'double' hooked>)
    """

    __slots__ = (
        "__weakref__",
        "_bound",
        "_calls",
        "_firsts",
        "_fn",
        "_layout",
        "_stamp",
        "_target",
        "_wrapper",
        "is_async",
        "kind",
        "kinds",
        "module_name",
        "name",
        "plan",
        "registry",
        "where",
    )

    skip_refusal: Optional[str] = None  # the call can always be skipped (Point protocol)
    """Why ``ctx.skip()`` can't work at this point, or ``None`` when it can."""

    def __init__(
        self,
        registry: Registry,
        name: str,
        *,
        is_async: bool = False,
        kind: str = "function",
        where: str = "?",
        module_name: str = "",
        fn: Any = None,
        bound: bool = False,
        target: Any = None,
    ) -> None:
        self.registry = registry
        self.name = name
        self.is_async = is_async
        self.kind = kind
        """What the point wraps: ``"function"`` or ``"method"``."""
        # Read once: a kind's row never changes, and the plan's build at the first call
        # after each change of hooks reads it (a property would cost a call through C).
        self.kinds: Tuple[str, ...] = point_kind(kind).runs
        """The hook kinds that apply to this point: its kind's row of the table."""
        self.where = where
        """Where the wrapped callable is defined, as ``file:line`` (``"?"`` if unknown)."""
        self.module_name = module_name
        """The module that defined the wrapped callable (its ``__module__``), or ``""``."""
        # ``plan.run(point, plan, args, kwargs)`` runs a call: the shape's first_call (or
        # the reference) at a plan's first call, then the code compiled for it
        # (``compile_call``). One attribute
        # store swaps the plan and its code together, for any thread's caller.
        self.plan: Optional[PointPlan] = UNRESOLVED
        self._calls = itertools.count()
        self._fn = fn  # what the point calls, and whose signature ctx.arguments binds to
        self._bound = bound  # fn takes self or cls first, which ctx.args leave out
        self._target = target  # ctx.target when not bound (a bound method's object, or fn)
        self._layout: Optional[Layout] = None
        # The function make_hookable hands out, weakly (it holds the point): compiling
        # a plan gives it the code of the plan's shape.
        self._wrapper: Optional[weakref.ref[FunctionType]] = None
        # Bumped by each invalidation: a plan worked out before a change must not
        # stay cached after it (see current_plan). No lock: a weakref callback
        # may invalidate the point while this very thread resolves it.
        self._stamp = 0
        # The first call of each call shape without around hooks this point met, with the
        # point's constants bound, by (pre hooks, post hooks, exception hooks): made at a
        # plan's first call (_run_first), run directly by the plans that follow (follow).
        self._firsts: Optional[Dict[Tuple[int, int, bool], Runner]] = None

    def invalidate(self) -> None:
        """Forget the plan (called when hooks change, with no bus lock held)."""
        self._stamp += 1
        self.plan = UNRESOLVED

    def follow(self, handle: Handle, added: bool) -> Optional[PointPlan]:
        """Take the plan that follows from the one kept when ``handle``, a plain sync hook
        for this point's exact name, was added (or removed); return the plan replaced, or
        ``None`` when there is none to follow from (the registry then calls
        :meth:`invalidate` after its lock).

        The registry calls it under its lock, in the order the hooks changed, so each
        change follows from the one before (bookkeeping only: no user code runs, and the
        registry lets go of the plan replaced after its lock). A hook added and removed
        around each call (a benchmark row) so costs no lookup of the registry's hooks at
        the next call. The stamp tells a plan being worked out meanwhile
        (:meth:`current_plan`) that it is stale.
        """
        plan = self.plan
        if plan is UNRESOLVED or plan is None or self.is_async:
            return None
        new = plan.with_hook(handle) if added else plan.without_hook(handle)
        if new is None:
            return None
        if new is not plan.parent:  # a new plan (a parent given back runs as it did)
            # Before the plan is seen: swapped whole. A plan of a call shape met before
            # (:func:`~hookbus._compiled_call.shape_of`, inline) runs its first call
            # directly: a hook added and removed around each call is a benchmark row.
            firsts = self._firsts
            if firsts is not None and new.direct and not new.around:
                shape = (len(new.pre_hooks), len(new.post_hooks), bool(new.exception))
                new.run = firsts.get(shape) or HookPoint._run_first
            else:
                new.run = HookPoint._run_first
        elif plan.shape:
            # The point's function runs the replaced plan's code: the parent's next call
            # compiles it again, which gives the function the parent's code back (a
            # __code__ store may run an audit hook: not here, under the lock).
            new.run = HookPoint._run_compiling
        self._stamp += 1
        self.plan = new
        return plan

    def current_plan(self) -> Optional[PointPlan]:
        """The plan for a call starting now, worked out again if hooks changed."""
        plan = self.plan
        if plan is UNRESOLVED:
            stamp = self._stamp
            plan = self.registry.plan(self)
            if plan is not None and not self.is_async:
                plan.run = HookPoint._run_first  # before the plan is seen: swapped whole
            elif plan is None and self._wrapper is not None:
                wrapper = self._wrapper()
                if wrapper is not None:
                    call_straight_through(wrapper)  # no shape's code in the way
            self.plan = plan
            if self._stamp != stamp:
                # Hooks changed while it was worked out: this call runs it, the
                # next works it out again (invalidate may have run before the store).
                self.plan = UNRESOLVED
        return plan

    def _run_first(self, plan: PointPlan, args: Tuple[Any, ...], kwargs: Dict[str, Any]) -> Any:
        """A plan's first call: its shape's code reading the plan's hooks (``first_call_of``),
        or the reference; the next call compiles.

        So a plan that lives for one call (a hook added and removed around each
        call) pays no closure and no compile (a shape compiles once, whatever the
        plan), and a plan that stays compiles once.
        """
        plan.run = HookPoint._run_compiling
        first = first_call_of(plan, self._bound)
        if first is None:
            return self._run_reference(plan, args, kwargs)
        if not plan.around:  # a shape follow() finds, from the next plan of this one on
            self._keep_first(plan)
        return first(
            self, plan, args, kwargs, self._fn, self.name, self._calls, self._target,
            self.registry, HookPoint._run_reference,
        )  # fmt: skip

    def _keep_first(self, plan: PointPlan) -> None:
        """Keep the first call of ``plan``'s shape, a direct one without around hooks, for
        the plans of that shape that follow (:meth:`follow`), unless it has it."""
        firsts = self._firsts
        if firsts is None:
            firsts = self._firsts = {}
        shape = (len(plan.pre_hooks), len(plan.post_hooks), bool(plan.exception))
        if shape in firsts:
            return
        first = added_hook_first_call(
            plan,
            call=self._fn,
            name=self.name,
            target=self._target,
            counter=self._calls,
            registry=self.registry,
            bound=self._bound,
            reference=HookPoint._run_reference,
            compiling=HookPoint._run_compiling,
        )
        if first is not None:
            firsts[shape] = first

    def _run_compiling(
        self, plan: PointPlan, args: Tuple[Any, ...], kwargs: Dict[str, Any]
    ) -> Any:
        """Compile the plan's code (``compile_call``), keep it with the plan, and run it.

        The point's function then runs the plan's calls itself (``run_in_wrapper``)."""
        run = plan.run = self._compile(plan)
        wrapper = None if self._wrapper is None else self._wrapper()
        if wrapper is not None:
            run_in_wrapper(wrapper, plan, run)
        return run(self, plan, args, kwargs)

    def _compile(self, plan: PointPlan) -> Runner:
        return compile_call(
            plan,
            call=self._fn,
            name=self.name,
            target=self._target,
            counter=self._calls,
            registry=self.registry,
            bound=self._bound,
            reference=HookPoint._run_reference,
        )

    def _run_reference(
        self, plan: PointPlan, args: Tuple[Any, ...], kwargs: Dict[str, Any]
    ) -> Any:
        """The reference sequence, ``call_with_hooks``, for one call under ``plan``."""
        target, strip = self._target, self._bound and bool(args)
        if strip:
            target, args = args[0], args[1:]
        ctx = _for_call(self.name, target, args, kwargs, next(self._calls), "pre", self)
        return call_with_hooks(self.registry, plan, ctx, self._fn, strip)

    def explain(self) -> str:
        """The code a call of this point runs now (see :meth:`EventBus.explain`).

        Example:
            >>> import hookbus
            >>> bus = hookbus.EventBus()
            >>> @bus.hookable("double")
            ... def double(x):
            ...     return 2 * x
            >>> print(double.__hookbus_point__.explain())
            # 'double': no hooks; the wrapper calls the function straight through
            <BLANKLINE>
            >>> _ = double.pre(lambda ctx: None)
            >>> print(double.__hookbus_point__.explain().splitlines()[:2])
            ["# 'double': a compiled call", "#   pre_0 = <Handle pre 'double' <lambda> active>"]
        """
        plan = self.current_plan()
        if plan is not None and self.is_async:
            return f"# {self.name!r}: an async point; call_with_hooks_async runs the plan\n"
        return explain(plan, self.name, self._bound)

    def context(self, target: Any, args: Tuple[Any, ...], kwargs: dict[str, Any]) -> CallContext:
        """A fresh call context for one call of this point."""
        return _for_call(self.name, target, args, kwargs, next(self._calls), "pre", self)

    def layout(self) -> Layout:
        """The parameters ``ctx.arguments`` binds to, worked out at its first use."""
        layout = self._layout
        if layout is None:
            layout = self._layout = layout_of(self._fn, self.name, drop_first=self._bound)
        return layout

    def __repr__(self) -> str:
        plan = self.plan
        state = "unresolved" if plan is UNRESOLVED else "hooked" if plan else "no hooks"
        return f"<{type(self).__name__} {self.name!r} {state}>"

    # --- f.pre, f.post, f.exception, f.around: registering through the point -----------
    # The wrapper that @bus.hookable returns carries these bound methods; type
    # checkers see them through TypedPoint.

    def pre(self, hook: Any = None, /, **options: Any) -> Any:
        """Register ``hook`` to run before each call: ``bus.pre(name, hook)``; return ``hook``.

        With no hook, return a decorator. Every form returns the hook itself, so a
        decorated function stays callable. So it is no :class:`Handle`:
        ``f.pre(hook).remove()`` and ``with f.pre(hook):`` fail;
        :meth:`EventBus.handles_of` finds its handles, and ``bus.pre(name, hook)``
        returns one.

        Example:
            >>> import hookbus
            >>> bus = hookbus.EventBus()
            >>> @bus.hookable("greet")
            ... def greet(name):
            ...     return f"hello {name}"
            >>> @greet.pre
            ... def shout(ctx):
            ...     ctx.args = (ctx.args[0].upper(),)
            >>> greet("ada"), callable(shout)
            ('hello ADA', True)
        """
        return self._register("pre", hook, options)

    def post(self, hook: Any = None, /, **options: Any) -> Any:
        """Register ``hook`` to run after each call that returned: ``bus.post(name, hook)``.

        Returns ``hook``, or with no hook a decorator, as :meth:`pre` does.

        Example:
            >>> import hookbus
            >>> bus = hookbus.EventBus()
            >>> @bus.hookable("double")
            ... def double(x):
            ...     return 2 * x
            >>> @double.post(priority="HIGH")
            ... def plus_one(ctx):
            ...     ctx.result += 1
            >>> double(4)
            9
        """
        return self._register("post", hook, options)

    def exception(self, hook: Any = None, /, **options: Any) -> Any:
        """Register ``hook`` to run when a call raises: ``bus.exception(name, hook)``.

        Returns ``hook``, or with no hook a decorator, as :meth:`pre` does.

        Example:
            >>> import hookbus
            >>> bus = hookbus.EventBus()
            >>> @bus.hookable("parse")
            ... def parse(text):
            ...     return int(text)
            >>> _ = parse.exception(lambda ctx: ctx.recover(0))
            >>> parse("12"), parse("oops")
            (12, 0)
        """
        return self._register("exception", hook, options)

    def around(self, hook: Any = None, /, **options: Any) -> Any:
        """Register a generator ``hook`` to run around each call: ``bus.around(name, hook)``.

        Returns ``hook``, or with no hook a decorator, as :meth:`pre` does.

        Example:
            >>> import hookbus
            >>> bus = hookbus.EventBus()
            >>> @bus.hookable("save")
            ... def save(path):
            ...     print("saving", path)
            >>> @save.around
            ... def logged(ctx):
            ...     print("begin")
            ...     yield
            ...     print("end")
            >>> save("a.txt")
            begin
            saving a.txt
            end
        """
        return self._register("around", hook, options)

    def _register(self, kind: str, hook: Any, options: Dict[str, Any]) -> Any:
        registry = self.registry
        if hook is None:
            return registry.decorator(kind, self.name, options)
        registry.register(kind, self.name, hook, options)
        return hook


_SELF_NAMES = frozenset({"self", "cls", "mcs", "metacls"})


def _is_method(fn: Callable[..., Any]) -> bool:
    """Whether ``fn``, a plain function, will be a method, so that args[0] is self or cls.

    A function decorated in a class body is not bound yet: it is a method if it was
    defined in a class (its qualname says so) and its first parameter is named as
    PEP 8 asks (``self`` or ``cls``). A staticmethod decorated below
    ``@staticmethod`` fails the second test, as it should.
    """
    owner = getattr(fn, "__qualname__", "").rpartition(".")[0]
    if not owner or owner.endswith("<locals>"):
        return False
    code = getattr(fn, "__code__", None)
    return code is not None and code.co_argcount > 0 and code.co_varnames[0] in _SELF_NAMES


class SharedNameWarning(UserWarning):
    """Two functions from different modules got the same default hook point name.

    A bare ``@hookable`` names its point by the function's ``__qualname__``, so two
    unrelated ``forward`` functions would share each other's hooks. Give either an
    explicit name; ``@hookable("forward")`` says that sharing is meant.

    Example:
        >>> import hookbus, warnings
        >>> bus = hookbus.EventBus()
        >>> def forward(x):
        ...     return x
        >>> forward.__module__ = "first"
        >>> first = bus.hookable(forward)
        >>> forward.__module__ = "second"
        >>> with warnings.catch_warnings(record=True) as caught:
        ...     warnings.simplefilter("always")
        ...     second = bus.hookable(forward)
        >>> caught[0].category.__name__
        'SharedNameWarning'
    """


def _warn_if_shared(registry: Registry, point: HookPoint, stacklevel: int) -> None:
    """Warn when ``point`` takes a default name that a point of another module has."""
    others = [
        other
        for other in registry.points(point.name)
        if getattr(other, "module_name", point.module_name) != point.module_name
    ]
    if not others:
        return
    other = others[0]
    own = f"{point.module_name}.{point.name}" if point.module_name else f"{point.name}.2"
    warnings.warn(
        f"the hook point name {point.name!r} (the default: the function's __qualname__) is "
        f"already used by {getattr(other, 'module_name', '') or '?'} ({other.where}); "
        f"{point.module_name or '?'} ({point.where}) now shares its hooks. If that is "
        f"meant, say so with @hookable({point.name!r}); if not, give it its own name, "
        f"such as @hookable({own!r})",
        SharedNameWarning,
        stacklevel=stacklevel,
    )


def _origin(fn: Any, self_from_args: bool) -> Tuple[str, str, str]:
    """(kind, file:line, module) of the callable a point wraps, for ``bus.points()``."""
    is_method = self_from_args or inspect.ismethod(fn)
    return (
        "method" if is_method else "function",
        where_defined(fn),
        str(getattr(fn, "__module__", "")),
    )


def _default_name(fn: Any) -> str:
    name = getattr(fn, "__qualname__", None) or getattr(fn, "__name__", None)
    return str(name) if name else type(fn).__name__


def _refuse_class(fn: type) -> None:
    raise TypeError(
        f"hookable() got the class {fn.__name__}, and a hook point is a function: the class "
        f"would stop being a class (isinstance and subclassing would break). To hook "
        f"construction, decorate its __init__ (or a factory function) with @bus.hookable; "
        f"to hook calls of its instances, decorate __call__, or bus.wrap(instance, name)"
    )


def _is_async(fn: Any) -> bool:
    """Whether calling ``fn`` gives a coroutine: async functions and async ``__call__``."""
    if inspect.iscoroutinefunction(fn):
        return True
    if isinstance(fn, (types.FunctionType, types.BuiltinFunctionType, types.MethodType)):
        return False
    return inspect.iscoroutinefunction(type(fn).__call__)  # what calling the object runs


def _fixed_target(fn: Any) -> Any:
    """The object of a bound method (builtin ones too), else the callable itself."""
    bound_to = getattr(fn, "__self__", None)
    # A builtin function's __self__ is its module (len.__self__ is builtins).
    if bound_to is None or isinstance(bound_to, types.ModuleType):
        return fn
    return bound_to


def make_hookable(
    registry: Registry,
    fn: Any,
    name: Optional[str],
    *,
    self_from_args: Optional[bool] = None,
    stacklevel: int = 3,
) -> Any:
    """Wrap ``fn`` as the hook point ``name`` in ``registry``; see :meth:`EventBus.hookable`."""
    if isinstance(fn, (classmethod, staticmethod)):
        # Wrap the function inside, and put it back in the same kind of descriptor,
        # so that Python's own binding passes cls (or nothing) as usual.
        is_class = isinstance(fn, classmethod)
        descriptor: Any = cast(Any, fn)  # typeshed leaves the function inside partly unknown
        wrapped = make_hookable(
            registry, descriptor.__func__, name, self_from_args=is_class, stacklevel=stacklevel + 1
        )
        return classmethod(wrapped) if is_class else staticmethod(wrapped)
    if isinstance(fn, type):
        _refuse_class(fn)
    if not callable(fn):
        raise TypeError(
            f"hookable() needs a callable, got {type(fn).__name__} {fn!r}; accepted: "
            f"functions, methods, classmethods, staticmethods, builtins, callable objects "
            f"and 'async def' functions"
        )
    point_name = check_name(
        _default_name(fn) if name is None else name, "hook point name", allow_pattern=False
    )
    existing = getattr(fn, "__hookbus_point__", None)
    if (
        isinstance(existing, HookPoint)
        and existing.registry is registry
        and existing.name == point_name
    ):
        return fn  # already this very hook point: wrapping again would run its hooks twice
    call: Any = fn  # what the wrapper calls; typed Any so both wrappers may await it
    is_async = _is_async(fn)
    # self or cls is the target, not an argument, for a function defined in a class
    # body (it becomes a method); a bound method's object, or the callable, otherwise.
    bound = self_from_args
    if bound is None:
        inner = existing._bound if isinstance(existing, HookPoint) else None
        bound = inspect.isfunction(fn) and _is_method(fn) if inner is None else inner
    fixed_target = _fixed_target(fn)
    kind, where, module_name = _origin(fn, bound)
    point = HookPoint(
        registry,
        point_name,
        is_async=is_async,
        kind=kind,
        where=where,
        module_name=module_name,
        fn=fn,
        bound=bound,
        target=fixed_target,
    )
    if name is None:
        # Before the point is added, and with no lock held: a warning turned into
        # an error leaves nothing behind.
        _warn_if_shared(registry, point, stacklevel + 1)
    counter = point._calls

    if is_async:

        async def call_point_async(*args: Any, **kwargs: Any) -> Any:
            if point.plan is None:
                return await call(*args, **kwargs)
            plan = point.current_plan()
            if plan is None:
                return await call(*args, **kwargs)
            target, strip = fixed_target, bound and bool(args)
            if strip:
                target, args = args[0], args[1:]
            ctx = _for_call(point_name, target, args, kwargs, next(counter), "pre", point)
            return await call_with_hooks_async(registry, plan, ctx, call, strip)

        wrapper: Callable[..., Any] = call_point_async
    else:
        # Generated (point_function): a compiled plan's call runs in its own frame.
        function = point_function(point, call)
        point._wrapper = weakref.ref(function)
        wrapper = function

    try:
        functools.update_wrapper(wrapper, fn)
    except AttributeError:  # pragma: no cover - objects that refuse some attributes
        wrapper.__wrapped__ = fn  # type: ignore[attr-defined]
    if not hasattr(fn, "__name__"):  # a callable object: name the wrapper after its type
        wrapper.__name__ = wrapper.__qualname__ = type(fn).__name__
    wrapper.__hookbus_point__ = point  # type: ignore[attr-defined]
    # f.pre(hook), f.post(hook), f.exception(hook): typed by f (TypedPoint).
    wrapper.pre = point.pre  # type: ignore[attr-defined]
    wrapper.post = point.post  # type: ignore[attr-defined]
    wrapper.exception = point.exception  # type: ignore[attr-defined]
    wrapper.around = point.around  # type: ignore[attr-defined]
    registry.add_point(point)
    return wrapper


class Decorator:
    """What ``@bus.hookable("name")`` returns: a decorator that keeps the signature."""

    @overload
    def __call__(self, fn: classmethod[T, P, R], /) -> classmethod[T, P, R]: ...

    @overload
    def __call__(  # type: ignore[overload-overlap]  # pyright: ignore[reportOverlappingOverload]
        self, fn: staticmethod[P, R], /
    ) -> staticmethod[P, R]: ...

    @overload
    def __call__(  # type: ignore[overload-overlap]
        self, fn: Callable[P, Coroutine[Any, Any, R]], /
    ) -> AsyncTypedPoint[P, R]: ...

    @overload
    def __call__(  # pyright: ignore[reportOverlappingOverload]
        self, fn: Callable[Concatenate[Type[S], P], R], /
    ) -> TypedClassPoint[S, P, R]: ...

    @overload
    def __call__(self, fn: Callable[P, R], /) -> TypedPoint[P, R]: ...

    def __call__(self, fn: Any, /) -> Any: ...  # pragma: no cover - typing only


# The hooks a point takes: a context of its result type in, nothing out; an around
# hook is a generator function of the context (async too, on an async point).
PointHook = Callable[["CallContext[R]"], None]
AsyncPointHook = Callable[["CallContext[R]"], Optional[Awaitable[None]]]
AroundHook = Callable[["CallContext[R]"], Iterator[None]]
AsyncAroundHook = Callable[["CallContext[R]"], Union[Iterator[None], AsyncIterator[None]]]


class TypedPoint(Protocol[P, R]):
    """A hook point made from ``def f(...) -> R``, as type checkers see it.

    It is called as ``f`` is, and its ``pre``, ``post`` and ``exception`` methods
    register hooks for its name, as ``bus.pre(name, hook)`` does, type-checked: a
    hook must take one ``CallContext[R]`` (so ``ctx.result`` is an ``R`` in a post
    hook) and return ``None``. Each returns the hook unchanged, with or without
    options, called or as a decorator, so ``f.post(hook).remove()`` fails:
    :meth:`EventBus.handles_of` finds the handles (``bus.post(name, hook)`` returns
    one). On a method, hooks run for every instance: register through the
    class (``Model.forward.post``) and pass ``target=obj`` for one instance.

    Example:
        >>> import hookbus
        >>> bus = hookbus.EventBus()
        >>> @bus.hookable("label")
        ... def label(x: int) -> str:
        ...     return f"#{x}"
        >>> @label.post
        ... def shout(ctx: hookbus.CallContext[str]) -> None:
        ...     ctx.result = ctx.result.upper() + "!"
        >>> label(3)
        '#3!'
        >>> [handle.kind for handle in bus.handles_of(shout)]
        ['post']
    """

    __name__: str
    __qualname__: str
    __hookbus_point__: HookPoint

    def __call__(self, *args: P.args, **kwargs: P.kwargs) -> R: ...

    @overload
    def __get__(self, instance: None, owner: Any, /) -> Self: ...

    @overload
    def __get__(
        self: TypedPoint[Concatenate[S, Q], R], instance: S, owner: Any, /
    ) -> Callable[Q, R]: ...

    @overload
    def pre(self, hook: PointHook[R], /, **options: Unpack[HookOptions]) -> PointHook[R]: ...

    @overload
    def pre(self, /, **options: Unpack[HookOptions]) -> Callable[[PointHook[R]], PointHook[R]]: ...

    @overload
    def post(self, hook: PointHook[R], /, **options: Unpack[HookOptions]) -> PointHook[R]: ...

    @overload
    def post(
        self, /, **options: Unpack[HookOptions]
    ) -> Callable[[PointHook[R]], PointHook[R]]: ...

    @overload
    def exception(self, hook: PointHook[R], /, **options: Unpack[HookOptions]) -> PointHook[R]: ...

    @overload
    def exception(
        self, /, **options: Unpack[HookOptions]
    ) -> Callable[[PointHook[R]], PointHook[R]]: ...

    @overload
    def around(self, hook: AroundHook[R], /, **options: Unpack[HookOptions]) -> AroundHook[R]: ...

    @overload
    def around(
        self, /, **options: Unpack[HookOptions]
    ) -> Callable[[AroundHook[R]], AroundHook[R]]: ...


class AsyncTypedPoint(Protocol[P, R]):
    """A hook point made from ``async def f(...) -> R``: its call is awaited, and its hooks
    may be plain or ``async def`` functions of a ``CallContext[R]``.

    ``R`` is what the call returns once awaited, which is what ``ctx.result`` holds
    in a post hook. See :class:`TypedPoint` for the rest.

    Example:
        >>> import asyncio, hookbus
        >>> bus = hookbus.EventBus()
        >>> @bus.hookable("fetch")
        ... async def fetch(url: str) -> bytes:
        ...     return b"page"
        >>> @fetch.post
        ... async def measure(ctx: hookbus.CallContext[bytes]) -> None:
        ...     print(len(ctx.result), "bytes")
        >>> asyncio.run(fetch("https://example.org"))
        4 bytes
        b'page'
    """

    __name__: str
    __qualname__: str
    __hookbus_point__: HookPoint

    def __call__(self, *args: P.args, **kwargs: P.kwargs) -> Coroutine[Any, Any, R]: ...

    @overload
    def __get__(self, instance: None, owner: Any, /) -> Self: ...

    @overload
    def __get__(
        self: AsyncTypedPoint[Concatenate[S, Q], R], instance: S, owner: Any, /
    ) -> Callable[Q, Coroutine[Any, Any, R]]: ...

    @overload
    def pre(
        self, hook: AsyncPointHook[R], /, **options: Unpack[HookOptions]
    ) -> AsyncPointHook[R]: ...

    @overload
    def pre(
        self, /, **options: Unpack[HookOptions]
    ) -> Callable[[AsyncPointHook[R]], AsyncPointHook[R]]: ...

    @overload
    def post(
        self, hook: AsyncPointHook[R], /, **options: Unpack[HookOptions]
    ) -> AsyncPointHook[R]: ...

    @overload
    def post(
        self, /, **options: Unpack[HookOptions]
    ) -> Callable[[AsyncPointHook[R]], AsyncPointHook[R]]: ...

    @overload
    def exception(
        self, hook: AsyncPointHook[R], /, **options: Unpack[HookOptions]
    ) -> AsyncPointHook[R]: ...

    @overload
    def exception(
        self, /, **options: Unpack[HookOptions]
    ) -> Callable[[AsyncPointHook[R]], AsyncPointHook[R]]: ...

    @overload
    def around(
        self, hook: AsyncAroundHook[R], /, **options: Unpack[HookOptions]
    ) -> AsyncAroundHook[R]: ...

    @overload
    def around(
        self, /, **options: Unpack[HookOptions]
    ) -> Callable[[AsyncAroundHook[R]], AsyncAroundHook[R]]: ...


class TypedClassPoint(Protocol[C, P, R]):
    """A hook point made from a classmethod, ``@hookable`` above ``@classmethod``.

    Type checkers hand such a decorator the function, whose first parameter is the
    class: read through the class or an instance, the point is a :class:`TypedPoint`
    without it, as Python's classmethod binds it.

    Example:
        >>> import hookbus
        >>> bus = hookbus.EventBus()
        >>> class Model:
        ...     @bus.hookable("make")
        ...     @classmethod
        ...     def make(cls, size: int) -> "Model":
        ...         return cls()
        >>> _ = Model.make.post(lambda ctx: print("made", type(ctx.result).__name__))
        >>> _ = Model.make(3)
        made Model
    """

    __name__: str
    __qualname__: str

    def __call__(self, cls: Type[C], /, *args: P.args, **kwargs: P.kwargs) -> R: ...

    def __get__(self, instance: Optional[C], owner: Type[C], /) -> TypedPoint[P, R]: ...
