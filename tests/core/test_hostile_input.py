"""Issue 15: hostile and odd input read by core (plan files, config.json, presets, nvidia-smi output) is one
`PlanError` line naming the file and key, never a crash, a hang or Python's internals."""

from __future__ import annotations

import os
import re
import signal
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
import tomli_w

from tests.conftest import user_dir
from tests.hostile import BIG_INT, DOTTED, DOTTED_KEY_FILES, HUGE_INT, write_config_files, write_plan_files
from tests.waiting import HANG_S
from vramplan.core.files.planio import load_plan_file
from vramplan.core.plan.architecture.hf_config import read_hf_config
from vramplan.core.plan.catalogue import presets
from vramplan.core.plan.catalogue.gpu_match import clean_name, parse
from vramplan.core.plan.helpers import tomlio
from vramplan.core.plan.helpers.errors import PlanError, printable, shown
from vramplan.core.plan.helpers.readfile import read_regular
from vramplan.core.plan.schema.plan import default_plan
from vramplan.machine import nvidia_smi

INTERNALS = ("set_int_max_str_digits", "datetime.datetime", "instance of", "Config", "Traceback", "Error:")


class TookTooLong(BaseException):
    """Not an OSError (as TimeoutError is): code under test that catches OSError cannot swallow it."""


@contextmanager
def deadline(seconds: int = int(HANG_S)) -> Iterator[None]:
    """Fail (not hang) when the block has not ended after ``seconds`` (a FIFO used to block forever): a guard
    against a hang, not a bound on speed."""

    def expired(signum: int, frame: object) -> None:
        raise TookTooLong(f"took more than {seconds} s")

    old = signal.signal(signal.SIGALRM, expired)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)


def assert_one_clean_line(exc: PlanError, names: str) -> None:
    line = exc.line()
    assert "\n" not in line and len(line) < 400, line
    assert names in line, line
    assert not any(word in line for word in INTERNALS), line


def test_each_broken_plan_file_is_one_line_naming_it(tmp_path: Path) -> None:
    for name, path in write_plan_files(tmp_path).items():
        with deadline(), pytest.raises(PlanError) as info:
            load_plan_file(path)
        assert_one_clean_line(info.value, name)


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("huge_int.toml", "more than 4,300 digits"),
        ("meta_huge_version.toml", "more than 4,300 digits"),
        ("deep_tables.toml", "nested"),
        ("deep_lists.toml", "nested"),
        ("beyond_float.toml", "training.tokens: must be less than or equal to"),
        ("overhead_beyond_float.toml", "overhead.zero_bucket_elements: must be less than or equal to"),
        ("model_type_list.toml", "model.model_type: must be a string"),
        ("bool_batch.toml", "training.micro_batch_size: must be a number, not true"),
        ("inf_price.toml", "hardware.price_per_gpu_hour: must be a finite number"),
        ("datetime_title.toml", "meta.title: must be a string (got 1979-05-27T07:32:00+00:00)"),
        ("fifo.toml", "named pipe"),
        ("folder.toml", "is a directory"),
        *((name, "a dotted key of more than 16 parts") for name in DOTTED_KEY_FILES),
    ],
)
def test_what_each_plan_file_error_says(tmp_path: Path, name: str, expected: str) -> None:
    path = write_plan_files(tmp_path)[name]
    with deadline(), pytest.raises(PlanError, match=re.escape(expected)):
        load_plan_file(path)


def test_a_long_dotted_key_is_refused_before_tomllib_parses(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 39: the bound is checked before the parse (whose time grows with the square of a key's parts), so
    tomllib never sees the key; its timing is bench/bench_hostile.py's (not a deadline here)."""

    def never(text: str) -> dict[str, object]:
        raise AssertionError("tomllib parsed a key of 100,000 parts")

    monkeypatch.setattr(tomlio.tomllib, "loads", never)
    for name, text in DOTTED_KEY_FILES.items():
        path = tmp_path / name
        path.write_text(text)
        with pytest.raises(PlanError, match="a dotted key of more than 16 parts") as info:
            load_plan_file(path)
        assert_one_clean_line(info.value, name)
    for text in (
        "[" + ".".join("a" * 17) + "]",
        " . ".join(['"a"'] * 17) + " = 1",
        "x = {" + ".".join("a" * 17) + "=1}",
    ):
        with pytest.raises(PlanError, match="dotted key"):
            tomlio.loads(text)


@pytest.mark.parametrize(
    "text",
    [
        f'[model]\npreset = "llama-7b"\n[meta]\nnote = "{DOTTED}"\n',  # dots in a string count nothing
        "[model]\npreset = 'llama-7b'\n[meta]\nnote = '''\n" + DOTTED + "'''\n",
        f'[model]\npreset = "llama-7b"\n# {DOTTED}\n',
        '[model]\npreset = "llama-7b"\n[training]\nlearning_rate = 1.5e-5\n[' + ".".join("abcdefghijklmno") + "]\n",
    ],
)
def test_dots_in_strings_comments_and_numbers_are_no_key(text: str) -> None:
    data = tomlio.loads(text)
    assert data["model"] == {"preset": "llama-7b"}


def test_a_byte_order_mark_is_read_past(tmp_path: Path) -> None:
    """Issue 39: a UTF-8 BOM (Windows editors write one) was "Invalid statement (at line 1, column 1)"."""
    path = tmp_path / "bom.toml"
    path.write_bytes(b'\xef\xbb\xbf[model]\npreset = "llama-7b"\n')
    assert load_plan_file(path).plan == default_plan()


@pytest.mark.parametrize(
    "tables",
    [
        f"[estimate]\ntotal_bytes = {BIG_INT}\n",
        f"[estimate]\ngpu_capacity_bytes = {BIG_INT}\n",
        f"[estimate]\nper_gpu_bytes = {{parameters = {BIG_INT}}}\n",
        f'[meta]\nvramplan_version = "{HUGE_INT}"\n',
    ],
)
def test_odd_export_tables_are_read_back_without_crashing(tmp_path: Path, tables: str) -> None:
    """``[estimate]`` is never input: figures beyond float range are only "different" (they overflowed the
    division into GiB); a 5000-digit version is no newer version (int() refused it)."""
    path = tmp_path / "plan.toml"
    path.write_text(f'[model]\npreset = "llama-7b"\n{tables}')
    pf = load_plan_file(path)
    assert pf.plan == default_plan()
    assert all(len(line) < 300 for line in pf.notices)


def test_a_huge_format_version_is_one_short_line(tmp_path: Path) -> None:
    path = tmp_path / "plan.toml"
    path.write_text(f'[meta]\nformat_version = {"9" * 4000}\n[model]\npreset = "llama-7b"\n')
    with pytest.raises(PlanError, match=r"meta\.format_version: must be a whole number from 1 to 1,000,000") as info:
        load_plan_file(path)
    assert len(info.value.line()) < 300


def test_devices_are_not_read(tmp_path: Path) -> None:
    with deadline(), pytest.raises(PlanError, match="is a device, not a file"):
        load_plan_file("/dev/zero")


def test_files_beyond_the_size_limit_are_refused(tmp_path: Path) -> None:
    big = tmp_path / "big.toml"
    big.write_bytes(b"# " + b"x" * 100 + b"\n")
    with pytest.raises(PlanError, match="too large"):
        read_regular(big, limit=50)
    assert read_regular(big, limit=200).startswith(b"# x")


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("deep.json", "nested too deeply"),
        ("list_type.json", "model_type: must be a string"),
        ("list_act.json", "activation [] is not modelled"),
        ("nan.json", "vocab_size: must be a positive integer (got nan)"),  # NaN is read, as transformers reads it
        ("huge.json", "more than 4,300 digits"),
        ("beyond_float.json", "beyond_float.json: num_key_value_heads: must be at most 65,536 (got a 301-digit"),
        ("loop_a.json", "symbolic link loop"),
        ("fifo.json", "named pipe"),
        ("checkpoint", "dangling symbolic link"),
    ],
)
def test_each_broken_config_json_is_one_line(tmp_path: Path, name: str, expected: str) -> None:
    path = write_config_files(tmp_path)[name]
    with deadline(), pytest.raises(PlanError) as info:
        default_plan().with_changes({"model.hf_config": str(path)})
    assert expected in info.value.line()
    assert_one_clean_line(info.value, name)
    assert "no config.json in this directory" not in info.value.line()


def test_read_hf_config_names_a_looping_path(tmp_path: Path) -> None:
    path = write_config_files(tmp_path)["loop_a.json"]
    with pytest.raises(PlanError, match="symbolic link loop"):
        read_hf_config(path)


# -- values: physical bounds, finite floats, strict types -----------------------------------------------------


@pytest.mark.parametrize(
    ("key", "value", "expected"),
    [
        ("model.hidden_size", 10**300, "less than or equal to"),
        ("model.vocab_size", 10**30, "less than or equal to"),
        ("training.tokens", 10**299, "less than or equal to"),
        ("overhead.cuda_context_mib", 10**300, "less than or equal to"),
        ("hardware.price_per_gpu_hour", 10**400, "must be a number (got a 401-digit number)"),
        ("hardware.price_per_gpu_hour", float("inf"), "finite"),
        ("training.learning_rate", float("inf"), "finite"),
        ("training.grad_clip", float("nan"), "finite"),
        ("training.mfu", 5e-324, "greater than or equal to 0.001"),
        ("training.micro_batch_size", True, "must be a number, not true"),
        ("strategy.zero_stage", False, "must be a number, not false"),
        ("strategy.compile", 1, "must be true or false"),
        ("strategy.compile", "yes", "must be true or false (got 'yes')"),  # issue 39: "0", "no", "yes" were read
        ("strategy.compile", "0", "must be true or false (got '0')"),
        ("model.model_type", [], "must be a string"),
        ("model.hf_config", " ", "must not be empty"),
    ],
)
def test_values_out_of_physical_range_or_type_are_refused(key: str, value: object, expected: str) -> None:
    with pytest.raises(PlanError) as info:
        default_plan().with_changes({key: value})
    assert expected in info.value.line() and key in info.value.line()
    assert_one_clean_line(info.value, key)


@pytest.mark.parametrize(
    ("model", "changes", "expected"),
    [
        (
            "qwen3-30b-a3b",
            {"model.dense_layers": 100},
            "model.dense_layers: 100 layers, more than num_hidden_layers=48",
        ),
        ("mistral-7b", {"model.sliding_layers": 33}, "model.sliding_layers: 33 layers, more than num_hidden_layers=32"),
        ("deepseek-v3", {"model.num_hidden_layers": 2}, "model.dense_layers: 3 layers, more than num_hidden_layers=2"),
    ],
)
def test_layer_counts_past_the_model_are_refused(model: str, changes: dict[str, int], expected: str) -> None:
    """Issue 39: dense_layers and sliding_layers above the layer count were clamped silently."""
    plan = default_plan().with_changes({"model.preset": model})
    with pytest.raises(PlanError) as info:
        plan.with_changes(changes)
    assert expected in info.value.line()


def test_list_keys_take_commas_as_typed_on_the_command_line() -> None:
    """Issue 39: ``--set checklist.ticked=a,b`` was refused (one item named "a,b") while ``training.lora_targets=q,v``
    took the commas; both list keys now read a typed value alike (`field_values.word_list`)."""
    from vramplan.core.plan.keys import parse_set

    for typed in ("nan.data,slow.data_loading", "nan.data, slow.data_loading", "nan.data slow.data_loading"):
        key, value = parse_set(f"checklist.ticked={typed}")
        plan = default_plan().with_changes({key: value})
        assert plan.checklist.ticked == ("nan.data", "slow.data_loading"), typed
    key, value = parse_set("training.lora_targets=Q,v")
    assert default_plan().with_changes({key: value}).training.lora_targets == ("q", "v")


def test_error_lines_cut_long_values_and_escape_control_characters() -> None:
    with pytest.raises(PlanError) as info:
        default_plan().with_changes({"model.preset": "x" * 20_000})
    assert len(info.value.line()) < 300 and "20,000 characters" in info.value.line()
    with pytest.raises(PlanError) as info:
        default_plan().with_changes({"hardware.gpu": "\x1b[31mred\x1b]0;title\x07"})
    assert "\x1b" not in info.value.line() and "\x07" not in info.value.line()
    assert "\\x1b[31mred" in info.value.line()
    assert shown(int(BIG_INT)) == "a 301-digit number"
    assert shown(int("9" * 4000)).endswith("-digit number")  # repr() of it would raise
    assert printable("a\nb\tc") == "a\\nb\\tc"


# -- user presets ---------------------------------------------------------------------------------------------

SELF_BASED = 'name = "LLaMA-7B, 16 layers"\nsource = "mine"\n[config]\npreset = "llama-7b"\nnum_hidden_layers = 16\n'
FROM_OTHER = 'name = "Half"\nsource = "mine"\n[config]\npreset = "llama-7b"\nnum_hidden_layers = 8\n'


def test_a_user_preset_starting_from_the_builtin_of_its_own_id(tmp_path: Path, monkeypatch) -> None:
    """``llama-7b.toml`` with ``preset = "llama-7b"``: the built-in LLaMA-7B with 16 layers (was infinite
    recursion in every command, or refused as a loop)."""
    user_dir(tmp_path, monkeypatch, {"models/llama-7b.toml": SELF_BASED, "models/half.toml": FROM_OTHER})
    reg = presets.registry()
    assert reg.problems == []
    plan = default_plan()
    assert (plan.model.num_hidden_layers, plan.model.hidden_size) == (16, 4096)
    half = plan.with_changes({"model.preset": "half"})
    assert (half.model.num_hidden_layers, half.model.hidden_size) == (8, 4096)


def test_user_presets_naming_each_other_are_reported_not_recursed(tmp_path: Path, monkeypatch) -> None:
    a = 'name = "A"\nsource = "x"\n[config]\npreset = "b"\n'
    b = 'name = "B"\nsource = "x"\n[config]\npreset = "a"\n'
    user_dir(tmp_path, monkeypatch, {"models/a.toml": a, "models/b.toml": b})
    reg = presets.registry()
    assert len(reg.problems) == 2
    with pytest.raises(PlanError, match="user preset file is broken"):
        default_plan().with_changes({"model.preset": "a"})


def test_odd_user_preset_files_are_skipped_without_hanging(tmp_path: Path, monkeypatch) -> None:
    root = user_dir(tmp_path, monkeypatch, {"models/ok.toml": FROM_OTHER})
    os.mkfifo(root / "models" / "pipe.toml")
    (root / "hardware").mkdir()
    (root / "hardware" / "slow.toml").write_text(
        'name = "Slow"\nmemory_mib = 1000\nbf16 = true\nbf16_tflops = 1e-300\nfp16_tflops = 1.0\nfp32_tflops = 1.0\n'
        'memory_bandwidth_gbs = 1e-300\ngpu_link = "x"\ngpu_link_gbs = 1.0\nhost_link = "x"\nhost_link_gbs = 1.0\n'
        'internode_gbs = 1.0\nflash_attention = true\nsource = "x"\n'
    )
    (root / "hardware" / "a100-80gb.toml").write_text(f"name = 'broken'\nmemory_mib = {HUGE_INT}\n")
    with deadline():
        reg = presets.reload()
    problems = "\n".join(reg.problem_lines())
    assert "pipe.toml: is a named pipe" in problems
    assert "slow.toml: bf16_tflops" in problems  # a near-zero throughput or bandwidth is no GPU
    assert (
        "a100-80gb.toml: a number with more than 4,300 digits (no plan value is that large) (the built-in "
        "a100-80gb is used)" in problems
    )
    assert "ok" in reg.models


# -- nvidia-smi output ------------------------------------------------------------------------------------------


def test_nvidia_smi_lines_with_odd_digits_or_escapes() -> None:
    assert parse("NVIDIA H100 80GB HBM3, 8155\u00b9\n") == []  # a superscript: isdigit() but not int()
    assert parse("NVIDIA H100 80GB HBM3, \u0661\u0662\n") == []  # Arabic-Indic digits
    assert parse(f"NVIDIA H100, {HUGE_INT}\n") == []
    assert parse("Foo GPU, 999999999\n") == []  # beyond any GPU preset's memory bound: was a ValidationError
    assert parse("NVIDIA H100 80GB HBM3, 81559\n" * 5000) == []  # no node has 5000 GPUs
    ((name, mem),) = parse("\x1b[31mEVIL\x1b]0;title\x07 GPU\x1b[0m, 1000\n")
    assert (name, mem) == ("EVIL GPU", 1000)
    assert clean_name("A\x00B\x9bC") == "A\\x00B\\x9bC"
    assert len(clean_name("x" * 10_000)) < 120


def test_an_endless_nvidia_smi_is_cut_short(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    bindir = tmp_path / "bin"
    bindir.mkdir()
    script = bindir / "nvidia-smi"
    script.write_text('#!/bin/sh\nwhile :; do echo "NVIDIA H100 80GB HBM3, 81559"; done\n')
    script.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bindir}{os.pathsep}{os.environ.get('PATH', '')}")
    monkeypatch.setattr(nvidia_smi, "TIMEOUT_S", 60.0)  # the bound on bytes stops it, long before any timeout
    with deadline():
        assert nvidia_smi.query() is None


def test_an_empty_hf_config_in_a_plan_file_is_not_its_directory(tmp_path: Path) -> None:
    path = tmp_path / "plan.toml"
    path.write_text('[model]\nhf_config = ""\n')
    with pytest.raises(PlanError, match=r"model\.hf_config: must not be empty"):
        load_plan_file(path)


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("memory_bandwidth_gbs", 1e-300),
        ("gpu_link_gbs", 1e-300),
        ("host_link_gbs", 0.0),
        ("internode_gbs", float("inf")),
        ("fp32_tflops", 5e-324),
        ("bf16_tflops", 1e-9),
        ("memory_mib", 10**30),
        ("bf16", 1),
    ],
)
def test_a_user_gpu_with_absurd_figures_is_refused(key: str, value: object) -> None:
    """A near-zero bandwidth or throughput made every step time infinite (``NaN``/``Infinity`` in --json)."""
    good = presets.gpu("a100-80gb").model_dump()
    with pytest.raises(ValueError, match=key):
        presets.GpuSpec.model_validate({**good, "id": "mine", key: value})


def test_a_user_presets_texts_are_escaped_where_they_are_read(tmp_path: Path, monkeypatch) -> None:
    """Issue 39: a user preset's name (shown by every command and the planner) held a raw escape sequence."""
    evil = "\x1b]0;pwned\x07\x1b[2J"
    text = tomli_w.dumps({"name": f"Evil{evil}", "source": f"x{evil}", "config": {"preset": "llama-7b"}})
    user_dir(tmp_path, monkeypatch, {"models/evil.toml": text})
    assert presets.registry().problems == []
    preset = presets.registry().models["evil"]
    assert preset.name == "Evil\\x1b]0;pwned\\x07\\x1b[2J" and preset.source.startswith("x\\x1b")
