"""The memo registry: every cached pure function of vramplan registers here, so caches can be emptied without
reaching into the modules that hold them.

`memoised` is `functools.lru_cache` plus registration in a group: ``"estimate"`` for the estimator's sub-results
(keyed on frozen inputs: a keystroke that changes one field recomputes only what depends on it), ``"presets"`` for
what is read from disk or from ``nvidia-smi`` (the preset registry, the detected GPUs). `clear` empties one group
(benchmarks measure cold estimates with ``clear("estimate")``); `vramplan.core.plan.catalogue.presets.reload` empties
both."""

from __future__ import annotations

from collections.abc import Callable
from functools import lru_cache
from typing import Any, Protocol, TypeVar

F = TypeVar("F", bound=Callable[..., Any])


class _Cached(Protocol):
    def cache_clear(self) -> None: ...


_GROUPS: dict[str, list[_Cached]] = {}


def memoised(maxsize: int | None = 1024, *, group: str = "estimate") -> Callable[[F], F]:
    """``functools.lru_cache(maxsize)``, registered in `group` (results must not be mutated by callers)."""

    def wrap(fn: F) -> F:
        cached = lru_cache(maxsize=maxsize)(fn)
        _GROUPS.setdefault(group, []).append(cached)
        return cached  # type: ignore[return-value]

    return wrap


def clear(group: str = "estimate") -> None:
    """Empty every registered cache of `group` (those of modules not imported yet hold nothing)."""
    for cached in _GROUPS.get(group, ()):
        cached.cache_clear()
