"""The argument forms of the built-in ``edit`` tool (pi 1.6.0 ``edit.js``).

pi 1.6's schema is ``{"path", "edits": [{"oldText", "newText"}, ...]}``, and its
``prepareArguments`` still accepts what models send from older prompts: a top-level
``oldText``/``newText`` pair, ``edits`` as a JSON string, ``edits`` as one object.
The supervisor normalises a call before validating it against the schema; the tool
worker applies the same function to what it is given directly (``pi tool``).
Standard library only: the worker imports this module.
"""

from __future__ import annotations

__all__ = ["is_single_edit", "prepare_edit_arguments"]


def prepare_edit_arguments(params: dict) -> dict:
    """pi 1.6.0's ``prepareArguments`` for ``edit``: the forms models send, made into
    ``{"path", "edits": [{"oldText", "newText"}, ...]}``.

    ``edits`` given as a JSON string or as one object becomes a list; a top-level
    ``oldText``/``newText`` pair (the single-edit form of pi before 1.6) is appended
    to ``edits``. Anything else is returned unchanged for the schema to judge.
    Returns a new dict; ``params`` is not modified.
    """
    if not isinstance(params, dict):
        return params
    args = dict(params)
    edits = args.get("edits")
    if isinstance(edits, str):
        import json

        try:
            parsed = json.loads(edits)
        except ValueError:
            parsed = None
        if isinstance(parsed, list):
            args["edits"] = parsed
        elif is_single_edit(parsed):
            args["edits"] = [parsed]
    elif is_single_edit(edits):
        args["edits"] = [edits]
    if not (isinstance(args.get("oldText"), str) and isinstance(args.get("newText"), str)):
        return args
    listed = list(args["edits"]) if isinstance(args.get("edits"), list) else []
    listed.append({"oldText": args.pop("oldText"), "newText": args.pop("newText")})
    args["edits"] = listed
    return args


def is_single_edit(value: object) -> bool:
    """Whether ``value`` is one ``{"oldText": str, "newText": str}`` edit."""
    return (
        isinstance(value, dict)
        and isinstance(value.get("oldText"), str)
        and isinstance(value.get("newText"), str)
    )
