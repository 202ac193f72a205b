"""docs/migrating/pluggy.md: each pluggy program and its hookbus port print the same,
or the page lists the difference under "What still differs"."""

from __future__ import annotations

import pytest
from side_by_side import Pair, check, pairs, peer_code, require

require("pluggy", "1.7")


@pytest.mark.parametrize("pair", pairs("pluggy"), ids=lambda pair: pair.name)
def test_the_port_prints_what_pluggy_prints_or_the_page_says_why(pair: Pair) -> None:
    check(pair, "pluggy")


def test_the_page_maps_every_pluggy_idiom() -> None:
    """What pluggy's users rely on is each run by a section, next to its port."""
    code = peer_code("pluggy")
    idioms = [
        "@hookspec",
        ".add_hookspecs(",
        ".register(",
        ".unregister(",
        "tryfirst=True",
        "trylast=True",
        "firstresult=True",
        "wrapper=True",
        "historic=True",
        ".call_historic(",
        "result_callback=",
        "optionalhook=True",
        ".check_pending(",
        "types.ModuleType(",
        ".subset_hook_caller(",
    ]
    missing = [idiom for idiom in idioms if idiom not in code]
    assert not missing, f"the pluggy page runs no {missing}"
