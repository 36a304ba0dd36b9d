"""The published step-time figures (tests/data/published_time.json, written by ``python -m bench.data.published_time
--write``; issue 38's evaluation set): the file's shape, that it is the script's entries, and that every entry's
`vramplan estimate` arguments give a valid plan. Not accuracy: the step-time model is judged against these figures
elsewhere (the script prints each error)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from bench.data.published_time import EXCLUDED, REQUIRED, entries, kernel_entries, predict
from tests.conftest import DATA

PUBLISHED = json.loads((DATA / "published_time.json").read_text())
FIGURES: list[dict[str, Any]] = PUBLISHED["figures"]
CASES = {c["id"]: c for c in json.loads((DATA / "published" / "cases.json").read_text())}


def test_the_file_is_the_scripts_entries() -> None:
    """Equal to what the script builds, but `params` (where the source gives none, --write fills vramplan's count
    of the plan's model and says so in `params_source`)."""
    script = {e["id"]: json.loads(json.dumps(e)) for e in entries()}
    assert [f["id"] for f in FIGURES] == list(script)
    for f in FIGURES:
        e = script[f["id"]]
        if f["params_source"] == "published":
            assert f["params"] == e["params"]
        else:
            assert e["params"] is None and f["params_source"] == "vramplan's count of the plan's model"
        assert {k: v for k, v in f.items() if k not in ("params", "params_source")} == {
            k: v for k, v in e.items() if k != "params"
        }
    assert PUBLISHED["kernels"] == json.loads(json.dumps(kernel_entries()))
    assert PUBLISHED["excluded"] == EXCLUDED


def test_issue_38_coverage() -> None:
    """At least 40 figures from at least 6 sources, 124M to 405B parameters, short and long context (>= 32k),
    full training, LoRA, QLoRA, multi-node and RL steps."""
    assert len(FIGURES) >= 40 and len({f["group"] for f in FIGURES}) >= 6
    assert len({f["id"] for f in FIGURES}) == len(FIGURES)
    params = [f["params"] for f in FIGURES]
    assert min(params) < 130e6 and max(params) > 400e9
    seqs = [f["seq_len"] for f in FIGURES]
    assert min(seqs) <= 2048 and sum(s >= 32768 for s in seqs) >= 5
    methods = {f["method"] for f in FIGURES}
    assert {"full", "lora", "qlora"} <= methods
    assert any(f["nodes"] > 1 for f in FIGURES)
    assert any(f["objective"] == "grpo" and f["compare"] == "step_seconds" for f in FIGURES)


@pytest.mark.parametrize("f", FIGURES, ids=[f["id"] for f in FIGURES])
def test_each_figure_is_complete(f: dict[str, Any]) -> None:
    assert set(REQUIRED) <= set(f), sorted(set(REQUIRED) - set(f))
    assert f["source"]["where"] and (f["source"].get("commit") or f["source"].get("via"))
    assert f["tokens_per_s_per_gpu"] > 0 and f["raw"]["value"] > 0 and f["raw"]["unit"]
    assert f["gpus"] >= f["nodes"] >= 1 and f["seq_len"] > 0 and f["params"] > 0
    assert f["compare"] in ("tokens_per_s_per_gpu", "step_seconds")
    if f["compare"] == "step_seconds":
        assert f["step_seconds"] > 0 and f["plan_steps_per_figure"] >= 1
    if f["derivation"] is None and f["raw"]["unit"] == "tokens/s/GPU":
        assert f["raw"]["value"] == f["tokens_per_s_per_gpu"]
    if f["step_seconds"] and f["plan_steps_per_figure"] == 1:
        # a published time per step: tokens/s/GPU is the step's tokens over that time
        tokens = f["global_batch"] * f["seq_len"]
        assert f["tokens_per_s_per_gpu"] == pytest.approx(tokens / f["step_seconds"] / f["gpus"], rel=1e-3)
    args = f["vramplan_args"]
    assert args[0] == "estimate" and args[-1] == "--json" and "--gpu" in args
    assert args[args.index("--gpu") + 1] == f["gpu_preset"]


@pytest.mark.parametrize("f", FIGURES, ids=[f["id"] for f in FIGURES])
def test_each_figure_is_a_valid_plan(f: dict[str, Any]) -> None:
    """The arguments resolve (built-in presets only) and the plan has a step time."""
    p = predict(f)
    assert p["tokens_per_s_per_gpu"] > 0 and p["step_seconds"] > 0
    if f["params_source"] != "published":
        assert p["params"] == f["params"]


def test_referenced_figures_are_the_cases() -> None:
    """The figures taken by reference equal their case's `published_tokens_per_s_per_gpu` in the copy of
    ../shared/published (fms-fsdp's four arrived there later: checked by --write against the shared file)."""
    refs = [f for f in FIGURES if f["from_case"]]
    checked = [f for f in refs if f["from_case"] in CASES]
    assert len(refs) == 19 and len(checked) >= 15
    for f in checked:
        assert CASES[f["from_case"]]["published_tokens_per_s_per_gpu"] == f["tokens_per_s_per_gpu"], f["id"]


def test_kernel_figures_are_apart() -> None:
    kernels = PUBLISHED["kernels"]
    assert kernels and all(k["kind"] == "kernel" and k["tflops"] > 0 and k["flops_formula"] for k in kernels)
    assert not {k["id"] for k in kernels} & {f["id"] for f in FIGURES}
    assert all(x["source"] and x["what"] and x["why"] for x in PUBLISHED["excluded"])
