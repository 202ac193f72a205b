"""Hook points on the torch operations called inside a module's forward.

``net.operations("transformer.h.0.attn", "softmax")`` makes every call of
``softmax`` during that module's forward a hook point named
``"transformer.h.0.attn:softmax.0"``, ``...:softmax.1``, ...: the module's name, a
colon, the operation's name and its call index within one forward. The usual
``bus.pre`` / ``bus.post`` / ``bus.exception`` / ``bus.around`` hooks then see and
replace its inputs (``ctx.args`` / ``ctx.kwargs``) and output (``ctx.result``), and
``ctx.skip(value)`` in a pre hook replaces the operation altogether.

How: torch's own interception, ``torch.overrides.TorchFunctionMode``. Each
selected module has one :class:`OperationSite`, which installs a native forward
pre hook that pushes a fresh :class:`OperationMode` on this thread's torch
function stack and a post hook (``always_call=True``, prepended) that pops it, so
the mode sees exactly the torch functions that the forward (its submodules and
helper functions included) calls. The site installs them only while a bus hook
matches one of its operation points, and for one forward after the selection
(the *discovery* forward, which learns how many calls each operation makes and
so which names exist); otherwise the module runs at native speed. A site that
sees its operations through the function swaps (the names' attention pattern,
:mod:`._function_swap`) installs no native hook: the module's forward swap
(:mod:`._forward_swap`, ``add_bracket``) runs the site around the forward
itself, the mode pushed as the forward starts and popped in a ``finally``.

The discovery forward is the first whose forward body ran. A call that a pre hook
skipped (on any bus: the names attach privately) or that ``patch`` replaced calls no
operation and tells nothing; counted, it would make a norm's ``rsqrt`` or an
attention's ``softmax`` look absent for good. The forward swap's brackets see only a
forward that runs: a site with native hooks adds one while it discovers (``_ran``),
which marks the call's mode.

Why the colon and the dot: a name like ``"attn:softmax[0]"`` would read as a glob
pattern at registration (``[0]`` is a character set), and ``"attn.softmax.0"``
could be the name of a real submodule. A pattern reaches operation points only if
it holds a colon (``"*:softmax.*"``, ``"transformer.h.*.attn:*"``): a pattern
written for modules (``"transformer.h.*"``, ``"*"``) keeps matching modules alone,
and so adds no cost to operations.

Operations are told apart by ``__name__``: ``torch.softmax``,
``torch.nn.functional.softmax`` and ``x.softmax()`` are all ``"softmax"``;
an operator is named by the function it calls: ``a @ b`` is ``"matmul"``,
``a * b`` ``"mul"``, ``a + b`` ``"add"`` (torch reports them so to the mode).
"""

from __future__ import annotations

import difflib
import itertools
import sys
import threading
import warnings
import weakref
from typing import Any, Callable, Dict, FrozenSet, Iterable, List, Optional, Set, Tuple

import torch
from torch import nn
from torch.overrides import TorchFunctionMode
from torch.utils.hooks import RemovableHandle

from ..adapter import (
    CallContext,
    EventBus,
    Handle,
    Layout,
    PointPlan,
    PostRunner,
    Removable,
    add_note,
    call_with_hooks,
    check_name,
    compile_post_phase,
    describe,
    is_pattern,
    layout_of,
    matcher_for,
    run_phase,
)
from . import _function_swap
from ._call_frames import Where, forward_raised, where_called
from ._forward_swap import ForwardSwap
from ._module_kinds import OPERATION_POINT
from ._native_hooks import remove_dispatchers
from ._script_refusal import hold_script_refusal, release_script_refusal

# The fast constructor, bound once: a classmethod is bound again at each access.
_for_call = CallContext.for_call
_FORWARD = Where.FORWARD  # read per selected operation call: an enum member is a lookup

__all__ = [
    "OPERATION_KINDS",
    "RUN",
    "ArgumentsReader",
    "OperationMode",
    "OperationPoint",
    "OperationSelection",
    "OperationSite",
    "ResultReader",
    "inert_site",
    "operation_name",
]

OPERATION_KINDS = OPERATION_POINT.runs
"""The hook kinds an operation point runs (its row of the table)."""

_push_mode: Callable[[Any], None] = torch._C._push_on_torch_function_stack
_pop_mode: Callable[[], Any] = torch._C._pop_torch_function_stack
_stack_length: Callable[[], int] = torch._C._len_torch_function_stack
_mode_at: Callable[[int], Any] = torch._C._get_function_stack_at


def operation_name(function: Any) -> str:
    """The name an operation is selected and named by: ``"softmax"`` for ``torch.softmax``.

    Example:
        >>> import torch
        >>> operation_name(torch.nn.functional.softmax), operation_name("matmul")
        ('softmax', 'matmul')
    """
    found: Any = function if isinstance(function, str) else getattr(function, "__name__", None)
    if not isinstance(found, str) or not (isinstance(function, str) or callable(function)):
        raise TypeError(
            f"cannot select the operation {type(function).__name__}: accepted: a torch "
            f"function (torch.matmul, torch.nn.functional.softmax, torch.Tensor.view) "
            f"or its name ('softmax')"
        )
    name = str(found)
    if not name.isidentifier():
        raise ValueError(
            f"operation name {name!r} is not a Python identifier; accepted: a torch "
            f"function or its __name__, such as 'softmax' or 'scaled_dot_product_attention'"
        )
    return name


# This thread's operation modes (innermost last) and hook depth, shared with the
# function swaps' dispatchers, which read the same list.
_THREAD = _function_swap.THREAD


class OperationMode(TorchFunctionMode):
    """The torch function mode of one forward call of one selected module.

    It counts the calls of each selected operation and hands them to its site;
    every other torch function passes straight through. ``call`` is the torch
    frame that runs the module's hooks, which tells a live call from one that
    ended without its post hook (a ``KeyboardInterrupt``). The frame itself, not
    its id: a new call's frame may reuse the address of an ended one.
    """

    ran = False
    """Whether the forward of this call ran (set by a discovering site's bracket)."""

    def __init__(self, site: OperationSite, call: Any) -> None:
        # No super().__init__(): TorchFunctionMode's does nothing, and one is made per
        # forward of a selected module.
        self.site = site
        self.selected = site.selected
        self.call = call
        self.counts: Dict[str, int] = {}
        # Entered in the function swaps rather than pushed as a mode, if the site asks
        # and they are in place (code that swapped a function by hand may have put
        # back what it saved before them: a mode sees those calls all the same).
        self.swap = site.swap and _function_swap.in_place(site.selected)

    def __torch_function__(
        self,
        func: Any,
        types: Any,
        args: Tuple[Any, ...] = (),
        kwargs: Optional[Dict[str, Any]] = None,
    ) -> Any:
        if getattr(func, "__name__", None) not in self.selected or _THREAD.in_hooks:
            return func(*args) if kwargs is None else func(*args, **kwargs)
        return self.site.run(self, func, args, kwargs or {}, sys._getframe(1))

    def running(self) -> bool:
        """Whether the module call that pushed this mode is still running."""
        call = self.call
        frame: Any = sys._getframe(1)
        while frame is not None:
            if frame is call:
                return True
            frame = frame.f_back
        return False


class ResultReader:
    """A post hook of an operation point that reads the operation's result and may
    replace it, and needs nothing else of the call: ``read(result, module)`` returns
    the result to use (the very object it got to leave it as is).

    On any point it runs as the post hook it is. When it is all the point's hooks have
    (a private recipe of the names vocabulary, see :mod:`._recipes`), the point calls
    ``read`` straight from the operation's call, with no context: one context per
    value (the name's) rather than two.

    Example:
        >>> import hookbus, torch, hookbus.torch
        >>> from torch import nn
        >>> model = nn.Sequential(nn.Softmax(dim=-1))
        >>> net = hookbus.torch.attach(model, hookbus.EventBus())
        >>> _ = net.operations("0", "softmax")
        >>> _ = net.post("0:softmax.0", ResultReader(lambda result, module: result * 0))
        >>> model(torch.ones(1, 2))
        tensor([[0., 0.]])
    """

    __slots__ = ("read",)

    def __init__(self, read: Callable[[Any, Any], Any]) -> None:
        self.read = read

    def __call__(self, ctx: CallContext) -> None:
        result = ctx.result
        new = self.read(result, ctx.target)
        if new is not result:
            ctx.result = new


class _Run:
    """The type of :data:`RUN`."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "RUN"


RUN: Any = _Run()
"""What an :class:`ArgumentsReader`'s ``read`` returns to let the operation run as called."""


class ArgumentsReader:
    """A pre hook of an operation point that reads the operation's arguments and may
    replace the operation: ``read(args, kwargs, module)`` returns :data:`RUN` to let it
    run as called, or the value to return instead (``ctx.skip(value)``).

    On any point it runs as the pre hook it is; when it is all the point's hooks have,
    the point calls ``read`` straight from the operation's call, with no context (as
    :class:`ResultReader`).

    Example:
        >>> import hookbus, torch, hookbus.torch
        >>> from torch import nn
        >>> model = nn.Sequential(nn.Softmax(dim=-1))
        >>> net = hookbus.torch.attach(model, hookbus.EventBus())
        >>> _ = net.operations("0", "softmax")
        >>> def halves(args, kwargs, module):
        ...     return torch.full_like(args[0], 0.5) if args[0].shape[-1] == 2 else RUN
        >>> _ = net.pre("0:softmax.0", ArgumentsReader(halves))
        >>> model(torch.zeros(1, 2)), model(torch.zeros(1, 1))
        (tensor([[0.5000, 0.5000]]), tensor([[1.]]))
    """

    __slots__ = ("read",)

    def __init__(self, read: Callable[[Tuple[Any, ...], Dict[str, Any], Any], Any]) -> None:
        self.read = read

    def __call__(self, ctx: CallContext) -> None:
        value = self.read(ctx.args, ctx.kwargs, ctx.target)
        if value is not RUN:
            ctx.skip(value)


def _remove_mode(mode: OperationMode) -> None:
    """Take ``mode`` off this thread's torch function stack, wherever it is (a mode seen
    through the function swaps is on no stack: taking it off the thread's list is all)."""
    if mode.swap:
        return
    length = _stack_length()
    if length and _mode_at(length - 1) is mode:
        _pop_mode()
        return
    above: List[Any] = []
    for _ in range(length):  # a mode pushed inside forward and left there: keep it
        top = _pop_mode()
        if top is mode:
            break
        above.append(top)
    for top in reversed(above):
        _push_mode(top)


class OperationPoint:
    """The hook point of the ``index``-th call of one operation in one module's forward."""

    __slots__ = (
        "__weakref__", "_calls", "_function", "bus", "name", "plan", "post_alone", "pre_alone",
        "registry", "site",
    )  # fmt: skip

    kinds = OPERATION_KINDS
    is_async = False  # torch calls operations synchronously
    kind = "operation"
    """What the point wraps, for ``bus.points()``."""
    skip_refusal = None  # ctx.skip(value) replaces the operation's result

    def __init__(self, site: OperationSite, name: str, function: Any) -> None:
        self.site = site
        self.bus = site.bus
        self.registry = site.bus.registry
        self.name = name
        self.plan: Optional[PointPlan] = None
        # The plan's post (or pre) hooks when they are all it has: the call then runs
        # one phase around the operation, without the whole sequence (call_with_hooks);
        # post hooks with their generated post phase, when they are plain; a lone
        # plain ResultReader (ArgumentsReader) as its bare read, with no context.
        self.post_alone: Optional[
            Tuple[Tuple[Handle, ...], Optional[PostRunner], Optional[Callable[[Any, Any], Any]]]
        ] = None
        self.pre_alone: Optional[Tuple[Tuple[Handle, ...], Optional[Callable[..., Any]]]] = None
        self._function = function
        self._calls = itertools.count()

    @property
    def where(self) -> str:
        """Where the module's forward is defined (the operation has no source of its own)."""
        return self.site.where

    def layout(self) -> Layout:
        """``ctx.arguments`` binds to the operation's signature, where Python knows it."""
        return layout_of(self._function, self.name)

    def invalidate(self) -> None:
        """Take the plan of the hooks that match now, then let the site arm or disarm."""
        plan = self.registry.plan(self) if self.site.attached else None
        if plan is not None:
            hooks = {
                kind: tuple(h for h in handles if h.match is None or ":" in h.name)
                for kind, handles in plan.hooks.items()
            }  # a pattern without a colon is meant for modules: it skips operations
            if not any(hooks.values()):
                plan = None
            elif hooks != plan.hooks:
                registry = self.registry
                plan = PointPlan(hooks, registry.errors == "raise" and registry.tracer is None)
        post_alone: Any = None
        pre_alone: Any = None
        if plan is not None and not (plan.around or plan.exception or plan.has_async):
            if not plan.pre:
                fast = plan.fast.get("post")
                read = _lone(fast, ResultReader)
                run = None if not fast or read is not None else compile_post_phase(
                    fast, plan.post, name=self.name, counter=self._calls
                )  # fmt: skip
                post_alone = (plan.post, run, read)
            elif not plan.post:
                pre_alone = (plan.pre, _lone(plan.fast.get("pre"), ArgumentsReader))
        # A call reads post_alone, then plan, then pre_alone: whichever it finds set
        # describes a whole plan, old or new.
        self.post_alone = self.pre_alone = None
        self.plan = plan
        self.post_alone, self.pre_alone = post_alone, pre_alone
        self.site.refresh()

    def __repr__(self) -> str:
        return f"<OperationPoint {self.name!r} {'hooked' if self.plan else 'no hooks'}>"


def _lone(hooks: Optional[Tuple[Callable[..., Any], ...]], kind: type) -> Any:
    """The ``read`` of ``hooks`` when they are one plain hook of type ``kind``, else ``None``."""
    if hooks is not None and len(hooks) == 1 and type(hooks[0]) is kind:
        found: Any = hooks[0]
        return found.read
    return None


class OperationSite:
    """The selected operations of one module: their points, and the native hooks that
    push an :class:`OperationMode` around the module's forward while they are needed."""

    def __init__(
        self, bus: EventBus, name: str, module: nn.Module, selected: FrozenSet[str], where: str
    ) -> None:
        self.bus = bus
        self.name = name
        self.where = where
        self.selected = selected
        self.attached = True
        self.discovering = True
        # Whether the discovery forward warns of a selected function it never called
        # (a private selection of the names vocabulary expects some: softmax under sdpa).
        self.warn_missing = True
        # Whether the calls are seen through a function swap rather than a mode (only
        # torch.nn.functional's functions, called through its attributes): see
        # _function_swap. Set by the names vocabulary for the attention's softmax, with
        # see_through_swaps(): such a site brackets the forward (_around) in its forward
        # swap instead of native hooks.
        self.swap = False
        # A copy's stand-in (see inert_site): copying a bound method binds the same
        # function to a copy of its object, so a copy's hooks are this class's methods.
        self.inert = False
        self._module: Callable[[], Optional[nn.Module]] = weakref.ref(module)
        self._points: Dict[Tuple[str, int], OperationPoint] = {}
        self._seen: Set[str] = set()
        self._pre: Optional[RemovableHandle] = None  # the native hooks, while installed
        self._post: Optional[RemovableHandle] = None
        # Installed with the pre hook: torch runs no post hook for a KeyboardInterrupt,
        # and the swap sees it leave forward (see _on_interrupt).
        self._swap: Optional[ForwardSwap] = None
        self._bracket: Optional[ForwardSwap] = None  # the swap holding _around, while armed
        self._discovery: Optional[ForwardSwap] = None  # the swap holding _ran, while discovering
        # One item per forward call that pushed a mode and awaits its post hook: appended
        # and popped without the lock (list.append and list.pop are atomic), read under it.
        self._in_flight: List[None] = []
        self._lock = threading.RLock()  # reentrant: invalidate() may run inside refresh()

    @property
    def points(self) -> List[OperationPoint]:
        """The operation points made so far, by operation then call index."""
        return [self._points[key] for key in sorted(self._points)]

    def refresh(self) -> None:
        """Install the native hooks if discovering or any point has hooks; else remove them."""
        with self._lock:
            want = self.attached and (
                self.discovering or any(p.plan is not None for p in self._points.values())
            )
            module = self._module()
            if self.swap:
                self._refresh_bracket(want, module)
            elif want and module is not None:
                if self._post is None:  # first: pops the mode before other post hooks run
                    self._post = module.register_forward_hook(
                        self._on_post, with_kwargs=True, always_call=True, prepend=True
                    )
                if self._swap is None:  # kept while a call runs (see _release_post)
                    swap = ForwardSwap.acquire(module)
                    swap.watch(self._on_interrupt)
                    self._swap = swap
                if self._pre is None:  # last of the pre hooks there now
                    self._pre = module.register_forward_pre_hook(self._on_pre)
                    hold_script_refusal(module)  # torch.jit.script refuses clearly
                self._bracket_discovery()
            elif not want and self._pre is not None:
                self._pre.remove()
                self._pre = None
                self._release_post()
                if module is not None:
                    release_script_refusal(module)

    def _refresh_bracket(self, want: bool, module: Optional[nn.Module]) -> None:
        """Add or remove the bracket of a site seen through function swaps (lock held)."""
        if want and module is not None and self._bracket is None:
            swap = ForwardSwap.acquire(module)
            swap.add_bracket(self._around)
            self._bracket = swap
            hold_script_refusal(module)  # torch.jit.script refuses clearly
        elif not want and self._bracket is not None:
            swap, self._bracket = self._bracket, None
            swap.remove_bracket(self._around)
            swap.release()
            if module is not None:
                release_script_refusal(module)

    def see_through_swaps(self) -> None:
        """See the calls through the function swaps, bracketing the forward in its forward
        swap (:meth:`_around`) rather than with native hooks: a module with no other hook
        then takes torch's short call path, and a ``finally`` pops the call's mode however
        the forward ends. Calls that pushed a mode finish with their native post hook."""
        with self._lock:
            if self.swap:
                return
            if self._pre is not None:
                self._pre.remove()
                self._pre = None
                self._release_post()
                module = self._module()
                if module is not None:
                    release_script_refusal(module)
            self.swap = True
            self.refresh()

    def _release_post(self) -> None:
        """Remove the post hook and the swap once disarmed and no call awaits them (lock
        held)."""
        # While a call that pushed a mode runs, its post hook (or, for a KeyboardInterrupt,
        # the swap) must stay to pop it: the last such call removes them (torch snapshots
        # the hooks per call).
        if self._pre is None and not self._in_flight:
            if self._post is not None:
                self._post.remove()
                self._post = None
            self._bracket_discovery()
            swap, self._swap = self._swap, None
            if swap is not None:
                swap.unwatch(self._on_interrupt)
                swap.release()

    def _bracket_discovery(self) -> None:
        """Hold :meth:`_ran` in the forward swap while this site discovers through native
        hooks; let it go after (lock held)."""
        swap = self._swap if self.discovering and self._pre is not None else None
        if swap is self._discovery:
            return
        if self._discovery is not None:
            self._discovery.remove_bracket(self._ran)
        self._discovery = swap
        if swap is not None:
            swap.add_bracket(self._ran)

    def _ran(self, run: Callable[..., Any], module: nn.Module, *args: Any, **kwargs: Any) -> Any:
        """The bracket of a site discovering through native hooks: the forward runs, so
        the call (the mode this site pushed last) may end the discovery."""
        modes = _THREAD.modes
        for position in range(len(modes) - 1, -1, -1):
            if modes[position].site is self:
                modes[position].ran = True
                break
        return run(module, *args, **kwargs)

    def uninstall(self) -> None:
        """Detach: no hook point, no native hook, no mode left behind."""
        with self._lock:
            self.attached = False
            points = list(self._points.values())
            self._points = {}
        self.bus.registry.remove_points(points)
        for point in points:
            point.plan = point.post_alone = point.pre_alone = None
        self.refresh()

    # --- the native hooks: they run on every call of the module while armed ----------

    def _on_pre(self, module: nn.Module, args: Tuple[Any, ...]) -> None:
        if self.inert:
            remove_dispatchers(module, self, None)
            return
        modes = _THREAD.modes
        if modes:
            _drop_ended(modes)
        mode = OperationMode(self, sys._getframe(1))  # torch's frame of this call
        self._in_flight.append(None)
        modes.append(mode)  # the function swaps' dispatchers see it there
        if not mode.swap:
            _push_mode(mode)

    def _on_interrupt(self, caller: Any, error: BaseException) -> None:
        """A ``BaseException`` that is no ``Exception`` left the forward called from
        ``caller``: torch runs no post hook for it, so the mode of that call goes here
        (left on the thread's stack, it would hold the call's frame and arguments)."""
        modes = _THREAD.modes
        for position in range(len(modes) - 1, -1, -1):
            mode = modes[position]
            if mode.site is self and mode.call is caller:
                del modes[position]
                _remove_mode(mode)
                with self._lock:
                    self._in_flight.pop()
                    self._release_post()
                return

    def _around(
        self, run: Callable[..., Any], module: nn.Module, *args: Any, **kwargs: Any
    ) -> Any:
        """The forward of a site seen through the function swaps: its mode is on this
        thread's list from the forward's start to its end (its frame is the mode's call)."""
        modes = _THREAD.modes
        if modes:
            _drop_ended(modes)
        mode = OperationMode(self, sys._getframe(0))
        modes.append(mode)
        if not mode.swap:  # a function was put back by hand: a mode sees its calls
            _push_mode(mode)
        raised = True
        try:
            result = run(module, *args, **kwargs)
            raised = False
            return result
        finally:
            if modes and modes[-1] is mode:
                modes.pop()
            elif mode in modes:
                modes.remove(mode)
            if not mode.swap:
                _remove_mode(mode)
            # The mode holds this frame (its call): dropped here, so that no cycle keeps the
            # frame, and the call's arguments with it, alive until the collector runs.
            del mode
            if self.discovering:
                self._discovered(raised)

    def _discovered(self, raised: bool) -> None:
        """The end of a call while discovering: the first that did not raise ends it."""
        with self._lock:
            finished = self.discovering and not raised
            if finished:
                self.discovering = False
        if finished:
            self._warn_missing()
            self.refresh()

    def _warn_missing(self) -> None:
        missing = sorted(self.selected - self._seen)
        if missing and self.warn_missing:
            warnings.warn(
                f"hookbus.torch: the forward of {self.name!r} called no "
                f"{', '.join(missing)}{_close_functions(missing)}: it has no operation "
                f"point by that name. Select "
                f"the name the code calls (torch.matmul and a @ b are 'matmul', a * b "
                f"is 'mul', a + b is 'add'; an attention implementation may call other "
                f"functions)",
                RuntimeWarning,
                stacklevel=_stacklevel_outside_torch(),
            )

    def _on_post(
        self, module: nn.Module, args: Tuple[Any, ...], kwargs: Dict[str, Any], output: Any
    ) -> None:
        if self.inert:
            remove_dispatchers(module, self, None)
            return
        modes = _THREAD.modes
        mode: Optional[OperationMode] = None
        if modes and modes[-1].site is self:  # the common case: ours is the innermost
            mode = modes.pop()
        else:
            for position in range(len(modes) - 1, -1, -1):
                if modes[position].site is self:
                    mode = modes.pop(position)
                    break
        if mode is None:
            return  # our pre hook was added during this call: no mode to pop
        if not mode.swap:
            _remove_mode(mode)
        self._in_flight.pop()
        # Popped first, then read: a disarm that set _pre to None after this read saw
        # the pop (it releases the post hook itself); one before it is seen here.
        if not self.discovering and self._pre is not None:
            return  # the common case: armed, discovered, nothing to release
        raised = output is None and forward_raised(sys._getframe(1))
        # A skipped or replaced call ran no bracket. A forward the user set on the
        # instance over the swap runs unseen by it: such a call counts, as it always did.
        swap = self._swap
        ran = mode.ran or swap is None or not swap.in_place()
        with self._lock:
            finished = self.discovering and not raised and ran
            if finished:
                self.discovering = False
            if self._pre is None:  # disarmed while this call ran: the last one out
                self._release_post()  # removes the post hook
        if finished:
            self._warn_missing()
            self.refresh()

    # --- one selected operation call ------------------------------------------------

    def run(
        self,
        mode: OperationMode,
        func: Any,
        args: Tuple[Any, ...],
        kwargs: Dict[str, Any],
        caller: Any,
    ) -> Any:
        """Run the call of ``func`` that ``mode`` intercepted, through its point's hooks;
        ``caller`` is the frame of the code that called it.

        Only the forward's own calls count: not those of a hook of hookbus's on a
        submodule (a logging hook's ``torch.tanh`` must not become ``tanh.0``), nor
        those under a mode left by an interrupted call. The callers (the mode and the
        function swaps' dispatchers) have already passed on the calls of the
        operation sites' own hooks (``in_hooks``).
        """
        # The code that called the operation: in the forward of the call that pushed the
        # mode, in a hook of hookbus's inside it, or under a mode left by a call that ended.
        if where_called(caller, mode.call) is not _FORWARD:
            return func(*args, **kwargs)
        name: str = func.__name__
        index = mode.counts.get(name, 0)
        mode.counts[name] = index + 1
        point = self._points.get((name, index))
        if point is None:
            if not self.attached:
                return func(*args, **kwargs)
            point = self._add_point(name, index, func)
        thread = _THREAD
        post = point.post_alone
        if post is not None:  # the common case (a value read or replaced), kept short
            result = func(*args, **kwargs)
            handles, run, read = post
            module = self._module()
            thread.in_hooks += 1
            try:
                if read is not None:  # a lone reader: no context, the same note on error
                    try:
                        return read(result, module)
                    except Exception as error:
                        add_note(error, describe(handles[0], point.name))
                        raise
                if run is not None:  # plain hooks on a plain bus: the generated post phase
                    return run(point, module, args, kwargs, result)
                ctx = _for_call(
                    point.name, module, args, kwargs, next(point._calls), "post", point, result
                )
                run_phase(point.registry, handles, ctx)
                return ctx.result
            finally:
                thread.in_hooks -= 1
        plan = point.plan
        if plan is None:
            return func(*args, **kwargs)
        pre = point.pre_alone
        module = self._module()
        if pre is not None and pre[1] is not None:  # a lone reader: no context
            thread.in_hooks += 1
            try:
                value = pre[1](args, kwargs, module)
            except Exception as error:
                add_note(error, describe(pre[0][0], point.name))
                raise
            finally:
                thread.in_hooks -= 1
            return func(*args, **kwargs) if value is RUN else value
        ctx = _for_call(point.name, module, args, kwargs, next(point._calls), "pre", point)
        thread.in_hooks += 1
        try:
            if pre is None:
                return call_with_hooks(point.registry, plan, ctx, _Operation(func))
            run_phase(point.registry, pre[0], ctx)
        finally:
            thread.in_hooks -= 1
        if ctx.skipped:
            return ctx.result
        return func(*ctx.args, **ctx.kwargs)

    def _add_point(self, name: str, index: int, func: Any) -> OperationPoint:
        point = OperationPoint(self, f"{self.name}:{name}.{index}", func)
        with self._lock:
            existing = self._points.get((name, index))
            if existing is not None:
                return existing
            self._points[(name, index)] = point
            self._seen.add(name)
        self.bus.registry.add_points([point])
        point.invalidate()  # hooks registered before it existed apply from this call on
        return point

    # A copied or pickled module copies its hook dicts, so the site's methods: a copy
    # is an inert site, which removes its hooks from the copy at its first call.
    def __reduce_ex__(self, protocol: Any) -> Tuple[Any, ...]:
        return (inert_site, (self.name,))

    def __deepcopy__(self, memo: Dict[int, Any]) -> Any:
        return inert_site(self.name)

    def __repr__(self) -> str:
        return f"<OperationSite {self.name!r} {sorted(self.selected)}>"


def _close_functions(names: List[str]) -> str:
    """``" (did you mean 'softmax'?)"`` for names close to a torch function's, else ``""``.

    Run when a discovery forward found a selected name never called (rare): the
    names are those of torch, ``torch.nn.functional`` and ``Tensor`` methods.
    """
    known = {*dir(torch), *dir(torch.nn.functional), *dir(torch.Tensor)}
    close: List[str] = []
    for name in names:
        operator = _operator(name)
        if operator:  # "__matmul__": a @ b is reported as "matmul"
            close.append(operator)
        elif name not in known:
            close.extend(difflib.get_close_matches(name, known, n=1, cutoff=0.8))
    return f" (did you mean {' and '.join(map(repr, close))}?)" if close else ""


def _operator(name: str) -> str:
    """The function an operator's method is reported as: ``"__matmul__"`` -> ``"matmul"``
    (``__rmul__`` -> ``"mul"``); ``""`` for any other name."""
    if not (name.startswith("__") and name.endswith("__")):
        return ""
    bare = name[2:-2]
    bare = bare[1:] if bare[:1] in ("r", "i") and hasattr(torch, bare[1:]) else bare
    return bare if hasattr(torch, bare) and bare not in ("init", "class") else ""


class _Operation:
    """The real operation call, run by ``call_with_hooks``: torch calls inside it count
    again (an enclosing module's mode sees them), unlike those of the hooks."""

    __slots__ = ("func",)

    def __init__(self, func: Any) -> None:
        self.func = func

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        thread = _THREAD
        depth, thread.in_hooks = thread.in_hooks, 0
        try:
            return self.func(*args, **kwargs)
        finally:
            thread.in_hooks = depth


def inert_site(name: str) -> OperationSite:
    """The stand-in of a copied module's operation site (a site pickles to this call).

    Example:
        >>> import copy, torch, hookbus, hookbus.torch
        >>> from torch import nn
        >>> model = nn.Sequential(nn.Softmax(dim=-1))
        >>> net = hookbus.torch.attach(model, hookbus.EventBus())
        >>> _ = net.operations("0", "softmax")
        >>> twin = copy.deepcopy(model)
        >>> _ = twin(torch.ones(1, 2))
        >>> len(twin[0]._forward_pre_hooks), len(twin[0]._forward_hooks)
        (0, 0)
    """
    site = OperationSite(_NO_HOOKS, name, nn.Identity(), frozenset(), "?")
    site.attached = site.discovering = False
    site.inert = True
    return site


# The private bus of inert sites: it never gets a hook.
_NO_HOOKS = EventBus("hookbus.torch operation copies")


_LIBRARIES = (
    __file__.rsplit("torch", 1)[0],  # hookbus/
    torch.__file__.rsplit("__init__", 1)[0],  # torch/
)


def _stacklevel_outside_torch() -> int:
    """The ``stacklevel`` of the first caller outside hookbus and torch (the model's code).

    The warning is issued from a native hook, which torch calls from ``_call_impl``.
    """
    level, frame = 1, sys._getframe(1)
    while frame.f_back is not None and frame.f_code.co_filename.startswith(_LIBRARIES):
        level, frame = level + 1, frame.f_back
    return level


def _drop_ended(modes: List[OperationMode]) -> None:
    """Take off the torch stack the modes of calls that ended without their post hook.

    A ``KeyboardInterrupt`` skips torch's ``always_call`` hooks; the next forward of
    a selected module in this thread cleans up (and until then such a mode fires no
    hook: :meth:`OperationSite.run` checks that its call still runs).
    """
    for mode in [mode for mode in modes if not mode.running()]:
        modes.remove(mode)
        _remove_mode(mode)
        site = mode.site
        with site._lock:
            site._in_flight.pop()
            site._release_post()


class OperationSelection(Removable):
    """The operations selected on some modules by :meth:`Attachment.operations
    <hookbus.torch.Attachment.operations>`; ``remove()`` undoes the selection.

    Example:
        >>> import hookbus, torch, hookbus.torch
        >>> from torch import nn
        >>> bus = hookbus.EventBus()
        >>> model = nn.Sequential(nn.Softmax(dim=-1))
        >>> net = hookbus.torch.attach(model, bus)
        >>> selection = net.operations("0", "softmax")
        >>> _ = model(torch.zeros(1, 2))  # the first forward finds the calls
        >>> selection.names
        ['0:softmax.0']
        >>> selection.remove()
        >>> selection.names
        []
    """

    __slots__ = ("sites",)

    def __init__(self, sites: Iterable[OperationSite]) -> None:
        self.sites: List[OperationSite] = list(sites)

    @property
    def names(self) -> List[str]:
        """The names of the operation points found so far, in model order."""
        return [point.name for site in self.sites for point in site.points]

    def remove(self) -> None:
        """Remove the operation points and every native hook and mode of this selection."""
        sites, self.sites = self.sites, []
        for site in sites:
            site.uninstall()

    def __repr__(self) -> str:
        return f"<OperationSelection of {len(self.sites)} modules: {len(self.names)} points>"


def unreached_operation(name: str, sites: Iterable[OperationSite]) -> Optional[str]:
    """Why ``name`` (a literal ``"module:op.index"``) can be no hook point, else ``None``.

    It can be none when the module's sites that select ``op`` have all run their
    discovery forward, and none reached call ``index`` (``"loop:tanh.3"`` of a
    forward that calls ``tanh`` twice): the reason names the points that exist. A
    name whose module or operation is not selected (yet) is not this function's to
    refuse.
    """
    module, colon, rest = name.rpartition(":")
    op, dot, index = rest.rpartition(".")
    if not (colon and dot and index.isdigit()):
        return None
    selecting = [
        site for site in sites if site.attached and site.name == module and op in site.selected
    ]
    if not selecting or any(site.discovering for site in selecting):
        return None
    if any((op, int(index)) in site._points for site in selecting):
        return None
    found = sorted(
        {p.name for site in selecting for p in site.points if p.name.startswith(f"{module}:{op}.")}
    )
    calls = f"called {op} {len(found)} time{'s' if len(found) != 1 else ''}"
    return (
        f"no operation point is named {name!r}: the forward of {module!r} {calls} when it "
        f"ran after the selection{': ' + ', '.join(map(repr, found)) if found else ''}. If a "
        f"later forward may call it more often, register with optional=True"
    )


def operation_key(
    selector: str,
    sites: Iterable[OperationSite],
    close: Callable[[List[str], str], str],
    *,
    optional: bool = False,
) -> str:
    """The bus name to register for an operation selector (``"attn:softmax.0"`` or a
    pattern with a colon); ``ValueError`` if it cannot match a selected operation, or
    names a call the discovery forward did not reach (:func:`unreached_operation`;
    accepted if ``optional``)."""
    check_name(selector, "operation selector", allow_pattern=True)
    live = [site for site in sites if site.attached]
    if is_pattern(selector):
        match = matcher_for(selector)
        found = [p.name for site in live for p in site.points]
        possible = [f"{site.name}:{op}.0" for site in live for op in site.selected]
        if any(match(name) for name in found + possible):
            return selector
        raise ValueError(
            f"no selected operation matches {selector!r}{close(found + possible, selector)}"
        )
    module, _, rest = selector.rpartition(":")
    op, _, index = rest.rpartition(".")
    for site in live:
        if site.name == module and op in site.selected and index.isdigit():
            unreached = None if optional else unreached_operation(selector, live)
            if unreached is not None:
                raise ValueError(unreached)
            return "".join(f"[{c}]" if c in "*?[" else c for c in selector)  # literal
    known = [p.name for site in live for p in site.points] or [
        f"{site.name}:{op}.0" for site in live for op in site.selected
    ]
    raise ValueError(
        f"no selected operation is named {selector!r} (operation points are named "
        f"'module:operation.index'; select them first with net.operations(modules, "
        f"'softmax')){close(known, selector)}"
    )
