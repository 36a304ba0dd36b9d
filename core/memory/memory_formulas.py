"""The formula and source behind each figure of an estimate (what the TUI shows when a component is selected)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from vramplan.core.memory.activations.stage import loss_parallel_on
from vramplan.core.plan.helpers.units import fmt_gib
from vramplan.core.plan.schema.precision import OPTIMIZERS, Regime, resolve_impl

if TYPE_CHECKING:
    from vramplan.core.memory.activations.context import ActCtx
    from vramplan.core.memory.states import States
    from vramplan.core.plan.architecture.arch import Arch
    from vramplan.core.plan.schema.plan import Plan

ZERO_SRC = "ZeRO (Rajbhandari et al. 2020) §5: stage 1 shards optimizer states, 2 gradients, 3 parameters"


def _shard(n: int, what: str) -> str:
    return f" / {n} ({what})" if n > 1 else ""


def component_formulas(
    plan: Plan,
    arch: Arch,
    reg: Regime,
    st: States,
    ctx: ActCtx,
    roles: tuple[str, ...],
    trainable: int,
    largest: dict[str, int],
) -> dict[str, tuple[str, str]]:
    t, s = plan.training, plan.strategy
    dp, tp, pp = plan.data_parallel, s.tensor_parallel, s.pipeline_parallel
    z = s.zero_stage
    split = f" (split over TP {tp} x PP {pp})" if tp * pp > 1 else ""
    full = t.method == "full"
    opt = OPTIMIZERS[t.optimizer]
    out: dict[str, tuple[str, str]] = {}

    if full:
        p = f"{st.params_local:,} params{split} x {reg.weight_bytes} B ({reg.name} weights)"
    else:
        quant = t.base_quantization
        base = "4-bit NF4" if quant == "nf4" else quant if quant != "none" else f"{2 if reg.compute == 'half' else 4} B"
        p = f"frozen base ({base}) + {st.trainable_local:,} LoRA params x {2 if reg.master_bytes else 4} B{split}"
    p += _shard(dp, "ZeRO-3") if z == 3 else ""
    if s.offload_parameters != "none":
        p += f", offloaded to {s.offload_parameters}"
    out["parameters"] = (
        f"{p} = {fmt_gib(largest.get('parameters', 0), 2)}",
        f"{reg.summary}; " + (ZERO_SRC if z == 3 else "transformers/peft module parameters"),
    )

    g = f"{st.trainable_local:,} trainable x {st.grad_bytes} B" + (_shard(dp, "ZeRO-2/3") if z >= 2 else "")
    if s.offload_optimizer != "none" and z >= 2:
        g += ", partition streamed to the host"
    out["gradients"] = (
        f"{g} = {fmt_gib(largest.get('gradients', 0), 2)}",
        "one gradient per trainable parameter, in its dtype; freed by zero_grad(set_to_none=True)",
    )

    state_elem = reg.state_bytes if full else 4
    if opt.factored:
        per = "row + column statistics per matrix"
    elif opt.int8_states:
        per = "2 x (1 B + 4 B / 256) (8-bit states, blockwise absmax)"
    else:
        per = f"{opt.dense_states} x {state_elem} B"
    master = f"{reg.master_bytes} B fp32 master + " if reg.master_bytes else ""
    o = f"{st.trainable_local:,} x ({master}{per})" + (_shard(dp, "ZeRO-1+") if z >= 1 else "")
    if s.offload_optimizer != "none":
        o += f", offloaded to {s.offload_optimizer} (0 on the GPU)"
    out["optimizer_states"] = (f"{o} = {fmt_gib(largest.get('optimizer_states', 0), 2)}", f"{opt.name}: {opt.source}")

    b, seq, h = t.micro_batch_size, t.seq_len, arch.h
    if ctx.gc:
        a = f"checkpoints: {arch.L} blocks x b*s*h x {reg.resid_bytes} B (b={b}, s={seq}, h={h})"
    else:
        a = f"saved tensors of {arch.L} blocks (b={b}, s={seq}, h={h}, f={arch.f}, {s.attention} attention)"
    if reg.compute == "autocast":
        a += " + autocast's bf16 weight copies"
    if s.activation_compression == "int8":
        a += ", int8-compressed"
    out["activations"] = (
        f"{a} = {fmt_gib(largest.get('activations', 0), 2)}",
        "tensors autograd saves for backward, op by op (core/activations.py; Korthikanti et al. 2022 §4 for the "
        "structure, checked tensor by tensor against measured PyTorch runs in tests/data)",
    )
    if s.fused_cross_entropy:
        lg = "fused cross-entropy: logits exist only a chunk of tokens at a time"
        src = "Liger fused_linear_cross_entropy / Cut Cross-Entropy (Wijmans et al. 2025)"
    elif loss_parallel_on(tp, plan.stack.framework):
        lg = f"4 x 4 B x b*s*V / {tp} (fp32 log-softmax + loss_parallel's 3 backward temporaries), V={arch.V:,}"
        src = (
            "torch/distributed/tensor/parallel/loss.py _nll_loss_and_log_softmax_backward (torchtitan with TP): "
            "zeros_like(x), exp(x), their sum and its product with the gradient beside the saved log-softmax"
        )
    else:
        lg = f"3 x 4 B x b*s*V{_shard(tp, 'vocab-parallel')} (fp32 log-softmax + 2 gradients), V={arch.V:,}"
        src = (
            "transformers ForCausalLMLoss upcasts logits to fp32; at the start of backward the saved "
            "log-softmax and the nll_loss and log_softmax gradients are live (measured in ../shared/oracle)"
        )
    out["logits"] = (f"{lg} = {fmt_gib(largest.get('logits', 0), 2)}", src)
    out["gathered_parameters"] = (
        f"2 x largest module (current + prefetched) + its gradients = {fmt_gib(largest.get('gathered_parameters', 0))}",
        "ZeRO-3 / FSDP all-gather modules before use (DeepSpeed estimate_zero3_model_states_mem_needs: 4 x "
        "largest layer; FSDP BACKWARD_PRE prefetch)",
    )
    out["autocast_cache"] = (
        f"bf16 copies of trained weights cached while the forward runs: 2 B x matmul weights = "
        f"{fmt_gib(largest.get('autocast_cache', 0), 2)}",
        "torch/csrc/autograd/autocast_mode.cpp cached_cast: casts of leaf tensors that require grad are cached "
        "until autocast exits; with checkpointing they are not saved, but alive at the end of the forward",
    )
    impl = resolve_impl(t.optimizer_impl, reg)
    out["temporaries"] = (
        f"largest transient: optimizer step ({impl}), a block's backward, or the embedding gradient = "
        f"{fmt_gib(largest.get('temporaries', 0), 2)}",
        "torch/optim/adamw.py _multi_tensor_adamw: _foreach_sqrt(exp_avg_sq) is one model-sized temporary; "
        "DeepSpeed flattens the fp32 gradient partition for the step",
    )
    out["checkpoint_buffers"] = (
        f"RoPE cos/sin, position ids, eager mask kept by checkpoint closures = "
        f"{fmt_gib(largest.get('checkpoint_buffers', 0), 3)}",
        "torch/utils/checkpoint.py non-reentrant checkpoint keeps its inputs' closures alive",
    )
    calibrated = plan.overhead.calibrated_from
    out["overhead"] = (
        "CUDA context + allocator reserve + communication buffers (see overhead terms)"
        + (f"; calibrated from {calibrated}" if calibrated else ""),
        "plan [overhead] table; each term cites its source"
        + ("; measured by vramplan measure --save-calibration" if calibrated else ""),
    )
    return out
