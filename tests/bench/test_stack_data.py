"""tests/data/stacks/sac_block.json is what bench/data/sac_block.py measures (issue 31.5): three of its runs are
measured again here (torch only; a second or so each) and must equal the committed figures to the byte, the tensor
lists included. The whole file, and the other stack files, are rerun by their scripts (docs/data.md)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from bench.data import sac_block  # noqa: E402
from bench.data.stack_probe import aten_matmuls  # noqa: E402

DATA = json.loads((Path(__file__).resolve().parents[1] / "data" / "stacks" / "sac_block.json").read_text())


@pytest.mark.parametrize(
    ("mode", "dtype", "layers"), [("op_2412", "bfloat16", 1), ("full", "float32", 2), ("every2", "bfloat16", 2)]
)
def test_sac_block_run_reproduces(mode: str, dtype: str, layers: int) -> None:
    committed = next(r for r in DATA["runs"] if (r["mode"], r["dtype"], r["L"]) == (mode, dtype, layers))
    with aten_matmuls():
        got = sac_block.run(mode, getattr(torch, dtype), layers)
    assert got == committed


def test_sac_block_formulas_and_config() -> None:
    assert DATA["formulas"] == {"bfloat16": sac_block.formulas(2), "float32": sac_block.formulas(4)}
    assert {k: DATA["config"][k] for k in sac_block.CONFIG} == sac_block.CONFIG
