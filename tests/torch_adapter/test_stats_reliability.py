"""Regression tests of issue 20, items 2 and 4-9: stats() on a shared bus, reset, lifetime,
float8, merging reduced statistics, copying and saving.

Items 1-3 across ranks (layout agreement, merge then reduce, NaN) are checks of
``distributed_checks.py``, run by test_distributed.py.
"""

from __future__ import annotations

import copy
import gc
import io
import pickle
import weakref
from typing import Any, Callable, Iterator

import pytest
import torch
from torch import nn

import hookbus
import hookbus.torch as ht


@pytest.fixture
def no_collector() -> Iterator[None]:
    """Only reference counting frees objects: a cycle then shows as a leak."""
    gc.collect()
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


def reduced_state(model: nn.Module, rows: int) -> dict[str, Any]:
    """A state_dict of statistics marked as reduced across ranks (what reduce() leaves)."""
    with ht.stats(model, "0") as st:
        model(torch.ones(rows, 2))
    state = st.state_dict()
    state["reduced"] = True
    return state


# --- item 2: merge keeps the mark that says "reduced already" -----------------------------


def test_merging_reduced_statistics_into_empty_ones_keeps_them_reduced() -> None:
    model = nn.Sequential(nn.Identity())
    reduced = ht.stats(model, "0")
    reduced.load_state_dict(reduced_state(model, 6))
    total = ht.stats(model, "0")
    total.merge(reduced)
    assert total["0"].count == 6
    assert "reduced across ranks" in repr(total)
    # Reducing again would count the 6 values once per rank.
    with pytest.raises(RuntimeError, match="reduced across ranks already"):
        total.reduce()
    # Reduced into reduced (epochs of a global run) stays reduced too.
    total.merge(reduced)
    assert total["0"].count == 12
    assert total.state_dict()["reduced"] is True


def test_merging_reduced_and_local_statistics_is_refused_both_ways() -> None:
    model = nn.Sequential(nn.Identity())
    reduced = ht.stats(model, "0")
    reduced.load_state_dict(reduced_state(model, 6))
    with ht.stats(model, "0") as local:
        model(torch.zeros(2, 2))
    with pytest.raises(ValueError, match=r"reduced across ranks.*local"):
        local.merge(reduced)
    with pytest.raises(ValueError, match=r"reduced across ranks.*local"):
        reduced.merge(local)
    assert local["0"].count == 2
    assert reduced["0"].count == 6


# --- item 4: two Stats on one bus -------------------------------------------------------


def test_two_stats_on_one_bus_start_and_stop_independently() -> None:
    bus = hookbus.EventBus()
    model = nn.Sequential(nn.Linear(2, 2))
    first = ht.stats(model, "0", bus=bus)
    second = ht.stats(model, "0", bus=bus)
    first.start()
    second.start()
    model(torch.ones(3, 2))
    first.stop()
    assert second.active
    model(torch.ones(5, 2))
    assert second.active
    second.stop()
    assert first["0"].count == 3
    assert second["0"].count == 8
    assert bus.hooks() == []
    first.start()  # either can start again
    model(torch.ones(1, 2))
    first.stop()
    assert first["0"].count == 4
    ht.attach(model, bus).detach()  # the last one out detached the model ("already attached")


def test_stats_leave_an_attachment_they_did_not_make_attached() -> None:
    bus = hookbus.EventBus()
    model = nn.Sequential(nn.Linear(2, 2))
    net = ht.attach(model, bus)
    with ht.stats(model, "0", bus=bus) as first:
        with ht.stats(model, "0", bus=bus):
            model(torch.ones(1, 2))
        assert net.active
        assert first.active
        model(torch.ones(1, 2))
    assert first["0"].count == 2
    assert net.active  # the user's attachment stays


# --- item 5: two models on one bus --------------------------------------------------------


@pytest.mark.parametrize("of", ["output", "input", "grad"])
def test_statistics_count_only_the_model_they_were_asked_for(of: str) -> None:
    bus = hookbus.EventBus()
    mine, other = nn.Sequential(nn.Linear(2, 2)), nn.Sequential(nn.Linear(2, 2))
    with ht.stats(mine, "0", of=of, bus=bus) as st, ht.stats(other, "0", of=of, bus=bus) as theirs:
        other(torch.ones(100, 2, requires_grad=True)).sum().backward()
        mine(torch.ones(3, 2, requires_grad=True)).sum().backward()
    assert st["0"].count == 3
    assert theirs["0"].count == 100


# --- item 6: reset forgets the feature size -----------------------------------------------


def test_reset_lets_the_next_forward_have_another_width() -> None:
    model = nn.Sequential(nn.Identity())
    with ht.stats(model, "0") as st:
        model(torch.ones(2, 4))
        st.reset()
        model(torch.full((3, 6), 2.0))  # raised inside the model's forward before the fix
    assert st["0"].count == 3
    assert st["0"].shape == (6,)
    assert torch.equal(st["0"].mean, torch.full((6,), 2.0, dtype=torch.float64))


# --- item 7: lifetime -------------------------------------------------------------------


@pytest.mark.parametrize("of", ["output", "input", "grad"])
def test_stopped_and_dropped_statistics_go_at_once_with_their_buffers(
    of: str, no_collector: None
) -> None:
    model = nn.Sequential(nn.Linear(2, 2))
    st = ht.stats(model, "0", of=of)
    st.start()
    model(torch.ones(3, 2, requires_grad=True)).sum().backward()
    with st.pause():
        pass
    st.stop()
    assert st["0"].count == 3
    gone = weakref.ref(st)
    del st
    assert gone() is None


# --- item 8: every dtype is reduced or skipped with a note ---------------------------------

FLOAT8 = [
    getattr(torch, name)
    for name in ("float8_e4m3fn", "float8_e5m2", "float8_e4m3fnuz", "float8_e5m2fnuz",
                 "float8_e8m0fnu")
    if hasattr(torch, name)
]  # fmt: skip


@pytest.mark.parametrize("dtype", FLOAT8, ids=str)
def test_float8_outputs_are_reduced_exactly(dtype: torch.dtype) -> None:
    model = nn.Sequential(nn.Identity())
    batches = [(torch.randn(n, 3) * 4 + 8).to(dtype) for n in (5, 2, 7)]
    with ht.stats(model, "0") as st:
        for x in batches:
            assert model(x) is x  # the forward goes through untouched
    values = torch.cat([x.double() for x in batches])
    stat = st["0"]
    assert stat.count == 14
    torch.testing.assert_close(stat.mean, values.mean(0), rtol=1e-12, atol=0.0)
    torch.testing.assert_close(stat.var, values.var(0, correction=0), rtol=1e-9, atol=1e-12)
    assert torch.equal(stat.min, values.amin(0))
    assert torch.equal(stat.max, values.amax(0))
    assert st.skipped == {}


def test_a_float_dtype_without_arithmetic_is_skipped_with_a_note() -> None:
    dtype = getattr(torch, "float4_e2m1fn_x2", None)
    if dtype is None:
        pytest.skip("this torch has no float4_e2m1fn_x2")
    model = nn.Sequential(nn.Identity())
    with ht.stats(model, "0") as st:
        model(torch.empty(4, 2, dtype=dtype))
    assert "0" not in st
    assert st.skipped == {"0": "float4_e2m1fn_x2 output (torch has no arithmetic for it)"}


# --- item 9: copying and saving ------------------------------------------------------------


def _save(st: ht.Stats) -> None:
    torch.save(st, io.BytesIO())


@pytest.mark.parametrize(
    "how",
    [copy.copy, copy.deepcopy, pickle.dumps, _save],
    ids=["copy", "deepcopy", "pickle", "torch.save"],
)
def test_copying_or_saving_statistics_is_refused_pointing_to_state_dict(
    how: Callable[[ht.Stats], Any],
) -> None:
    model = nn.Sequential(nn.Identity())
    with ht.stats(model, "0") as st:
        model(torch.ones(2, 2))
    with pytest.raises(TypeError, match=r"cannot be copied or pickled.*state_dict\(\)"):
        how(st)
    assert st["0"].count == 2
