"""Errors that reach the user as one clear line (CLI: stderr + exit code 2; TUI: next to the field)."""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # pydantic is imported by the modules that validate, not by every importer of this one
    from pydantic import ValidationError


MAX_SHOWN = 80  # characters of a user's value echoed in an error line
MAX_MESSAGE = 600  # an error line's message is cut here (a safety net: values are cut to MAX_SHOWN first)
MAX_WHERE = 300  # the file and key an error names
MAX_PROBLEMS = 4  # problems of one input named in its one line; the rest counted
LINE_BUDGET = 600  # characters of that line past its first problem's (a longer one is counted, not named)


def printable(text: str, keep: str = "") -> str:
    """``text`` with control characters (terminal escape sequences, newlines, C1 codes, bidirectional overrides)
    written as escapes (``\\x1b``), but those in ``keep`` (``"\\n"``: a report's lines): the one sanitiser of text
    that reaches a terminal, so a name read from a file or a program never sets a terminal's title or clears its
    screen. The CLI passes everything it prints through it (`vramplan.cli.parser.run`); the planner shows what
    was sanitised where it was read (preset files, config.json names, nvidia-smi's GPU names)."""
    probe = text
    for ch in keep:
        probe = probe.replace(ch, " ")
    if probe.isprintable():  # the common case, at C speed
        return text
    return "".join(ch if ch.isprintable() or ch == " " or ch in keep else ascii(ch)[1:-1] for ch in text)


def clip(text: str, limit: int = MAX_SHOWN) -> str:
    """``text`` cut to about ``limit`` characters, saying how much was left out."""
    if len(text) <= limit:
        return text
    return f"{text[: limit - 20]}... ({len(text):,} characters)"


def shown(value: object, limit: int = MAX_SHOWN) -> str:
    """A user's value as an error line echoes it: as written in a file (``[1, "a"]``, a date as ISO 8601, never
    ``datetime.datetime(...)``), cut to ``limit`` characters, control characters escaped. A huge integer is
    described, not printed (Python refuses to print one of more than 4,300 digits)."""
    if isinstance(value, str) and len(value) > limit:
        return printable(repr(value[:limit]))[: limit - 25] + f"... ({len(value):,} characters)"
    parts: list[str] = []
    _render(value, parts, limit + 1, 0)
    return clip(printable("".join(parts)), limit)


def _render(value: object, parts: list[str], budget: int, depth: int) -> int:
    """Append ``value``'s text to ``parts``, stopping once ``budget`` characters are written; the budget left."""
    if budget <= 0:
        return 0
    if isinstance(value, list | tuple | dict) and depth < 8:
        items = list(value.items()) if isinstance(value, dict) else list(value)
        parts.append("{" if isinstance(value, dict) else "[")
        budget -= 1
        for i, item in enumerate(items):
            if budget <= 0:
                break
            if i:
                parts.append(", ")
                budget -= 2
            if isinstance(value, dict):
                key, item = item
                budget = _render(key, parts, budget, depth + 1)
                parts.append(": ")
                budget -= 2
            budget = _render(item, parts, budget, depth + 1)
        parts.append("}" if isinstance(value, dict) else "]")
        return budget - 1
    if isinstance(value, int) and not isinstance(value, bool) and value.bit_length() > 256:
        digits = int(math.log10(abs(value))) + 1
        digits -= 10 ** (digits - 1) > abs(value)  # log10 rounds up just below a power of ten
        text = f"a {digits}-digit number"
    elif isinstance(value, list | tuple | dict):
        text = "[...]"
    elif callable(getattr(value, "isoformat", None)):
        text = value.isoformat()  # type: ignore[attr-defined]
    elif isinstance(value, str) and len(value) > budget:
        text = repr(value[:budget]) + f"... ({len(value):,} characters)"
    else:
        text = repr(value)
    parts.append(text)
    return budget - len(text)


def _shared_prefix(lines: list[str]) -> str:
    """The ``where: `` that every line starts with (the file all of an input's problems are in), else ""."""
    head = lines[0].split(": ", 1)[0] + ": "
    return head if len(lines) > 1 and all(x.startswith(head) and len(x) > len(head) for x in lines) else ""


class PlanError(ValueError):
    """A problem with user input: a plan file, a key, a value, a preset id.

    `where` names the file and/or the dotted key (``plan.toml: training.seq_len``); `message` says what is wrong
    and, where we can, what would be right. Both are made safe to print: control characters escaped, cut to a
    few hundred characters (values echoed in a message are cut to `MAX_SHOWN` by `shown`).
    """

    def __init__(self, message: str, where: str | None = None, others: tuple[PlanError, ...] = ()) -> None:
        self.message = clip(printable(message), MAX_MESSAGE)
        self.where = clip(printable(where), MAX_WHERE) if where is not None else None
        self.others = others  # the input's further problems (every bad key of a file), named in `full_line`
        super().__init__(self.line())

    def first_line(self) -> str:
        return f"{self.where}: {self.message}" if self.where else self.message

    def line(self) -> str:
        """The first problem, and how many more there are (``... (and 2 more problems)``)."""
        n = len(self.others)
        return self.first_line() + (f" (and {n} more problem{'s' if n > 1 else ''})" if n else "")

    def full_line(self) -> str:
        """Every problem in one line (the CLI's stderr), the file they share named once: at most `MAX_PROBLEMS`
        within `LINE_BUDGET` characters (the first always), then ``and N more``
        (``p.toml: training.a: unknown key | training.b: must be ...``)."""
        every = [self.first_line(), *(e.first_line() for e in self.others)]
        prefix = _shared_prefix(every)
        text, n = every[0], 1
        for x in every[1:MAX_PROBLEMS]:
            if len(text) + len(x) - len(prefix) > LINE_BUDGET or (n == MAX_PROBLEMS - 1 and len(every) > MAX_PROBLEMS):
                break
            text, n = text + " | " + x[len(prefix) :], n + 1
        return text + (f" | and {len(every) - n} more" if len(every) > n else "")

    def at(self, where: str) -> PlanError:
        """The same error located more precisely (``file`` prefixed to the key)."""
        others = tuple(e.at(where) for e in self.others)
        return PlanError(self.message, f"{where}: {self.where}" if self.where else where, others)


class PlanNotice(UserWarning):
    """Something the user should know that is not an error (e.g. an exported plan's estimate changed).

    Core code emits it with `warnings.warn`; the CLI prints each as one line on stderr without changing the exit
    code, the TUI shows it next to the plan. `core.files.planio.load_plan_file` returns them instead of warning.
    """


def suggest(name: str, choices: Iterable[str], cutoff: float = 0.5) -> str:
    """``; did you mean llama-7b?`` when a name is close to one of `choices` (`difflib`'s similarity ratio at least
    ``cutoff``), else empty."""
    import difflib  # a misspelt name only: most commands never suggest one

    close = difflib.get_close_matches(name, list(choices), n=3, cutoff=cutoff)
    return f"; did you mean {', '.join(close)}?" if close else ""


def pydantic_error(
    exc: ValidationError, known_keys: Callable[[list[str]], list[str]], model: type | None = None
) -> PlanError:
    """Every problem of a pydantic `ValidationError` as a `PlanError` naming its dotted key (the first, the others
    in its ``others``): an unknown key gets close matches among ``known_keys(parent_path)``; a whole number too
    large to read (``1e30``) the field's bound, looked up in ``model``'s fields, as other out-of-range numbers."""
    every = exc.errors()
    # the items of one list (``lora_targets = [1, 2]``) are one value's problem: its first item's, counted
    items: dict[tuple[Any, ...], list[Any]] = {}
    for err in every:
        items.setdefault(tuple(part for part in err["loc"] if not isinstance(part, int)), []).append(err)
    every = [same[0] for same in items.values()]
    # the other items counted once each (an item of a union type fails once per member)
    more = {id(same[0]): len({_indices(e["loc"]) for e in same}) - 1 for same in items.values()}
    # a key missing is said when first (a preset that does not load leaves them all missing: not said each)
    errors = [
        _with_more_items(_one_error(err, known_keys, model), more[id(err)])
        for i, err in enumerate(every)
        if not i or err["type"] != "missing"
    ]
    unique = list({e.first_line(): e for e in errors}.values())
    listed: set[str] = set()  # a table's known keys, said once
    for i, e in enumerate(unique):
        head, sep, known = e.message.partition(" (known: ")
        if sep and known in listed:
            unique[i] = PlanError(head, e.where)
        listed.add(known)
    return PlanError(unique[0].message, unique[0].where, tuple(unique[1:]))


def _indices(loc: tuple[Any, ...]) -> tuple[int, ...]:
    """Which item of which list a pydantic error's location names: its integer parts."""
    return tuple(part for part in loc if isinstance(part, int))


def _with_more_items(error: PlanError, more: int) -> PlanError:
    """``training.lora_targets.0: must be a string (got 1) (and 1 more item)``: a list's other bad items counted."""
    if not more:
        return error
    return PlanError(f"{error.message} (and {more} more item{'s' if more > 1 else ''})", error.where)


def _upper_bound(model: type | None, loc: list[str]) -> str:
    """``less than or equal to 1000000``: the ``le``/``lt`` of the field at ``loc`` in a pydantic ``model`` (the
    tables' models nested in it), or ""."""
    fields: dict[str, Any] = getattr(model, "model_fields", {})
    info = None
    for part in loc:
        info = fields.get(part)
        if info is None:
            return ""
        fields = getattr(info.annotation, "model_fields", {})
    for bound in getattr(info, "metadata", ()):
        if getattr(bound, "le", None) is not None:
            return f"less than or equal to {bound.le}"
        if getattr(bound, "lt", None) is not None:
            return f"less than {bound.lt}"
    return ""


def _one_error(err: Any, known_keys: Callable[[list[str]], list[str]], model: type | None) -> PlanError:
    loc = [str(x) for x in err["loc"]]
    ctx_error = (err.get("ctx") or {}).get("error")
    if isinstance(ctx_error, PlanError):
        return PlanError(ctx_error.message, ctx_error.where or ".".join(loc) or None)
    loc = [clip(printable(part)) for part in loc]  # an unknown key may be 20 KB long
    key = ".".join(loc)
    if err["type"] == "extra_forbidden":
        parent = loc[:-1]
        known = known_keys(parent)
        hint = suggest(loc[-1], known) if known else ""
        what = "table" if not parent else "key"
        known_list = f" (known: {', '.join(known)})" if known else ""
        return PlanError(f"unknown {what}{hint or ''}" + ("" if hint else known_list), key)
    msg = _PLAIN.get(err["type"], err["msg"]).replace("Input should be", "must be")
    if err["type"] == "int_parsing_size":  # 1e30 for a count: past 2**63, pydantic's words name its parser
        bound = _upper_bound(model, loc)
        msg = f"must be {bound}" if bound else "must be a whole number of at most 2**63 - 1"
    if msg.startswith("Value error, "):
        msg = msg[len("Value error, ") :]
    if err["type"] == "missing":
        msg = "missing (no preset gives it)" if loc and loc[0] == "model" else "missing"
    if "input" in err and err["type"] not in ("missing",) and not isinstance(err["input"], dict):
        msg = f"{msg} (got {shown(err['input'])})"
    return PlanError(msg, key or None)


# pydantic's wording where it names Python or pydantic internals ("instance of HardwareConfig")
_PLAIN = {
    "model_type": "must be a table",
    "model_attributes_type": "must be a table",
    "dict_type": "must be a table",
    "finite_number": "must be a finite number (not inf or nan)",
    "int_type": "must be a whole number",
    "int_parsing": "must be a whole number",
    "int_from_float": "must be a whole number",
    "float_type": "must be a number",
    "float_parsing": "must be a number",
    "bool_type": "must be true or false",
    "bool_parsing": "must be true or false",
    "string_type": "must be a string",
    "tuple_type": "must be a list",
    "list_type": "must be a list",
}
