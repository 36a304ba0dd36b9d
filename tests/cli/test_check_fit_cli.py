"""`vramplan check` and `vramplan fit`: exit codes, JSON contracts, and every suggestion verified through
`vramplan estimate PLAN --set ...`."""

from __future__ import annotations

import json
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from tests.hostile import strict_json
from vramplan.cli.parser import run

ROOT = Path(__file__).resolve().parents[2]

OVER = """
[model]
preset = "llama-7b"

[hardware]
gpu = "a100-80gb"
gpus_per_node = 8

[training]
micro_batch_size = 4

[strategy]
zero_stage = 0
gradient_checkpointing = "none"
"""

PLANS = {
    "ddp-7b": OVER,
    "70b-zero3": '[model]\npreset = "llama-2-70b"\n\n[strategy]\nzero_stage = 3\ngradient_checkpointing = "full"\n',
    "bloom-4090": (
        '[model]\npreset = "bloom-7b1"\n\n[hardware]\ngpu = "rtx-4090"\ngpus_per_node = 2\n\n'
        '[training]\nseq_len = 4096\nprecision = "fp32"\n\n[strategy]\nattention = "eager"\n'
    ),
    "8b-full-4090": (  # torchtune's full fine-tune on one RTX 4090, before its memory flags
        '[model]\npreset = "llama-3-8b"\n\n[hardware]\ngpu = "rtx-4090"\ngpus_per_node = 1\n\n'
        '[training]\nprecision = "bf16-pure"\n\n[strategy]\nzero_stage = 0\ngradient_checkpointing = "none"\n'
    ),
    "qwen-long-tight": (  # fits with 9% free: suggestions must leave 10%
        '[model]\npreset = "qwen2.5-7b"\n\n[training]\nmicro_batch_size = 3\nseq_len = 8192\n\n'
        '[strategy]\nzero_stage = 3\ngradient_checkpointing = "full"\n\n[overhead]\ncuda_context_mib = 5120\n'
    ),
}


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    cmd = [sys.executable, "-m", "vramplan", *args]
    return subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, timeout=60)


def json_of(args: list[str], capsys: pytest.CaptureFixture[str], code: int = 0) -> dict:
    assert run(args) == code
    out = capsys.readouterr().out
    return strict_json(out)  # exactly one JSON object


# -- vramplan check ---------------------------------------------------------------------------------------------


def test_check_exit_codes(tmp_plan, capsys: pytest.CaptureFixture[str]) -> None:
    assert run(["check"]) == 0  # the default plan: warnings and by-hand items, nothing fails
    out = capsys.readouterr().out
    for heading in ("Out of memory", "NaN loss", "Slow training"):
        assert f"\n{heading}\n" in out
    assert max(len(line) for line in out.splitlines()) <= 90
    assert run(["check", str(tmp_plan(OVER))]) == 1  # over capacity: the checklist fails a review
    out = capsys.readouterr().out
    assert "FAIL  Fits in GPU memory" in out and "--set strategy.zero_stage=3" in out


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["check", "missing.toml"], "missing.toml: no such file"),
        (["check", "--set", "strategy.zero_stage=7"], "strategy.zero_stage"),
        (["check", "--set", 'checklist.ticked=["slow.dataloader"]'], "did you mean slow.data_loading"),
        (["fit", "--set", "training.bogus=1"], "training.bogus: unknown key"),
        (["fit", "--limit", "x"], "expected a whole number of at least 1"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(args: list[str], expected: str) -> None:
    r = cli(*args)
    assert r.returncode == 2, r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and expected in lines[0] and "Traceback" not in r.stderr


def test_check_json_contract(tmp_plan, capsys: pytest.CaptureFixture[str]) -> None:
    data = json_of(["check", str(tmp_plan(OVER)), "--json"], capsys, code=1)
    assert data["summary"]["failing"] == ["oom.capacity"]
    items = data["items"]
    assert len(items) == 24  # oom.host_memory: the node's host memory and NVMe (issue 28.7)
    for item in items:
        assert {"id", "group", "status", "title", "detail", "fix"} <= set(item)
        assert item["group"] in ("oom", "nan", "slow") and item["status"] in ("ok", "warn", "fail", "manual")
        fix = item["fix"]
        if fix is not None:
            assert isinstance(fix["changes"], dict) and fix["changes"]
            assert isinstance(fix["memory_total"], int) and isinstance(fix["fits"], bool)
            assert isinstance(fix["relative_step_time"], float) and fix["effect"].startswith(fix["title"])
    capacity = next(i for i in items if i["id"] == "oom.capacity")
    assert capacity["status"] == "fail" and capacity["fix"]["fits"] is True


def test_check_json_ticked_items(capsys: pytest.CaptureFixture[str]) -> None:
    data = json_of(["check", "--json", "--set", 'checklist.ticked=["nan.data"]'], capsys)
    by_id = {i["id"]: i for i in data["items"]}
    assert by_id["nan.data"]["ticked"] is True and by_id["slow.data_loading"]["ticked"] is False
    assert "ticked" not in by_id["oom.capacity"]  # only by-hand items are ticked


# -- vramplan fit -----------------------------------------------------------------------------------------------


def test_fit_json_contract(tmp_plan, capsys: pytest.CaptureFixture[str]) -> None:
    data = json_of(["fit", str(tmp_plan(OVER)), "--json"], capsys)
    assert data["fits"] is False
    assert isinstance(data["max_micro_batch_size"], int) and data["max_micro_batch_size"] == 0
    assert data["min_gpus"] is None  # no sharding: more GPUs do not shrink what each holds
    assert 1 <= len(data["suggestions"]) <= 10
    for s in data["suggestions"]:
        assert {"title", "changes", "memory_total", "fits", "relative_step_time"} <= set(s)
        assert s["fits"] is True and isinstance(s["memory_total"], int)
    ranked = [(s["tier"] == 2, s["relative_step_time"]) for s in data["suggestions"]]
    assert ranked == sorted(ranked)  # one notion of fastest; a change of method after the same model
    data = json_of(["fit", "--json"], capsys)  # the default plan fits with room: no suggestions
    assert data["fits"] is True and data["suggestions"] == [] and data["min_gpus"] == 2
    assert data["max_micro_batch_size"] > 1


def test_a_fit_suggestion_is_serialised_as_what_if_measures_its_change(
    tmp_plan, capsys: pytest.CaptureFixture[str]
) -> None:
    """``fit --json``'s suggestion is the what-if effect of its changes, key for key, plus what ranked it."""
    from vramplan.core.advice.whatif import WhatIf
    from vramplan.core.files.planio import load_plan_file

    path = tmp_plan(OVER)
    data = json_of(["fit", str(path), "--json"], capsys)
    what_if = WhatIf(load_plan_file(path).plan)
    for s in data["suggestions"][:3]:
        effect = what_if.measure(s["title"], s["changes"])
        assert effect is not None
        ranking = {k: s.pop(k) for k in ("moves", "speedups", "tier", "kind")}
        assert s == strict_json(json.dumps(effect.to_json())), s["title"]
        assert ranking["tier"] in (0, 1, 2) and isinstance(ranking["kind"], str)


@pytest.mark.parametrize("name", sorted(PLANS))
def test_every_suggestion_fits_through_estimate_set(name: str, tmp_plan, capsys: pytest.CaptureFixture[str]) -> None:
    path = str(tmp_plan(PLANS[name], f"{name}.toml"))
    advice = json_of(["fit", path, "--json"], capsys)
    assert advice["suggestions"], f"{name}: expected suggestions"
    goal = advice["goal_headroom_fraction"]  # the safety margin, whether the plan fits or not (issue 32.1)
    assert goal >= 0.1 and advice["margin"]["kind"] in ("expected error", "fragmentation")
    for s in advice["suggestions"]:
        args = ["estimate", path, "--json"]
        for item in s["set"]:
            args += ["--set", item]
        est = json_of(args, capsys)
        assert est["memory"]["fits"] is True, (name, s["title"])
        # a change of method keeps its own estimate's error band (never under fragmentation's 10%)
        keep = goal if s["tier"] < 2 else 0.1
        assert est["memory"]["headroom"] >= keep * est["memory"]["gpu_capacity"], (name, s["title"])
        assert est["memory"]["per_gpu"]["total"] == s["memory_total"]
        assert est["time"]["step_seconds"] == pytest.approx(s["step_seconds"])
        assert est["time"]["step_seconds"] / advice["step_seconds"] == pytest.approx(s["relative_step_time"])
        changed = {f"{t}.{k}": v for t, table in est["plan"].items() for k, v in table.items()}
        assert all(changed[k] == v for k, v in s["changes"].items())
    if advice["min_gpus"] is not None:
        args = ["estimate", path, "--json"]
        for key, value in advice["min_gpus_changes"].items():
            args += ["--set", f"{key}={value}"]
        assert json_of(args, capsys)["memory"]["fits"] is True


def test_fit_finds_levers_that_help_only_together(tmp_plan, capsys: pytest.CaptureFixture[str]) -> None:
    """Full checkpointing saves nothing while the optimizer step is the peak; after the step moves into backward
    and the states are paged 8-bit, it is what fits an 8B full fine-tune on 24 GB (torchtune's RTX 4090 row:
    18.9 GiB peak allocated with these flags and compile)."""
    advice = json_of(["fit", str(tmp_plan(PLANS["8b-full-4090"], "t.toml")), "--json"], capsys)
    by_changes = {frozenset(s["changes"].items()): s for s in advice["suggestions"]}
    together = frozenset(
        {
            "strategy.gradient_checkpointing": "full",
            "strategy.optimizer_in_backward": True,
            "training.optimizer": "paged-adamw-8bit",
        }.items()
    )
    assert together in by_changes
    s = by_changes[together]
    assert s["fits"] is True and s["memory_on_gpu"] < s["memory_total"]  # the paged states are beside the peak
    # no offload: the step costs what full recomputation re-runs, one forward of the blocks (its own term), less
    # what the 8-bit states save the optimizer step (1-byte moments: fewer bytes through HBM); the rest is as it was
    path = str(tmp_plan(PLANS["8b-full-4090"], "t.toml"))
    base = json_of(["estimate", path, "--json"], capsys)["time"]["terms"]
    sets = [a for k, v in s["changes"].items() for a in ("--set", f"{k}={json.dumps(v)}")]
    terms = json_of(["estimate", path, "--json", *sets], capsys)["time"]["terms"]
    recompute = terms["recompute"]["exposed_seconds"]
    saved = base["optimizer_step"]["exposed_seconds"] - terms["optimizer_step"]["exposed_seconds"]
    assert recompute > 0 and saved > 0 and "recompute" not in base
    assert s["relative_step_time"] == pytest.approx(1 + (recompute - saved) / advice["step_seconds"], rel=1e-6)


BLOOM_A100 = ["--model", "bloom-7b1", "--gpu", "a100-40gb", "--gpus", "4", "--set", "training.method=full"]


def test_fit_ranks_memory_and_speed_moves_by_one_notion_of_fastest(capsys: pytest.CaptureFixture[str]) -> None:
    """issue 16.12: BLOOM-7B1 full fine-tune on 4 x A100-40GB is just over (it fitted with 1% free before FSDP2's
    all-gather pool was counted: its 250,880-token root unit). 8-bit AdamW frees 10 GiB, enough
    to drop activation checkpointing too: that pair is suggested, ahead of tensor parallelism (which is slower and
    which the DeepSpeed export cannot express), and the checklist's memory fix is the advisor's first suggestion."""
    assert run(["fit", *BLOOM_A100]) == 0
    out = capsys.readouterr().out
    lines = [line.strip() for line in out.splitlines()]
    pair = lines.index("2. 8-bit AdamW + no checkpointing (different numerics)")
    # the allocator's rules, not 5% slack, and FSDP2's all-gather pool (core.memory.states.fsdp2_all_gather_pool)
    assert lines[pair + 1].startswith("30.5 GiB per GPU (24% free), ")
    # no recomputation (the blocks' forward, timed as its kernels) and 1-byte moments for the optimizer step
    assert "step time x0.74" in lines[pair + 1]
    assert lines[pair + 2 : pair + 4] == [
        "--set training.optimizer=adamw-8bit",
        "--set strategy.gradient_checkpointing=none",
    ]
    tp = next(n for n, line in enumerate(lines) if "tensor parallel 4" in line)
    assert pair < tp
    data = json_of(["fit", *BLOOM_A100, "--json"], capsys)
    first = data["suggestions"][0]
    assert first["relative_step_time"] < 0.9 and first["changes"]["strategy.gradient_checkpointing"] == "none"
    same_model = [s["relative_step_time"] for s in data["suggestions"] if s["tier"] < 2]
    assert same_model == sorted(same_model) and first["relative_step_time"] == same_model[0]
    check = json_of(["check", *BLOOM_A100, "--json"], capsys, code=1)  # over: the capacity item fails
    capacity = next(i for i in check["items"] if i["id"] == "oom.capacity")
    assert capacity["fix"]["set"] == first["set"]  # the checklist and the advisor agree on the fastest
    assert f"Fastest change that solves it: {first['title']}." in " ".join(capacity["detail"].split())
    deepspeed = json_of(["fit", *BLOOM_A100, "--json", "--framework", "hf-deepspeed"], capsys)
    assert deepspeed["suggestions"][0]["set"] == first["set"]
    assert not any("tensor_parallel" in s["changes"] for s in deepspeed["suggestions"])
    # Megatron-LM shards no parameters (this plan is ZeRO-3) and has no 8-bit AdamW: neither the advisor nor the
    # checklist proposes a plan it cannot run
    assert json_of(["fit", *BLOOM_A100, "--json", "--framework", "megatron"], capsys)["suggestions"] == []
    check = json_of(["check", *BLOOM_A100, "--json", "--framework", "megatron"], capsys, code=1)
    capacity = next(i for i in check["items"] if i["id"] == "oom.capacity")
    assert capacity["fix"] is None and capacity["alternatives"] == []


def test_fit_text_says_how_it_ranks_and_the_commands_paste(tmp_plan, capsys: pytest.CaptureFixture[str]) -> None:
    path = str(tmp_plan(PLANS["bloom-4090"], "bloom.toml"))
    assert run(["fit", path]) == 0
    out = capsys.readouterr().out
    words = " ".join(out.split())
    assert "fastest first (" in words and "step time relative to now" in words and "same model" in out
    assert "leave 10% free (fragmentation's 10%; --headroom sets it)" in words  # the margin and where it is from
    assert "Largest micro-batch that fits as is (with 10% free):" in out
    assert "Fewest GPUs that fit with these strategies" in out  # fp32 BLOOM's FSDP2 root all-gather: none fit
    set_lines = [line.strip() for line in out.splitlines() if line.strip().startswith("--set ")]
    assert set_lines
    for line in set_lines:  # shell-quoted and never split from their value: each parses back
        words = shlex.split(line)
        assert words[0::2] == ["--set"] * (len(words) // 2) and all("=" in w for w in words[1::2])


def test_fit_subprocess_and_no_textual() -> None:
    code = (
        "import sys, io, contextlib\n"
        "from vramplan.__main__ import main\n"
        "with contextlib.redirect_stdout(io.StringIO()):\n"
        "    assert main(['fit', '--json']) == 0\n"
        "    assert main(['check']) == 0\n"
        "bad = [m for m in sys.modules if m.split('.')[0] in ('textual', 'rich')]\n"
        "assert not bad, bad\n"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=60)
    assert r.returncode == 0, r.stderr


def test_fit_gives_the_largest_sequence_length_that_fits() -> None:
    """Issue 16.13: `fit` says the largest sequence length that fits as is (`max_seq_len` in the JSON): it fits,
    one token more does not."""

    def cli(*args: str) -> str:
        cmd = [sys.executable, "-m", "vramplan", *args]
        return subprocess.run(cmd, capture_output=True, text=True, timeout=120, check=True).stdout

    data = strict_json(cli("fit", "--json"))  # LLaMA-7B: the default plan fits far longer sequences (issue 32.1)
    assert data["max_seq_len"] == data["context_len"] == 2048
    assert "(with 10% free): 2,048 (capped at the model's 2,048-token context)" in " ".join(cli("fit").split())
    plan = ("--model", "qwen2.5-7b")  # no trained context in its preset: the search runs to the memory's limit
    data = strict_json(cli("fit", *plan, "--json"))
    seq, margin = data["max_seq_len"], data["goal_headroom_fraction"]
    assert seq > 2048 and data["context_len"] is None
    assert f"Largest sequence length that fits as is (with {margin:.0%} free): {seq:,}" in cli("fit", *plan)

    def free(n: int) -> float:
        memory = strict_json(cli("estimate", *plan, "--set", f"training.seq_len={n}", "--json"))["memory"]
        return memory["headroom"] / memory["gpu_capacity"]

    assert free(seq) >= margin > free(seq + 1)  # the margin stays free at seq, one token more takes it


def test_fit_framework_restricts_suggestions_to_what_it_runs() -> None:
    """Issue 16.12: `fit --framework` keeps only plans the framework runs: BLOOM-7B1 full fine-tuning on 4 x
    A100-40GB (DDP, no checkpointing) suggests TP + sequence parallelism with any framework, never for HF Trainer +
    DeepSpeed or FSDP; Megatron gets no LoRA, no offload, no ZeRO-2/3."""
    base = ["fit", "--model", "bloom-7b1", "--gpu", "a100-40gb", "--gpus", "4", "--set", "strategy.zero_stage=0",
            "--set", "strategy.gradient_checkpointing=none", "--json", "--limit", "20"]  # fmt: skip

    def sets(framework: str) -> list[dict]:
        r = subprocess.run([sys.executable, "-m", "vramplan", *base, "--framework", framework],
                           capture_output=True, text=True, timeout=120)  # fmt: skip
        assert r.returncode == 0, r.stderr
        return [s["changes"] for s in strict_json(r.stdout)["suggestions"]]

    anything = sets("all")
    assert any(c.get("strategy.sequence_parallel") for c in anything)
    for framework in ("hf-deepspeed", "fsdp"):
        got = sets(framework)
        assert got and not any(c.get("strategy.sequence_parallel") or c.get("strategy.pipeline_parallel") for c in got)
    mega = sets("megatron")
    assert mega and not any(c.get("training.method", "full") != "full" for c in mega)
    assert not any(c.get("strategy.zero_stage", 0) >= 2 for c in mega)
    cmd = [sys.executable, "-m", "vramplan", "fit", "--framework", "jax"]
    bad = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
    assert bad.returncode == 2 and "invalid choice" in bad.stderr
