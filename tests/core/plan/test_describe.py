"""The words that describe a plan (`core.plan.describe`): one framework's vocabulary per plan (issue 40.7: "DP 8,
ZeRO-3" and then "stack custom chose: fsdp_version 2" of the same plan)."""

from __future__ import annotations

import pytest

from vramplan.core.plan.describe import parallel_summary, sharding_label
from vramplan.core.plan.resolved import choices_text
from vramplan.core.plan.schema.plan import default_plan


@pytest.mark.parametrize(
    ("changes", "label"),
    [
        ({}, "FSDP2 full shard (ZeRO-3)"),  # bf16 autocast over fp32 weights, sharded: FSDP (the stack's fsdp_version)
        ({"strategy.zero_stage": 2}, "FSDP2 shard grad + optimizer (ZeRO-2)"),
        ({"strategy.fsdp_version": 1}, "FSDP1 full shard (ZeRO-3)"),
        ({"training.precision": "bf16-master"}, "ZeRO-3"),  # DeepSpeed's master weights: its ZeRO
        ({"strategy.zero_stage": 1}, "ZeRO-1"),  # FSDP has no optimizer-only sharding
    ],
)
def test_a_plan_is_described_in_the_vocabulary_of_the_framework_that_shards_it(
    changes: dict[str, object], label: str
) -> None:
    plan = default_plan().with_changes(changes)
    assert sharding_label(plan) == label
    summary = parallel_summary(plan, framework_words=True)
    assert summary == f"DP 8, {label}"
    assert ("fsdp_" in choices_text(plan)) <= ("FSDP" in summary)  # the stack's FSDP keys only beside FSDP words
    assert parallel_summary(plan) == f"DP 8, ZeRO-{plan.strategy.zero_stage}"  # the compact form keeps the key's
