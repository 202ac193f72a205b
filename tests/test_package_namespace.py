"""What ``import hookbus`` shows a user at the prompt: ``dir()`` and ``help()``."""

from __future__ import annotations

import inspect
import pydoc
import re
import types

import pytest

import hookbus


def test_dir_of_the_package_lists_its_public_names_and_submodules_only() -> None:
    # ("@py_builtins" and the like are pytest's assertion rewriting, not hookbus's.)
    public = {name for name in dir(hookbus) if name.isidentifier() and not name.startswith("_")}
    submodules = {  # hookbus.torch, hookbus.training...: those imported so far
        name
        for name in public
        if isinstance(getattr(hookbus, name), types.ModuleType)
        and getattr(hookbus, name).__name__ == f"hookbus.{name}"
    }
    assert public - submodules == set(hookbus.__all__), sorted(public - set(hookbus.__all__))


@pytest.mark.parametrize("method", ["on", "pre", "post", "exception", "around"])
def test_help_shows_the_registration_options_by_name(method: str) -> None:
    """``help(hookbus.on)`` spells out the options, not ``**options: Any``."""
    function = getattr(hookbus, method)
    shown = pydoc.render_doc(function, renderer=pydoc.plaintext)
    options = {"priority": 0, "once": False, "target": None, "weak": False, "optional": False}
    if method == "on":
        options["with_name"] = False
    for option, default in options.items():
        found = re.search(rf"\b{option}: '(\w+)' = (\w+)", shown)
        assert found, f"help(hookbus.{method}) lacks {option}:\n{shown[:600]}"
        assert found.group(2) == repr(default)
    assert ("with_name" in shown.split("\n\n")[1]) == (method == "on")
    assert "**options" not in shown
    # The spelled-out signature is the one that runs: every option it shows is taken.
    parameters = inspect.signature(function).parameters
    keyword_only = [name for name, p in parameters.items() if p.kind is p.KEYWORD_ONLY]
    bus = hookbus.EventBus()
    if method in {"pre", "post", "exception", "around"}:
        bus.hookable("point")(lambda: None)
    hook = (lambda ctx: (yield)) if method == "around" else (lambda *args: None)
    handle = getattr(bus, method)(
        "point", hook, **{name: parameters[name].default for name in keyword_only}
    )
    assert handle.active
