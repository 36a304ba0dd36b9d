"""Reading a config file safely: a regular file under a size limit, JSON or YAML (PyYAML's ``safe_load``, so no
object construction), refused with one line when it holds alias bombs (billion laughs) or deep nesting."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from vramplan.core.plan.helpers.errors import PlanError
from vramplan.core.plan.helpers.jsonio import TOO_MANY_DIGITS, loads_json, too_many_digits
from vramplan.core.plan.helpers.readfile import read_regular

if TYPE_CHECKING:  # PyYAML is imported when a YAML text is read (`parse_text`): 12-17 ms the Open dialog spared
    import yaml

MAX_BYTES = 1 << 20  # 1 MiB: training configs are a few KiB
MAX_DEPTH = 32  # nesting of mappings and lists
MAX_NODES = 100_000  # nodes as seen when every alias is expanded (an alias bomb expands to billions)
MAX_ALIASES = 100


def read_text(path: str | Path) -> str:
    """The text of a regular file of at most `MAX_BYTES` (`core.plan.helpers.readfile.read_regular`: no FIFO, device or
    directory is opened for reading, the size is bounded as it is read); anything else is a `PlanError` naming the
    file."""
    data = read_regular(path, MAX_BYTES)
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise PlanError(f"not UTF-8 text (byte {exc.start})", str(path)) from None


def _check_yaml_nodes(root: yaml.Node, where: str) -> None:
    """Refuse alias bombs and deep nesting before anything is constructed: count the nodes as every alias
    expands them (PyYAML's composer makes an alias the same node object, reached again)."""
    import yaml

    seen_ids: set[int] = set()
    aliases = 0
    count = 0
    stack: list[tuple[yaml.Node, int]] = [(root, 1)]
    while stack:
        node, depth = stack.pop()
        count += 1
        if count > MAX_NODES:
            raise PlanError(f"more than {MAX_NODES:,} values once its aliases are expanded (an alias bomb?)", where)
        if depth > MAX_DEPTH:
            raise PlanError(f"nested deeper than {MAX_DEPTH} levels", where)
        if isinstance(node, yaml.CollectionNode):
            if id(node) in seen_ids:
                aliases += 1
                if aliases > MAX_ALIASES:
                    raise PlanError(f"more than {MAX_ALIASES} aliases (an alias bomb?)", where)
            seen_ids.add(id(node))
            if isinstance(node, yaml.MappingNode):
                for key, value in node.value:
                    stack.append((key, depth + 1))
                    stack.append((value, depth + 1))
            else:
                stack.extend((child, depth + 1) for child in node.value)


def _depth(value: Any, limit: int) -> int:
    stack: list[tuple[Any, int]] = [(value, 1)]
    deepest = 0
    while stack:
        v, d = stack.pop()
        deepest = max(deepest, d)
        if deepest > limit:
            return deepest
        if isinstance(v, dict):
            stack.extend((x, d + 1) for x in v.values())
        elif isinstance(v, list):
            stack.extend((x, d + 1) for x in v)
    return deepest


def parse_text(text: str, where: str, as_json: bool) -> Any:
    """The data of a JSON or YAML text; every failure is one `PlanError` naming ``where``."""
    if as_json:
        data = loads_json(text, where)
        if _depth(data, MAX_DEPTH) > MAX_DEPTH:
            raise PlanError(f"nested deeper than {MAX_DEPTH} levels", where)
        return data
    import yaml

    try:
        nodes = list(yaml.compose_all(text, Loader=yaml.SafeLoader))
        if len(nodes) > 1:
            raise PlanError("holds several YAML documents; a config is one", where)
        if nodes and nodes[0] is not None:
            _check_yaml_nodes(nodes[0], where)
        return yaml.safe_load(text)
    except RecursionError:
        raise PlanError(f"nested deeper than {MAX_DEPTH} levels", where) from None
    except ValueError as exc:  # PyYAML's int() of a number of more than 4,300 digits
        if not too_many_digits(exc):
            raise
        raise PlanError(f"not valid YAML: {TOO_MANY_DIGITS}", where) from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        at = f" (line {mark.line + 1}, column {mark.column + 1})" if mark is not None else ""
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise PlanError(f"not valid YAML: {problem}{at}", where) from None


def read_data(path: str | Path) -> tuple[Any, bool]:
    """A config file's data and whether it was JSON (by content: a JSON file starts with ``{``; YAML, a superset,
    reads the rest)."""
    text = read_text(path)
    as_json = text.lstrip().startswith("{") or str(path).lower().endswith(".json")
    return parse_text(text, str(path), as_json), as_json
