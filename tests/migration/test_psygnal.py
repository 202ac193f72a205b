"""docs/migrating/psygnal.md: each psygnal program and its hookbus port print the same,
or the page lists the difference under "What still differs"."""

from __future__ import annotations

import pytest
from side_by_side import Pair, check, pairs, peer_code, require

require("psygnal", "0.16")


@pytest.mark.parametrize("pair", pairs("psygnal"), ids=lambda pair: pair.name)
def test_the_port_prints_what_psygnal_prints_or_the_page_says_why(pair: Pair) -> None:
    check(pair, "psygnal")


def test_the_page_maps_every_psygnal_idiom() -> None:
    """What psygnal's users rely on is each run by a section, next to its port."""
    code = peer_code("psygnal")
    idioms = [
        "Signal(float)",
        ".connect(",
        "priority=",
        ".disconnect(",
        "@kitchen.changed.connect",
        ".blocked(",
        "gc.collect()",
        "SignalGroup",
        ".all.connect(",
    ]
    missing = [idiom for idiom in idioms if idiom not in code]
    assert not missing, f"the psygnal page runs no {missing}"
