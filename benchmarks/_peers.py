"""The peer libraries, each set up with n no-op listeners, as their users would.

A peer that is not installed is skipped (``available()`` says which are there),
so the benchmark still runs where only hookbus is installed (as in CI's core
jobs on other Pythons). Every listener, for every library, is a distinct
``def listener(x): return None``: libraries that de-duplicate see n listeners.
"""

from __future__ import annotations

import importlib
import importlib.util
import types
from typing import Any, Callable, Dict, List, Optional, Tuple

PEERS = ("blinker", "psygnal", "pyee", "pluggy")


def available() -> List[str]:
    """The installed peers, in table order."""
    return [name for name in PEERS if importlib.util.find_spec(name) is not None]


def version(name: str) -> str:
    from importlib.metadata import version as dist_version

    return dist_version(name)


def psygnal_compiled() -> Optional[bool]:
    """Whether the installed psygnal is the mypyc-compiled build (None: not installed)."""
    if importlib.util.find_spec("psygnal") is None:
        return None
    psygnal: Any = importlib.import_module("psygnal")
    return bool(getattr(psygnal, "_compiled", False))


def listeners(n: int) -> List[Callable[[Any], None]]:
    """``n`` distinct no-op listeners taking one argument."""

    def make() -> Callable[[Any], None]:
        def listener(x: Any) -> None:
            return None

        return listener

    return [make() for _ in range(n)]


# Each builder returns (statements by entry point, namespace): the statement that
# emits with the listeners connected.


def blinker_emit(n: int) -> Tuple[Dict[str, str], Dict[str, Any]]:
    import blinker

    signal = blinker.Signal()
    keep = listeners(n)  # blinker holds receivers weakly by default
    for listener in keep:
        signal.connect(listener)
    return {"send": "signal.send(1)"}, {"signal": signal, "keep": keep}


def psygnal_emit(n: int) -> Tuple[Dict[str, str], Dict[str, Any]]:
    import psygnal

    class Emitter:
        changed = psygnal.Signal(int)

    emitter = Emitter()
    signal = emitter.changed
    keep = listeners(n)
    for listener in keep:
        signal.connect(listener)
    statements = {"emit": "signal.emit(1)"}
    if hasattr(signal, "emit_fast"):
        statements["emit_fast"] = "signal.emit_fast(1)"
    return statements, {"signal": signal, "emitter": emitter, "keep": keep}


def pyee_emit(n: int) -> Tuple[Dict[str, str], Dict[str, Any]]:
    import pyee

    emitter = pyee.EventEmitter()
    for listener in listeners(n):
        emitter.on("e", listener)
    return {"emit": "emitter.emit('e', 1)"}, {"emitter": emitter}


def _pluggy_manager() -> Tuple[Any, Any]:
    import pluggy

    spec = pluggy.HookspecMarker("bench")
    impl = pluggy.HookimplMarker("bench")

    class Spec:
        @spec
        def evt(self, x: Any) -> None:
            """The benchmark's hook."""

    manager = pluggy.PluginManager("bench")
    manager.add_hookspecs(Spec)
    return manager, impl


def pluggy_plugins(impl: Any, n: int) -> List[Any]:
    return [types.SimpleNamespace(evt=impl(listener)) for listener in listeners(n)]


def pluggy_emit(n: int) -> Tuple[Dict[str, str], Dict[str, Any]]:
    manager, impl = _pluggy_manager()
    for plugin in pluggy_plugins(impl, n):
        manager.register(plugin)
    return {"hook call": "hook.evt(x=1)"}, {"hook": manager.hook}


EMITTERS: Dict[str, Callable[[int], Tuple[Dict[str, str], Dict[str, Any]]]] = {
    "blinker": blinker_emit,
    "psygnal": psygnal_emit,
    "pyee": pyee_emit,
    "pluggy": pluggy_emit,
}


# Register and remove one listener, on an emitter that has none.


def blinker_register() -> Tuple[str, Dict[str, Any]]:
    import blinker

    (listener,) = listeners(1)
    return "signal.connect(listener); signal.disconnect(listener)", {
        "signal": blinker.Signal(),
        "listener": listener,
    }


def psygnal_register() -> Tuple[str, Dict[str, Any]]:
    import psygnal

    class Emitter:
        changed = psygnal.Signal(int)

    emitter = Emitter()
    (listener,) = listeners(1)
    return "signal.connect(listener); signal.disconnect(listener)", {
        "signal": emitter.changed,
        "emitter": emitter,
        "listener": listener,
    }


def pyee_register() -> Tuple[str, Dict[str, Any]]:
    import pyee

    (listener,) = listeners(1)
    return "emitter.on('e', listener); emitter.remove_listener('e', listener)", {
        "emitter": pyee.EventEmitter(),
        "listener": listener,
    }


def pluggy_register() -> Tuple[str, Dict[str, Any]]:
    manager, impl = _pluggy_manager()
    (plugin,) = pluggy_plugins(impl, 1)
    return "manager.register(plugin); manager.unregister(plugin)", {
        "manager": manager,
        "plugin": plugin,
    }


REGISTERS: Dict[str, Callable[[], Tuple[str, Dict[str, Any]]]] = {
    "blinker": blinker_register,
    "psygnal": psygnal_register,
    "pyee": pyee_register,
    "pluggy": pluggy_register,
}
