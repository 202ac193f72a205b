"""A migration page's programs, the peer's and its hookbus port, run side by side.

Each idiom a page maps is one section holding two console blocks: first the peer's
program, then its port to hookbus, each complete on its own. Both run here in a fresh
namespace, as a reader would run them, and what they print is compared. Where the two
print different things, the section must name the difference with a link to the page's
"What still differs" list (``[`None` results](#what-still-differs)``), and that list must
have an item of that name (``- **`None` results**: ...``): a difference a reader would
meet must be on the page, never found by surprise.
"""

from __future__ import annotations

import contextlib
import difflib
import doctest
import importlib.metadata
import io
import re
from typing import Dict, List, NamedTuple

import pytest
from doc_pages import DOCS, Block, Section, imported_modules, sections

import hookbus
from hookbus.pytest_plugin import isolate

MIGRATING = DOCS / "migrating"
STILL_DIFFERS = "what-still-differs"
_CITED = re.compile(r"\[([^\]]+)\]\(#" + STILL_DIFFERS + r"\)")
_LISTED = re.compile(r"^- \*\*(.+?)\*\*", re.M)


def require(peer: str, version: str) -> None:
    """Skip the calling test module unless ``peer`` is installed at ``version`` or later.

    The pages were checked against these versions; an older peer behaves otherwise in
    places (pyee before 13 raised removing a listener twice).
    """
    pytest.importorskip(peer, reason=f'{peer} is not installed (pip install -e ".[bench]")')
    installed = importlib.metadata.version(peer)
    parts = [int(part) for part in re.findall(r"\d+", installed)[:2]]
    wanted = [int(part) for part in version.split(".")]
    if parts < wanted:
        pytest.skip(
            f"the page maps {peer} {version}; {installed} is installed",
            allow_module_level=True,
        )


class Pair(NamedTuple):
    section: Section
    peer: Block
    port: Block

    @property
    def name(self) -> str:
        return self.section.anchor


def pairs(peer: str) -> List[Pair]:
    """The page's idioms: each section whose first block imports ``peer``."""
    found = []
    for section in sections(MIGRATING / f"{peer}.md"):
        if not section.blocks or peer not in imported_modules(section.blocks[0].source):
            continue
        where = f"{peer}.md#{section.anchor}"
        assert len(section.blocks) == 2, f"{where}: a peer's program, then its port, alone"
        peer_block, port = section.blocks
        imports = imported_modules(port.source)
        assert "hookbus" in imports, f"{where}: the second block is hookbus's port"
        assert peer not in imports, f"{where}: the port imports {peer}"
        found.append(Pair(section, peer_block, port))
    return found


def peer_code(peer: str) -> str:
    """The code of every block of the page that imports ``peer``."""
    return "\n".join(pair.peer.source for pair in pairs(peer))


def transcript(block: Block) -> str:
    """What the block prints, run as a console session in a fresh namespace.

    Each statement runs as the interactive interpreter runs it (an expression's value
    is shown); an error that escapes a statement is shown as its type and message.
    """
    namespace: Dict[str, object] = {"__name__": "migration"}
    output = io.StringIO()
    with isolate(hookbus.default_bus), contextlib.redirect_stdout(output):
        for example in doctest.DocTestParser().get_examples(block.source):
            try:
                exec(compile(example.source, "<page>", "single"), namespace)
            except Exception as error:
                print(f"raised {type(error).__name__}: {error}")
    return output.getvalue()


def listed_differences(peer: str) -> List[str]:
    """The names of the items of the page's "What still differs" list (in bold)."""
    (section,) = [s for s in sections(MIGRATING / f"{peer}.md") if s.anchor == STILL_DIFFERS]
    return _LISTED.findall("\n".join(section.prose))


def check(pair: Pair, peer: str) -> None:
    """The peer's program and its port print the same, or the page lists the difference."""
    listed = [name.casefold() for name in listed_differences(peer)]
    cited = _CITED.findall("\n".join(pair.section.prose))
    for name in cited:  # a name mid-sentence is written in lower case
        assert name.casefold() in listed, (
            f"#{pair.name} cites {name!r}, which 'What still differs' lacks"
        )
    theirs, ours = transcript(pair.peer), transcript(pair.port)
    if theirs != ours:
        lines = difflib.unified_diff(
            theirs.splitlines(), ours.splitlines(), peer, "hookbus", lineterm=""
        )
        diff = "\n".join(lines)
        assert cited, (
            f"#{pair.name}: the {peer} program and its hookbus port print different things, "
            f"and the section cites no item of 'What still differs':\n{diff}"
        )
