"""The estimator's memo caches: pure sub-results keyed on frozen inputs (a keystroke that changes one field
recomputes only what depends on it). `clear()` empties them (benchmarks measure cold estimates with it)."""

from __future__ import annotations


def clear() -> None:
    import importlib

    from core import activations, arch, stage_acts, states

    estimate = importlib.import_module("core.estimate")  # the package exports the function under this name
    for fn in (
        arch.build_arch,
        activations.layer_saved,
        activations.embed_saved,
        activations.head_saved,
        states.model_states,
        stage_acts.stage_acts,
        estimate._phases,
        estimate._stage_peak,
        states.stages,
    ):
        fn.cache_clear()
