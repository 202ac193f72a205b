"""Attaching a model: every module becomes a hook point, named by its qualified name.

An :class:`Attachment` is what a user holds: the model's names, selection of
modules (by name or glob, module, type, or a list: ``_selection.select``, which
:func:`~hookbus.torch.capture` shares), one registration method per hook kind,
and :meth:`Attachment.detach`.

Attaching records every module's name (and the module, weakly); a module's
:class:`~hookbus.torch._point.ModulePoint` is made only when a hook may match
it. The attachment is the bus's :class:`~hookbus.adapter.PointSource`: the
registry asks it for points before registering a hook of a module kind, so
``bus.post(name, ...)`` needs no point made beforehand, and a name that can only
be a typo of a module's is refused there (:meth:`Attachment.refuse_unmatched`).
So attaching and detaching cost a walk of the model, not a point per module.

``names="transformer"`` adds the names vocabulary (:mod:`._vocabulary`), a second
point source on the same bus, for TransformerLens's names of the model's values.
"""

from __future__ import annotations

import difflib
import sys
import threading
import warnings
import weakref
from typing import (
    Any,
    Callable,
    Dict,
    Iterator,
    List,
    Optional,
    Set,
    Union,
    cast,
    overload,
)

from torch import nn
from typing_extensions import Unpack

from ..adapter import (
    CallContext,
    EventBus,
    Handle,
    HandleGroup,
    HookOptions,
    Matcher,
    Removable,
    check_name,
    is_pattern,
    matcher_for,
    where_defined,
)
from ._module_kinds import OPERATION_POINT
from ._operations import (
    OperationSelection,
    OperationSite,
    operation_key,
    operation_name,
    unreached_operation,
)
from ._point import KINDS, ModulePoint
from ._replaced_modules import ModuleReads, Replaced
from ._selection import (
    ROOT,
    GroupSelector,
    Selector,
    close_or_first_names,
    literal_pattern,
    select,
)
from ._table_detection import find_architecture
from ._unwrap import is_compiled, unwrap, walk, warn_hook_on_compiled
from ._user_line import stacklevel_outside_hookbus
from ._value_point import is_name
from ._vocabulary import VOCABULARIES, Vocabulary

__all__ = ["AroundHook", "Attachment", "Hook", "attach", "bus_or_default", "find_attachment"]

Hook = Callable[[CallContext], None]
"""What every registration method but ``around`` takes: ``hook(ctx)``, returning ``None``."""

AroundHook = Callable[[CallContext], Iterator[None]]
"""What ``around`` takes: a generator function of ``ctx`` that yields once."""

TYPO_CUTOFF = 0.8
"""How alike (``difflib`` ratio) a bus-level hook's name must be to a module's name
to be refused as its typo (:meth:`Attachment.refuse_unmatched`)."""


class _ModuleRef(weakref.ref[nn.Module]):
    """A module, held weakly, as :func:`select` reads it (``.module``)."""

    __slots__ = ()

    @property
    def module(self) -> Optional[nn.Module]:
        """The module, or ``None`` once it was garbage collected."""
        return self()


# Each model's attachments, weakly (find_attachment). Attachments hold the model weakly.
_attachments: weakref.WeakKeyDictionary[nn.Module, List[weakref.ref[Attachment]]] = (
    weakref.WeakKeyDictionary()
)
# Keeps each model's attachments alive as long as the model, even when the caller drops
# the Attachment, while no hook of theirs is on it: an attachment with hooks on the model
# is kept by them (the model's native hooks hold its points, which hold it). A hook that
# holds the model (a closure) is held by the bus, which the attachment holds: were the
# attachment held here all along, the model would never be collected.
_unhooked: weakref.WeakKeyDictionary[nn.Module, List[Attachment]] = weakref.WeakKeyDictionary()
_anchor_lock = threading.Lock()  # _unhooked and each attachment's count of hooked points


def attach(
    model: nn.Module,
    bus: Optional[EventBus] = None,
    *,
    prefix: str = "",
    raw_names: bool = False,
    names: Optional[str] = None,
) -> Attachment:
    """Make every module of ``model`` a hook point of ``bus`` (default: ``hookbus.default_bus``).

    Each module is named by its qualified name from ``model.named_modules()``
    (``"encoder.layers.0.attn"``), after ``prefix`` and a dot if a prefix is given.
    The model itself is named ``prefix``, or ``"<root>"`` without one. Names are
    those of the bare model: the levels that ``DistributedDataParallel`` and
    ``DataParallel`` (``module``), FSDP1 (``_fsdp_wrapped_module``),
    ``torch.compile`` (``_orig_mod``), the checkpoint wrappers
    (``_checkpoint_wrapped_module``) and PEFT (``base_model.model``) insert are left
    out, and a wrapper is no hook
    point of its own (selecting it selects what it wraps). ``raw_names=True``
    names every module, wrappers included, by its ``named_modules()`` name
    instead; :func:`bare_names` maps one to the other. The usual
    ``bus.pre`` / ``bus.post`` / ``bus.exception`` calls then apply to module calls,
    with ``ctx.target`` the module and ``ctx.name`` its name; the returned
    :class:`Attachment` adds selection by type or object, gradient and backward
    hooks, and :meth:`Attachment.detach`.

    Attaching installs no torch hook: a module gets one native dispatcher per
    phase while some bus hook matches it, and loses it when the last goes. It
    records the names only (a module's hook point is made when a hook first
    matches it), so attaching inside each call is cheap. While attached, a
    ``bus.pre`` / ``post`` / ``exception`` / ``around`` name that matches no hook
    point and is a typo of a module's is refused (docs/torch.md, "Names on the
    bus"). A ``torch.compile`` wrapper is unwrapped, so the names are the eager ones.

    ``names="transformer"`` also makes TransformerLens's names of the model's
    values hook points of ``bus`` (``"blocks.0.attn.hook_z"``, ``[batch, pos,
    head, d_head]``), the same on every architecture hookbus knows (GPT-2,
    GPT-NeoX, OPT, Llama and the models built like it, Gemma 2, Phi-3), found
    from the model's structure; a model of another layout is refused with a
    ``ValueError`` listing them. Names take ``post`` hooks: ``ctx.result`` is the
    value, and assigning it replaces the value in the forward. Nothing runs on the
    model while no hook is on a name; :attr:`Attachment.vocabulary` lists them, and
    docs/torch.md ("Names") defines each. With a ``prefix``, names start with it too.

    Example:
        >>> import hookbus, torch, hookbus.torch
        >>> from torch import nn
        >>> bus = hookbus.EventBus()
        >>> model = nn.Sequential(nn.Linear(2, 3), nn.ReLU())
        >>> net = hookbus.torch.attach(model, bus)
        >>> net.names
        ['<root>', '0', '1']
        >>> _ = bus.post("0", lambda ctx: print(ctx.name, tuple(ctx.result.shape)))
        >>> _ = model(torch.ones(4, 2))
        0 (4, 3)
        >>> net.detach()
    """
    if not isinstance(model, nn.Module):  # pyright: ignore[reportUnnecessaryIsInstance]
        raise TypeError(f"attach() needs a torch.nn.Module, got {type(model).__name__}")
    bus = bus_or_default(bus, "attach()")
    if not isinstance(prefix, str):  # pyright: ignore[reportUnnecessaryIsInstance]
        raise TypeError(f"prefix must be a str, got {type(prefix).__name__} {prefix!r}")
    if prefix:
        check_name(prefix, "hook point name", allow_pattern=False)
    if not isinstance(raw_names, bool):  # pyright: ignore[reportUnnecessaryIsInstance]
        raise TypeError(f"raw_names= takes True or False, got {raw_names!r}")
    if names is not None and names not in VOCABULARIES:
        raise ValueError(
            f"attach() option names= takes None or one of "
            f"{', '.join(map(repr, VOCABULARIES))}, got {names!r}"
        )
    compiled = is_compiled(model)
    model = unwrap(model)
    for existing in _attached(model):
        if existing.bus is bus and existing.active:
            raise ValueError(
                f"{type(model).__name__} is already attached to {bus!r} as {existing!r}; "
                f"use that attachment, or detach() it first"
            )
    found = find_architecture(model) if names is not None else None  # refused before any hook
    attachment = Attachment(model, bus, prefix, compiled=compiled, raw_names=raw_names)
    if found is not None:
        try:
            private = EventBus(f"hookbus.torch names of {type(model).__name__}")
            net = Attachment(model, private, "", compiled=compiled, watch_replaced=False)
            attachment._vocabulary = Vocabulary(
                model, bus, net, found, prefix, on_hooked=attachment._anchor
            )
        except BaseException:
            attachment.detach()
            raise
    return attachment


class Attachment(Removable):
    """A model attached to a bus: its modules' names, selection, and extra hook kinds.

    Every registration method takes a *selector* and the usual options
    (``priority``, ``once``, ``target``, ``weak``):

    * a name or glob pattern (``"layers.*.attn"``), checked against the model's
      names: one that matches no module is a ``ValueError`` listing close names;
      returns one :class:`~hookbus.Handle` (a pattern keeps matching by name);
    * a module of the model: one ``Handle`` for its name;
    * a module type (``nn.Linear``), or a list of selectors: a
      :class:`~hookbus.HandleGroup` of one handle per module selected now.

    Hooks registered here are removed by :meth:`detach`, which also removes every
    native hook and leaves the model's hook dicts exactly as they were. An
    attachment is a context manager that detaches on exit.

    Example:
        >>> import hookbus, torch, hookbus.torch
        >>> from torch import nn
        >>> model = nn.Sequential(nn.Linear(2, 2), nn.ReLU(), nn.Linear(2, 1))
        >>> with hookbus.torch.attach(model, hookbus.EventBus()) as net:
        ...     _ = net.post(nn.Linear, lambda ctx: print("ran", ctx.name))
        ...     _ = model(torch.ones(1, 2))
        ran 0
        ran 2
        >>> model._forward_hooks
        OrderedDict()
    """

    __slots__ = (
        "__weakref__",
        "_compiled",
        "_cut_warned",
        "_far",
        "_handles",
        "_hooked",
        "_ids",
        "_making",
        "_model",
        "_modules",
        "_operations",
        "_points",
        "_raw",
        "_raw_names",
        "_reads",
        "_replace_warned",
        "_vocabulary",
        "_warned",
        "_watch_replaced",
        "_wrappers",
        "bus",
        "prefix",
        "strict_ddp",
    )  # fmt: skip

    def __init__(
        self,
        model: nn.Module,
        bus: EventBus,
        prefix: str,
        *,
        compiled: bool = False,
        raw_names: bool = False,
        watch_replaced: bool = True,
    ) -> None:
        self.bus = bus
        self.prefix = prefix
        self._model = weakref.ref(model)
        # Every module's hook-point name -> the module, weakly (selection, names);
        # its ModulePoint is made only when a hook may match it (make_points).
        self._modules: Dict[str, _ModuleRef] = {}
        self._points: Dict[str, ModulePoint] = {}  # the points made so far
        # id(module) -> name: wrappers too, under the name of what they wrap. The
        # module's weak reference (in _modules or _wrappers) tells a live module
        # from a reused id.
        self._ids: Dict[int, str] = {}
        self._wrappers: Dict[int, _ModuleRef] = {}
        self._raw: Dict[str, str] = {}  # name -> named_modules() name, where it isn't qualname
        self._making = threading.Lock()  # makes each point once; detach() empties the dicts
        # Names refuse_unmatched found far from every module's: difflib over a big
        # model's names takes milliseconds, and a hook may be registered again and again.
        self._far: Set[str] = set()
        # Only the attachment's own registrations, held weakly: a handle removed
        # and dropped by its owner must not be kept (nor its hook) until detach().
        self._handles: weakref.WeakSet[Handle] = weakref.WeakSet()
        self._operations: List[OperationSelection] = []  # removed by detach()
        self._vocabulary: Optional[Vocabulary] = None  # names="transformer"
        # The modules that hooks by name were registered on, made at the first such
        # registration (nothing at attach): a hook on one replaced since is refused, and
        # replacing one while a point on it (or inside it) has hooks warns, once. Only
        # while some point has hooks is torch's global registration hook installed
        # (ModuleReads.hooked); the vocabulary's private attachment leaves the warning
        # to the vocabulary (watch_replaced=False).
        self._reads: Optional[ModuleReads] = None
        self._raw_names = raw_names
        self._watch_replaced = watch_replaced
        self._replace_warned = False
        self._hooked = 0  # points (and vocabulary names) with hooks on the model: _anchor
        #: Whether a DistributedDataParallel without find_unused_parameters wraps
        #: the model: a post hook that cuts an output from the graph then breaks it.
        self.strict_ddp = False
        self._cut_warned = False
        modules, ids, raw_of = self._modules, self._ids, self._raw
        root, dotted = prefix or ROOT, f"{prefix}." if prefix else ""
        for raw, bare, module, is_wrapper in walk(model):
            qualname = raw if raw_names else bare
            name = f"{dotted}{qualname}" if qualname else root
            if is_wrapper:
                if "_orig_mod" in module._modules:
                    compiled = True
                if _is_strict_ddp(module):
                    self.strict_ddp = True
                if not raw_names:
                    ids[id(module)] = name
                    self._wrappers[id(module)] = _ModuleRef(module)
                    continue
            modules[name] = _ModuleRef(module)
            ids[id(module)] = name
            if raw != qualname:
                raw_of[name] = raw
        self._compiled = compiled
        self._warned = not compiled
        with _anchor_lock:
            _attachments.setdefault(model, []).append(weakref.ref(self))
            _unhooked.setdefault(model, []).append(self)
        registry = bus.registry
        registry.add_source(self)  # first: a hook registered from now on makes its points
        try:
            if registry.has_hooks(KINDS):  # a new bus (a capture's) has none: nothing to do
                # Hooks registered before attaching apply at once: make their points.
                for handle in registry.hooks():
                    if handle.kind in KINDS:
                        self._make(self._matching(handle.name, handle.match))
        except BaseException:  # an async hook matches a module: refused, as add_points says
            self._detach_points()
            self._forget_model()
            raise

    # --- points, made on demand: the bus's PointSource ---------------------------------

    def make_points(self, kind: Optional[str], name: str, match: Optional[Matcher]) -> bool:
        """Make the points of the modules that a hook of ``kind`` for ``name`` matches.

        Called by the bus's registry (no lock held) before it registers such a hook;
        returns whether the name is this model's: a module's, a pattern matching
        one, or an operation point's name on one of its modules.

        Example:
            >>> import hookbus, hookbus.torch
            >>> from torch import nn
            >>> bus = hookbus.EventBus()
            >>> model = nn.Sequential(nn.Linear(1, 1))
            >>> net = hookbus.torch.attach(model, bus)
            >>> bus.registry.points("0")  # made on demand: here, by listing it
            [<ModulePoint '0' no hooks>]
            >>> net.make_points("post", "0", None), net.make_points("post", "1", None)
            (True, False)
        """
        if kind is not None and kind not in KINDS:
            return False
        names = self._matching(name, match)
        if names:
            if kind is not None:  # a hook is being registered: not on a replaced module
                self._refuse_replaced(names)
            self._make(names)
            return True
        module, colon, _ = name.rpartition(":")
        if not (colon and module and self._matching(module, _matcher(module, match))):
            return False
        # An operation point's name: the model's, unless it names a call that the
        # discovery forward did not reach (refuse_unmatched then refuses it).
        return match is not None or unreached_operation(name, self._operation_sites()) is None

    def refuse_unmatched(self, kind: str, name: str, match: Optional[Matcher]) -> None:
        """Refuse a bus-level hook whose name is a typo of one of this model's names.

        Called by the registry when a hook of a module's kind (``pre``, ``post``,
        ``exception``, ``around``, ...) matches no point and no module of any model
        on the bus. It raises the ``ValueError`` that :meth:`select` raises when
        the name, or an operation point's module part (before the ``":"``), is
        close to a module's name (``difflib`` ratio at least :data:`TYPO_CUTOFF`),
        names one once this attachment's prefix is put before it, or is a module's
        path and a dot followed by a child that module does not have
        (``"0.weigth_typo"``): a module's names are the attachment's to give.

        Example:
            >>> import hookbus, hookbus.torch
            >>> from torch import nn
            >>> bus = hookbus.EventBus()
            >>> model = nn.Sequential()
            >>> model.add_module("encoder", nn.Linear(1, 1))
            >>> net = hookbus.torch.attach(model, bus)
            >>> bus.post("encodr", print)
            Traceback (most recent call last):
            ValueError: no module named 'encodr'; close names: 'encoder'
            >>> bus.post("encoder.wieght", print)  # no child of 'encoder' has that name
            Traceback (most recent call last):
            ValueError: no module named 'encoder.wieght'; close names: 'encoder'
            >>> _ = bus.post("saved", print)  # far from every name: a point to come
        """
        modules = self._modules
        if kind not in KINDS or not modules:
            return
        if self._vocabulary is not None and is_name(name):
            return  # meant for the names: the vocabulary refuses a typo of one, with close names
        if match is None:
            unreached = unreached_operation(name, self._operation_sites())
            if unreached is not None:
                raise ValueError(unreached)
        if name in self._far:
            return
        module, colon, _ = name.rpartition(":")
        target = module if colon and module else name
        pattern = match is not None and is_pattern(target)
        prefixed = f"{self.prefix}.{target}" if self.prefix else None
        if (
            not difflib.get_close_matches(target, list(modules), n=1, cutoff=TYPO_CUTOFF)
            and not (prefixed is not None and self._matching(prefixed, _matcher(prefixed, match)))
            and (pattern or not self._under_a_module(target, prefixed))
        ):
            if len(self._far) >= 4096:
                self._far.clear()
            self._far.add(name)
            return
        if pattern:
            raise ValueError(
                f"no module name matches {target!r}{close_or_first_names(modules, target)}"
            )
        raise ValueError(f"no module named {target!r}{close_or_first_names(modules, target)}")

    def _under_a_module(self, target: str, prefixed: Optional[str]) -> bool:
        """Whether ``target`` (or ``prefixed``) is a module's path, a dot and more: a
        descendant that module does not have (the caller knows no module has the name).

        For ``prefixed`` (``target`` missing this attachment's prefix), the prefix's own
        module does not count: every name is under it.
        """
        modules = self._modules
        for name, top in ((target, None), (prefixed, self.prefix)):
            parent, dot, _ = (name or "").rpartition(".")
            while dot and parent and parent != top:
                if parent in modules:
                    return True
                parent, dot, _ = parent.rpartition(".")
        return False

    def _matching(self, name: str, match: Optional[Matcher]) -> List[str]:
        """The names of this model's modules that ``name`` (a pattern if ``match``) matches."""
        modules = self._modules
        if match is None:
            return [name] if name in modules else []
        return [each for each in modules if match(each)]

    def _refuse_replaced(self, names: List[str]) -> None:
        """Refuse a hook on ``names`` if one of their modules, or one it is inside, was
        replaced since attach: the hook would sit on the old module, which the forward
        no longer calls (``model.get_submodule(name)`` is the new one)."""
        reads = self._module_reads()
        if reads is None:
            return
        reads.add_paths(names, self._paths_of)
        found = reads.replaced(names)
        if found is None:
            return
        name, replaced = found
        replaced = replaced._replace(path=self._name_at(replaced.path))
        inside = "" if name == replaced.path else "it is inside "
        raise ValueError(
            f"cannot hook {name!r}: {inside}{replaced.described()}: hooks by name go on "
            f"the modules the model had when it was attached, and the forward no longer "
            f"calls that one. detach() and attach the model again, after the change, to "
            f"hook the new one"
        )

    def _module_reads(self) -> Optional[ModuleReads]:
        """The :class:`ModuleReads` of the modules hooked by name, made at the first call
        (``None`` once the model was collected or detached)."""
        reads = self._reads
        if reads is not None:
            return reads
        model = self._model()
        if model is None:
            return None
        with self._making:
            reads = self._reads
            if reads is None and self._modules:
                reads = _module_reads(model, self._modules, self.prefix, self._raw_names)
                if self._watch_replaced:
                    reads.watch(self._on_replaced)
                self._reads = reads
        return reads

    def _on_hooked(self, point: ModulePoint, hooked: bool) -> None:
        """A point came to have hooks, or has none any more: its module, and those it is
        inside, are watched for a replacement while some point on them has hooks."""
        self._anchor(hooked)
        if not self._watch_replaced:
            return
        reads = self._module_reads() if hooked else self._reads
        if reads is None:
            return
        if hooked:
            reads.add_paths([point.name], self._paths_of)
        reads.hooked(point.name, hooked)

    def _anchor(self, hooked: bool) -> None:
        """Count a point (or a vocabulary name) that came to have hooks, or has none any
        more: while none has, :data:`_unhooked` keeps this attachment alive with the model;
        while some has, the model's native hooks do (see :data:`_unhooked`)."""
        model = self._model()
        with _anchor_lock:
            if model is None or not self._modules:
                return
            before, self._hooked = self._hooked, max(0, self._hooked + (1 if hooked else -1))
            if (before == 0) == (self._hooked == 0):
                return
            kept = _unhooked.setdefault(model, [])
            if self._hooked:
                if self in kept:
                    kept.remove(self)
            else:
                kept.append(self)

    def _forget_model(self) -> None:
        """Leave the model's lists of attachments (detach)."""
        model = self._model()
        if model is None:
            return
        with _anchor_lock:
            mine = _attachments.get(model, [])
            mine[:] = [ref for ref in mine if ref() is not None and ref() is not self]
            kept = _unhooked.get(model, [])
            if self in kept:
                kept.remove(self)

    def _on_replaced(self, replaced: Replaced) -> None:
        """A module that a point with hooks is on (or inside) is being replaced (torch's
        registration hook): warn, as the hooks stay on the old module."""
        reads = self._reads
        if reads is None or self._replace_warned or not self._modules:
            return
        hooked = reads.hooked_reading(replaced.path)
        if not hooked:
            return
        self._replace_warned = True
        path = self._name_at(replaced.path)
        shown = ", ".join(map(repr, hooked[:3])) + (", ..." if len(hooked) > 3 else "")
        warnings.warn(
            f"hookbus.torch: the module {path!r} ({replaced.was}) is being replaced by "
            f"{replaced.taken_by()} after attach(), and the hooks on {shown} are on it or "
            f"inside it: they stay on the old module and no longer see the forward (hooks "
            f"by the name of a replaced module are refused from now on). detach() and "
            f"attach the model again, after the change, to hook the new one",
            RuntimeWarning,
            stacklevel=stacklevel_outside_hookbus(),
        )

    def _paths_of(self, name: str) -> List[str]:
        """The path below the model of the module named ``name`` (none for the model)."""
        if name == (self.prefix or ROOT):
            return []
        return [name[len(self.prefix) + 1 :] if self.prefix else name]

    def _name_at(self, path: str) -> str:
        return f"{self.prefix}.{path}" if self.prefix else path

    def _make(self, names: List[str]) -> None:
        """Make the points of ``names`` not made yet; each applies the hooks matching it."""
        made: List[ModulePoint] = []
        with self._making:
            points, modules = self._points, self._modules
            for name in names:
                module = modules[name]() if name in modules and name not in points else None
                if module is None:
                    continue
                point = ModulePoint(self.bus, name, module)
                if self._compiled:  # hooks added after a hook-less compiled call take effect
                    point.recompile_on_change = True
                    point.on_compiled_miss = self._warn_compiled
                if self.strict_ddp:
                    point.on_graph_cut = self._warn_graph_cut
                point.on_hooked = self._on_hooked
                made.append(point)
            if not made:
                return
            self.bus.registry.add_points(made)  # refused if async hooks match
            for point in made:
                points[point.name] = point
        for point in made:  # no lock held: installing may warn (a compiled model)
            point.invalidate()

    def _warn_compiled(self, point: ModulePoint, kind: str) -> None:
        if self._warned:
            return
        self._warned = True  # first: a warnings hook registering here must not recurse
        try:
            warn_hook_on_compiled(point.name, kind)
        except BaseException:
            self._warned = False  # raised (-W error): the registration is undone; warn again
            raise

    def _warn_graph_cut(self, point: ModulePoint) -> None:
        if self._cut_warned:
            return
        self._cut_warned = True
        warnings.warn(
            f"hookbus.torch: a post hook on module {point.name!r} replaced its output by one "
            f"that autograd does not track (torch.zeros_like(...), a detached tensor), under "
            f"DistributedDataParallel without find_unused_parameters: the layers before it "
            f"get no gradient, and DDP fails at the next iteration ('Expected to have "
            f"finished reduction') or the other rank hangs. Pass find_unused_parameters=True "
            f"to DDP, or keep the graph: ctx.result = ctx.result * 0",
            RuntimeWarning,
            stacklevel=stacklevel_outside_hookbus(),
        )

    # --- names and selection -----------------------------------------------------------

    @property
    def names(self) -> List[str]:
        """Every module's hook-point name, in ``named_modules()`` order."""
        return list(self._modules)

    @property
    def model(self) -> nn.Module:
        """The attached model (``RuntimeError`` if it was garbage collected)."""
        model = self._model()
        if model is None:
            raise RuntimeError("the attached model was garbage collected")
        return model

    @property
    def active(self) -> bool:
        """Whether the model is still attached."""
        return bool(self._modules)

    @property
    def vocabulary(self) -> Optional[Vocabulary]:
        """The names of the model's values, if attached with ``names=``; else ``None``.

        Example:
            >>> import transformers, hookbus, hookbus.torch
            >>> config = transformers.GPT2Config(n_layer=2, n_head=4, n_embd=32, vocab_size=10)
            >>> model = transformers.GPT2LMHeadModel(config)
            >>> net = hookbus.torch.attach(model, hookbus.EventBus(), names="transformer")
            >>> names = net.vocabulary
            >>> names.architecture, len(names.names), names.dims.heads
            ('GPT-2', 40, 4)
        """
        return self._vocabulary

    def _check_attached(self) -> None:
        if not self._modules:
            model = self._model()
            what = type(model).__name__ if model is not None else "a collected model"
            raise RuntimeError(
                f"this attachment of {what} to the bus {self.bus.name!r} is detached (detach() "
                f"was called): it selects no module any more; attach the model again"
            )

    def __reduce_ex__(self, protocol: Any) -> Any:
        raise TypeError(
            "an Attachment cannot be pickled or copied: it ties a model to a bus in this "
            "process. Attach the model in the process that runs it (for a DataLoader "
            "worker, in worker_init_fn); a pickled or copied model carries no hooks"
        )

    def name_of(self, module: nn.Module) -> str:
        """The hook-point name of ``module``; ``ValueError`` if it is not in the model.

        A see-through wrapper (DDP, FSDP1, compile, checkpoint wrapper, PEFT) has the
        name of the module it wraps.

        Example:
            >>> import hookbus, hookbus.torch
            >>> from torch import nn
            >>> model = nn.Sequential(nn.Linear(1, 1))
            >>> hookbus.torch.attach(model, hookbus.EventBus(), prefix="net").name_of(model[0])
            'net.0'
        """
        self._check_attached()
        name = self._ids.get(id(module))
        if name is not None:
            held = self._wrappers.get(id(module))
            if held is None:
                held = self._modules.get(name)
            if held is not None and held() is module:
                return name
        raise ValueError(
            f"{type(module).__name__} module {_short(module)} is not part of the attached "
            f"model (modules added after attach() are not hook points; attach again)"
        )

    def raw_name(self, name: str) -> str:
        """The ``named_modules()`` name of the module that the hook point ``name`` is.

        It differs from ``name`` under wrappers (``"module.0"`` for ``"0"`` under
        DDP) and with a prefix (the raw name has none).

        Example:
            >>> import hookbus, hookbus.torch
            >>> from torch import nn
            >>> dp = nn.DataParallel(nn.Sequential(nn.Linear(1, 1)))
            >>> net = hookbus.torch.attach(dp, hookbus.EventBus())
            >>> net.names, net.raw_name("0")
            (['<root>', '0'], 'module.0')
        """
        self._check_attached()
        if name not in self._modules:
            raise KeyError(f"no module named {name!r}{close_or_first_names(self._modules, name)}")
        raw = self._raw.get(name)
        if raw is not None:
            return raw
        if name == (self.prefix or ROOT):
            return ""
        return name[len(self.prefix) + 1 :] if self.prefix else name

    def module(self, name: str) -> nn.Module:
        """The module named ``name``; ``KeyError`` listing close names if there is none.

        Example:
            >>> import hookbus, hookbus.torch
            >>> from torch import nn
            >>> model = nn.Sequential(nn.Linear(1, 1))
            >>> hookbus.torch.attach(model, hookbus.EventBus()).module("0")
            Linear(in_features=1, out_features=1, bias=True)
        """
        self._check_attached()
        held = self._modules.get(name)
        module = held() if held is not None else None
        if module is None:
            raise KeyError(f"no module named {name!r}{close_or_first_names(self._modules, name)}")
        return module

    def select(self, selector: Selector) -> List[str]:
        """The names that ``selector`` selects, in model order; an error if none.

        Example:
            >>> import hookbus, hookbus.torch
            >>> from torch import nn
            >>> model = nn.Sequential(nn.Linear(1, 1), nn.ReLU(), nn.Linear(1, 1))
            >>> net = hookbus.torch.attach(model, hookbus.EventBus())
            >>> net.select(nn.Linear), net.select("[01]"), net.select(model[1])
            (['0', '2'], ['0', '1'], ['1'])

        A string equal to a module's name selects that module only, even if it
        holds glob characters (``nn.ModuleDict({"a[0]": ...})`` is legal).
        """
        self._check_attached()
        return select(self._modules, selector, self.name_of)

    # --- registration: one method per hook kind ------------------------------------------

    @overload
    def pre(
        self, selector: Union[str, nn.Module], hook: Hook, /, **options: Unpack[HookOptions]
    ) -> Handle: ...
    @overload
    def pre(
        self, selector: GroupSelector, hook: Hook, /, **options: Unpack[HookOptions]
    ) -> HandleGroup: ...
    def pre(self, selector: Selector, hook: Hook, /, **options: Unpack[HookOptions]) -> Any:
        """Forward pre hook: ``ctx.args`` / ``ctx.kwargs`` (kwargs-only calls included).

        Assign ``ctx.args`` (a tuple) or ``ctx.kwargs`` (a dict) to replace them.

        Example:
            >>> import hookbus, torch, hookbus.torch
            >>> from torch import nn
            >>> model = nn.Sequential(nn.Identity())
            >>> net = hookbus.torch.attach(model, hookbus.EventBus())
            >>> def zero(ctx):
            ...     ctx.args = (torch.zeros_like(ctx.args[0]),)
            >>> _ = net.pre("0", zero)
            >>> model(torch.ones(2))
            tensor([0., 0.])
        """
        return self._register("pre", selector, hook, options)

    @overload
    def post(
        self, selector: Union[str, nn.Module], hook: Hook, /, **options: Unpack[HookOptions]
    ) -> Handle: ...
    @overload
    def post(
        self, selector: GroupSelector, hook: Hook, /, **options: Unpack[HookOptions]
    ) -> HandleGroup: ...
    def post(self, selector: Selector, hook: Hook, /, **options: Unpack[HookOptions]) -> Any:
        """Forward post hook: ``ctx.result`` is the output; assign it to replace it.

        The replacement flows into autograd like any tensor the module returned.

        Example:
            >>> import hookbus, torch, hookbus.torch
            >>> from torch import nn
            >>> model = nn.Sequential(nn.Identity())
            >>> net = hookbus.torch.attach(model, hookbus.EventBus())
            >>> def double(ctx):
            ...     ctx.result = ctx.result * 2
            >>> _ = net.post(nn.Identity, double)
            >>> model(torch.ones(2))
            tensor([2., 2.])
        """
        return self._register("post", selector, hook, options)

    @overload
    def around(
        self, selector: Union[str, nn.Module], hook: AroundHook, /, **options: Unpack[HookOptions]
    ) -> Handle: ...
    @overload
    def around(
        self, selector: GroupSelector, hook: AroundHook, /, **options: Unpack[HookOptions]
    ) -> HandleGroup: ...
    def around(
        self, selector: Selector, hook: AroundHook, /, **options: Unpack[HookOptions]
    ) -> Any:
        """Around hook: a generator taking ``ctx`` that spans the module's forward.

        Before its ``yield``: the set-up, before every pre hook. After it: the
        teardown, after every post and exception hook, whatever happened (torch's
        ``always_call``); ``ctx.result`` is the output, to read or replace. If the
        forward (or a hook) raised an ``Exception``, it is raised at the ``yield``;
        torch re-raises the forward's own error after its hooks, so translating or
        recovering it there warns (do that around a ``bus.wrap`` point). A
        recomputation stopped by activation checkpointing is no error: the generator
        is closed (its ``finally`` runs). See :meth:`hookbus.EventBus.around`.

        Example:
            >>> import hookbus, torch, hookbus.torch
            >>> from torch import nn
            >>> model = nn.Sequential(nn.Linear(2, 2))
            >>> net = hookbus.torch.attach(model, hookbus.EventBus())
            >>> def timed(ctx):
            ...     print("enter", ctx.name)
            ...     try:
            ...         yield
            ...     finally:
            ...         print("exit", ctx.name)
            >>> _ = net.around("0", timed)
            >>> _ = model(torch.ones(1, 2))
            enter 0
            exit 0
        """
        return self._register("around", selector, hook, options)

    @overload
    def exception(
        self, selector: Union[str, nn.Module], hook: Hook, /, **options: Unpack[HookOptions]
    ) -> Handle: ...
    @overload
    def exception(
        self, selector: GroupSelector, hook: Hook, /, **options: Unpack[HookOptions]
    ) -> HandleGroup: ...
    def exception(self, selector: Selector, hook: Hook, /, **options: Unpack[HookOptions]) -> Any:
        """Exception hook: runs when the module's forward raises, with ``ctx.exception``.

        It observes: torch re-raises the error after its hooks, so the error
        propagates unchanged (``ctx.recover()`` there warns; recover around the call
        with ``bus.wrap``). Not run under ``torch.compile``.

        Example:
            >>> import hookbus, torch, hookbus.torch
            >>> from torch import nn
            >>> model = nn.Sequential(nn.Linear(3, 1))
            >>> net = hookbus.torch.attach(model, hookbus.EventBus())
            >>> _ = net.exception("0", lambda ctx: print(ctx.name, tuple(ctx.args[0].shape)))
            >>> try:
            ...     model(torch.ones(2, 5))
            ... except RuntimeError:
            ...     print("raised")
            0 (2, 5)
            raised
        """
        return self._register("exception", selector, hook, options)

    @overload
    def grad(
        self, selector: Union[str, nn.Module], hook: Hook, /, **options: Unpack[HookOptions]
    ) -> Handle: ...
    @overload
    def grad(
        self, selector: GroupSelector, hook: Hook, /, **options: Unpack[HookOptions]
    ) -> HandleGroup: ...
    def grad(self, selector: Selector, hook: Hook, /, **options: Unpack[HookOptions]) -> Any:
        """Gradient hook on the module's outputs: the cheap, safe way to see gradients.

        At backward, ``ctx.result`` is the gradient of one output tensor (assign to
        replace it), ``ctx.data["path"]`` says which tensor of a nested output
        (``()`` for a plain tensor), and ``ctx.call_index`` is that of the forward
        call that made it. Outputs that don't require grad (``torch.no_grad()``)
        are skipped. Safe with in-place ops, unlike :meth:`backward`.

        Example:
            >>> import hookbus, torch, hookbus.torch
            >>> from torch import nn
            >>> model = nn.Sequential(nn.Linear(2, 1))
            >>> net = hookbus.torch.attach(model, hookbus.EventBus())
            >>> _ = net.grad("0", lambda ctx: print(ctx.name, ctx.result))
            >>> model(torch.ones(1, 2)).sum().backward()
            0 tensor([[1.]])
        """
        return self._register("grad", selector, hook, options)

    @overload
    def backward_pre(
        self, selector: Union[str, nn.Module], hook: Hook, /, **options: Unpack[HookOptions]
    ) -> Handle: ...
    @overload
    def backward_pre(
        self, selector: GroupSelector, hook: Hook, /, **options: Unpack[HookOptions]
    ) -> HandleGroup: ...
    def backward_pre(
        self, selector: Selector, hook: Hook, /, **options: Unpack[HookOptions]
    ) -> Any:
        """Full backward pre hook: ``ctx.args`` is ``grad_output``; assign to replace it.

        Opt-in: full backward hooks cost about as much as the backward pass of a
        small module and fail with in-place ops on the module's output
        (``ReLU(inplace=True)``). Prefer :meth:`grad`.

        Example:
            >>> import hookbus, torch, hookbus.torch
            >>> from torch import nn
            >>> model = nn.Sequential(nn.Linear(2, 1))
            >>> net = hookbus.torch.attach(model, hookbus.EventBus())
            >>> _ = net.backward_pre("0", lambda ctx: print(ctx.args))
            >>> model(torch.ones(1, 2, requires_grad=True)).sum().backward()
            (tensor([[1.]]),)
        """
        return self._register("backward_pre", selector, hook, options)

    @overload
    def backward(
        self, selector: Union[str, nn.Module], hook: Hook, /, **options: Unpack[HookOptions]
    ) -> Handle: ...
    @overload
    def backward(
        self, selector: GroupSelector, hook: Hook, /, **options: Unpack[HookOptions]
    ) -> HandleGroup: ...
    def backward(self, selector: Selector, hook: Hook, /, **options: Unpack[HookOptions]) -> Any:
        """Full backward hook: ``ctx.args`` is ``grad_output``, ``ctx.result`` ``grad_input``.

        Assign ``ctx.result`` (a tuple of the same length) to replace ``grad_input``.
        Opt-in, with the costs and limits of :meth:`backward_pre`.

        Example:
            >>> import hookbus, torch, hookbus.torch
            >>> from torch import nn
            >>> model = nn.Sequential(nn.Linear(2, 1))
            >>> net = hookbus.torch.attach(model, hookbus.EventBus())
            >>> _ = net.backward("0", lambda ctx: print(ctx.result))
            >>> x = torch.ones(1, 2, requires_grad=True)
            >>> model(x).sum().backward()  # doctest: +ELLIPSIS
            (tensor([[...]]),)
        """
        return self._register("backward", selector, hook, options)

    def operations(self, selector: Selector, *functions: Any) -> OperationSelection:
        """Make the calls of ``functions`` inside the selected modules' forward hook points.

        Each call is named ``"<module>:<operation>.<index>"``: the module's name, the
        operation's ``__name__`` and its call index within one forward
        (``"transformer.h.0.attn:softmax.0"``). ``bus.pre`` / ``bus.post`` /
        ``bus.exception`` / ``bus.around`` hooks, and this attachment's methods, then
        see and replace the operation's ``ctx.args`` / ``ctx.kwargs`` and
        ``ctx.result`` (``ctx.target`` is the module); ``ctx.skip(value)`` in a pre
        hook replaces the call. Every call of the functions while the forward runs
        counts, its submodules' and helpers' included. A pattern reaches operation
        points only if it holds a colon (``"*:softmax.*"``). The selected modules
        run at native speed while no hook matches, except for one forward after
        this call, which finds the calls (the
        points exist from then on; hooks registered before apply at once). Built on
        ``torch.overrides.TorchFunctionMode``; see docs/torch.md.

        Example:
            >>> import hookbus, torch, hookbus.torch
            >>> from torch import nn
            >>> bus = hookbus.EventBus()
            >>> model = nn.Sequential(nn.Softmax(dim=-1))
            >>> net = hookbus.torch.attach(model, bus)
            >>> _ = net.operations("0", torch.softmax)
            >>> def flat(ctx):
            ...     ctx.args = (torch.zeros_like(ctx.args[0]), *ctx.args[1:])
            >>> _ = bus.pre("0:softmax.0", flat)
            >>> model(torch.tensor([[1.0, 3.0]]))
            tensor([[0.5000, 0.5000]])
        """
        self._check_attached()
        names = [operation_name(function) for function in functions]
        if not names:
            raise TypeError(
                "operations() needs at least one operation after the selector, such as "
                "net.operations('layers.*.attn', torch.softmax) or 'softmax'"
            )
        sites: List[OperationSite] = []
        for name in self.select(selector):
            module = self._modules[name]()
            if module is not None:
                where = where_defined(getattr(type(module), "forward", None))
                sites.append(OperationSite(self.bus, name, module, frozenset(names), where))
        selection = OperationSelection(sites)
        self._operations.append(selection)
        for site in sites:
            site.refresh()  # armed for the forward that finds the calls
        return selection

    def _operation_sites(self) -> List[OperationSite]:
        return [site for selection in self._operations for site in selection.sites]

    def _register(
        self, kind: str, selector: Selector, hook: Union[Hook, AroundHook], options: HookOptions
    ) -> Any:
        names = self._names_of(selector)
        if names is not None:  # names of the vocabulary: its point source checks them
            return self._register_names(kind, selector, names, hook, options)
        if isinstance(selector, str) and ":" in selector and selector not in self._modules:
            self._check_attached()
            if kind not in OPERATION_POINT.runs and OPERATION_POINT.refuses_others:
                raise ValueError(
                    f"{kind} hooks do not apply to operation points such as {selector!r}; "
                    f"accepted there: {', '.join(OPERATION_POINT.runs)} hooks"
                )
            key = operation_key(
                selector,
                self._operation_sites(),
                lambda known, name: close_or_first_names(dict.fromkeys(known), name),
                optional=bool(options.get("optional")),
            )
            handle = self.bus.registry.register(kind, key, hook, options)
            self._handles.add(handle)
            return handle
        names = self.select(selector)
        if kind in ("backward_pre", "backward"):
            self._check_full_backward(names)
        if isinstance(selector, str) and selector not in self._modules:
            keys = [selector]  # a pattern: it keeps matching by name
        else:  # the model's own names: matched literally, glob characters and all
            keys = [literal_pattern(name) for name in names]
        handles: List[Handle] = []
        try:
            for key in keys:
                handles.append(self.bus.registry.register(kind, key, hook, options))
        except BaseException:
            for handle in handles:
                handle.remove()
            raise
        for handle in handles:
            self._handles.add(handle)
        if isinstance(selector, (str, nn.Module)):
            return handles[0]
        return HandleGroup(handles)

    def _names_of(self, selector: Selector) -> Optional[List[str]]:
        """The selector's names of the vocabulary (``"blocks.*.hook_z"``, or a list of
        names), if it selects some and no module; else ``None``."""
        if self._vocabulary is None:
            return None
        if isinstance(selector, str):
            items: List[Any] = [selector]
        elif isinstance(selector, list) and selector:
            items = cast("List[Any]", selector)  # type: ignore[redundant-cast]  # for pyright
        else:
            return None
        if all(isinstance(i, str) and is_name(i) and i not in self._modules for i in items):
            return [str(item) for item in items]
        return None

    def _register_names(
        self,
        kind: str,
        selector: Selector,
        names: List[str],
        hook: Union[Hook, AroundHook],
        options: HookOptions,
    ) -> Any:
        self._check_attached()
        handles: List[Handle] = []
        try:
            for name in names:
                handles.append(self.bus.registry.register(kind, name, hook, options))
        except BaseException:
            for handle in handles:
                handle.remove()
            raise
        for handle in handles:
            self._handles.add(handle)
        return handles[0] if isinstance(selector, str) else HandleGroup(handles)

    def _check_full_backward(self, names: List[str]) -> None:
        for name in names:
            module = self._modules[name]()
            hooks: Any = module._backward_hooks if module is not None else None  # pyright: ignore[reportUnknownMemberType, reportUnknownVariableType]
            if module is not None and hooks and not module._is_full_backward_hook:
                raise ValueError(
                    f"module {name!r} has old-style backward hooks (register_backward_hook); "
                    f"torch refuses full backward hooks next to them. Remove those, or use "
                    f"grad() hooks on outputs instead"
                )

    # --- cleanup -----------------------------------------------------------------------

    def detach(self) -> None:
        """Remove this attachment's hooks and every native hook; the model is as before.

        Idempotent. Hooks registered on the bus by name stay on the bus (they may
        apply to other models), but no longer reach this model.
        """
        vocabulary, self._vocabulary = self._vocabulary, None
        if vocabulary is not None:  # its names first, with the hooks they put on the model
            vocabulary.remove()
        reads, self._reads = self._reads, None
        if reads is not None:  # first: the points' hooks then go with nothing to watch
            reads.close()
        self._detach_points()  # first: removing the hooks then reaches no module point
        selections, self._operations = self._operations, []
        for selection in selections:
            selection.remove()
        handles = list(self._handles)
        self._handles = weakref.WeakSet()
        HandleGroup(handles).remove()
        self._forget_model()

    remove = detach

    def _detach_points(self) -> None:
        with self._making:  # replaced, not cleared: a reader may be iterating them
            points, self._points = self._points, {}
            self._modules, self._ids, self._wrappers, self._raw = {}, {}, {}, {}
        registry = self.bus.registry
        registry.remove_source(self)
        if not points:
            return
        registry.remove_points(list(points.values()))  # first: no change reaches them
        for point in points.values():
            point.uninstall()

    def hooks(self) -> List[Handle]:
        """The bus hooks of every kind that match this model's modules now."""
        kinds = set(KINDS)
        seen: Dict[int, Handle] = {}
        for name in self._modules:
            for handle in self.bus.hooks(name):
                if handle.kind in kinds:
                    seen.setdefault(id(handle), handle)
        return list(seen.values())

    def __repr__(self) -> str:
        model = self._model()
        what = type(model).__name__ if model is not None else "<collected model>"
        state = f"{len(self._modules)} modules" if self._modules else "detached"
        prefix = f" prefix={self.prefix!r}" if self.prefix else ""
        return f"<Attachment {what} on {self.bus.name!r}{prefix} {state}>"


def bus_or_default(bus: Optional[EventBus], caller: str) -> EventBus:
    """``bus``, ``hookbus.default_bus`` for ``None``; anything else is refused."""
    if bus is None:
        from .. import default_bus

        return default_bus
    if not isinstance(bus, EventBus):  # pyright: ignore[reportUnnecessaryIsInstance]
        raise TypeError(
            f"{caller} takes a hookbus.EventBus as bus (or None: hookbus.default_bus), "
            f"got {type(bus).__name__}"
        )
    return bus


def _matcher(name: str, match: Optional[Matcher]) -> Optional[Matcher]:
    """A matcher for ``name`` when it is a pattern (``match`` says the whole name was one)."""
    return matcher_for(name) if match is not None and is_pattern(name) else None


def _module_reads(
    model: nn.Module, modules: Dict[str, _ModuleRef], prefix: str, raw: bool
) -> ModuleReads:
    """A :class:`ModuleReads` of the attachment's ``modules``, by their paths below ``model``
    (``raw``: wrappers named); it holds the attachment's dict, not the attachment: no
    cycle through it."""
    dotted = f"{prefix}." if prefix else ""

    def path_of(module: nn.Module) -> str:  # for ModuleReads.add: the attachment adds paths
        for name, held in modules.items():
            if held() is module:
                return name[len(dotted) :]
        raise KeyError(type(module).__name__)

    def module_at(path: str) -> nn.Module:
        module = modules[f"{dotted}{path}"]()
        if module is None:  # collected: it left the model
            raise KeyError(path)
        return module

    return ModuleReads(model, path_of, module_at, raw=raw)


def _is_strict_ddp(module: nn.Module) -> bool:
    ddp = getattr(
        sys.modules.get("torch.nn.parallel.distributed"), "DistributedDataParallel", None
    )
    return (
        ddp is not None
        and isinstance(module, ddp)
        and not getattr(module, "find_unused_parameters", False)
    )


def _short(module: nn.Module) -> str:
    text = repr(module).splitlines()[0]
    return text if len(text) <= 60 else text[:57] + "..."


def find_attachment(model: nn.Module, bus: EventBus) -> Optional[Attachment]:
    """The active attachment of ``model`` to ``bus``, or ``None``."""
    for existing in _attached(unwrap(model)):
        if existing.bus is bus and existing.active:
            return existing
    return None


def _attached(model: nn.Module) -> List[Attachment]:
    """The attachments of ``model`` still alive."""
    refs = _attachments.get(model, ())
    return [existing for existing in (ref() for ref in refs) if existing is not None]
