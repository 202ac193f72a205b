"""The torch adapter's rows of the table of what is valid where.

Three kinds of hook the core does not have (a module's backward and gradient
hooks), and four kinds of point: a module, an operation call inside a module's
forward, every module call of the process (``every_module``), and a name of the
vocabulary (``"blocks.0.attn.hook_z"``), a value rather than a call. Declared once,
at import, through the seam; the points' ``kinds`` and refusals read these rows.
"""

from __future__ import annotations

from ..adapter import PLAIN, HookKind, PointKind, add_hook_kind, add_point_kind, hook_kind

__all__ = ["EVERY_MODULE_POINT", "MODULE_POINT", "NAME_POINT", "OPERATION_POINT"]

_CONTEXT = "`hook(ctx)`, a `CallContext`"
_OPTIONS = hook_kind("pre").options  # the options every hook around a call takes

for _kind in (
    HookKind(
        "backward_pre",
        "backward_pre",
        PLAIN,
        True,
        _OPTIONS,
        _CONTEXT + ": `ctx.args` is `grad_output`",
    ),
    HookKind(
        "backward",
        "backward",
        PLAIN,
        True,
        _OPTIONS,
        _CONTEXT + ": `ctx.args` is `grad_output`, `ctx.result` `grad_input`",
    ),
    HookKind(
        "grad",
        "grad",
        PLAIN,
        True,
        _OPTIONS,
        _CONTEXT + ": `ctx.result` is the gradient of one output tensor",
    ),
):
    add_hook_kind(_kind)

_CALL_HOOKS = ("around", "pre", "post", "exception")
_WARNS = "warns: torch raises the error all the same"
_NEVER_ASYNC = "never (torch calls hooks synchronously)"

MODULE_POINT = add_point_kind(
    PointKind(
        "module",
        (*_CALL_HOOKS, "backward_pre", "backward", "grad"),
        "a module of an attached model (`hookbus.torch.attach`)",
        "the module",
        None,
        _WARNS,
        _NEVER_ASYNC,
        False,
    )
)
"""A module of an attached model."""

OPERATION_POINT = add_point_kind(
    PointKind(
        "operation",
        _CALL_HOOKS,
        "one call of a torch operation inside a selected module's forward "
        '(`"<module>:<operation>.<index>"`)',
        "the module",
        None,
        "yes: the post hooks then run on the value",
        _NEVER_ASYNC,
        True,
    )
)
"""The ``index``-th call of an operation in a module's forward (``net.operations``)."""

EVERY_MODULE_POINT = add_point_kind(
    PointKind(
        "every module",
        _CALL_HOOKS,
        "every module call of the process (`hookbus.torch.every_module`); pre hooks see "
        "`ctx.args` only",
        "the module called",
        "ctx.skip() needs the module's own hook point: attach its model and register "
        "there; hooks on every module cannot skip one",
        _WARNS,
        _NEVER_ASYNC,
        False,
    )
)
"""torch's global module hooks, as one point."""

NAME_POINT = add_point_kind(
    PointKind(
        "name",
        ("post",),
        "a name of the vocabulary of a model attached with names "
        '(`"blocks.0.attn.hook_z"`): a value, not a call; `ctx.result` is the value',
        "the module whose hook found the value",
        "a name of the vocabulary is a value, not a call: post hooks replace it with "
        "ctx.result = ...; to skip a module, hook the module itself",
        "no exception hooks run there (a value, not a call)",
        _NEVER_ASYNC,
        True,
    )
)
"""A name of the vocabulary: post hooks read and replace its value."""
