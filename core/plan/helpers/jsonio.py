"""Reading JSON text with one-line errors: the one JSON parser of vramplan's inputs (a model's config.json, the
training configs of `core.files.importers`). Python's own limits are its failures too: an integer of more than
4,300 digits (``int()`` refuses to convert it: a plain ValueError, "Exceeds the limit"), nesting deep enough to
exhaust the stack, and ``NaN``/``Infinity`` (Python writes them; JSON has none)."""

from __future__ import annotations

from typing import Any

from vramplan.core.plan.helpers.errors import PlanError

TOO_MANY_DIGITS = "a number with more than 4,300 digits"  # Python's int-conversion limit (sys.get_int_max_str_digits)


def too_many_digits(exc: ValueError) -> bool:
    """Whether ``exc`` is Python refusing to convert a number of more than 4,300 digits (a parser's ``int()``)."""
    return "integer string conversion" in str(exc) or "digits" in str(exc)


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON number")


def loads_json(text: str, where: str, constants: bool = False) -> Any:
    """The data of a JSON text; every failure is one `PlanError` naming ``where``. ``constants``: read ``NaN`` and
    ``Infinity`` as Python's json does (a model's config.json, which Hugging Face wrote with them)."""
    import json  # here: `tomlio` shares this module's wording, and the planner's first frame loads no json

    try:
        return json.loads(text) if constants else json.loads(text, parse_constant=_no_constant)
    except json.JSONDecodeError as exc:
        raise PlanError(f"not valid JSON: {exc.msg} (line {exc.lineno}, column {exc.colno})", where) from None
    except RecursionError:
        raise PlanError("not readable: objects or arrays nested too deeply", where) from None
    except ValueError as exc:  # NaN / Infinity, or int("9" * 5000)
        what = TOO_MANY_DIGITS if too_many_digits(exc) else str(exc)
        raise PlanError(f"not valid JSON: {what}", where) from None
