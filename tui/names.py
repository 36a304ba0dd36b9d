"""Preset names that fit a column: one rule for GPU and model names, keeping each unique among the presets shown.

A name is shortened only while it is too long, step by step: the vendor prefix goes (``NVIDIA ``, ``AMD Instinct
``...), then what is in parentheses (``(HGX)``, ``(one GCD)``), then common words (``Generation``), and last the
end is cut (``…``). Each step is taken only if what it leaves is no other preset's name at any step (nor, cut, the
start of one): ``RTX 6000 Ada Generation`` is ``RTX 6000 Ada`` in 16 columns, ``H100 80GB SXM5`` stays whole.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from functools import lru_cache

from vramplan.core.plan.catalogue import presets
from vramplan.core.plan.describe import short_gpu_name

COMMON_WORDS = ("Generation", "Edition")
_PARENTHESES = re.compile(r"\s*\([^)]*\)")
_WORDS = re.compile(r"\s*\b(?:" + "|".join(COMMON_WORDS) + r")\b")


def forms(name: str) -> Iterator[str]:
    """The name, then each shorter form of the rule's steps (repeated forms left out)."""
    seen = {name}
    yield name
    form = name
    for step in (short_gpu_name, lambda n: _PARENTHESES.sub("", n), lambda n: _WORDS.sub("", n).strip()):
        form = step(form)
        if form and form not in seen:
            seen.add(form)
            yield form


@lru_cache(maxsize=512)
def abbreviated(name: str, names: tuple[str, ...], width: int) -> str:
    """``name`` in at most ``width`` columns, told apart from every other name of ``names`` (the presets shown):
    its longest form of the rule (`forms`) that fits and is no other name's form; else a form cut with ``…`` (after
    a whole word if it can) where the part kept starts no other name's form; else its start and end around a
    ``…``. A name that fits is kept whole."""
    if len(name) <= width:
        return name
    others = {f for n in names if n != name for f in forms(n)}
    own = list(forms(name))
    for form in own:
        if len(form) <= width and form not in others:
            return form
    for head in _heads(own, width):
        if not any(o.startswith(head) for o in others):
            return head + "…"
    last = own[-1]
    for tail in range(1, width - 1):  # the end tells ``Llama-3.1-8B`` from ``Llama-3.1-70B``
        cut = f"{last[: width - 1 - tail]}…{last[-tail:]}"
        if not any(o.startswith(cut[: width - 1 - tail]) and o.endswith(last[-tail:]) for o in others):
            return cut
    return last[:width]


def _heads(own: list[str], width: int) -> Iterator[str]:
    """The starts a form may be cut to, with room for the ``…``: whole words first, shortest form first (it loses
    the least to the cut), then the longest start of each."""
    for form in reversed(own):
        words = form.split(" ")
        for k in range(len(words) - 1, 0, -1):
            head = " ".join(words[:k])
            if len(head) < width:
                yield head
                break
    for form in reversed(own):
        yield form[: max(1, width - 1)].rstrip()


def gpu_names() -> tuple[str, ...]:
    """Every GPU preset's name (the registry's order)."""
    return tuple(g.name for g in presets.registry().sorted_gpus())


def model_names() -> tuple[str, ...]:
    """Every model preset's name (the registry's order)."""
    return tuple(m.name for m in presets.registry().sorted_models())


def short_gpu(name: str, width: int) -> str:
    """A GPU preset's name without its vendor (as the planner's lists show it), abbreviated to ``width``."""
    short = short_gpu_name(name)
    return abbreviated(short, tuple(short_gpu_name(n) for n in gpu_names()), width)


def short_model(name: str, width: int) -> str:
    """A model preset's name abbreviated to ``width`` (a custom or modified model's name is cut the same way)."""
    return abbreviated(name, model_names(), width)
