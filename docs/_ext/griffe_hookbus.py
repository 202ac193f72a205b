"""A Griffe extension that lets mkdocstrings render hookbus's docstrings as written.

hookbus's docstrings follow the Google style, with two habits mkdocstrings
doesn't read on its own:

* an ``Example:`` section (singular), which Griffe would take for an admonition,
  rendering its ``>>>`` lines as nested block quotes: it becomes ``Examples:``,
  which Griffe renders as Python console blocks;
* Sphinx roles (``:class:`EventBus```, ``:meth:`emit```): each becomes a
  cross-reference to the documented object when it can be found, else plain code;
* a paragraph ending in ``:`` or ``::`` followed by an indented block (outside the
  Google sections): the block becomes a fenced one, ``pycon`` when it starts with
  ``>>>``, else ``text``, since Markdown would show an unlabelled block unhighlighted.
"""

from __future__ import annotations

import contextlib
import re
from typing import Any, List

import griffe

_EXAMPLE_HEADER = re.compile(r"^(\s*)Example:\s*$", re.MULTILINE)
_ROLE = re.compile(r":(?:class|meth|func|attr|data|obj|mod|exc):`~?([\w.]+)`")
_CALLABLE_ROLES = (":meth:", ":func:")
# A paragraph's last line (not indented) ending in ":" or "::", a blank line, then
# lines indented by 4 (or blank). A Google section header has no blank line after it.
_INDENTED_BLOCK = re.compile(r"^(\S[^\n]*?):?:\n\n((?:(?: {4}[^\n]*)?\n)+)", re.MULTILINE)
PACKAGE = "hookbus"


class HookbusDocstrings(griffe.Extension):
    """Rewrite ``Example:`` headers and Sphinx roles before the docstrings are parsed."""

    def on_object(self, *, obj: griffe.Object, loader: griffe.GriffeLoader, **kwargs: Any) -> None:
        self._rewrite(obj, loader)

    def on_package(
        self, *, pkg: griffe.Module, loader: griffe.GriffeLoader, **kwargs: Any
    ) -> None:
        self._rewrite(pkg, loader)  # on_object skips the top package itself

    def _rewrite(self, obj: griffe.Object, loader: griffe.GriffeLoader) -> None:
        if obj.docstring is None:
            return
        text = _EXAMPLE_HEADER.sub(r"\1Examples:", obj.docstring.value + "\n")
        text = _INDENTED_BLOCK.sub(_fence, text).rstrip("\n")
        obj.docstring.value = _ROLE.sub(lambda m: self._reference(m, obj, loader), text)

    def _reference(self, match: re.Match[str], obj: griffe.Object, loader: Any) -> str:
        name = match.group(1)
        title = f"`{name}()`" if match.group(0).startswith(_CALLABLE_ROLES) else f"`{name}`"
        owner = obj if obj.is_class else obj.parent
        # A method the class inherits (EventBus gets some from helper classes) is shown
        # on the class's page, under the class's own name.
        if owner is not None and owner.is_class and "." not in name:
            with contextlib.suppress(Exception):  # an unresolvable base: try the others
                if name not in owner.members and name in owner.all_members:
                    return f"[{title}][{_public_module(owner)}.{owner.name}.{name}]"
        for candidate in _candidates(name, obj):
            try:
                loader.modules_collection.get_member(candidate)
            except (KeyError, ValueError, griffe.AliasResolutionError, griffe.CyclicAliasError):
                continue
            return f"[{title}][{candidate}]"
        return title


def _fence(match: re.Match[str]) -> str:
    lines = match.group(2).rstrip("\n").split("\n")
    code = "\n".join(line[4:] for line in lines)
    language = "pycon" if code.startswith(">>>") else "text"
    return f"{match.group(1)}:\n\n```{language}\n{code}\n```\n\n"


def _candidates(name: str, obj: griffe.Object) -> List[str]:
    """Where ``name`` may live, as the public paths the API page documents."""
    if name.startswith(f"{PACKAGE}.") or name == PACKAGE:
        return [name]
    owner = obj if obj.is_class else obj.parent
    found: List[str] = []
    if owner is not None and owner.is_class:
        found.append(f"{_public_module(owner)}.{owner.name}.{name}")
    found.append(f"{_public_module(obj)}.{name}")
    found.append(f"{PACKAGE}.{name}")
    return found


def _public_module(obj: griffe.Object) -> str:
    """The module path without private parts: hookbus._bus -> hookbus."""
    module = obj.module.path
    parts = [part for part in module.split(".") if not part.startswith("_")]
    return ".".join(parts)
