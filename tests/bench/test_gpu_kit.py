"""The GPU measurement kit without torch (CI has none): its cases, their mapping onto a transformers config and a
vramplan plan, the command line of bench/measure/gpu_kit.py, and the results file's writer and validator.
tests/bench/test_gpu_kit_cpu.py runs the kit itself on the CPU where torch is installed."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from bench.data.published_configs import REAL
from tests.bench.kit import KIT, gpu_estimate, gpu_kit, gpu_plans, gpu_results
from vramplan.core.memory.peak import estimate
from vramplan.core.plan.catalogue import presets
from vramplan.core.plan.schema.plan import plan_from_dict

DEFAULT = gpu_plans.resolve_all(gpu_plans.PLAN_SETS["default"]())
TINY = gpu_plans.resolve_all(gpu_plans.PLAN_SETS["tiny"]())


def test_default_set_covers_the_published_mechanisms() -> None:
    """10-16 cases on one GPU that pair up the choices the published runs differ by."""
    assert 10 <= len(DEFAULT) <= 16
    seen: dict[str, set[Any]] = {}
    for c in DEFAULT:
        for key in ("precision", "optimizer_impl", "gradient_checkpointing", "attention", "method", "lora_targets"):
            seen.setdefault(key, set()).add(c[key])
        seen.setdefault("family", set()).add(c["hf_config"]["model_type"])
        seen.setdefault("seq_len", set()).add(c["seq_len"])
        seen.setdefault("micro_batch_size", set()).add(c["micro_batch_size"])
        seen.setdefault("lora_rank", set()).add(c["lora_rank"] if c["method"] != "full" else None)
        seen.setdefault("kbit_prepare", set()).add(c["kbit_prepare"])
    assert seen["family"] == {"llama", "qwen2", "mistral"}
    assert {"bf16", "bf16-mixed"} <= seen["precision"]
    assert {"foreach", "fused"} <= seen["optimizer_impl"]
    assert seen["gradient_checkpointing"] == {True, False}
    assert seen["attention"] == {"sdpa", "eager"}
    assert seen["method"] == {"full", "lora", "qlora"}
    assert seen["lora_targets"] >= {"qv", "all-linear"}
    assert {8, 16} <= seen["lora_rank"]
    assert seen["kbit_prepare"] == {True, False}
    assert {2048, 4096} <= seen["seq_len"]
    assert {1, 4} <= seen["micro_batch_size"]
    # at full size: a Llama-3-8B-shaped full fine-tune
    assert any(c["hf_config"]["num_hidden_layers"] == 32 and c["method"] == "full" for c in DEFAULT)


def test_the_prepared_script_fits_its_device_time() -> None:
    """One script under 8 minutes, leaving time to rerun within 15: the expected seconds add up to well under
    the default --budget-s of 420."""
    assert sum(c["expect_s"] for c in DEFAULT) <= 420
    assert gpu_kit.parser().parse_args(["--out", "x"]).budget_s == 420


@pytest.mark.parametrize("name", ["llama-3-8b", "mistral-7b"])
def test_shapes_are_the_published_configs(name: str) -> None:
    published, count, _ = REAL[name]
    shape = gpu_plans.SHAPES[name]
    assert {k: shape[k] for k in published if k in shape} == {k: v for k, v in published.items() if k in shape}
    c = gpu_plans.resolve({"id": "x", "shape": name})
    assert estimate(plan_from_dict(gpu_plans.plan_data(c))).params_total == count


def test_qwen2_shape_is_qwen2_7b() -> None:
    """Qwen2-7B's config.json has the architecture of vramplan's Qwen2.5-7B preset (same widths, 7,615,616,512)."""
    preset = presets.model_preset("qwen2.5-7b")
    shape = gpu_plans.SHAPES["qwen2-7b"]
    assert {k: shape[k] for k in preset.config} == preset.config
    c = gpu_plans.resolve({"id": "x", "shape": "qwen2-7b"})
    assert estimate(plan_from_dict(gpu_plans.plan_data(c))).params_total == preset.params == 7_615_616_512


def test_layers_override_and_transformers_kwargs() -> None:
    c = gpu_plans.resolve({"id": "x", "shape": "llama-3-8b", "layers": 8})
    family, kw = gpu_plans.hf_config_kwargs(c)
    assert family == "llama"
    assert kw["num_hidden_layers"] == 8 and kw["hidden_size"] == 4096 and kw["vocab_size"] == 128256
    assert kw["use_cache"] is False and kw["attention_dropout"] == 0.0
    assert "model_type" not in kw
    assert gpu_plans.SHAPES["llama-3-8b"]["num_hidden_layers"] == 32  # the shape itself is untouched


@pytest.mark.parametrize(("big", "small"), list(zip(DEFAULT, TINY, strict=True)), ids=[c["id"] for c in DEFAULT])
def test_tiny_case_keeps_the_structure(big: dict[str, Any], small: dict[str, Any]) -> None:
    same = ("precision", "optimizer", "optimizer_impl", "gradient_checkpointing", "attention", "method")
    assert {k: small[k] for k in same} == {k: big[k] for k in same}
    assert {k: small[k] for k in ("lora_targets", "lora_rank", "kbit_prepare", "double_quant", "quant_type")} == {
        k: big[k] for k in ("lora_targets", "lora_rank", "kbit_prepare", "double_quant", "quant_type")
    }
    b, s = big["hf_config"], small["hf_config"]
    assert s["model_type"] == b["model_type"] and s["tie_word_embeddings"] == b["tie_word_embeddings"]
    assert (s["num_key_value_heads"] < s["num_attention_heads"]) == (
        b["num_key_value_heads"] < b["num_attention_heads"]
    )
    assert ("sliding_window" in s) == ("sliding_window" in b)
    if "sliding_window" in b:
        assert (s["sliding_window"] >= small["seq_len"]) == (b["sliding_window"] >= big["seq_len"])
    assert s["hidden_size"] * s["num_hidden_layers"] < 1000 and small["seq_len"] <= 64
    assert small["id"] == f"tiny_{big['id']}"


@pytest.mark.parametrize("c", DEFAULT, ids=[c["id"] for c in DEFAULT])
def test_case_maps_onto_a_valid_plan(c: dict[str, Any]) -> None:
    plan = plan_from_dict(gpu_plans.plan_data(c))
    t, s = plan.training, plan.strategy
    assert (plan.hardware.gpu, plan.hardware.total_gpus, s.zero_stage) == ("h200", 1, 0)
    assert (t.micro_batch_size, t.seq_len, t.method) == (c["micro_batch_size"], c["seq_len"], c["method"])
    assert t.optimizer_impl == c["optimizer_impl"]
    assert s.gradient_checkpointing == ("full" if c["gradient_checkpointing"] else "none")
    assert s.attention == ("flash" if c["attention"] == "sdpa" else "eager")
    assert plan.model.num_hidden_layers == c["hf_config"]["num_hidden_layers"]
    if c["method"] == "qlora":
        assert t.base_quantization == "nf4" and t.double_quantization == c["double_quant"]
        # prepare_model_for_kbit_training makes every weight that is not 4-bit fp32: vramplan's fp32 regime
        assert t.precision == ("fp32" if c["kbit_prepare"] else "bf16-pure")
    else:
        assert t.precision == {"bf16": "bf16-pure", "bf16-mixed": "bf16-autocast", "fp32": "fp32"}[c["precision"]]
    if c["method"] != "full":
        assert t.lora_targets == (("q", "v") if c["lora_targets"] == "qv" else ("all-linear",))


@pytest.mark.parametrize("c", DEFAULT[:3] + [c for c in DEFAULT if c["method"] == "qlora"], ids=lambda c: c["id"])
def test_in_process_cli_estimate_is_the_plans_estimate(c: dict[str, Any]) -> None:
    """The kit's `vramplan estimate --hf-config ... --set ... --json` (run in-process) estimates the same plan as
    plan_data: the same total, parameters and verdict."""
    assert gpu_estimate.load() is None
    got = gpu_estimate.estimate(c)
    data = gpu_plans.plan_data(c)
    for key, value in got["future_sets_accepted"].items():  # the QLoRA keys, once vramplan has them
        table, name = key.split(".")
        data[table][name] = value
    plan = plan_from_dict(data)
    est = estimate(plan)
    assert got["total"] == est.total
    assert (got["params_total"], got["params_trainable"]) == (est.params_total, est.params_trainable)
    assert got["fits"] == est.fits
    assert got["command"].startswith("vramplan estimate --hf-config CONFIG.json --set hardware.gpu=h200")


NOT_INSTALLED = """
import sys
sys.meta_path[:] = [f for f in sys.meta_path if "editable" not in getattr(f, "__module__", "")]
try:
    import vramplan
    print("installed another way:", vramplan.__file__)
    raise SystemExit(0)
except ImportError:
    pass
sys.path.insert(0, KIT)
import gpu_estimate

print("why:", gpu_estimate.importable())
import vramplan.core.plan
import vramplan.measure.records

print("from:", vramplan.__file__, vramplan.measure.records.__file__)
"""


def test_vramplan_is_imported_from_the_checkout_where_it_is_not_installed() -> None:
    """The GPU machine gets the repository, not an installed vramplan: the kit, which measures through
    vramplan.measure, imports it from the checkout as pyproject.toml's package-dir lays it out (entry/ is the
    package, measure/ is vramplan.measure)."""
    root = KIT.parents[1]
    code = f"KIT = {str(KIT)!r}\n" + NOT_INSTALLED
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=root)
    assert p.returncode == 0, p.stderr[-2000:]
    if p.stdout.startswith("installed another way"):
        pytest.skip(p.stdout.strip())
    lines = p.stdout.splitlines()
    assert lines[0] == "why: None"
    assert lines[1] == f"from: {root / 'entry' / '__init__.py'} {root / 'measure' / 'records.py'}"


def test_estimate_falls_back_to_total_minus_overhead() -> None:
    """Without allocated/reserved in the estimate, the published check's approximation."""
    terms = {"cuda_context": 512, "allocator_reserve": 100, "nccl": 64}
    got = gpu_results.compared({"total": 10_000}, terms)
    assert (got["allocated"], got["reserved"], got["total"]) == (10_000 - 676, 10_000 - 576, 10_000)
    got = gpu_results.compared({"total": 10_000, "allocated": 7_000, "reserved": 8_000}, terms)
    assert (got["allocated"], got["reserved"], got["sources"]) == (7_000, 8_000, ["allocated", "reserved"])


# -- the command line -------------------------------------------------------------------------------------------
def test_arguments_and_defaults(tmp_path: Path) -> None:
    args, cases = gpu_kit.parse(["--out", str(tmp_path / "out.json")])
    assert (args.plan_set, args.device, args.budget_s, args.gpu, args.force) == (
        "default",
        "cuda",
        420.0,
        "h200",
        False,
    )
    assert [c["id"] for c in cases] == [c["id"] for c in DEFAULT]
    args, cases = gpu_kit.parse(["--device", "cpu", "--plan-set", "tiny", "--only", "tiny_qwen2", "--list"])
    assert args.device == "cpu" and [c["id"] for c in cases] == ["tiny_qwen2-7b_bf16_gc_b1_s4096"]


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        ([], "--out PATH is required"),
        (["--out", "x", "--budget-s", "0"], "--budget-s must be positive"),
        (["--out", "x", "--plan-set", "huge"], "invalid choice: 'huge'"),
        (["--out", "x", "--device", "tpu"], "invalid choice: 'tpu'"),
        (["--out", "x", "--only", "nosuchcase"], "--only nosuchcase: no such case"),
        (["--out", "x", "--budget-s", "soon"], "invalid float value"),
    ],
)
def test_usage_errors(argv: list[str], message: str) -> None:
    with pytest.raises(gpu_kit.UsageError, match=message):
        gpu_kit.parse(argv)


def test_out_is_never_replaced_without_force(tmp_path: Path) -> None:
    out = tmp_path / "gpu_truth.json"
    out.write_text("{}")
    with pytest.raises(gpu_kit.UsageError, match="exists; --force replaces it"):
        gpu_kit.parse(["--out", str(out)])
    assert gpu_kit.parse(["--out", str(out), "--force"])[0].force
    with pytest.raises(gpu_kit.UsageError, match="not a regular file"):
        gpu_kit.parse(["--out", str(tmp_path), "--force"])


def _script(*argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(KIT / "gpu_kit.py"), *argv], capture_output=True, text=True, timeout=120)


def test_list_runs_without_torch() -> None:
    p = _script("--list")
    assert p.returncode == 0, p.stderr
    assert [line.split()[0] for line in p.stdout.splitlines()] == [c["id"] for c in DEFAULT]


def test_usage_error_is_one_line_and_exit_2(tmp_path: Path) -> None:
    p = _script("--out", str(tmp_path / "x.json"), "--only", "nope")
    assert p.returncode == 2 and p.stdout == ""
    assert p.stderr.strip().count("\n") == 0 and "no such case" in p.stderr


def test_without_torch_the_kit_says_so(tmp_path: Path) -> None:
    try:
        import torch  # noqa: F401

        pytest.skip("torch is installed here: tests/bench/test_gpu_kit_cpu.py runs the kit")
    except ImportError:
        pass
    p = _script("--device", "cpu", "--plan-set", "tiny", "--out", str(tmp_path / "x.json"))
    assert p.returncode == 2 and "No module named 'torch'" in p.stderr and p.stderr.count("\n") == 1
    assert not (tmp_path / "x.json").exists()


# -- the results file -------------------------------------------------------------------------------------------
ENV = {k: "x" for k in gpu_results.ENVIRONMENT}


def _ok_row(cid: str, **measured: Any) -> dict[str, Any]:
    m: dict[str, Any] = {k: 1000 for k in gpu_results.MEASURED_OK}
    m |= {"steps": [{"step": 1}], "process_bytes": None, "step_seconds": 0.5, "tokens_per_second": 4096.0}
    m |= measured
    return {"id": cid, "status": "ok", "seconds": 1.0, "case": {"id": cid}, "measured": m, "estimate": None}


def _doc(*rows: dict[str, Any], device: str = "cuda") -> dict[str, Any]:
    doc = gpu_results.new_document("python gpu_kit.py", device, dict(ENV), 420, "2026-01-01T00:00:00+00:00")
    doc["cases"] = list(rows)
    return doc


def test_results_round_trip(tmp_path: Path) -> None:
    oom = {"id": "b", "status": "oom", "case": {"id": "b"}, "reason": "did not fit (step 1)", "measured": {}}
    doc = _doc(_ok_row("a"), oom)
    out = tmp_path / "d" / "gpu_truth.json"
    gpu_results.write(doc, out)
    assert gpu_results.load(out) == json.loads(json.dumps(doc))
    assert [p.name for p in out.parent.iterdir()] == ["gpu_truth.json"]  # no temporary file left behind
    umask = os.umask(0)
    os.umask(umask)
    assert out.stat().st_mode & 0o777 == 0o666 & ~umask  # as a plain open() makes it, not mkstemp's 0600
    out.chmod(0o640)
    gpu_results.write(doc, out)
    assert out.stat().st_mode & 0o777 == 0o640  # a replaced file keeps its mode
    assert [r["id"] for r in gpu_results.gpu_rows(doc)] == ["a", "b"]
    assert gpu_results.gpu_rows(_doc(_ok_row("a"), device="cpu")) == []


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda d: d.update(schema=2), "schema 2"),
        (lambda d: d.update(device="tpu"), "device 'tpu'"),
        (lambda d: d["environment"].pop("torch"), "environment must name"),
        (lambda d: d["cases"].append(d["cases"][0]), "duplicate id 'a'"),
        (lambda d: d["cases"][0]["measured"].pop("peak_reserved_bytes"), "measured.peak_reserved_bytes is missing"),
        (lambda d: d["cases"][0]["measured"].update(grad_bytes=-1), "measured.grad_bytes = -1"),
        (lambda d: d["cases"][0]["measured"].update(steady_peak_allocated_bytes=2000), "steady peak is above"),
        (lambda d: d["cases"][0].update(status="done"), "status 'done'"),
        (lambda d: d["cases"][0].update(status="skipped"), "a skipped row says why"),
        (lambda d: d["cases"][0].update(estimate={"total": 1}), "estimate must name"),
        (lambda d: d.update(cases={}), "cases must be a list"),
    ],
)
def test_validator_names_the_problem(change: Any, message: str) -> None:
    doc = _doc(_ok_row("a"))
    gpu_results.validate(doc)
    change(doc)
    with pytest.raises(gpu_results.ResultsError, match=message):
        gpu_results.validate(doc)


def test_cpu_rows_need_no_reserved_figure() -> None:
    gpu_results.validate(_doc(_ok_row("a", peak_reserved_bytes=None), device="cpu"))
    with pytest.raises(gpu_results.ResultsError, match="peak_reserved_bytes = None"):
        gpu_results.validate(_doc(_ok_row("a", peak_reserved_bytes=None), device="cuda"))


def test_writer_refuses_a_directory_and_invalid_documents(tmp_path: Path) -> None:
    with pytest.raises(gpu_results.ResultsError, match="not a regular file"):
        gpu_results.write(_doc(), tmp_path)
    with pytest.raises(gpu_results.ResultsError, match="schema"):
        gpu_results.write({"schema": 0}, tmp_path / "x.json")
    assert not (tmp_path / "x.json").exists()


def test_summary_table_has_every_case_and_the_errors() -> None:
    row = _ok_row("a", peak_allocated_bytes=10 * 2**30, steady_peak_allocated_bytes=10 * 2**30)
    row["estimate"] = {
        "allocated": 11 * 2**30,
        "reserved": 12 * 2**30,
        "total": 13 * 2**30,
        "fits": True,
        "gpu_capacity": 140 * 2**30,
        "tokens_per_second_per_gpu": 2048.0,
    }
    oom = {"id": "big", "status": "oom", "case": {}, "reason": "did not fit (step 1 (warm-up))", "measured": {}}
    oom["estimate"] = dict(row["estimate"], fits=False, total=150 * 2**30)
    skipped = {"id": "q", "status": "skipped", "case": {}, "reason": "QLoRA skipped: no bitsandbytes"}
    text = gpu_results.summary_table(_doc(row, oom, skipped))
    a = next(line for line in text.splitlines() if line.startswith("a "))
    assert "10.00" in a and "11.00" in a and "+10.0%" in a and "-50.0%" in a
    assert "vramplan: does not fit, total 150.00" in text
    assert "QLoRA skipped" in text
    assert "median |error|: allocated 10.0% (n=1" in text
