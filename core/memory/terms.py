"""The unit of the estimate: a `Term` is one quantity of memory (its name, the kind it counts as, its bytes), with
its formula and source. The function that computes the bytes builds the term; the formula's text is made from its
parts only when someone reads it (`Term.formula`), so an estimate stays in microseconds. A mechanism (sharding,
an offload, a pool, a loss path) that changes a quantity returns a new term with its own part of the formula
appended (`Term.then`)."""

from __future__ import annotations

from typing import Any, NamedTuple

Part = tuple[str, tuple[Any, ...]]  # a str.format template and its arguments


class Term(NamedTuple):
    """One quantity of GPU memory: ``bytes`` of kind ``kind`` (`core.memory.kinds`), how it is computed and from
    which source."""

    name: str  # what it is ("parameters", "zero_buckets", ...): the kind's name for a kind's headline term
    kind: str
    bytes: int
    parts: tuple[Part, ...]  # the formula, formatted on demand
    source: str

    @property
    def formula(self) -> str:
        return "".join(template.format(*args) for template, args in self.parts)

    def then(self, template: str, *args: Any, bytes: int | None = None) -> Term:
        """This term after a mechanism changed it: its formula continued by ``template`` (formatted with
        ``args`` when read), its bytes ``bytes`` (unchanged when None)."""
        return self._replace(parts=(*self.parts, (template, args)), bytes=self.bytes if bytes is None else bytes)

    def sourced(self, source: str) -> Term:
        return self._replace(source=source)


def term(name: str, kind: str, n_bytes: int, template: str, *args: Any, source: str) -> Term:
    """A term whose formula starts with ``template`` (formatted with ``args`` when read)."""
    return Term(name, kind, n_bytes, ((template, args),), source)


def headline(kind: str, template: str, *args: Any, source: str) -> Term:
    """What a kind of memory is, in words: the term a kind's figure is explained by (its bytes are the kind's
    largest over the step, which the estimate adds when it shows the formula)."""
    return Term(kind, kind, 0, ((template, args),), source)
