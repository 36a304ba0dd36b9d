"""The estimate's surroundings in the CLI: notes before the table, diff per token, help with an example, cost in USD."""

from __future__ import annotations

import io
import sys
from pathlib import Path

import pytest

from tests.hostile import strict_json
from vramplan.cli import COMMANDS
from vramplan.cli.parser import run


def test_notices_print_before_the_table(monkeypatch: pytest.MonkeyPatch) -> None:
    both = io.StringIO()  # stdout and stderr into one stream, as a terminal shows them
    monkeypatch.setattr(sys, "stdout", both)
    monkeypatch.setattr(sys, "stderr", both)
    assert run(["estimate", "--gpu", "h100"]) == 0
    text = both.getvalue()
    note = text.index("vramplan: --gpu h100: taken as h100-80gb")
    assert note < text.index("LLaMA-7B on 8 x") < text.index("step time")
    assert text.count("taken as h100-80gb") == 1


def test_notices_are_not_printed_before_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    assert run(["estimate", "--gpu", "h100", "--set", "training.seq_len=0"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "training.seq_len" in err[0]


def test_diff_states_step_time_per_token(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    a, b = tmp_path / "a.toml", tmp_path / "b.toml"
    a.write_text('[model]\npreset = "llama-7b"\n')
    b.write_text('[model]\npreset = "llama-7b"\n[training]\nmicro_batch_size = 4\n')
    assert run(["diff", str(a), str(b)]) == 0
    line = next(x for x in capsys.readouterr().out.splitlines() if x.startswith("step time per token, us"))
    assert run(["diff", str(a), str(b), "--json"]) == 0
    data = strict_json(capsys.readouterr().out)
    # per token = 1 / (tokens/s), in microseconds: 4x the batch is ~4x the step but about the same per token
    us_a, us_b = (1e6 / data[k]["tokens_per_second"] for k in ("a", "b"))
    cells = line.removeprefix("step time per token, us").split()
    assert cells[:3] == [f"{us_a:,.2f}", f"{us_b:,.2f}", f"{us_b - us_a:+,.2f}"]
    assert len(line) <= 80


@pytest.mark.parametrize("command", COMMANDS)
def test_each_subcommand_help_has_a_description_and_an_example(
    command: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exit_info:
        run([command, "--help"])
    assert exit_info.value.code == 0
    text = capsys.readouterr().out
    usage, _, rest = text.partition("\n\n")
    assert usage.startswith(f"usage: vramplan {command}")
    assert not rest.startswith(("positional arguments:", "options:"))  # a description comes first
    example = text.rstrip().splitlines()[-1]
    assert example.startswith(f"example: vramplan {command}") and len(example) <= 78


def test_cost_names_its_currency(capsys: pytest.CaptureFixture[str]) -> None:
    assert run(["gpus", "--tokens", "1B", "--price", "2", "--no-advice", "--gpu", "h100-80gb"]) == 0
    header = next(x for x in capsys.readouterr().out.splitlines() if x.split()[:2] == ["GPU", "GiB"])
    assert header.endswith("cost USD")
    assert run(["estimate", "--set", "training.tokens=1e9", "--set", "hardware.price_per_gpu_hour=2"]) == 0
    assert "USD at 2 USD per GPU-hour" in capsys.readouterr().out
