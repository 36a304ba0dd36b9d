"""``training.mfu`` is an override of the matmuls' efficiency, not an input every step time needs (issue 38,
point 7): `vramplan keys` says so, an unset key leaves each matmul to the GPU's measured efficiency and its shape,
a set key times every matmul at that fraction of the peak, and the reported MFU is a result either way."""

from __future__ import annotations

import pytest

from tests.hostile import strict_json
from vramplan.cli.parser import run


def test_keys_documents_mfu_as_the_matmul_efficiency_override(capsys: pytest.CaptureFixture[str]) -> None:
    assert run(["keys"]) == 0
    text = capsys.readouterr().out
    doc = " ".join(text[text.index("training.mfu") :].split("\n  training.")[0].split("[strategy]")[0].split())
    assert "the fraction of the GPU's dense peak every matmul runs at" in doc
    assert "unset: each matmul's from the GPU's measured best fraction and its shape's tiles and waves" in doc


def _time(capsys: pytest.CaptureFixture[str], *sets: str) -> dict[str, object]:
    args = ["estimate", "--json", "--gpu", "h100-80gb", "--set", "strategy.gradient_checkpointing=none"]
    for s in sets:
        args += ["--set", s]
    assert run(args) == 0
    time: dict[str, object] = strict_json(capsys.readouterr().out)["time"]
    return time


def test_mfu_set_times_every_matmul_at_that_fraction(capsys: pytest.CaptureFixture[str]) -> None:
    auto = _time(capsys)
    assert auto["mfu_setting"] is None  # unset: the matmuls' efficiency is modelled
    matmuls_auto = auto["terms"]["matmuls"]["seconds"]  # type: ignore[index]
    half = _time(capsys, "training.mfu=0.25")
    assert half["mfu_setting"] == 0.25
    assert "training.mfu 0.25" in half["explain"]["matmuls"]["formula"]  # type: ignore[index]
    # the same FLOPs at 25% of the peak, against the H100's measured 80% for its best shapes and less for others
    matmuls_quarter = half["terms"]["matmuls"]["seconds"]  # type: ignore[index]
    assert 2.5 < matmuls_quarter / matmuls_auto < 3.3  # type: ignore[operator]
    # the reported MFU is what the step achieves, below the setting (the step does more than matmuls)
    assert 0 < half["mfu"] < 0.25  # type: ignore[operator]
    # only the matmuls move: the memory-bound terms are the same
    assert half["terms"]["memory_ops"] == auto["terms"]["memory_ops"]  # type: ignore[index]
