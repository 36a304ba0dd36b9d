"""``vramplan trace --lengths DIST``: the sequence length of each micro-batch of each traced step, since real batches
vary. Pure Python (the CLI checks the spec before torch is imported).

The spec (lengths as ``training.seq_len`` takes them: ``4096``, ``4k``, ``32K``):

- ``plan`` (the default): every micro-batch is the plan's ``training.seq_len``;
- ``N``: every micro-batch N tokens;
- ``A,B,C``: step k's micro-batches are the k-th length (cycling);
- ``uniform:A-B``: each micro-batch a length drawn uniformly from A to B (seeded, so a run repeats), rounded up to
  a multiple of 64 (``uniform:A-B/R`` to round to R instead).

A batch is ``micro_batch_size`` sequences of the drawn length (a padded or packed batch of that length).
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from vramplan.core.plan.helpers.field_values import parse_count

MAX_TOKENS = 1 << 22  # 4M tokens: far beyond any context, a bound on what is typed


class LengthsError(ValueError):
    """A spec that does not parse: its message is one line for the user."""


@dataclass(frozen=True)
class Lengths:
    """A parsed spec: ``kind`` is ``plan``, ``fixed``, ``cycle`` or ``uniform``."""

    kind: str
    values: tuple[int, ...] = ()
    low: int = 0
    high: int = 0
    multiple: int = 64

    def draw(self, seq_len: int, steps: int, micro_batches: int, seed: int = 0) -> tuple[tuple[int, ...], ...]:
        """Each step's micro-batch lengths (`seq_len`: the plan's)."""
        if self.kind == "plan":
            return tuple((seq_len,) * micro_batches for _ in range(steps))
        if self.kind in ("fixed", "cycle"):
            return tuple((self.values[k % len(self.values)],) * micro_batches for k in range(steps))
        rng = random.Random(seed)
        m = self.multiple
        return tuple(
            tuple(min(-(-rng.randint(self.low, self.high) // m) * m, MAX_TOKENS) for _ in range(micro_batches))
            for _ in range(steps)
        )

    def describe(self) -> str:
        if self.kind == "plan":
            return "the plan's seq_len"
        if self.kind in ("fixed", "cycle"):
            return ", ".join(f"{v:,}" for v in self.values) + (" (cycling by step)" if self.kind == "cycle" else "")
        return f"uniform {self.low:,} to {self.high:,}, rounded up to {self.multiple}"


def _length(text: str) -> int:
    try:
        value = parse_count("training.seq_len", text.strip())
    except (ValueError, TypeError):
        value = None
    if value is None or not 1 <= value <= MAX_TOKENS:
        raise LengthsError(f"--lengths: {text.strip()[:40]!r} is not a length from 1 to {MAX_TOKENS:,} tokens")
    return value


def parse_lengths(spec: str) -> Lengths:
    """The spec (see the module docstring); raises `LengthsError` with one line."""
    text = spec.strip()
    if text in ("", "plan"):
        return Lengths("plan")
    if text.startswith("uniform:"):
        body, _, multiple = text[len("uniform:") :].partition("/")
        low, sep, high = body.partition("-")
        if not sep:
            raise LengthsError(f"--lengths: expected uniform:A-B, got {text[:40]!r}")
        lo, hi = _length(low), _length(high)
        if lo > hi:
            raise LengthsError(f"--lengths: {lo:,} is above {hi:,}")
        m = _length(multiple) if multiple else 64
        return Lengths("uniform", low=lo, high=hi, multiple=m)
    values = tuple(_length(v) for v in text.split(","))
    return Lengths("fixed" if len(values) == 1 else "cycle", values)
