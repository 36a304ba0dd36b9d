"""Hostile input by fuzzing: hypothesis over plan files, ``--set`` values, config.json files, user presets
and nvidia-smi output. Whatever comes in, the CLI exits 0/1 with strict JSON on stdout, or 2 with one short line on
stderr; core raises nothing but `PlanError`. Bounded: a few hundred examples, well under a minute in all."""

from __future__ import annotations

import datetime as dt
import io
import json
import os
import tempfile
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path
from typing import Any

import pytest
import tomli_w
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.hostile import strict_json
from vramplan.cli.parser import run
from vramplan.core.plan.catalogue import presets
from vramplan.core.plan.catalogue.gpu_match import parse
from vramplan.core.plan.keyref import settable_keys
from vramplan.core.plan.schema.plan import TABLES
from vramplan.machine import nvidia_smi
from vramplan.machine.nvidia_smi import starting_plan

EXAMPLES = int(os.environ.get("VRAMPLAN_FUZZ_EXAMPLES", "150"))  # more to hunt: VRAMPLAN_FUZZ_EXAMPLES=5000
FUZZ = settings(
    max_examples=EXAMPLES,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
KEYS = [k.key for k in settable_keys()]
INTERNALS = ("Traceback", "set_int_max_str_digits", "datetime.datetime", "instance of", "\x1b")

# the keys of an exported file's [meta] and [estimate] (read back, never trusted)
RESERVED_KEYS = ("format_version", "vramplan_version", "created", "title", "total_bytes", "gpu_capacity_bytes")
RESERVED_KEYS += ("per_gpu_bytes", "fits", "peak_phase")

# values as a hostile file or command line gives them: odd numbers, types where others are expected, control
# characters, deep and wide structures
odd_ints = st.one_of(
    st.integers(-3, 70_000),
    st.sampled_from([0, -1, 2**31, 2**63, 10**30, 10**299, 10**300, 10**400]),
)
odd_floats = st.one_of(
    st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from([5e-324, 1e-300, 1e300, 0.0, -0.0, 0.45, 1.0]),
)
odd_text = st.one_of(
    st.text(max_size=20),
    st.sampled_from(["llama-7b", "a100-80gb", "full", "lora", "\x1b[31mred", "x" * 500, "4k", "2T", "45%", ""]),
)
scalars = st.one_of(st.booleans(), odd_ints, odd_floats, odd_text, st.just(dt.datetime(1979, 5, 27, 7, 32)))
values = st.recursive(
    scalars, lambda inner: st.lists(inner, max_size=3) | st.dictionaries(odd_text, inner, max_size=3), max_leaves=6
)


def cli(*args: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with redirect_stdout(out), redirect_stderr(err):
        code = run(list(args))
    return code, out.getvalue(), err.getvalue()


def check_outcome(code: int, out: str, err: str, json_out: bool = True) -> None:
    """0/1: output (strict JSON with --json); 2: one line on stderr (a file's bad keys named in it, the rest
    counted) and nothing on stdout."""
    assert code in (0, 1, 2), (code, err)
    assert not any(word in err for word in INTERNALS), err
    if code == 2:
        lines = err.strip().splitlines()
        errors = [line for line in lines if line.startswith("vramplan: ")]
        assert len(errors) == 1 and len(errors[0]) < 1600, err
        assert out == ""
    elif json_out:
        strict_json(out)


@st.composite
def plan_tables(draw: st.DrawFn) -> dict[str, Any]:
    """A plan file's tables: mostly known keys (so validation goes deep), some hostile values, some unknown keys."""
    data: dict[str, Any] = {"model": {"preset": draw(st.sampled_from(["llama-7b", "gpt2", "qwen2.5-72b"]))}}
    for key in draw(st.lists(st.sampled_from(KEYS), max_size=4)):
        table, _, name = key.partition(".")
        data.setdefault(table, {})[name] = draw(values)
    if draw(st.booleans()):
        table = draw(st.sampled_from([*TABLES, "meta", "estimate", "zzz"]))
        data.setdefault(table, {})[draw(st.one_of(odd_text, st.sampled_from(RESERVED_KEYS)))] = draw(values)
    return data


def toml_text(data: dict[str, Any]) -> str | None:
    try:
        return tomli_w.dumps(data)
    except (TypeError, ValueError):  # tomli_w cannot write some values (a 400-digit int, a mixed nesting)
        return None


@FUZZ
@given(data=plan_tables(), garbage=st.one_of(st.none(), st.text(max_size=40), st.binary(max_size=40)))
def test_fuzzed_plan_files(data: dict[str, Any], garbage: str | bytes | None) -> None:
    text = toml_text(data)
    payload = (text or "").encode() + (
        garbage.encode("utf-8", "surrogatepass") if isinstance(garbage, str) else garbage or b""
    )
    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "plan.toml"
        path.write_bytes(payload)
        for command in ("estimate", "check"):
            check_outcome(*cli(command, str(path), "--json"))
        check_outcome(*cli("export", str(path), "-o", "-", "--format", "deepspeed"))  # DeepSpeed JSON: strict


@FUZZ
@given(
    sets=st.lists(st.tuples(st.sampled_from([*KEYS, "model.zzz", "nope"]), values), min_size=1, max_size=3),
    model=st.sampled_from(sorted(presets.registry().models)),
    gpu=st.sampled_from(sorted(presets.registry().gpus)),
)
def test_fuzzed_set_values(sets: list[tuple[str, Any]], model: str, gpu: str) -> None:
    args = [arg for key, value in sets for arg in ("--set", f"{key}={toml_literal(value)}")]
    check_outcome(*cli("estimate", "--model", model, "--gpu", gpu, *args, "--json"))


def toml_literal(value: Any) -> str:
    """A value as one would type it after ``--set key=`` (a TOML inline literal)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    if isinstance(value, dt.datetime):
        return value.isoformat()
    if isinstance(value, list):
        return "[" + ", ".join(toml_literal(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{json.dumps(k)} = {toml_literal(v)}" for k, v in value.items()) + "}"
    return json.dumps(value)


SIZE_KEYS = (
    "vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads",
    "num_key_value_heads", "head_dim", "n_embd", "n_layer", "n_head", "hidden_act", "activation_function",
    "tie_word_embeddings", "rotary_pct", "num_experts", "sliding_window", "_name_or_path", "model_type",
)  # fmt: skip


@FUZZ
@given(
    model_type=st.one_of(st.sampled_from(["llama", "gpt2", "gpt_neox", "falcon", "mistral", "gemma"]), values),
    keys=st.dictionaries(st.sampled_from(SIZE_KEYS), values, max_size=6),
    base=st.booleans(),
)
def test_fuzzed_config_json(model_type: Any, keys: dict[str, Any], base: bool) -> None:
    raw: dict[str, Any] = {"model_type": model_type}
    if base:  # a plausible model, so the odd keys are read on top of valid sizes
        raw |= {"vocab_size": 64, "hidden_size": 16, "intermediate_size": 32, "num_hidden_layers": 2}
        raw |= {"num_attention_heads": 2}
    raw |= keys
    text = json.dumps(raw, default=str)
    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "config.json"
        path.write_text(text)
        check_outcome(*cli("estimate", "--hf-config", str(path), "--json"))


@st.composite
def preset_files(draw: st.DrawFn) -> dict[str, str | None]:
    """A user preset directory: model and hardware files with hostile contents (None: a FIFO)."""
    files: dict[str, str | None] = {}
    for _ in range(draw(st.integers(1, 3))):
        kind = draw(st.sampled_from(["models", "hardware"]))
        name = draw(st.sampled_from(["llama-7b", "a100-80gb", "mine", "other"]))
        if draw(st.integers(0, 9)) == 0:
            files[f"{kind}/{name}.toml"] = None
            continue
        if kind == "models":
            config = {"preset": draw(st.sampled_from(["llama-7b", "mine", "other", "gpt2"]))}
            config |= draw(st.dictionaries(st.sampled_from(SIZE_KEYS), values, max_size=2))
            table: dict[str, Any] = {"name": "M", "source": "fuzz", "config": config}
        else:
            table = {"name": "G", "source": "fuzz", "memory_mib": 1000, "bf16": True, "bf16_tflops": 100.0}
            table |= {"fp16_tflops": 100.0, "fp32_tflops": 10.0, "memory_bandwidth_gbs": 1000.0, "gpu_link": "x"}
            table |= {"gpu_link_gbs": 50.0, "host_link": "x", "host_link_gbs": 25.0, "internode_gbs": 12.5}
            table |= {"flash_attention": True, "generation": "hopper", "sm_count": 100, "matmul_efficiency": 0.7}
            table |= {"kernel_overhead_us": 2.0, "time_source": "fuzz"}
            field = draw(st.sampled_from(sorted(presets.GpuSpec.model_fields)))
            table[field] = draw(values)
        files[f"{kind}/{name}.toml"] = toml_text(table) or "broken ="
    return files


@FUZZ
@given(
    files=preset_files(),
    model=st.sampled_from(["llama-7b", "mine", "other"]),
    gpu=st.sampled_from(["a100-80gb", "mine", "other"]),
)
def test_fuzzed_user_presets(
    files: dict[str, str | None], model: str, gpu: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    with tempfile.TemporaryDirectory() as d:
        for rel, text in files.items():
            p = Path(d) / rel
            p.parent.mkdir(parents=True, exist_ok=True)
            if text is None:
                os.mkfifo(p)
            else:
                p.write_text(text)
        monkeypatch.setenv("VRAMPLAN_CONFIG_DIR", d)
        presets.reload()
        try:
            check_outcome(*cli("presets", "--json"))
            check_outcome(*cli("estimate", "--model", model, "--gpu", gpu, "--json"))
        finally:
            monkeypatch.undo()
            presets.reload()


@settings(max_examples=2 * EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    lines=st.lists(
        st.tuples(
            st.one_of(st.text(max_size=30), st.sampled_from(["NVIDIA H100 80GB HBM3", "Tesla T4", "\x1b[2J GPU"])),
            st.one_of(
                st.integers(-5, 10**6).map(str),
                st.sampled_from(["999999999", str(2**24), str(2**24 + 1), "8155\u00b9", "1" * 5000]),
                st.text(max_size=8),
            ),
        ),
        max_size=5,
    ),
    tail=st.text(max_size=60),
)
def test_fuzzed_nvidia_smi_output(lines: list[tuple[str, str]], tail: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """What nvidia-smi prints, parsed and then taken as the starting plan's hardware."""
    output = "".join(f"{name}, {mem}\n" for name, mem in lines) + tail
    for name, mem in parse(output):
        assert name and "\x1b" not in name and name.isprintable() and len(name) < 120
        assert 0 < mem <= 2**24
    with monkeypatch.context() as m:
        m.setattr(nvidia_smi, "query", lambda: output)
        m.setenv("VRAMPLAN_DETECT", "1")
        presets.reload()  # forgets the detected GPUs too
        try:
            det = nvidia_smi.detected_gpus()
            plan = starting_plan()
            if det is not None:
                assert plan.hardware.gpu == det.gpu_id and "\x1b" not in det.label
        finally:
            m.undo()
            presets.reload()
