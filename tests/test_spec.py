"""The rules behind declared events, for every signature: does a hook accept a spec, and do
emit's arguments bind to it.

Each rule is checked against Python's own argument binding over every call shape that
the generated signatures can tell apart (names from a small pool plus one "other").
"""

from __future__ import annotations

import inspect
import itertools
from inspect import Parameter, Signature
from typing import Any, Dict, List, Optional, Tuple

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hookbus._spec import (
    bad_arguments,
    bind,
    code_shape,
    format_spec,
    hook_mismatch,
    make_binder,
    spec_of,
)

NAMES = ("a", "b", "c", "d")
OTHER = "zz"  # a keyword that no generated signature names

Call = Tuple[int, Tuple[str, ...]]


@st.composite
def signatures(draw: Any) -> Signature:
    """Any valid signature over NAMES: positional-only, positional-or-keyword, *args,
    keyword-only and **kwargs parameters, with or without defaults."""
    names = list(draw(st.permutations(NAMES)))
    counts = draw(st.lists(st.integers(0, 2), min_size=3, max_size=3))
    if sum(counts) > len(NAMES):
        counts = [min(c, 1) for c in counts]
    params: List[Parameter] = []
    default_started = False
    kinds = (Parameter.POSITIONAL_ONLY, Parameter.POSITIONAL_OR_KEYWORD)
    for kind, count in zip(kinds, counts[:2]):
        for _ in range(count):
            default_started = default_started or draw(st.booleans())
            default = None if default_started else Parameter.empty
            params.append(Parameter(names.pop(), kind, default=default))
    if draw(st.booleans()):
        params.append(Parameter("args", Parameter.VAR_POSITIONAL))
    for _ in range(counts[2]):
        default = None if draw(st.booleans()) else Parameter.empty
        params.append(Parameter(names.pop(), Parameter.KEYWORD_ONLY, default=default))
    if draw(st.booleans()):
        params.append(Parameter("kwargs", Parameter.VAR_KEYWORD))
    return Signature(params)


def all_calls() -> List[Call]:
    """Every call shape: 0-5 positionals, and any set of keywords from NAMES and OTHER."""
    keywords = (*NAMES, OTHER)
    subsets = [
        combo
        for size in range(len(keywords) + 1)
        for combo in itertools.combinations(keywords, size)
    ]
    return [(count, combo) for count in range(6) for combo in subsets]


CALLS = all_calls()


def binds(signature: Signature, call: Call, *, prefix: int = 0) -> bool:
    count, keywords = call
    try:
        bind(signature, tuple(range(count + prefix)), dict.fromkeys(keywords))
    except TypeError:
        return False
    return True


def test_bind_binds_as_a_call_does() -> None:
    def hook(d: Any = None, /, **kwargs: Any) -> Any:
        return kwargs

    assert hook(d=1) == {"d": 1}
    bind(inspect.signature(hook), (), {"d": 1})  # Signature.bind raises here before 3.13
    with pytest.raises(TypeError, match="positional only"):
        bind(inspect.signature(lambda d, /: None), (), {"d": 1})


def hook_with(signature: Signature) -> Any:
    def hook(*args: Any, **kwargs: Any) -> None:
        pass  # pragma: no cover - never called, only inspected

    hook.__signature__ = signature  # type: ignore[attr-defined]
    return hook


def failing_call(spec: Signature, hook: Signature, prefix: int) -> Optional[Call]:
    for call in CALLS:
        if binds(spec, call) and not binds(hook, call, prefix=prefix):
            return call
    return None


@settings(max_examples=300, deadline=None)
@given(signatures(), signatures(), st.booleans())
def test_a_hook_is_accepted_exactly_when_every_call_of_the_spec_binds_to_it(
    spec: Signature, hook: Signature, with_name: bool
) -> None:
    """hook_mismatch is None if and only if no call that binds to the spec fails on the hook
    (with_name hooks get one more positional argument first)."""
    mismatch = hook_mismatch(hook_with(hook), "e", spec, with_name=with_name)
    witness = failing_call(spec, hook, prefix=1 if with_name else 0)
    assert (mismatch is None) == (witness is None), (str(spec), str(hook), mismatch, witness)


@settings(max_examples=300, deadline=None)
@given(signatures())
def test_the_emit_binder_raises_exactly_when_arguments_do_not_bind(spec: Signature) -> None:
    binder = make_binder(spec, "e")
    for count, keywords in CALLS:
        kwargs: Dict[str, Any] = dict.fromkeys(keywords)
        try:
            binder(*range(count), **kwargs)
        except TypeError:
            bound = False
        else:
            bound = True
        assert bound == binds(spec, (count, keywords)), (str(spec), count, keywords)
        assert (bad_arguments("e", spec, tuple(range(count)), kwargs) is None) == bound


@settings(max_examples=100, deadline=None)
@given(signatures())
def test_the_binder_has_the_specs_signature(spec: Signature) -> None:
    shown = inspect.signature(make_binder(spec, "e"))
    assert [(p.name, p.kind, p.default is Parameter.empty) for p in shown.parameters.values()] == [
        (p.name, p.kind, p.default is Parameter.empty) for p in spec.parameters.values()
    ]


@settings(max_examples=300, deadline=None)
@given(signatures(), signatures())
def test_functions_of_equal_code_shape_accept_exactly_the_same_calls(
    one: Signature, other: Signature
) -> None:
    """The emit fast path lets a first hook of the spec's code shape check the arguments."""
    first, second = make_binder(one, "a"), make_binder(other, "b")
    if code_shape(first) != code_shape(second):  # type: ignore[arg-type]
        return
    for call in CALLS:
        assert binds(one, call) == binds(other, call), (str(one), str(other), call)


def test_code_shape_reads_the_code_not_wrapped_or_signature() -> None:
    import functools

    def inner(x: int) -> None: ...

    @functools.wraps(inner)
    def wrapper(*args: Any, **kwargs: Any) -> None: ...

    assert str(inspect.signature(wrapper)) == str(inspect.signature(inner))
    assert code_shape(wrapper) != code_shape(inner)  # type: ignore[arg-type]


def test_the_mismatch_names_a_failing_call_and_the_reason() -> None:
    def spec(user: str, *, admin: bool = False) -> None: ...

    signature = inspect.signature(spec)
    assert hook_mismatch(lambda user, admin=False: None, "e", signature) is None
    assert hook_mismatch(lambda *args, **kwargs: None, "e", signature) is None
    assert hook_mismatch(lambda user, **kwargs: None, "e", signature) is None
    assert hook_mismatch(lambda user: None, "e", signature) == (
        "called as hook(user, admin=...) it fails: got an unexpected keyword argument 'admin'"
    )
    assert hook_mismatch(lambda user, extra: None, "e", signature) == (
        "called as hook(user) it fails: missing a required argument: 'extra'"
    )
    assert hook_mismatch(lambda: None, "e", signature) == (
        "called as hook(user) it fails: too many positional arguments"
    )
    # A name passed as a keyword must be the hook's name for it.
    assert hook_mismatch(lambda person, admin=False: None, "e", signature) == (
        "called as hook(user=...) it fails: missing a required argument: 'person' (the spec "
        "lets callers pass 'user' by name; if they never do, make it positional-only in the "
        "stub: 'user, /')"
    )


def test_a_hook_whose_signature_python_cannot_tell_is_accepted() -> None:
    class Opaque:
        __signature__ = property(lambda self: (_ for _ in ()).throw(ValueError("no")))

        def __call__(self, *args: Any) -> None: ...

    assert hook_mismatch(Opaque(), "e", inspect.signature(lambda x: None)) is None


def test_bad_arguments_names_the_event_the_spec_and_what_was_passed() -> None:
    def spec(user: str, *, admin: bool = False) -> None: ...

    error = bad_arguments("user.created", inspect.signature(spec), ("ada", 1), {})
    assert error is not None
    assert str(error) == (
        "event 'user.created' was emitted with arguments that don't match its spec "
        "user.created(user: str, *, admin: bool = False): got (str, int), "
        "too many positional arguments; no hook was called"
    )


def test_format_spec_drops_the_return_annotation_and_quotes() -> None:
    def spec(x: int, *rest: str, flag: bool = True, **extra: Any) -> None: ...

    assert format_spec("e", inspect.signature(spec)) == (
        "e(x: int, *rest: str, flag: bool = True, **extra: Any)"
    )


@pytest.mark.parametrize(
    ("stub", "message"),
    [
        (print, "needs a function as its stub, got builtin_function_or_method"),
        ("user.created", "needs a function as its stub, got str"),
        (len, "needs a function as its stub"),
    ],
)
def test_a_stub_that_is_not_a_function_is_refused(stub: Any, message: str) -> None:
    with pytest.raises(TypeError, match=message):
        spec_of(stub, "event()")


def test_an_async_stub_is_refused_saying_hooks_may_still_be_async() -> None:
    async def signup(user: str) -> None: ...

    with pytest.raises(TypeError, match=r"is 'async def'.*hooks may still be async"):
        spec_of(signup, "event()")
