"""docs/migrating/blinker.md: each blinker program and its hookbus port print the same,
or the page lists the difference under "What still differs"."""

from __future__ import annotations

import pytest
from side_by_side import Pair, check, pairs, peer_code, require

require("blinker", "1.9")


@pytest.mark.parametrize("pair", pairs("blinker"), ids=lambda pair: pair.name)
def test_the_port_prints_what_blinker_prints_or_the_page_says_why(pair: Pair) -> None:
    check(pair, "blinker")


def test_the_page_maps_every_blinker_idiom() -> None:
    """What blinker's users rely on is each run by a section, next to its port."""
    code = peer_code("blinker")
    idioms = [
        ".signal(",
        ".connect(",
        ".send(",
        ".disconnect(",
        "sender=",
        ".connected_to(",
        ".muted(",
        ".has_receivers_for(",
        ".receivers_for(",
        ".send_async(",
        "gc.collect()",
    ]
    missing = [idiom for idiom in idioms if idiom not in code]
    assert not missing, f"the blinker page runs no {missing}"
