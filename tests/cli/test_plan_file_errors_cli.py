"""A plan file's bad keys all at once in one line (issues 32, 39), --set's did-you-mean, 1e30 for a count in words."""

from __future__ import annotations

from pathlib import Path

import pytest

from vramplan.cli.parser import run
from vramplan.core.plan.helpers.errors import MAX_PROBLEMS


def err_lines(args: list[str], capsys: pytest.CaptureFixture[str]) -> list[str]:
    assert run(args) == 2
    return capsys.readouterr().err.strip().splitlines()


def test_every_bad_key_of_a_file_is_in_its_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    plan = tmp_path / "p.toml"
    plan.write_text(
        '[model]\npreset = "llama-7b"\n[training]\nmicro_batch_sise = 2\nseq_lenn = 4\n[strategy]\nzero_stagee = 2\n'
    )
    lines = err_lines(["estimate", str(plan)], capsys)
    assert lines == [  # the file named once (issue 39: one line, exit 2)
        f"vramplan: {plan}: training.micro_batch_sise: unknown key; did you mean micro_batch_size?"
        " | training.seq_lenn: unknown key; did you mean seq_len?"
        " | strategy.zero_stagee: unknown key; did you mean zero_stage?"
    ]
    set_line = err_lines(["estimate", "--set", "training.micro_batch_sise=2"], capsys)
    assert set_line == ["vramplan: training.micro_batch_sise: unknown key; did you mean micro_batch_size?"]


def test_many_bad_keys_are_counted_past_four(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    plan = tmp_path / "p.toml"
    plan.write_text('[model]\npreset = "llama-7b"\n[training]\n' + "".join(f"bad{i} = 1\n" for i in range(14)))
    (line,) = err_lines(["estimate", str(plan)], capsys)
    parts = line.split(" | ")
    assert len(parts) == MAX_PROBLEMS == 4
    assert parts[-1] == "and 11 more"  # 14 problems: 3 named, then the 11 others counted
    assert "(known: objective, micro_batch_size" in parts[0] and parts[1] == "training.bad1: unknown key"


def test_one_problem_from_the_core_counts_the_others(tmp_path: Path) -> None:
    from vramplan.core.files.planio import load_plan
    from vramplan.core.plan.helpers.errors import PlanError

    plan = tmp_path / "p.toml"
    plan.write_text('[model]\npreset = "llama-7b"\n[training]\nseq_lenn = 4\n[strategy]\nzero_stagee = 2\n')
    with pytest.raises(PlanError) as info:
        load_plan(plan)
    assert info.value.line().endswith("did you mean seq_len? (and 1 more problem)")  # the TUI's one line


@pytest.mark.parametrize("key, bound", [("training.micro_batch_size", "1000000"), ("strategy.zero_stage", "3")])
def test_1e30_as_an_integer_gets_our_wording(
    key: str, bound: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    want = f"{key}: must be less than or equal to {bound} (got 1e+30)"
    assert err_lines(["estimate", "--set", f"{key}=1e30"], capsys) == [f"vramplan: {want}"]
    table, _, name = key.partition(".")
    plan = tmp_path / "p.toml"
    plan.write_text(f'[model]\npreset = "llama-7b"\n[{table}]\n{name} = 1e30\n')
    assert err_lines(["estimate", str(plan)], capsys) == [f"vramplan: {plan}: {want}"]
