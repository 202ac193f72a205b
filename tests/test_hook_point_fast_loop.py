"""The hook-point wrapper's direct loop does what its slow twin, ``call_with_hooks``, does.

Plain sync hooks run in the wrapper's own inline loop (``_hookpoint.py``); an open
trace sends the same calls to the general loop (``_dispatch.call_with_hooks``).
For every mix of hook behaviours, both give the same calls, result and error.
"""

from __future__ import annotations

from typing import Any, Callable, List, Optional, Tuple

from hypothesis import given
from hypothesis import strategies as st

from hookbus import CallContext, EventBus

PRE = ["none", "value", "raise", "skip", "args", "result"]
POST = ["none", "value", "raise", "replace"]


def _outcome(
    pre: List[str], post: List[str], call_raises: bool, recover: Optional[bool], general: bool
) -> Tuple[List[Any], Any]:
    bus = EventBus()
    log: List[Any] = []

    def work(x: int) -> int:
        log.append(("call", x))
        if call_raises:
            raise KeyError(x)
        return x * 10

    hooked = bus.wrap(work, "work")

    def make_pre(index: int, behaviour: str) -> Callable[[CallContext], Any]:
        def hook(ctx: CallContext) -> Any:
            log.append(("pre", index, ctx.args, ctx.skipped))
            if behaviour == "value":
                return index
            if behaviour == "raise":
                raise ValueError(f"pre {index}")
            if behaviour == "skip":
                ctx.skip(-index)
            if behaviour == "args":
                ctx.args = (ctx.args[0] + 1,)
            if behaviour == "result":
                ctx.result = 5
            return None

        hook.__qualname__ = f"pre{index}"
        return hook

    def make_post(index: int, behaviour: str) -> Callable[[CallContext], Any]:
        def hook(ctx: CallContext) -> Any:
            log.append(("post", index, ctx.result, ctx.skipped, ctx.recovered))
            if behaviour == "value":
                return index
            if behaviour == "raise":
                raise ValueError(f"post {index}")
            if behaviour == "replace":
                ctx.result = (ctx.result, index)
            return None

        hook.__qualname__ = f"post{index}"
        return hook

    for index, behaviour in enumerate(pre):
        bus.pre("work", make_pre(index, behaviour))
    for index, behaviour in enumerate(post):
        bus.post("work", make_post(index, behaviour))
    if recover is not None:

        def on_error(ctx: CallContext) -> None:
            log.append(("exception", type(ctx.exception).__name__))
            if recover:
                ctx.recover("recovered")

        bus.exception("work", on_error)
    error = None
    try:
        if general:
            with bus.trace():
                result = hooked(1)
        else:
            result = hooked(1)
            plan = hooked.__hookbus_point__.plan  # type: ignore[attr-defined]
            assert plan is None or plan.direct
        log.append(("result", result))
    except Exception as raised:
        error = (type(raised).__name__, str(raised), getattr(raised, "__notes__", []))
    return log, error


@given(
    st.lists(st.sampled_from(PRE), max_size=3),
    st.lists(st.sampled_from(POST), max_size=3),
    st.booleans(),
    st.sampled_from([None, False, True]),
)
def test_direct_hook_point_loop_matches_call_with_hooks(
    pre: List[str], post: List[str], call_raises: bool, recover: Optional[bool]
) -> None:
    direct = _outcome(pre, post, call_raises, recover, general=False)
    general = _outcome(pre, post, call_raises, recover, general=True)
    assert direct == general
