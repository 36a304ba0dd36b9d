"""Issue 40.7: one framework's words per plan. A plan FSDP shards (bf16 autocast over 8 ranks, the default) is
described as "FSDP2 full shard (ZeRO-3)" (user-40a), and its tables, checks and Markdown report then call its gathered
weights and their communication FSDP's, not ZeRO-3's; a DeepSpeed master-weight plan keeps ZeRO-3's words."""

from __future__ import annotations

import pytest

from vramplan.cli.parser import run
from vramplan.core.files.review import markdown_report
from vramplan.core.memory.kinds import kind_label
from vramplan.core.memory.peak import estimate
from vramplan.core.plan.schema.plan import default_plan
from vramplan.core.time.record import term_label


def out_of(args: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    run(args)
    return capsys.readouterr().out


def test_an_fsdp_plans_tables_and_checks_say_fsdp(capsys: pytest.CaptureFixture[str]) -> None:
    plan = default_plan()
    assert kind_label("gathered_parameters", plan) == "FSDP gathered"
    assert term_label("zero3_comm", plan) == "FSDP gathers + scatter"
    table = out_of(["estimate"], capsys)
    assert "DP 8, FSDP2 full shard (ZeRO-3)" in table
    assert "FSDP gathered" in table and "FSDP gathers + scatter" in table and "ZeRO-3 gather" not in table
    checks = out_of(["check"], capsys)
    assert "sharded over 8 ranks: FSDP2 full shard (ZeRO-3)" in " ".join(checks.split())
    report = markdown_report(estimate(plan))
    assert "| FSDP gathered |" in report and "ZeRO-3 gathered" not in report


def test_a_deepspeed_plan_keeps_zero_words(capsys: pytest.CaptureFixture[str]) -> None:
    plan = default_plan().with_changes({"training.precision": "bf16-master"})  # DeepSpeed's master weights shard
    assert kind_label("gathered_parameters", plan) == "ZeRO-3 gathered"
    assert term_label("zero3_comm", plan) == "ZeRO-3 gathers + scatter"
    table = out_of(["estimate", "--set", "training.precision=bf16-master"], capsys)
    assert "ZeRO-3 gathered" in table and "FSDP" not in table


def test_an_fsdp_config_is_imported_in_fsdp_words() -> None:
    """The import's summary line names the sharding as the file's framework does (user-40a's line said ZeRO-3)."""
    from tests.conftest import ROOT
    from vramplan.core.files.importers.apply import import_config

    for name in ("accelerate_fsdp.yaml", "axolotl_llama2_qlora_fsdp.yml"):
        im = import_config(ROOT / "tests" / "data" / "import" / name, default_plan())
        assert "sharding FSDP1 full shard (ZeRO-3)" in im.summary(), im.summary()
    ds = import_config(ROOT / "tests" / "data" / "import" / "hf_ds_config_zero2.json", default_plan())
    assert "sharding ZeRO-2;" in ds.summary()


def test_a_deepspeed_config_is_imported_in_zero_words_whatever_the_plans_regime() -> None:
    """README task 4: a DeepSpeed JSON exported from a bf16-autocast plan is ZeRO-2 (DeepSpeed runs it), not FSDP."""
    from tests.conftest import ROOT
    from vramplan.core.files.importers.apply import import_config

    ds = import_config(ROOT / "tests" / "data" / "import" / "seed_13b_zero3.json", default_plan())
    assert "sharding ZeRO-3" in ds.summary() and "FSDP" not in ds.summary()
