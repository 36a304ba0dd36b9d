"""Properties of the estimator over many plans (hypothesis, explicit strategies per field)."""

from __future__ import annotations

from typing import Any

from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from vramplan.core.memory.peak import estimate
from vramplan.core.plan.helpers.errors import PlanError
from vramplan.core.plan.schema.plan import plan_from_dict
from vramplan.core.plan.schema.training import OPTIMIZERS, PRECISIONS

FAMILY_SHAPES = {
    # model_type: (hidden sizes, head counts, tied)
    "llama": (st.sampled_from([1024, 2048, 4096, 5120, 8192]), [8, 16, 32, 64], False),
    "mistral": (st.sampled_from([2048, 4096, 5120]), [16, 32], False),
    "qwen2": (st.sampled_from([896, 1536, 3584, 5120, 8192]), [7, 14, 28, 64], False),
    "gemma": (st.sampled_from([2048, 3072]), [8, 16], True),
    "phi3": (st.sampled_from([3072, 5120]), [32, 40], False),
    "bloom": (st.sampled_from([1024, 2048, 4096]), [16, 32], True),
    "gpt2": (st.sampled_from([768, 1024, 1600]), [12, 16, 25], True),
    "gpt_neox": (st.sampled_from([768, 2048, 4096, 6144]), [12, 16, 32, 64], False),
    "falcon": (st.sampled_from([2048, 4544, 8192]), [32, 71, 128], True),
}
NO_GQA = ("bloom", "gpt2", "gpt_neox")


def _options(draw: st.DrawFn, family: str, heads: int) -> dict[str, Any]:
    """The structural keys each family's config may set (core.plan.architecture.arch.Family.options), drawn."""
    if family == "gpt2":
        return {"max_position_embeddings": 8192, "hidden_act": draw(st.sampled_from(["gelu_new", "gelu"]))}
    if family == "gpt_neox":
        return {
            "use_parallel_residual": draw(st.booleans()),
            "partial_rotary_factor": draw(st.sampled_from([0.25, 1.0])),
            "attention_bias": draw(st.booleans()),
        }
    if family == "falcon":
        new = draw(st.booleans())
        parallel = True if new else draw(st.booleans())
        out: dict[str, Any] = {
            "new_decoder_architecture": new,
            "use_parallel_residual": parallel,
            "alibi": False if new else draw(st.booleans()),
            "attention_bias": draw(st.booleans()),
        }
        if parallel:
            out["num_ln_in_parallel_attn"] = draw(st.sampled_from([1, 2]))
        return out
    if family == "gemma":
        return {"head_dim": 256}
    if family == "phi3":
        return {"partial_rotary_factor": draw(st.sampled_from([1.0, 0.75]))}
    if family == "llama":
        return {"attention_bias": draw(st.booleans()), "mlp_bias": draw(st.booleans())}
    return {}


@st.composite
def models(draw: st.DrawFn, min_layers: int = 2, min_hidden: int = 0) -> dict[str, Any]:
    family = draw(st.sampled_from(sorted(FAMILY_SHAPES)))
    hidden_st, heads_options, tied = FAMILY_SHAPES[family]
    h = draw(hidden_st.filter(lambda x: x >= min_hidden))
    heads = draw(st.sampled_from([a for a in heads_options if h % a == 0] or [8]))
    options = _options(draw, family, heads)
    if family in NO_GQA:
        kv = heads
    elif family == "falcon" and not options["new_decoder_architecture"]:
        kv = draw(st.sampled_from([1, heads]))
    else:
        kv = draw(st.sampled_from([d for d in (1, 2, 4, 8, heads) if heads % d == 0]))
    f = 4 * h if family == "bloom" else draw(st.sampled_from([h * 8 // 3 // 64 * 64, 3 * h, 4 * h, 7 * h // 2]))
    return {
        "model_type": family,
        "vocab_size": draw(st.sampled_from([32000, 50257, 128256, 152064, 250880])),
        "hidden_size": h,
        "intermediate_size": f,
        "num_hidden_layers": draw(st.integers(min_layers, 48)),
        "num_attention_heads": heads,
        "num_key_value_heads": kv,
        "tie_word_embeddings": tied,
        **options,
    }


def _targets(family: str) -> list[list[str]]:
    attn = [["q", "v"]] if family in ("llama", "mistral", "qwen2", "gemma") else [["qkv"]]
    mlp = [["gate_up", "down"]] if family == "phi3" else [["up", "down"]]
    return [["all-linear"], ["o"], *mlp, *attn]


@st.composite
def plans(draw: st.DrawFn, min_layers: int = 2, min_hidden: int = 0) -> dict[str, Any]:
    method = draw(st.sampled_from(["full", "lora", "qlora"]))
    model = draw(models(min_layers, min_hidden))
    targets = draw(st.sampled_from(_targets(model["model_type"])))
    return {
        "model": model,
        "hardware": {
            "gpu": draw(st.sampled_from(["a100-80gb", "h100-80gb", "rtx-4090", "t4", "mi300x"])),
            "gpus_per_node": draw(st.sampled_from([1, 2, 4, 8])),
            "nodes": draw(st.sampled_from([1, 2, 4])),
        },
        "training": {
            "micro_batch_size": draw(st.integers(1, 16)),
            "seq_len": draw(st.sampled_from([128, 512, 2048, 4096, 8192])),
            "grad_accum_steps": draw(st.integers(1, 8)),
            "precision": draw(st.sampled_from(PRECISIONS)),
            "optimizer": draw(st.sampled_from(OPTIMIZERS)),
            "optimizer_impl": draw(st.sampled_from(["auto", "foreach", "for-loop", "fused"])),
            "method": method,
            "lora_rank": draw(st.sampled_from([4, 8, 64])),
            "lora_targets": targets,
        },
        "strategy": {
            "gradient_checkpointing": draw(st.sampled_from(["none", "selective", "full"])),
            "attention": draw(st.sampled_from(["eager", "flash"])),
            "activation_compression": draw(st.sampled_from(["none", "int8"])),
            "fused_cross_entropy": draw(st.booleans()),
            "zero_stage": draw(st.integers(0, 3)),
            "offload_optimizer": draw(st.sampled_from(["none", "none", "cpu", "nvme"])),
            "offload_parameters": draw(st.sampled_from(["none", "none", "cpu"])),
            "tensor_parallel": draw(st.sampled_from([1, 1, 2, 4])),
            "pipeline_parallel": draw(st.sampled_from([1, 1, 2])),
            "sequence_parallel": draw(st.booleans()),
        },
    }


def valid(data: dict[str, Any]):
    try:
        return plan_from_dict(data)
    except PlanError:
        assume(False)


SETTINGS = settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.filter_too_much])


@SETTINGS
@given(plans(min_layers=1))
def test_any_valid_plan_estimates(data: dict[str, Any]) -> None:
    est = estimate(valid(data))
    per_gpu = est.per_gpu()
    kinds = {k: v for k, v in per_gpu.items() if k != "total"}
    assert all(v >= 0 for v in kinds.values())
    # the peak is one moment: at least its largest kind, at most every kind at its largest at once
    assert max(kinds.values()) <= est.total <= sum(kinds.values())
    assert sum(est.live_at_peak.values()) == est.total


def _total(data: dict[str, Any], table: str, key: str, value: Any) -> int:
    """The total less the allocator's reserve: the caching allocator's segment packing is not monotone (a larger
    tensor can fill its 2 MiB / 20 MiB segment better: core/memory/allocator.py), everything else must be."""
    changed = {**data, table: {**data[table], key: value}}
    est = estimate(plan_from_dict(changed))
    return est.total - est.overhead_bytes.get("allocator_reserve", 0)


@SETTINGS
@given(
    plans(),
    st.sampled_from([("training", "micro_batch_size"), ("training", "seq_len"), ("model", "num_hidden_layers")]),
)
def test_monotone_in_batch_sequence_layers(data: dict[str, Any], field: tuple[str, str]) -> None:
    plan = valid(data)
    table, key = field
    value = getattr(getattr(plan, table), key)
    bigger = value * 2 if key == "seq_len" else value + 1
    try:
        plan.with_changes({f"{table}.{key}": bigger})
    except PlanError:
        assume(False)
    assert _total(data, table, key, value) <= _total(data, table, key, bigger)


ZERO_MODELS = [
    "llama-7b",
    "bloom-7b1",
    "mistral-7b",
    "llama-3-8b",
    "qwen2.5-7b",
    "llama-2-13b",
    "llama-2-70b",
    "qwen2.5-72b",
]


@SETTINGS
@given(plans(), st.sampled_from(ZERO_MODELS), st.sampled_from([4, 8, 16, 64]))
def test_zero_stages_never_add_memory(data: dict[str, Any], preset: str, dp: int) -> None:
    """ZeRO-3 <= ZeRO-2 <= ZeRO-1 <= 0 per GPU, on the models ZeRO is used for (the 7B-72B presets).

    ZeRO-3 trades its parameter shard for gathering one module (and prefetching the next) at a time; on a small
    model whose embedding is most of its weights (say 0.3B parameters with a 150k vocabulary, or a QLoRA model
    whose 16-bit embedding outweighs its 4-bit blocks) the gathered embedding costs about what the shard saves,
    and the estimate says so rather than pretend."""
    data = {
        **data,
        "model": {"preset": preset},
        "hardware": {"gpu": "a100-80gb", "gpus_per_node": dp, "nodes": 1},
        "training": {**data["training"], "lora_targets": ["all-linear"]},
        "strategy": {
            **data["strategy"],
            "tensor_parallel": 1,
            "pipeline_parallel": 1,
            "sequence_parallel": False,
            "offload_optimizer": "none",
            "offload_parameters": "none",
        },
    }
    totals = []
    for zero in (0, 1, 2, 3):
        data["strategy"]["zero_stage"] = zero
        totals.append(estimate(valid(data)).total)
    assert totals[3] <= totals[2] <= totals[1] <= totals[0]


@SETTINGS
@given(plans(min_layers=4))
def test_checkpointing_never_adds_memory(data: dict[str, Any]) -> None:
    """none >= selective >= full, up to checkpointing's own bookkeeping.

    Checkpointing pays for itself once there is more than one block whose activations it can drop. What it keeps
    of its own (``checkpoint_buffers``: RoPE tables, position ids, an eager attention mask held by the
    checkpoints' closures until the last block's backward; during a recompute, the kept inputs next to their
    recomputed copies) is real memory: when the peak comes at the end of backward, where gradients dominate and
    activations are nearly gone, checkpointing can cost that much more: a few MB, bounded here by its buffers
    plus 0.2% of the total. Any activation memory it failed to drop would be far larger."""
    valid(data)
    ests = {}
    for level in ("none", "selective", "full"):
        changed = {**data, "strategy": {**data["strategy"], "gradient_checkpointing": level}}
        ests[level] = estimate(plan_from_dict(changed))

    def bookkeeping(level: str) -> int:
        c = ests[level].components.get("checkpoint_buffers")
        # + the allocator reserve of the level with more memory (its segment packing is not monotone)
        return int((c.bytes if c else 0) * 1.06 + 0.002 * ests[level].total) + ests[level].overhead_bytes.get(
            "allocator_reserve", 0
        )

    assert ests["full"].total <= ests["selective"].total + bookkeeping("full")
    assert ests["selective"].total <= ests["none"].total + bookkeeping("selective")
