"""Seeing through wrappers: bare module names, and compiled models.

Training stacks wrap models in modules whose only child is the model (or one of
its layers): ``DistributedDataParallel`` and ``DataParallel`` add ``module``,
FSDP1 adds ``_fsdp_wrapped_module`` at every wrapped level, ``torch.compile``
adds ``_orig_mod``, the checkpoint wrappers of
``torch.distributed.algorithms`` add ``_checkpoint_wrapped_module``, and PEFT
adds ``base_model.model`` (its ``PeftModel`` and its tuner, LoRA's ``LoraModel``). A *bare
name* leaves those levels out, so ``"0"`` names the same layer with or without
the wrappers, and a selector written for the bare model works on the wrapped one.
FSDP2 (``fully_shard``) and ``gradient_checkpointing_enable()`` insert no module
and change no name.

A ``torch.compile``'d model is unwrapped to the module that runs; torch runs
no hook on its forward's error path, so the adapter warns of exception hooks
there.
"""

from __future__ import annotations

import sys
import warnings
from typing import Any, Dict, List, NamedTuple, Optional, Set, Tuple

from torch import nn

from ._user_line import stacklevel_outside_hookbus

__all__ = [
    "WRAPPERS",
    "CompiledModelWarning",
    "ModuleName",
    "bare_model",
    "bare_names",
    "is_compiled",
    "unwrap",
    "walk",
    "warn_hook_on_compiled",
    "wrapped_attribute",
    "wrapper_attributes",
]

WRAPPERS: Tuple[Tuple[str, str, str], ...] = (
    ("torch.nn.parallel.distributed", "DistributedDataParallel", "module"),
    ("torch.nn.parallel.data_parallel", "DataParallel", "module"),
    ("torch.distributed.fsdp.fully_sharded_data_parallel", "FullyShardedDataParallel",
     "_fsdp_wrapped_module"),
    ("torch._dynamo.eval_frame", "OptimizedModule", "_orig_mod"),
    ("torch.distributed.algorithms._checkpoint.checkpoint_wrapper", "ActivationWrapper",
     "_checkpoint_wrapped_module"),
    ("peft.peft_model", "PeftModel", "base_model"),
    ("peft.tuners.tuners_utils", "BaseTuner", "model"),
)  # fmt: skip
"""The see-through wrappers: (module, class, the attribute holding what it wraps)."""


# type -> the attribute its instances wrap (None: not a wrapper), for the wrapper
# classes imported so far: isinstance against them is slow (DDP is an ABC), so
# attaching a model asks once per type. Cleared when another wrapper's module is
# imported (a type cached as no wrapper might subclass its class).
_cache: Dict[type, Optional[str]] = {}
_cache_for: Tuple[Tuple[type, str], ...] = ()


_UNKNOWN = ""  # a cache miss: not None, so the lookup goes on


def wrapper_attributes() -> Dict[type, Optional[str]]:
    """Module type -> the attribute its instances wrap (``None``: no wrapper), so far.

    Filled in by :func:`wrapped_attribute` as types are met, for the wrapper classes
    imported now: ask for it once per walk of a model, not once per module.
    """
    global _cache, _cache_for
    classes = _wrapper_classes()
    if classes != _cache_for or len(_cache) >= 4096:
        _cache, _cache_for = {}, classes
    return _cache


def _wrapper_classes() -> Tuple[Tuple[type, str], ...]:
    found: List[Tuple[type, str]] = []
    for module_name, class_name, attribute in WRAPPERS:
        imported = sys.modules.get(module_name)
        cls = getattr(imported, class_name, None) if imported is not None else None
        if isinstance(cls, type):
            found.append((cls, attribute))
    return tuple(found)


def wrapped_attribute(module: nn.Module, wrappers: Dict[type, Optional[str]]) -> Optional[str]:
    """The child attribute that ``module`` wraps, if it is a see-through wrapper.

    ``wrappers`` is :func:`wrapper_attributes`. Classes are looked up only in modules
    already imported: a wrapper class whose module was never imported has no
    instance, so nothing is imported here.

    Example:
        >>> from torch import nn
        >>> wrappers = wrapper_attributes()
        >>> dp, relu = nn.DataParallel(nn.Linear(1, 1)), nn.ReLU()
        >>> wrapped_attribute(dp, wrappers), wrapped_attribute(relu, wrappers)
        ('module', None)
    """
    kind = type(module)
    try:
        attribute = wrappers[kind]
    except KeyError:
        attribute = next((name for cls, name in _cache_for if issubclass(kind, cls)), None)
        if "<locals>" not in kind.__qualname__:  # a class made in a function may be
            wrappers[kind] = attribute  # collected: kept here, it would keep what it holds

    if attribute is None or module._modules.get(attribute) is None:
        return None
    return attribute


class ModuleName(NamedTuple):
    """One module of a model as :func:`walk` finds it."""

    raw: str
    """Its qualified name in ``model.named_modules()``."""
    bare: str
    """Its name with the wrapper levels left out (a wrapper shares it with what it wraps)."""
    module: nn.Module
    """The module itself."""
    is_wrapper: bool
    """Whether it is a see-through wrapper (its hooks would fire with those of its child)."""


def bare_model(
    model: nn.Module, wrappers: Optional[Dict[type, Optional[str]]] = None
) -> nn.Module:
    """The module that every see-through wrapper around ``model`` wraps (``model`` if none).

    ``wrappers`` is :func:`wrapper_attributes`, for a caller that unwraps many modules
    at once (asking it costs a look at every wrapper class's module).

    Example:
        >>> from torch import nn
        >>> inner = nn.Linear(1, 1)
        >>> bare_model(nn.DataParallel(inner)) is inner
        True
    """
    if wrappers is None:
        wrappers = wrapper_attributes()
    attribute = wrapped_attribute(model, wrappers)
    while attribute is not None:
        model = model._modules[attribute]  # type: ignore[assignment]  # not None: checked
        attribute = wrapped_attribute(model, wrappers)
    return model


def walk(model: nn.Module) -> List[ModuleName]:
    """Every module of ``model`` once, in ``named_modules()`` order, with both names.

    Example:
        >>> from torch import nn
        >>> dp = nn.DataParallel(nn.Sequential(nn.Linear(1, 1)))
        >>> [(m.raw, m.bare, m.is_wrapper) for m in walk(dp)]
        [('', '', True), ('module', '', False), ('module.0', '0', False)]
    """
    named: List[Tuple[str, nn.Module]] = list(model.named_modules())  # pyright: ignore[reportUnknownArgumentType]
    wrappers = wrapper_attributes()
    known = wrappers.get
    if not any(  # the common case: no wrapper, bare names are raw names
        known(type(module), _UNKNOWN) is not None and wrapped_attribute(module, wrappers)
        for _, module in named
    ):
        # The NamedTuple's own constructor is Python code, 4 times slower.
        make: Any = getattr(tuple, "__new__")  # noqa: B009 - untyped for pyright
        return [make(ModuleName, (raw, raw, module, False)) for raw, module in named]
    found: List[ModuleName] = []
    seen: Set[int] = set()
    stack: List[Tuple[nn.Module, str, str]] = [(model, "", "")]
    while stack:
        module, raw, bare = stack.pop()
        if id(module) in seen:
            continue
        seen.add(id(module))
        attribute = wrapped_attribute(module, wrappers)
        found.append(ModuleName(raw, bare, module, attribute is not None))
        children: List[Tuple[nn.Module, str, str]] = []
        for name, child in module._modules.items():
            if child is None:
                continue
            child_raw = f"{raw}.{name}" if raw else name
            child_bare = bare if name == attribute else (f"{bare}.{name}" if bare else name)
            children.append((child, child_raw, child_bare))
        stack.extend(reversed(children))
    return found


def bare_names(model: nn.Module) -> Dict[str, str]:
    """``{raw qualified name: bare name}`` for every module of ``model``.

    The raw names are those of ``model.named_modules()``; the bare names leave out
    the levels that DDP, DataParallel, FSDP1, ``torch.compile``, the checkpoint
    wrappers and PEFT insert, so they are the names of the unwrapped model (``""`` is the
    model itself). A wrapper maps to the bare name of the module it wraps. Invert
    the dict to go from bare names to raw ones (``attach(..., raw_names=True)``
    names hook points by the raw names).

    Example:
        >>> import hookbus.torch
        >>> from torch import nn
        >>> dp = nn.DataParallel(nn.Sequential(nn.Linear(1, 1), nn.ReLU()))
        >>> hookbus.torch.bare_names(dp)
        {'': '', 'module': '', 'module.0': '0', 'module.1': '1'}
    """
    return {found.raw: found.bare for found in walk(model)}


# --- compiled models ------------------------------------------------------------------


class CompiledModelWarning(UserWarning):
    """Hooks that a ``torch.compile``'d model never runs: exception hooks (and the
    error path of around hooks), since torch skips hooks on a forward's error path
    while compiling. Other hooks take effect, even when added after the compiled
    model first ran (hookbus makes torch recompile the code that calls the module).

    Example:
        >>> import warnings, hookbus.torch
        >>> warnings.simplefilter("ignore", hookbus.torch.CompiledModelWarning)
    """


def is_compiled(model: nn.Module) -> bool:
    """Whether ``model`` is a ``torch.compile`` wrapper or was ``model.compile()``'d."""
    return isinstance(getattr(model, "_orig_mod", None), nn.Module) or (
        getattr(model, "_compiled_call_impl", None) is not None
    )


def unwrap(model: nn.Module) -> nn.Module:
    """The module that runs: ``torch.compile(model)`` wraps it in ``_orig_mod``."""
    inner = getattr(model, "_orig_mod", None)
    return inner if isinstance(inner, nn.Module) else model


def warn_hook_on_compiled(module_name: str, kind: str) -> None:
    """Warn that ``kind`` hooks on module ``module_name`` of a compiled model won't run.

    Other hooks take effect on a compiled model, even one that ran before they
    were added (``ModulePoint.recompile_on_change``): only a forward's error path
    is skipped while compiling.
    """
    what = "exception hooks" if kind == "exception" else "around hooks' teardown after an error"
    warnings.warn(
        f"hookbus.torch: {kind} hooks went on module {module_name!r} of a "
        f"torch.compile'd model, and torch runs no hook on a forward's error path while "
        f"compiling (always_call hooks): its {what} will not run when the compiled "
        f"model raises. Run the eager model (compiled._orig_mod) where errors matter, "
        f"or catch the error around the compiled call",
        CompiledModelWarning,
        stacklevel=stacklevel_outside_hookbus(),
    )
