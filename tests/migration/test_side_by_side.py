"""side_by_side.require: a page's test module is skipped, never an error, where the peer
is missing or older than the version the page maps."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest_plugins = ["pytester"]

HERE = Path(__file__).parent


@pytest.mark.parametrize(
    ("peer", "version"),
    [("pluggy", "999.0"), ("a_peer_that_is_not_installed", "1.0")],
    ids=["peer-too-old", "peer-missing"],
)
def test_a_page_module_is_skipped_whole_when_its_peer_does_not_fit(
    pytester: pytest.Pytester, peer: str, version: str
) -> None:
    pytester.makepyfile(
        test_page=f"""
        import sys
        sys.path[:0] = [{str(HERE)!r}, {str(HERE.parent)!r}]
        from side_by_side import require

        require({peer!r}, {version!r})

        def test_never_runs():
            raise AssertionError("the module should have been skipped")
        """
    )
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-rs")
    result.assert_outcomes(skipped=1)
    result.stdout.fnmatch_lines([f"*SKIPPED*{peer}*"])
