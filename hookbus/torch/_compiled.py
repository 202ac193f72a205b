"""``torch.compile``'d models: recognise them, reach the module that runs, warn about hooks."""

from __future__ import annotations

import warnings

from torch import nn

from ._warnings import stacklevel_outside_hookbus

__all__ = ["CompiledModelWarning", "is_compiled", "unwrap", "warn_hook_on_compiled"]


class CompiledModelWarning(UserWarning):
    """Hooks were installed on a ``torch.compile``'d model: torch may ignore them.

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


def warn_hook_on_compiled(module_name: str, phase: str) -> None:
    """Warn that a native ``phase`` hook went on module ``module_name`` of a compiled model."""
    warnings.warn(
        f"hookbus.torch: a native {phase} hook was installed on module {module_name!r} "
        f"of a torch.compile'd model. If the compiled model already ran while it had no "
        f"hooks, torch ignores hooks added since "
        f"(torch._dynamo.config.skip_nnmodule_hook_guards): "
        f"register hooks before its first call, or call torch._dynamo.reset(). A model "
        f"that had hooks then recompiles at each change instead.",
        CompiledModelWarning,
        stacklevel=stacklevel_outside_hookbus(),
    )
