"""A plan file's bad keys all at once, with --set's did-you-mean, and 1e30 for a count in our words (issue 32)."""

from __future__ import annotations

from pathlib import Path

import pytest

from vramplan.cli.parser import run
from vramplan.core.plan.helpers.errors import MAX_LINES


def err_lines(args: list[str], capsys: pytest.CaptureFixture[str]) -> list[str]:
    assert run(args) == 2
    return capsys.readouterr().err.strip().splitlines()


def test_every_bad_key_of_a_file_is_one_line_each(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    plan = tmp_path / "p.toml"
    plan.write_text(
        '[model]\npreset = "llama-7b"\n[training]\nmicro_batch_sise = 2\nseq_lenn = 4\n[strategy]\nzero_stagee = 2\n'
    )
    lines = err_lines(["estimate", str(plan)], capsys)
    assert lines == [
        f"vramplan: {plan}: training.micro_batch_sise: unknown key; did you mean micro_batch_size?",
        f"vramplan: {plan}: training.seq_lenn: unknown key; did you mean seq_len?",
        f"vramplan: {plan}: strategy.zero_stagee: unknown key; did you mean zero_stage?",
    ]
    set_line = err_lines(["estimate", "--set", "training.micro_batch_sise=2"], capsys)
    assert set_line == ["vramplan: training.micro_batch_sise: unknown key; did you mean micro_batch_size?"]


def test_many_bad_keys_stop_at_ten_lines(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    plan = tmp_path / "p.toml"
    plan.write_text('[model]\npreset = "llama-7b"\n[training]\n' + "".join(f"bad{i} = 1\n" for i in range(14)))
    lines = err_lines(["estimate", str(plan)], capsys)
    assert len(lines) == MAX_LINES == 10
    assert lines[-1] == "vramplan: and 5 more"  # 14 problems: 9 shown, then the 5 others counted
    assert "(known: objective, micro_batch_size" in lines[0] and lines[1].endswith("training.bad1: unknown key")


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
