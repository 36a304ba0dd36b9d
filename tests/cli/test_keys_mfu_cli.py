"""The auto MFU `vramplan keys` documents is the one the step time uses (issue 32, point 6)."""

from __future__ import annotations

import re

import pytest

from tests.hostile import strict_json
from vramplan.cli.parser import run
from vramplan.core.plan.catalogue.presets import model_config
from vramplan.core.time import flops as fl
from vramplan.core.time.assumptions import MATH_MFU


def test_keys_documents_the_default_mfu_the_estimate_uses(capsys: pytest.CaptureFixture[str]) -> None:
    assert run(["keys"]) == 0
    text = capsys.readouterr().out
    doc = text[text.index("training.mfu") :].split("\n  training.")[0]
    m = re.search(r"A100 (\d\.\d+), H100-class (\d\.\d+)\) / \(1 \+ k x attention share\) x model / hardware", doc)
    assert m, doc
    assert (float(m[1]), float(m[2])) == (MATH_MFU["ampere"].m0, MATH_MFU["hopper"].m0)
    arch = model_config({"preset": "llama-7b"}).arch()
    share = fl.attention_forward_flops(arch, 2048) / (
        fl.forward_matmul_flops(arch) + fl.attention_forward_flops(arch, 2048)
    )
    for gpu, m0, generation in (("a100-80gb", float(m[1]), "ampere"), ("h100-80gb", float(m[2]), "hopper")):
        args = ["estimate", "--json", "--gpu", gpu, "--set", "strategy.gradient_checkpointing=none"]
        assert run(args) == 0  # no recomputation: model / hardware FLOPs = 1
        time = strict_json(capsys.readouterr().out)["time"]
        assert time["mfu_default"] is True
        assert time["mfu_setting"] == pytest.approx(m0 / (1 + MATH_MFU[generation].k * share))
