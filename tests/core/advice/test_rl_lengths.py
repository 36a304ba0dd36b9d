"""Issue 40.4: an RL plan is described and searched by its own lengths. `check` described a GRPO plan of 512 + 1024
tokens as "1 x 2048 tokens" (the SFT seq_len it does not train on); `fit` offered a largest sequence of 16,777,216
tokens (the search's bound: training.seq_len changes nothing in an RL plan, and the preset had no context)."""

from __future__ import annotations

from vramplan.core.advice.advisor import advise
from vramplan.core.advice.checklist import checklist
from vramplan.core.advice.fit_limits import MAX_SEQ_LEN, seq_len_text, sequence_search
from vramplan.core.memory.peak import estimate
from vramplan.core.plan.describe import batch_label
from vramplan.core.plan.schema.plan import Plan, plan_from_dict


def grpo(model: str = "qwen3-8b", gpu: str = "h100-80gb", gpus: int = 8) -> Plan:
    """8 completions per GPU (one group of num_generations 8 each), ZeRO-3, vLLM colocated."""
    return plan_from_dict({
        "model": {"preset": model}, "hardware": {"gpu": gpu, "gpus_per_node": gpus},
        "training": {"objective": "grpo", "micro_batch_size": 8}, "strategy": {"zero_stage": 3},
        "rl": {"max_prompt_length": 512, "max_completion_length": 1024, "generation": "vllm-colocate"},
    })  # fmt: skip


def test_check_describes_a_grpo_plan_by_its_own_sequence() -> None:
    """512 + 1024 = 1,536 tokens per completion, 8 completions per micro-batch: never the 2,048 of
    training.seq_len."""
    p = grpo()
    assert p.training.seq_len == 2048
    cl = checklist(p)
    for item in ("nan.data", "slow.micro_batch", "oom.activations"):
        detail = cl.item(item).detail
        assert "8 x 1536" in detail and "2048" not in detail, (item, detail)
    assert "sequences of 1,536 tokens" in cl.item("slow.data_loading").detail
    assert batch_label(p).startswith("GRPO: 8 completions/GPU of 512 + 1024 tokens")


def test_fit_searches_the_completion_length_under_the_context() -> None:
    """OLMo-2-7B (a 4,096-token context) on 8 x H200: memory does not stop the search, the trained context does:
    prompt 512 + completion 3,584."""
    p = grpo("olmo-2-7b", "h200").with_changes({"training.micro_batch_size": 1})
    assert sequence_search(p) == ("rl.max_completion_length", 512)
    a = advise(p)
    assert a.max_seq_len == a.context_len == 4096 < MAX_SEQ_LEN
    assert a.max_seq_changes == {"rl.max_completion_length": 3584}
    assert seq_len_text(a.max_seq_len, a.context_len, a.max_seq_changes) == (
        "4,096 tokens: prompt 512 + rl.max_completion_length 3,584 (capped at the model's 4,096-token context)"
    )


def test_fit_stops_where_memory_does_and_the_change_fits() -> None:
    p = grpo().with_changes({"training.micro_batch_size": 1})
    a = advise(p)
    ((key, completion),) = a.max_seq_changes.items()
    assert key == "rl.max_completion_length" and a.max_seq_len == 512 + completion < 40_960
    assert a.margin.keeps(estimate(p.with_changes({key: completion})))
    assert not a.margin.keeps(estimate(p.with_changes({key: completion + 1})))


def test_dpo_searches_max_length_and_sft_seq_len() -> None:
    dpo = plan_from_dict({"model": {"preset": "qwen3-8b"}, "training": {"objective": "dpo"},
                          "strategy": {"zero_stage": 3}})  # fmt: skip
    assert sequence_search(dpo) == ("rl.max_length", 0)
    a = advise(dpo)
    assert set(a.max_seq_changes) == {"rl.max_length"} and a.max_seq_len == a.max_seq_changes["rl.max_length"]
    sft = plan_from_dict({"model": {"preset": "qwen3-8b"}})
    assert sequence_search(sft) == ("training.seq_len", 0)
