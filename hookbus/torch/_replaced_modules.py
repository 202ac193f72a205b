"""Which of the modules that a model's names read were replaced since they were attached.

The names vocabulary reads the modules that were in the model at ``attach()``:
its recipes hold them, and hook them. A module replaced afterwards (PEFT's
adapters injected into an attached model, a user swapping a block) leaves the
names that read it hooking a module the forward no longer calls: silent, or
reading the old module's values. :class:`ModuleReads` learns, for each name a
hook is registered on (:meth:`ModuleReads.add`, at registration: nothing at
attach), the modules it reads and their parents as the attachment recorded
them, and tells which was replaced:

* :meth:`ModuleReads.replaced` walks their names from the model now (the
  registration asks it: the vocabulary refuses the hook, naming the module);
* torch's global module registration hook
  (``register_module_module_registration_hook``: every ``setattr`` and
  ``add_module`` of a submodule, anywhere), installed while some name is
  watched, tells :meth:`ModuleReads.watch`'s callback of the replacement as it
  happens (the vocabulary warns if a hooked name reads it). That costs two dict
  lookups per submodule assignment, nothing per forward; a replacement that
  bypasses ``setattr`` (``_modules`` written directly) is seen at the next
  registration only.

A see-through wrapper put around a module (FSDP1's auto wrap, the checkpoint
wrappers: :mod:`._unwrap`) is no replacement: the module still runs inside it,
with its hooks. Names are the attachment's bare names, which skip such wrappers.
"""

from __future__ import annotations

import threading
import weakref
from typing import Any, Callable, Dict, Iterable, List, NamedTuple, Optional, Tuple

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

_Entry = Tuple["weakref.ref[nn.Module]", "weakref.ref[ModuleReads]"]
# id(a module that names read, or one of its parents) -> (it, weakly; the reads watching it).
_watched: Dict[int, List[_Entry]] = {}
_watch_lock = threading.Lock()  # changes to _watched and _hook; read unlocked
_hook: Optional[RemovableHandle] = None


class ModuleReads:
    """The modules that names read, by their names in the attachment, from the model now.

    ``name_of(module)`` is a module's name at attach, ``module_at(name)`` the module
    that had it (``KeyError`` once collected): an attachment's ``name_of`` and
    ``module``, whose names are dotted paths below ``root``, see-through wrappers
    left out.

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
        "__weakref__", "_finalizer", "_held", "_lock", "_module_at", "_name_of", "_on_replace",
        "_paths", "_root", "_types", "_where",
    )  # fmt: skip

    def __init__(
        self,
        root: nn.Module,
        name_of: Callable[[nn.Module], str],
        module_at: Callable[[str], nn.Module],
    ) -> None:
        self._root = weakref.ref(root)
        self._name_of, self._module_at = name_of, module_at
        self._paths: Dict[str, Tuple[str, ...]] = {}  # name -> the paths of what it reads
        self._held: Dict[str, Callable[[], Optional[nn.Module]]] = {}  # path -> module, weakly
        self._types: Dict[str, str] = {}  # path -> its class's name
        self._where: Dict[int, str] = {}  # id(module held) -> its path
        self._on_replace: Optional[Callable[[], Optional[OnReplace]]] = None
        self._finalizer: Any = None  # a weakref.finalize, once watching
        self._lock = threading.Lock()

    def add(self, names: Iterable[str], reads: Callable[[str], Iterable[nn.Module]]) -> None:
        """Learn the modules that each of ``names`` reads, ``reads(name)`` (once a name)."""
        name_of = self._name_of
        self.add_paths(names, lambda name: [name_of(module) for module in reads(name)])

    def add_paths(self, names: Iterable[str], paths_of: Callable[[str], Iterable[str]]) -> None:
        """Learn the paths of the modules that each of ``names`` reads, ``paths_of(name)``
        (once a name): for names whose modules may be collected already."""
        new: List[nn.Module] = []
        with self._lock:
            for name in names:
                if name in self._paths:
                    continue
                paths = tuple(dict.fromkeys(paths_of(name)))
                self._paths[name] = paths
                for path in paths:
                    parts = path.split(".")
                    for end in range(1, len(parts) + 1):
                        prefix = ".".join(parts[:end])
                        if prefix not in self._held:
                            new.extend(self._hold(prefix))
        if new and self._on_replace is not None:
            _watch(self, new)

    def _hold(self, prefix: str) -> List[nn.Module]:
        try:
            module = self._module_at(prefix)
        except KeyError:  # collected: it left the model since attach
            self._held[prefix], self._types[prefix] = _gone, ""
            return []
        self._held[prefix] = weakref.ref(module)
        self._types[prefix] = type(module).__name__
        self._where[id(module)] = prefix
        return [module]

    def replaced(self, names: Iterable[str]) -> Optional[Tuple[str, Replaced]]:
        """The first of ``names`` that reads a module no longer at its path, with that
        module (the outermost one replaced), or ``None``; only names :meth:`add` learned."""
        root = self._root()
        if root is None:
            return None
        held, types = self._held, self._types
        wrappers = wrapper_attributes()  # once: each module below is unwrapped with it
        bare_root = bare_model(root, wrappers)
        for name in names:
            for path in self._paths.get(name, ()):
                module: Any = bare_root
                prefix = ""
                for part in path.split("."):
                    prefix = f"{prefix}.{part}" if prefix else part
                    child = module._modules.get(part)  # module: unwrapped already
                    module = bare_model(child, wrappers) if child is not None else None
                    if module is None or module is not held[prefix]():
                        now = type(child).__name__ if child is not None else None
                        return name, Replaced(prefix, types[prefix], now)
        return None

    def reading(self, path: str) -> List[str]:
        """The names learned that read the module at ``path`` (or one inside it)."""
        inside = f"{path}."
        return [
            name
            for name, paths in self._paths.items()
            if any(each == path or each.startswith(inside) for each in paths)
        ]

    def watch(self, on_replace: OnReplace) -> None:
        """Call ``on_replace(replaced)`` when a module learned is replaced through
        ``setattr`` or ``add_module`` (before torch stores the new one), until
        :meth:`close`. A bound method is held weakly."""
        if self._finalizer is not None:
            return
        me: weakref.ref[ModuleReads] = weakref.ref(self)
        self._on_replace = weakref.WeakMethod(on_replace)
        self._finalizer = weakref.finalize(self, _unwatch, me)
        with self._lock:
            held = [module for module in (ref() for ref in self._held.values()) if module]
        _watch(self, held)

    def close(self) -> None:
        """Stop watching (idempotent)."""
        finalizer, self._finalizer = self._finalizer, None
        self._on_replace = None
        if finalizer is not None:
            finalizer()

    def _replacing(self, old: nn.Module, new: Optional[nn.Module]) -> None:
        held = self._on_replace
        on_replace = held() if held is not None else None
        path = self._where.get(id(old))
        if on_replace is None or path is None or self._held[path]() is not old:
            return
        if new is not None and bare_model(new) is old:
            return  # a see-through wrapper around it
        now = type(new).__name__ if new is not None else None
        on_replace(Replaced(path, self._types[path], now))


def _gone() -> None:
    """A module that was collected before it was held: no module is it."""
    return None


def _watch(reads: ModuleReads, modules: List[nn.Module]) -> None:
    global _hook
    me = weakref.ref(reads)
    with _watch_lock:
        for module in modules:
            _watched.setdefault(id(module), []).append((weakref.ref(module), me))
        if _hook is None and _watched:
            _hook = register_module_module_registration_hook(_on_registration)


def _on_registration(parent: nn.Module, name: str, new: Any) -> None:
    """torch's global module registration hook: ``parent.name = new`` is about to happen."""
    old = parent._modules.get(name)
    if old is None or old is new:
        return
    entries = _watched.get(id(old))
    if not entries:
        return
    for held_module, held_reads in list(entries):
        reads = held_reads()
        if reads is not None and held_module() is old:
            reads._replacing(old, new)  # pyright: ignore[reportPrivateUsage]


def _unwatch(me: weakref.ref[ModuleReads]) -> None:
    global _hook
    with _watch_lock:
        for key, entries in list(_watched.items()):
            kept = [entry for entry in entries if entry[1] is not me and entry[1]() is not None]
            if kept:
                _watched[key] = kept
            else:
                del _watched[key]
        if _hook is not None and not _watched:
            _hook.remove()
            _hook = None
