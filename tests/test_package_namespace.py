"""What ``import hookbus`` shows a user at the prompt: ``dir()`` and ``help()``."""

from __future__ import annotations

import types

import hookbus


def test_dir_of_the_package_lists_its_public_names_and_submodules_only() -> None:
    # ("@py_builtins" and the like are pytest's assertion rewriting, not hookbus's.)
    public = {name for name in dir(hookbus) if name.isidentifier() and not name.startswith("_")}
    submodules = {name for name in public if isinstance(getattr(hookbus, name), types.ModuleType)}
    assert public - submodules == set(hookbus.__all__), sorted(public - set(hookbus.__all__))
    assert submodules <= {"adapter", "bridges", "pytest_plugin", "torch", "training"}
