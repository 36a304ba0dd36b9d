"""The training stacks' memory techniques (issues 12 and 13) against what PyTorch's CPU path measured of them
(tests/data/stacks, tests/data/qlora; how each was measured: the READMEs there), and the identities and
directions each mechanism implies where the CPU shows nothing (paged unified memory, host offload, fp8).

Bounds, and why: where the CPU runs the same kernels and allocations as the stack (per-op and full checkpointing,
layer-interval checkpointing, compiled saves, the chunked loss, the optimizer step in backward, parameters and
states of QLoRA) the estimate must agree to the byte, or within the few KiB of bookkeeping named at the assert (an
8 B allocation once per run; the labels and loss scalars). Whole-step QLoRA peaks are held to the suite's CPU-oracle
bounds (-5%..+15%, tests/conftest.py `assert_issue_bounds`): without checkpointing they agree within 5%; with
checkpointing the estimate keeps the whole recomputed block's transient at the peak, which the CPU's allocator
partly reuses (measured +6% to +13% over).
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.conftest import DATA
from vramplan.core.memory.activations.context import plan_ctx
from vramplan.core.memory.activations.loss import LossBytes, loss_bytes
from vramplan.core.memory.activations.stage import plan_layout
from vramplan.core.memory.peak import estimate
from vramplan.core.memory.record import Estimate
from vramplan.core.plan.helpers.errors import PlanError
from vramplan.core.plan.schema.plan import Plan, plan_from_dict
from vramplan.core.time.step import step_time

SAC = json.loads((DATA / "stacks" / "sac_block.json").read_text())
COMPILE = json.loads((DATA / "stacks" / "compile_block.json").read_text())
CHUNKED = json.loads((DATA / "stacks" / "chunked_ce.json").read_text())
OPT_IN_BWD = json.loads((DATA / "stacks" / "opt_in_bwd.json").read_text())
QLORA = json.loads((DATA / "qlora" / "qlora_cpu.json").read_text())["cases"]

DTYPE_PRECISION = {"bfloat16": "bf16-pure", "float32": "fp32"}


def _set(data: dict[str, Any], changes: dict[str, Any]) -> dict[str, Any]:
    for key, value in changes.items():
        table, name = key.split(".")
        data[table][name] = value
    return data


def block_plan(layers: int, **changes: Any) -> Plan:
    """The measured block config (b=2, s=128, h=256, 8/2 heads, i=768) as a full fine-tuning plan."""
    c = SAC["config"]
    data = {
        "model": {
            "model_type": "llama",
            "vocab_size": 1024,
            "hidden_size": c["h"],
            "intermediate_size": c["i"],
            "num_hidden_layers": layers,
            "num_attention_heads": c["n_h"],
            "num_key_value_heads": c["n_kv"],
            "tie_word_embeddings": False,
        },
        "hardware": {"gpu": "h200", "gpus_per_node": 1, "nodes": 1},
        "training": {"micro_batch_size": c["b"], "seq_len": c["s"], "precision": "bf16-pure", "method": "full"},
        "strategy": {"gradient_checkpointing": "none", "attention": "flash", "zero_stage": 0},
    }
    return plan_from_dict(_set(data, changes))


def per_block(**changes: Any) -> int:
    """Activation bytes one more block adds (stacks of 2 and 4 blocks: what is paid once per run cancels)."""
    a2, a4 = (estimate(block_plan(n, **changes), cpu=True).largest["activations"] for n in (2, 4))
    assert (a4 - a2) % 2 == 0
    return (a4 - a2) // 2


def measured_per_block(mode: str, dtype: str) -> int:
    runs = {r["L"]: r["retained"] for r in SAC["runs"] if r["mode"] == mode and r["dtype"] == dtype}
    return (runs[4] - runs[2]) // 2


def compiled_run(block: str, precision: str) -> dict[str, Any]:
    return next(r for r in COMPILE["runs"] if r["block"] == block and r["precision"] == precision)


# --- per-op selective checkpointing (strategy.gradient_checkpointing = "op") and checkpoint_every -----------------


@pytest.mark.parametrize("dtype", ["bfloat16", "float32"])
def test_op_checkpointing_saves_what_torchtitan_saves_to_the_byte(dtype: str) -> None:
    prec = DTYPE_PRECISION[dtype]
    assert measured_per_block("op_2412", dtype) == measured_per_block("op_new", dtype)  # both policies save alike
    assert per_block(**{"training.precision": prec, "strategy.gradient_checkpointing": "op"}) == measured_per_block(
        "op_2412", dtype
    )
    assert per_block(**{"training.precision": prec, "strategy.gradient_checkpointing": "full"}) == (
        measured_per_block("full", dtype)
    )
    # the formula in words: C·T·(h [block input] + n_h·d [q] + n_kv·d [v] + n_h·d [SDPA out] + i [gate] + h [down])
    # + 4·b·n_h·s [SDPA's fp32 log-sum-exp]
    c, size = SAC["config"], 2 if dtype == "bfloat16" else 4
    formula = size * c["T"] * (2 * c["h"] + 2 * c["n_h"] * c["d"] + c["n_kv"] * c["d"] + c["i"])
    assert formula + 4 * c["b"] * c["n_h"] * c["s"] == measured_per_block("op_2412", dtype)


@pytest.mark.parametrize("precision", ["bf16-pure", "fp32", "bf16-autocast"])
def test_op_lies_between_full_and_selective(precision: str) -> None:
    """Per-op keeps more than full recomputation and less than Megatron's selective (which, with flash attention,
    keeps everything: the attention core is never materialised)."""
    by = {
        m: per_block(**{"training.precision": precision, "strategy.gradient_checkpointing": m})
        for m in ("none", "selective", "op", "full")
    }
    assert by["full"] < by["op"] < by["selective"] == by["none"]


@pytest.mark.parametrize("dtype", ["bfloat16", "float32"])
def test_checkpoint_every_second_block(dtype: str) -> None:
    """torchtitan's `selective_ac_option = "2"`: every second block checkpointed, the others save everything. The
    measured stack is torchtitan's block, which without checkpointing saves 196,608 B more than transformers' block
    that vramplan models (compile_block.json's eager figures), so the mechanism is checked as the identity it implies
    on both sides: two blocks keep what one unchecked and one checkpointed block keep."""
    measured = (measured_per_block("every2", dtype)) * 2
    assert measured == measured_per_block("none", dtype) + measured_per_block("full", dtype)
    prec = DTYPE_PRECISION[dtype]
    every2 = (
        per_block(
            **{"training.precision": prec, "strategy.gradient_checkpointing": "full", "strategy.checkpoint_every": 2}
        )
        * 2
    )
    none = per_block(**{"training.precision": prec})
    full = per_block(**{"training.precision": prec, "strategy.gradient_checkpointing": "full"})
    assert every2 == none + full


# --- torch.compile (strategy.compile) ------------------------------------------------------------------------------


@pytest.mark.parametrize("precision", ["bf16", "autocast"])
def test_compile_saves_what_inductor_saves(precision: str) -> None:
    """transformers' LlamaDecoderLayer, eager and compiled: the allocator's retained bytes of one block, which
    carry the run's 8 B once."""
    run = compiled_run("hf", precision)
    prec = "bf16-pure" if precision == "bf16" else "bf16-autocast"
    assert abs(per_block(**{"training.precision": prec}) - run["eager_retained"]) <= 8
    assert abs(per_block(**{"training.precision": prec, "strategy.compile": True}) - run["compiled_retained"]) <= 8


def test_compile_under_op_checkpointing_drops_the_last_matmul_output() -> None:
    run = compiled_run("tt_op", "bf16")
    got = per_block(**{"strategy.gradient_checkpointing": "op", "strategy.compile": True})
    assert abs(got - run["compiled_retained"]) <= 8
    assert run["eager_retained"] - run["compiled_retained"] == 2 * 256 * 256  # C·T·h: the down projection's output


def test_compile_under_full_checkpointing() -> None:
    """Compiled full AC keeps the block input (as eager) plus one 5,056 B uint8 tensor (the size of PyTorch's CPU
    generator state; CUDA's Philox state is 16 B) that vramplan leaves out: within 4% on this tiny block."""
    run = compiled_run("tt_full", "bf16")
    got = per_block(**{"strategy.gradient_checkpointing": "full", "strategy.compile": True})
    assert got == run["eager_retained"] - 8
    assert 0 <= run["compiled_retained"] - got <= 0.04 * got


@pytest.mark.parametrize("precision", ["bf16-pure", "fp32", "bf16-autocast"])
@pytest.mark.parametrize("mode", ["none", "selective", "op", "full"])
def test_compile_never_raises_activations(precision: str, mode: str) -> None:
    base = {"training.precision": precision, "strategy.gradient_checkpointing": mode}
    assert per_block(**base, **{"strategy.compile": True}) <= per_block(**base)
    plain, compiled = (estimate(block_plan(4, **base, **{"strategy.compile": c})) for c in (False, True))
    assert compiled.largest["activations"] <= plain.largest["activations"]
    assert compiled.allocated <= plain.allocated


# --- chunked cross-entropy (strategy.loss_chunks) -----------------------------------------------------------------


def _loss(chunks: int, compiled: bool) -> LossBytes:
    c = CHUNKED["config"]
    plan = plan_from_dict(
        {
            "model": {
                "model_type": "llama",
                "vocab_size": c["V"],
                "hidden_size": c["h"],
                "intermediate_size": 768,
                "num_hidden_layers": 2,
                "num_attention_heads": 8,
                "tie_word_embeddings": False,
            },
            "hardware": {"gpu": "h200", "gpus_per_node": 1},
            "training": {"micro_batch_size": c["b"], "seq_len": c["s"], "precision": "bf16-pure", "method": "full"},
            "strategy": {"loss_chunks": chunks, "compile": compiled, "fused_cross_entropy": False},
        }
    )
    return loss_bytes(plan_ctx(plan, True), plan_layout(plan))


# The loss's own small tensors the model leaves out: int64 labels (T·8 = 4,096 B), the loss scalars and, chunked,
# each chunk's labels view and scalar: at most 8 KiB + 20 B here.
LOSS_SLACK = 8 * 1024 + 20


@pytest.mark.parametrize(
    ("variant", "chunks", "compiled"),
    [("tt_full", 1, False), ("tune_chunked", 8, False), ("tune_chunked_compiled", 8, True)],
)
def test_loss_saves_and_transients_as_measured(variant: str, chunks: int, compiled: bool) -> None:
    run = next(r for r in CHUNKED["runs"] if r["variant"] == variant)
    saved, fwd, bwd, copies, *_ = _loss(chunks, compiled)
    assert 0 <= run["saved_after_loss"] - (saved + copies) <= LOSS_SLACK
    assert 0 <= run["fwd_peak"] - (saved + fwd + copies) <= LOSS_SLACK
    if not compiled:  # compiled, the backward also holds the lm_head's partial gradients (checked in peak.py's phases)
        assert 0 <= run["bwd_peak"] - (saved + bwd + copies) <= LOSS_SLACK


def test_chunked_loss_eager_saves_the_same_and_compiled_saves_half() -> None:
    """Eager chunking only lowers the transients (the fp32 log-softmax of every chunk is still saved); compiled,
    only the 16-bit chunks are saved (2TV instead of 4TV)."""
    full, chunked, compiled = _loss(1, False), _loss(8, False), _loss(8, True)
    assert chunked[0] == full[0] and chunked[1] < full[1] and chunked[2] < full[2]
    assert compiled[0] * 2 == full[0]
    tv_fp32 = CHUNKED["units"]["TV_fp32"]
    assert full[0] == tv_fp32 and compiled[0] == CHUNKED["units"]["TV_bf16"]


# --- optimizer step in backward (strategy.optimizer_in_backward) --------------------------------------------------


def _oib_plan(tied: bool, oib: bool, **strategy: Any) -> Plan:
    c = OPT_IN_BWD["config"]
    return plan_from_dict(
        {
            "model": {
                "model_type": "llama",
                "vocab_size": c["V"],
                "hidden_size": c["h"],
                "intermediate_size": c["i"],
                "num_hidden_layers": c["L"],
                "num_attention_heads": c["n_h"],
                "num_key_value_heads": c["n_kv"],
                "tie_word_embeddings": tied,
            },
            "hardware": {"gpu": "h200", "gpus_per_node": 1},
            "training": {
                "micro_batch_size": c["b"],
                "seq_len": c["s"],
                "precision": "bf16-pure",
                "method": "full",
                "optimizer": "adamw",
                "optimizer_impl": "fused",
            },
            "strategy": {"gradient_checkpointing": "none", "optimizer_in_backward": oib, **strategy},
        }
    )


@pytest.mark.parametrize("run", OPT_IN_BWD["runs"], ids=lambda r: f"oib={r['optimizer_in_backward']}-tied={r['tied']}")
def test_optimizer_in_backward_keeps_one_gradient_alive(run: dict[str, Any]) -> None:
    est = estimate(_oib_plan(run["tied"], run["optimizer_in_backward"]), cpu=True)
    assert est.largest["parameters"] == run["param_bytes"]
    assert est.largest["gradients"] == run["max_grad_bytes_alive"]
    phases = {p.name for p in est.phases}
    if run["optimizer_in_backward"]:
        assert run["phase_peaks_above_start"]["opt"] == 0 and "optimizer" not in phases
        assert est.largest["gradients"] == run["largest_param_bytes"]
    else:
        assert "optimizer" in phases


def test_optimizer_in_backward_removes_the_gradient_buffer_and_refuses_accumulation() -> None:
    for tied in (False, True):
        plain, oib = estimate(_oib_plan(tied, False)), estimate(_oib_plan(tied, True))
        assert oib.allocated < plain.allocated
        assert plain.largest["gradients"] - oib.largest["gradients"] >= 0.9 * plain.largest["gradients"]
    with pytest.raises(PlanError, match="accumulation"):
        _oib_plan(False, True).with_changes({"training.grad_accum_steps": 2})


# --- paged and 8-bit optimizers (bitsandbytes) ---------------------------------------------------------------------


def _opt_plan(optimizer: str) -> Estimate:
    plan = _oib_plan(False, False).with_changes({"training.optimizer": optimizer, "training.optimizer_impl": "auto"})
    return estimate(plan)


def test_paged_states_leave_the_allocated_figure() -> None:
    """Paged states live in CUDA unified memory: in `total`, not in `allocated`/`reserved`, and not what must fit
    (`on_gpu`). Paging moves them; it does not change how many bytes they take."""
    for plain_name, paged_name in (("adamw-8bit", "paged-adamw-8bit"), ("adamw", "paged-adamw")):
        plain, paged = _opt_plan(plain_name), _opt_plan(paged_name)
        term = paged.overhead_bytes["paged_optimizer_states"]
        assert term > 0 and "paged_optimizer_states" not in plain.overhead_bytes
        assert paged.allocated <= paged.reserved <= paged.total
        assert paged.on_gpu == paged.total - term
        assert paged.allocated < plain.allocated
    # 8-bit: the same states, part of them paged; the absmax and small tensors' states stay in the allocator
    plain8, paged8 = _opt_plan("adamw-8bit"), _opt_plan("paged-adamw-8bit")
    assert (
        paged8.largest["optimizer_states"] + paged8.overhead_bytes["paged_optimizer_states"]
        == (plain8.largest["optimizer_states"])
    )
    # bitsandbytes' 32-bit states are fp32 whatever the parameters' dtype: 8 B per element (torch AdamW: 2 x bf16)
    p32 = _opt_plan("paged-adamw")
    assert p32.largest["optimizer_states"] + p32.overhead_bytes["paged_optimizer_states"] == (
        2 * _opt_plan("adamw").largest["optimizer_states"]
    )


# --- activation offloading, Float8, bf16-fsdp (no CPU measurement: identities) -------------------------------------


def _big(**changes: Any) -> Plan:
    data = {
        "model": {"preset": "llama-3-8b"},
        "hardware": {"gpu": "h100-80gb", "gpus_per_node": 8, "nodes": 1},
        "training": {"micro_batch_size": 2, "seq_len": 4096, "precision": "bf16-pure", "method": "full"},
        "strategy": {"gradient_checkpointing": "full", "attention": "flash", "zero_stage": 3},
    }
    return plan_from_dict(_set(data, changes))


@pytest.mark.parametrize("mode", ["full", "none"])
def test_activation_offload_moves_saved_activations_to_host(mode: str) -> None:
    plain = estimate(_big(**{"strategy.gradient_checkpointing": mode}))
    off = estimate(_big(**{"strategy.gradient_checkpointing": mode, "strategy.activation_offload": "cpu"}))
    assert off.largest["activations"] < plain.largest["activations"]
    assert off.allocated < plain.allocated
    moved = plain.largest["activations"] - off.largest["activations"]
    assert off.cpu_per_node - plain.cpu_per_node >= moved  # pinned host RAM, per node (8 GPUs)


def test_float8_needs_fp8_tensor_cores_and_never_raises_memory() -> None:
    with pytest.raises(PlanError, match="fp8"):
        _big(**{"hardware.gpu": "a100-80gb", "strategy.float8": True})
    for mode in ("none", "full"):
        plain = _big(**{"strategy.gradient_checkpointing": mode})
        fp8 = _big(**{"strategy.gradient_checkpointing": mode, "strategy.float8": True})
        assert estimate(fp8).allocated <= estimate(plain).allocated
        assert step_time(fp8).step_seconds < step_time(plain).step_seconds


def test_bf16_fsdp_is_16_bytes_per_parameter_sharded_with_bf16_activations() -> None:
    """FSDP2 MixedPrecisionPolicy(bf16, fp32) over fp32 shards: 4 (shard) + 4 (fp32 grad shard) + 8 (AdamW)
    bytes per parameter over the data-parallel group; activations those of pure bf16 (no fp32 residual stream)."""
    fsdp = estimate(_big(**{"training.precision": "bf16-fsdp"}))
    pure = estimate(_big())
    auto = estimate(_big(**{"training.precision": "bf16-autocast"}))
    n, dp = fsdp.params_total, 8
    assert fsdp.largest["parameters"] == pytest.approx(4 * n / dp, rel=1e-3)
    assert fsdp.largest["gradients"] == pytest.approx(4 * n / dp, rel=1e-3)
    assert fsdp.largest["optimizer_states"] == pytest.approx(8 * n / dp, rel=1e-3)
    assert fsdp.largest["activations"] == pure.largest["activations"] < auto.largest["activations"]
    with pytest.raises(PlanError, match="zero_stage = 3"):
        _big(**{"training.precision": "bf16-fsdp", "strategy.zero_stage": 2})
    # On the measured block (one GPU, fully sharded over one rank): sac_block's bf16 runs are the block cast to
    # bf16 as FSDP2's param_dtype computes, so bf16-fsdp must save exactly what they saved, per op and fully
    # checkpointed, and what transformers' bf16 block saved without checkpointing (compile_block's `hf` run).
    fsdp1 = {"training.precision": "bf16-fsdp", "strategy.zero_stage": 3}
    for mode in ("op", "full"):
        got = per_block(**fsdp1, **{"strategy.gradient_checkpointing": mode})
        assert got == measured_per_block("op_2412" if mode == "op" else mode, "bfloat16")
    assert abs(per_block(**fsdp1) - compiled_run("hf", "bf16")["eager_retained"]) <= 8


# --- LoRA / QLoRA: lora_dtype, dropout, bitsandbytes generation, kbit_prepare, quantized_modules ------------------


def qlora_plan(c: dict[str, Any], **changes: Any) -> Plan:
    q = c["quantize"]
    training: dict[str, Any] = {
        "micro_batch_size": c["micro_batch_size"],
        "seq_len": c["seq_len"],
        "precision": "bf16-pure",
        "optimizer": "adamw",
        "optimizer_impl": "foreach",
        "method": "qlora" if q else "lora",
        "lora_rank": c["lora_rank"],
        "lora_targets": ["q", "v"] if c["targets"] == "qv" else ["all-linear"],
        "lora_dtype": "fp32",  # PEFT's autocast_adapter_dtype, as measured
        "lora_dropout": c["lora_dropout"],
        "kbit_prepare": c["prepare"],
        "bnb_generation": "legacy" if c["emulate_old_bnb"] else "current",
    }
    if q:
        training |= {
            "quantization": "nf4",
            "double_quantization": c["double_quant"],
            "quant_compute_dtype": "bf16" if c["compute_dtype"] == "bfloat16" else "fp32",
        }
    data = {
        "model": {
            "model_type": "llama",
            "vocab_size": c["vocab_size"],
            "hidden_size": c["hidden_size"],
            "intermediate_size": c["intermediate_size"],
            "num_hidden_layers": c["num_layers"],
            "num_attention_heads": c["num_heads"],
            "num_key_value_heads": c["num_kv_heads"],
            "tie_word_embeddings": False,
        },
        "hardware": {"gpu": "h200", "gpus_per_node": 1},
        "training": training,
        "strategy": {
            "gradient_checkpointing": "full" if c["gradient_checkpointing"] else "none",
            "attention": "flash",
            "zero_stage": 0,
        },
    }
    return plan_from_dict(_set(data, changes))


@pytest.mark.parametrize("cid", sorted(QLORA))
def test_qlora_cpu_case(cid: str) -> None:
    m = QLORA[cid]
    est = estimate(qlora_plan(m["case"]), cpu=True)
    p = m["params"]
    # 4-bit weights with their quant state (code, absmax, nested state), 16-bit frozen weights, fp32 adapters
    assert est.largest["parameters"] == sum(p["bytes_by_kind_dtype"].values()) + p["quant_state_total"]
    assert est.largest["gradients"] == m["grads"]["bytes"]
    # AdamW's states plus one 4 B `step` tensor per trained tensor (vramplan leaves those out: <= 4 B x 2 x 32 here)
    assert 0 <= m["optimizer"]["bytes"] - est.largest["optimizer_states"] <= 256
    peak = m["memory"]["step2"]["peak"]
    err = est.peak.total / peak - 1
    if m["case"]["gradient_checkpointing"]:
        assert -0.05 <= err <= 0.15, (cid, est.peak.total, peak)
    else:
        assert abs(err) <= 0.05, (cid, est.peak.total, peak)


def _pairs(differs: str) -> list[tuple[str, str]]:
    """(a, b) case ids whose configs differ only in `differs` (a: the default)."""
    out = []
    for a, ma in QLORA.items():
        for b, mb in QLORA.items():
            ca, cb = ma["case"], mb["case"]
            keys = set(ca) - {"id", "note", differs}
            if a != b and not ca[differs] and cb[differs] and all(ca[k] == cb[k] for k in keys):
                out.append((a, b))
    return out


@pytest.mark.parametrize("knob", ["emulate_old_bnb", "prepare", "lora_dropout"])
def test_qlora_knobs_move_the_peak_as_measured(knob: str) -> None:
    """bitsandbytes <= 0.43.1 (`bnb_generation = "legacy"`), `kbit_prepare` and LoRA dropout each raise the
    step's peak on the CPU; the estimate moves the same way for every measured pair."""
    pairs = _pairs(knob)
    assert pairs
    for a, b in pairs:
        ma, mb = QLORA[a], QLORA[b]
        ea, eb = (estimate(qlora_plan(m["case"]), cpu=True).peak.total for m in (ma, mb))
        measured_up = mb["memory"]["step2"]["peak"] - ma["memory"]["step2"]["peak"]
        assert measured_up > 0 and eb > ea, (a, b)


def test_lora_dtype_halves_the_adapter_states() -> None:
    """16-bit adapters (torchtune, litgpt) against PEFT's fp32: weights, gradients and AdamW states of the
    adapters in half the bytes."""
    c = QLORA["q_base"]["case"]
    fp32, bf16 = (estimate(qlora_plan(c, **{"training.lora_dtype": d})) for d in ("fp32", "bf16"))
    assert bf16.largest["gradients"] * 2 == fp32.largest["gradients"] == QLORA["q_base"]["grads"]["bytes"]
    assert bf16.largest["optimizer_states"] * 2 == fp32.largest["optimizer_states"]
    adapters = fp32.largest["gradients"]
    assert fp32.largest["parameters"] - bf16.largest["parameters"] == adapters // 2
    assert bf16.allocated < fp32.allocated


def test_quantized_modules_order_the_weights() -> None:
    """torchtune quantizes only the adapted linears, transformers every block linear, Lightning/litgpt every linear
    including lm_head: the weights shrink in that order (LoRA on q, v)."""
    c = QLORA["q_base"]["case"]
    w = {
        m: estimate(qlora_plan(c, **{"training.quantized_modules": m})).largest["parameters"]
        for m in ("adapted", "block-linears", "all-linears")
    }
    assert w["adapted"] > w["block-linears"] > w["all-linears"]


def test_qlora_double_quantization_saves_what_was_measured() -> None:
    dq, nodq = (estimate(qlora_plan(QLORA[i]["case"]), cpu=True) for i in ("q_base", "q_nodq"))
    measured = (
        sum(QLORA["q_nodq"]["params"]["bytes_by_kind_dtype"].values())
        + QLORA["q_nodq"]["params"]["quant_state_total"]
        - sum(QLORA["q_base"]["params"]["bytes_by_kind_dtype"].values())
        - QLORA["q_base"]["params"]["quant_state_total"]
    )
    assert nodq.largest["parameters"] - dq.largest["parameters"] == measured > 0


# --- allocated <= reserved <= total over every mechanism -----------------------------------------------------------

MECHANISMS: list[dict[str, Any]] = [
    {},
    {"strategy.gradient_checkpointing": "op"},
    {"strategy.gradient_checkpointing": "full", "strategy.checkpoint_every": 2},
    {"strategy.compile": True},
    {"strategy.optimizer_in_backward": True},
    {"training.optimizer": "paged-adamw-8bit"},
    {"training.optimizer": "paged-adamw"},
    {"strategy.activation_offload": "cpu"},
    {"strategy.loss_chunks": 8},
    {"strategy.float8": True},
    {"training.precision": "bf16-fsdp"},
    {
        "training.method": "qlora",
        "training.bnb_generation": "legacy",
        "training.quantized_modules": "all-linears",
        "training.lora_dtype": "bf16",
        "training.lora_dropout": 0.05,
    },
    {"training.method": "qlora", "training.kbit_prepare": True},
]


@pytest.mark.parametrize("changes", MECHANISMS, ids=lambda c: ",".join(f"{k}={v}" for k, v in c.items()) or "plain")
def test_allocated_reserved_total_are_ordered(changes: dict[str, Any]) -> None:
    est = estimate(_big(**changes))
    assert 0 < est.allocated <= est.reserved <= est.total
    assert est.on_gpu <= est.total
    assert est.fits == (est.on_gpu <= est.gpu_capacity)
