"""Which of the modules that a model's names read were replaced since they were attached.

The names read the modules that were in the model at ``attach()``: the
attachment's module points hook them, the names vocabulary's recipes read them.
A module replaced afterwards (PEFT's adapters injected into an attached model, a
user swapping a block) leaves the names that read it hooking a module the
forward no longer calls: silent, or reading the old module's values.
:class:`ModuleReads` learns, for each name a hook is registered on
(:meth:`ModuleReads.add`, at registration: nothing at attach), the modules it
reads and their parents as the attachment recorded them, and tells which was
replaced:

* :meth:`ModuleReads.replaced` walks their names from the model now (the
  registration asks it: the hook is refused, naming the module);
* torch's global module registration hook
  (``register_module_module_registration_hook``: every ``setattr`` and
  ``add_module`` of a submodule, anywhere), one per :class:`ModuleReads`, tells
  :meth:`ModuleReads.watch`'s callback of the replacement as it happens (the
  owner warns). It is installed only while some name has hooks
  (:meth:`ModuleReads.hooked`), and removed when the last hooked name loses
  them, at :meth:`ModuleReads.close` (``detach()``), or when the
  :class:`ModuleReads` is collected: it holds it weakly, so nothing lives longer
  for it. It costs a call and a dict lookup per submodule assignment while
  installed, nothing per forward; a replacement that bypasses ``setattr``
  (``_modules`` written directly) is seen at the next registration only.

A see-through wrapper put around a module (FSDP1's auto wrap, the checkpoint
wrappers: :mod:`._unwrap`) is no replacement: the module still runs inside it,
with its hooks. Names are the attachment's names: bare ones, which skip such
wrappers, or raw ones (``raw_names=True``), which name them.
"""

from __future__ import annotations

import threading
import weakref
from typing import Any, Callable, Dict, Iterable, List, NamedTuple, Optional, Set, Tuple

from torch import nn
from torch.nn.modules.module import register_module_module_registration_hook
from torch.utils.hooks import RemovableHandle

from ._unwrap import bare_model, wrapper_attributes

__all__ = ["ModuleReads", "Replaced"]


class Replaced(NamedTuple):
    """A module that a name reads, replaced since attach: its name, its class then (``""``:
    collected before it was looked at) and now (``None``: removed).

    Example:
        >>> Replaced("h.0", "Block", "Block").described()
        "the module 'h.0', which was a Block at attach() and is now another Block"
    """

    path: str
    was: str
    now: Optional[str]

    def taken_by(self) -> str:
        """What took its place: ``"a LoraLinear"``, ``"another Conv1D"`` or ``"gone"``."""
        if self.now is None:
            return "gone"
        return f"another {self.now}" if self.now == self.was else f"a {self.now}"

    def described(self) -> str:
        """The module, what it was at attach() and what is there now, for a message."""
        if not self.was:
            return f"the module {self.path!r}, replaced since attach() (now {self.taken_by()})"
        return (
            f"the module {self.path!r}, which was a {self.was} at attach() and is now "
            f"{self.taken_by()}"
        )


OnReplace = Callable[[Replaced], None]


class ModuleReads:
    """The modules that names read, by their names in the attachment, from the model now.

    ``name_of(module)`` is a module's name at attach, ``module_at(name)`` the module
    that had it (``KeyError`` once collected): an attachment's ``name_of`` and
    ``module``, whose names are dotted paths below ``root``, see-through wrappers
    left out (``raw``: named, as ``attach(..., raw_names=True)`` names them).

    Example:
        >>> from torch import nn
        >>> model = nn.Sequential(nn.Linear(1, 1), nn.ReLU())
        >>> names = {id(model[0]): "0", id(model[1]): "1"}
        >>> modules = {"0": model[0], "1": model[1]}
        >>> reads = ModuleReads(model, lambda m: names[id(m)], modules.__getitem__)
        >>> reads.add(["first", "second"], {"first": [model[0]], "second": [model[1]]}.get)
        >>> reads.replaced(["first", "second"]) is None
        True
        >>> model[0] = nn.Linear(1, 1)
        >>> reads.replaced(["second", "first"])
        ('first', Replaced(path='0', was='Linear', now='Linear'))
    """

    __slots__ = (
        "__weakref__", "_counts", "_finalizer", "_held", "_hook", "_hooked", "_lock",
        "_module_at", "_name_of", "_on_replace", "_paths", "_raw", "_root", "_types", "_where",
    )  # fmt: skip

    def __init__(
        self,
        root: nn.Module,
        name_of: Callable[[nn.Module], str],
        module_at: Callable[[str], nn.Module],
        *,
        raw: bool = False,
    ) -> None:
        self._root = weakref.ref(root)
        self._name_of, self._module_at = name_of, module_at
        self._raw = raw  # paths name the wrappers: walked from the root, not from inside them
        self._paths: Dict[str, Tuple[str, ...]] = {}  # name -> the paths of what it reads
        self._held: Dict[str, Callable[[], Optional[nn.Module]]] = {}  # path -> module, weakly
        self._types: Dict[str, str] = {}  # path -> its class's name
        self._where: Dict[int, str] = {}  # id(module held) -> its path
        self._hooked: Set[str] = set()  # the names with hooks now (hooked)
        self._counts: Dict[str, int] = {}  # path -> how many hooked names read it, or inside it
        self._on_replace: Optional[Callable[[], Optional[OnReplace]]] = None
        # torch's global module registration hook, this reads' own, while _counts has paths;
        # removed when it is collected too (the finalizer).
        self._hook: Optional[RemovableHandle] = None
        self._finalizer: Any = None
        self._lock = threading.Lock()

    def add(self, names: Iterable[str], reads: Callable[[str], Iterable[nn.Module]]) -> None:
        """Learn the modules that each of ``names`` reads, ``reads(name)`` (once a name)."""
        name_of = self._name_of
        self.add_paths(names, lambda name: [name_of(module) for module in reads(name)])

    def add_paths(self, names: Iterable[str], paths_of: Callable[[str], Iterable[str]]) -> None:
        """Learn the paths of the modules that each of ``names`` reads, ``paths_of(name)``
        (once a name): for names whose modules may be collected already."""
        with self._lock:
            for name in names:
                if name in self._paths:
                    continue
                paths = tuple(dict.fromkeys(paths_of(name)))
                self._paths[name] = paths
                for prefix in _prefixes(paths):
                    if prefix not in self._held:
                        self._hold(prefix)

    def _hold(self, prefix: str) -> None:
        try:
            module = self._module_at(prefix)
        except KeyError:  # collected: it left the model since attach
            self._held[prefix], self._types[prefix] = _gone, ""
            return
        self._held[prefix] = weakref.ref(module)
        self._types[prefix] = type(module).__name__
        self._where[id(module)] = prefix

    def replaced(self, names: Iterable[str]) -> Optional[Tuple[str, Replaced]]:
        """The first of ``names`` that reads a module no longer at its path, with that
        module (the outermost one replaced), or ``None``; only names :meth:`add` learned."""
        root = self._root()
        if root is None:
            return None
        held, types = self._held, self._types
        wrappers = wrapper_attributes()  # once: each module below is unwrapped with it
        start = root if self._raw else bare_model(root, wrappers)
        for name in names:
            for path in self._paths.get(name, ()):
                module: Any = start
                prefix = ""
                for part in path.split("."):
                    prefix = f"{prefix}.{part}" if prefix else part
                    child = module._modules.get(part)
                    was = held[prefix]()
                    if child is None or child is not was:  # a wrapper around it is no change
                        module = bare_model(child, wrappers) if child is not None else None
                        if module is None or module is not was:
                            now = type(child).__name__ if child is not None else None
                            return name, Replaced(prefix, types[prefix], now)
                    else:
                        module = child
        return None

    def hooked_reading(self, path: str) -> List[str]:
        """The names with hooks (:meth:`hooked`) that read the module at ``path`` (or one
        inside it)."""
        inside = f"{path}."
        with self._lock:
            hooked = [(name, self._paths[name]) for name in self._hooked]
        return [
            name
            for name, paths in hooked
            if any(each == path or each.startswith(inside) for each in paths)
        ]

    def watch(self, on_replace: OnReplace) -> None:
        """Call ``on_replace(replaced)`` when a module that a name with hooks reads (see
        :meth:`hooked`), or one it is inside, is replaced through ``setattr`` or
        ``add_module`` (before torch stores the new one), until :meth:`close`. A bound
        method is held weakly. Call it before :meth:`hooked`."""
        if self._on_replace is None:
            self._on_replace = weakref.WeakMethod(on_replace)

    def hooked(self, name: str, hooked: bool) -> None:
        """Say that ``name`` (learned by :meth:`add`) has hooks now, or has none any more:
        the modules it reads, and their parents, are watched while a name with hooks
        reads them; torch's global hook is there while some module is watched."""
        with self._lock:
            if (
                self._on_replace is None  # not watching, or closed
                or name not in self._paths
                or (name in self._hooked) == hooked
            ):
                return
            counts, step = self._counts, 1 if hooked else -1
            if hooked:
                self._hooked.add(name)
            else:
                self._hooked.discard(name)
            for prefix in _prefixes(self._paths[name]):
                count = counts.get(prefix, 0) + step
                if count:
                    counts[prefix] = count
                else:
                    del counts[prefix]
            if counts and self._hook is None:
                self._install()
            elif not counts and self._hook is not None:
                self._uninstall()

    def close(self) -> None:
        """Stop watching, forget which names have hooks (idempotent)."""
        with self._lock:
            self._on_replace = None
            self._hooked.clear()
            self._counts = {}
            if self._hook is not None:
                self._uninstall()

    def _install(self) -> None:  # self._lock held
        me = weakref.ref(self)

        def on_registration(parent: nn.Module, name: str, new: Any) -> None:
            reads = me()  # weakly: torch's hook keeps nothing alive
            if reads is not None:
                reads._registering(parent, name, new)

        self._hook = hook = register_module_module_registration_hook(on_registration)
        self._finalizer = weakref.finalize(self, hook.remove)

    def _uninstall(self) -> None:  # self._lock held
        hook, self._hook = self._hook, None
        finalizer, self._finalizer = self._finalizer, None
        if finalizer is not None:
            finalizer.detach()
        if hook is not None:
            hook.remove()

    def _registering(self, parent: nn.Module, name: str, new: Any) -> None:
        """torch's global module registration hook: ``parent.name = new`` is about to
        happen (every submodule assignment in the process, while installed)."""
        old = parent._modules.get(name)
        if old is None or old is new:
            return
        path = self._where.get(id(old))
        if path is None or not self._counts.get(path) or self._held[path]() is not old:
            return  # not a module that a name with hooks reads (or is inside)
        held = self._on_replace
        on_replace = held() if held is not None else None
        if on_replace is None:
            return
        if new is not None and bare_model(new) is old:
            return  # a see-through wrapper around it
        now = type(new).__name__ if new is not None else None
        on_replace(Replaced(path, self._types[path], now))


def _gone() -> None:
    """A module that was collected before it was held: no module is it."""
    return None


def _prefixes(paths: Iterable[str]) -> List[str]:
    """Each path and every path it is inside, once: ``["h", "h.0", "h.0.attn"]``."""
    found: Dict[str, None] = {}
    for path in paths:
        parts = path.split(".")
        for end in range(1, len(parts) + 1):
            found[".".join(parts[:end])] = None
    return list(found)
