"""Units. Everything inside vramplan is an integer number of bytes; GiB appear only at display time."""

from __future__ import annotations

import math
import re

KiB = 1024
MiB = 1024**2
GiB = 1024**3


def gib(n_bytes: int | float) -> float:
    return n_bytes / GiB


def gib_text(n_bytes: int | float, digits: int = 1) -> str:
    """``16.6`` (GiB, no unit): per-GPU figures with a fixed number of decimals (the planner, tables, reports)."""
    return f"{n_bytes / GiB:.{digits}f}"


def fmt_gib(n_bytes: int | float, digits: int = 1) -> str:
    """``12.3 GiB``; small values get more digits so they never read as zero."""
    value = n_bytes / GiB
    if 0 < abs(value) < 0.1 and digits < 3:
        return f"{value:.3f} GiB"
    return f"{value:.{digits}f} GiB"


def fmt_bytes(n_bytes: int | float) -> str:
    """Human-readable size with the largest sensible binary unit."""
    value = float(n_bytes)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(value) < 1024 or unit == "TiB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.2f} {unit}"
        value /= 1024
    raise AssertionError("unreachable")


def fmt_count(n: int) -> str:
    """Parameter and token counts: ``2.00 T``, ``6.74 B``, ``131.1 M``, ``4,096``."""
    if n >= 10**12:
        return f"{n / 1e12:.2f} T"
    if n >= 10**9:
        return f"{n / 1e9:.2f} B"
    if n >= 10**6:
        return f"{n / 1e6:.1f} M"
    return f"{n:,}"


def fmt_steps(n: int) -> str:
    """``1 step``, ``12,207 steps``."""
    return f"{n:,} step" + ("" if n == 1 else "s")


def fmt_seconds(seconds: float) -> str:
    """Durations, microseconds to days: ``850 us``, ``12.3 ms``, ``1.25 s``, ``4.2 min``, ``12.3 h``, ``21.0 days``."""
    if seconds < 1e-3:
        return f"{seconds * 1e6:.0f} us"
    if seconds < 1:
        return f"{seconds * 1e3:.1f} ms"
    if seconds < 120:
        return f"{seconds:.2f} s"
    if seconds < 7200:
        return f"{seconds / 60:.1f} min"
    if seconds < 3 * 86400:
        return f"{seconds / 3600:.1f} h"
    return f"{seconds / 86400:.1f} days"


# Suffixes a number may carry: 2T tokens, 300B, 45% (of one).
_SCALE = {"k": 1e3, "m": 1e6, "b": 1e9, "g": 1e9, "t": 1e12, "%": 0.01}
_BINARY = {"k": 1024.0, "m": 1024.0**2}
_WHOLE = re.compile(r"[+-]?[0-9]+")  # digits only, read exactly (float() would round past 2**53)
_NAMES = (("T", 10**12), ("B", 10**9), ("M", 10**6), ("K", 10**3))


def parse_number(text: str, integer: bool = False, binary: bool = False) -> float | int | None:
    """``2T`` -> 2e12, ``45%`` -> 0.45, ``1e9``, ``2,000``, ``2_048``, ``$2.5``; empty -> None (unset). ValueError
    says what a number looks like. ``binary``: K and M are 1024 and 1024**2 (a sequence length: ``4k`` = 4096,
    ``32K`` = 32768, as context lengths are named)."""
    t = text.strip().replace("_", "").replace(",", "").removeprefix("$").strip()
    if not t:
        return None
    scale = _SCALE.get(t[-1].lower(), 1.0)
    if binary and t[-1].lower() in _BINARY:
        scale = _BINARY[t[-1].lower()]
    if scale != 1.0:
        t = t[:-1].strip()
    if integer and scale >= 1 and len(t) < 4300 and _WHOLE.fullmatch(t):
        return int(t) * int(scale)  # exact: 10**25 typed is 10**25, not float's 10000000000000000905969664
    try:
        value = float(t) * scale
    except ValueError:
        examples = "2048, 4k, 2_048, 1e3, 300B" if integer else "0.4, 45%, 1e12, 2T (empty: unset)"
        raise ValueError(f"enter a number: {examples}") from None
    if not math.isfinite(value):
        raise ValueError("enter a finite number")
    if integer:
        if value != round(value):
            raise ValueError("enter a whole number (4k, 300B, 1e9)")
        return round(value)
    return value


def number_text(value: float | int, integer: bool = False) -> str:
    """How a plan's number is shown in its field: ``2T`` for 2,000,000,000,000 tokens, ``0.45``."""
    if integer:
        for name, size in _NAMES:
            if value >= size:  # the largest suffix, when it is exact to three decimals
                return f"{value / size:g}{name}" if (value * 1000) % size == 0 else str(value)
        return str(value)
    return f"{value:g}"
