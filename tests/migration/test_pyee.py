"""docs/migrating/pyee.md: each pyee program and its hookbus port print the same,
or the page lists the difference under "What still differs"."""

from __future__ import annotations

import pytest
from side_by_side import Pair, check, pairs, peer_code, require

require("pyee", "13")


@pytest.mark.parametrize("pair", pairs("pyee"), ids=lambda pair: pair.name)
def test_the_port_prints_what_pyee_prints_or_the_page_says_why(pair: Pair) -> None:
    check(pair, "pyee")


def test_the_page_maps_every_pyee_idiom() -> None:
    """What pyee's users rely on is each run by a section, next to its port."""
    code = peer_code("pyee")
    idioms = [
        ".on(",
        ".once(",
        ".emit(",
        ".remove_listener(",
        ".remove_all_listeners(",
        ".listeners(",
        '.emit("error"',
        "AsyncIOEventEmitter",
        "enum.Enum",
        "pickle.dumps(",
        "ExecutorEventEmitter",
        '"new_listener"',
    ]
    missing = [idiom for idiom in idioms if idiom not in code]
    assert not missing, f"the pyee page runs no {missing}"
