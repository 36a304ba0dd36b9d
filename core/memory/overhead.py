"""GPU memory outside the step's tensors: named, adjustable terms (the plan's ``[overhead]`` table), each built
with its formula and source where its bytes are computed (`overhead_terms`)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from vramplan.core.memory.terms import Term, headline, term
from vramplan.core.plan.helpers.units import MiB
from vramplan.core.plan.resolved import fsdp_sharded

if TYPE_CHECKING:
    from vramplan.core.memory.states.record import States
    from vramplan.core.plan.schema.plan import Plan


def _groups(plan: Plan) -> int:
    s = plan.strategy
    return sum(1 for n in (plan.data_parallel, s.tensor_parallel, s.pipeline_parallel) if n > 1)


def _bucket(plan: Plan) -> int:
    o = plan.overhead
    return o.zero_bucket_elements if o.zero_bucket_elements is not None else plan.model.hidden_size**2


def zero_bucket_elements(plan: Plan) -> int:
    """The DeepSpeed ``reduce_bucket_size`` (elements) the estimate assumes (exports write the same value)."""
    return _bucket(plan)


def zero_bucket_buffers(plan: Plan) -> int:
    """How many reduce buckets the estimate assumes: two with ``overlap_comm`` (DeepSpeed's default: ZeRO-3)."""
    return _zero_buffers(plan)


def _zero_buffers(plan: Plan) -> int:
    return 2 if plan.strategy.zero_stage == 3 else 1  # overlap_comm: DeepSpeed's default is on for ZeRO-3 only


FSDP_ONLY = ("torchtitan", "torchtune")  # stacks whose ZeRO is always torch's FSDP, never DeepSpeed


def deepspeed_buckets(plan: Plan) -> bool:
    """Whether ZeRO's gradients go through DeepSpeed's reduce buckets (stage_1_and_2.py / stage3.py ipg
    buffers): not when a stack that shards only with torch's FSDP (torchtitan parallelize apply_fsdp, torchtune
    training/_distributed.py shard_model: fully_shard) runs it (`core.plan.stack.defaults.fsdp_sharded`): FSDP
    reduce-scatters each unit's gradients from a per-unit buffer (FSDP2 _fsdp_collectives.py foreach_reduce's
    reduce_scatter_input, FSDP1 the unit's flat gradient), which the backward moments count as the block
    behind's pending gradients. Other stacks' plans may be exported to DeepSpeed (`core.files.deepspeed_export`)."""
    return not (fsdp_sharded(plan) and plan.stack.framework in FSDP_ONLY)


def overhead_terms(
    plan: Plan,
    st: States,
    tensor_peak: int,
    *,
    grads_at_peak: int = 0,
    freed_logits: int = 0,
    allocator_rules: int = 0,
) -> tuple[Term, ...]:
    """The memory outside the step's tensors, term by term. Which of them `torch.cuda.max_memory_allocated` and
    `max_memory_reserved` see is `core.memory.record.ALLOCATED_TERMS` / `RESERVE_TERMS`.

    ``grads_at_peak``: gradient bytes live at the peak moment (FSDP2's gradient shards that are not are still
    reserved in the reduce-scatter stream's pool); ``freed_logits``: the 16-bit logits freed before a loss
    backward whose fp32 requests that block cannot serve (0 unless the peak is the loss's backward);
    ``allocator_rules``: the caching allocator's rounding and segment waste over the step's moments
    (`core.memory.allocator`), the reserve unless ``overhead.allocator_reserve_percent`` replaces it."""
    o = plan.overhead
    pct = o.allocator_reserve_percent
    reserve = allocator_rules if pct is None else int(tensor_peak * pct / 100)
    reserve_text, reserve_source = _reserve_text(plan)
    out = [
        term("cuda_context", "overhead", o.cuda_context_mib * MiB, "{} MiB (overhead.cuda_context_mib)",
             o.cuda_context_mib, source=CUDA_CONTEXT_SRC),
        term("allocator_reserve", "overhead", reserve, "{}", reserve_text, source=reserve_source),
    ]  # fmt: skip
    if freed_logits and not o.expandable_segments:
        out.append(
            term(
                "freed_logits", "overhead", freed_logits,
                "the 16-bit logits, C x tokens x V, freed before the loss's backward", source=FREED_LOGITS_SRC,
            )
        )  # fmt: skip
    if st.grad_shards_pool > grads_at_peak:
        out.append(
            term(
                "stream_pools", "overhead", st.grad_shards_pool - grads_at_peak,
                "fp32 gradient shards, 4 B x trainable / dp, absent at the peak but reserved", source=STREAM_POOLS_SRC,
            )
        )  # fmt: skip
    if st.gather_pool:
        out.append(
            term(
                "all_gather_pool", "overhead", st.gather_pool,
                "root unit + first block all-gather outputs (+ the root's cast shard, root / dp, with param_dtype)",
                source=ALL_GATHER_POOL_SRC,
            )
        )  # fmt: skip
    if st.paged:
        out.append(
            term(
                "paged_optimizer_states", "overhead", st.paged,
                "optimizer states of tensors with >= 1e5 elements (bitsandbytes paged)", source=PAGED_SRC,
            )
        )  # fmt: skip
    out += _communication_terms(plan, st)
    if o.calibrated_from:  # measured on a machine by `vramplan measure --save-calibration`
        calibrated = ("cuda_context", "allocator_reserve") if pct is not None else ("cuda_context",)
        out = [t.then(", calibrated: {}", o.calibrated_from) if t.name in calibrated else t for t in out]
    return tuple(out)


def _communication_terms(plan: Plan, st: States) -> list[Term]:
    """NCCL's own buffers, and the gradient buckets DeepSpeed or DDP allocate through PyTorch."""
    o, s, dp = plan.overhead, plan.strategy, plan.data_parallel
    out: list[Term] = []
    groups = _groups(plan)
    if groups:
        out.append(
            term(
                "nccl", "overhead", groups * o.nccl_mib_per_group * MiB,
                "{} process group(s) x {} MiB (overhead.nccl_mib_per_group)", groups, o.nccl_mib_per_group,
                source=NCCL_SRC,
            )
        )  # fmt: skip
    if s.zero_stage >= 1 and dp > 1 and deepspeed_buckets(plan):
        buffers, bucket = _zero_buffers(plan), _bucket(plan)
        out.append(
            term(
                "zero_buckets", "overhead", buffers * min(bucket, st.trainable_local) * st.grad_bytes,
                "{} x min(reduce_bucket_size {:.3g}, trainable {:,}) x {} B", buffers, bucket, st.trainable_local,
                st.grad_bytes, source=ZERO_BUCKETS_SRC,
            )
        )  # fmt: skip
    # torch DDP (HF Trainer, accelerate); with TP/PP, Megatron's DDP reduces from its contiguous grad buffer
    ddp = s.zero_stage == 0 and dp > 1 and s.tensor_parallel == s.pipeline_parallel == 1
    if ddp and not o.ddp_gradient_as_bucket_view:
        out.append(
            term(
                "ddp_buckets", "overhead", st.grads,
                "one bucket copy of the gradients (overhead.ddp_gradient_as_bucket_view = false)", source=DDP_SRC,
            )
        )  # fmt: skip
    return out


def overhead_headline(plan: Plan) -> Term:
    """The overhead's own formula: its terms, each with its source."""
    calibrated = plan.overhead.calibrated_from
    return headline(
        "overhead",
        "CUDA context + allocator reserve + communication buffers (see overhead terms){}",
        f"; calibrated from {calibrated}" if calibrated else "",
        source="plan [overhead] table; each term cites its source"
        + ("; measured by vramplan measure --save-calibration" if calibrated else ""),
    )


CUDA_CONTEXT_SRC = (
    "CUDA context, kernel images and cuBLAS/cuDNN handles: 287 MiB lazy / 667 MiB eager module loading "
    "(pytorch/pytorch#86509), ~400 MiB typical with CUDA >= 11.7 (pytorch/pytorch#109888)"
)
NCCL_SRC = (
    "NCCL's own cudaMalloc'd channel buffers (NCCL_BUFFSIZE 4 MiB per channel and peer), invisible to "
    "PyTorch's allocator: ~1.6 GB for one communicator with all-reduce (NVIDIA/nccl#864)"
)
ZERO_BUCKETS_SRC = (
    "DeepSpeed gradient reduce buckets (stage_1_and_2.py / stage3.py ipg buffers, two with overlap_comm, "
    "which deepspeed/runtime/zero/config.py turns on for ZeRO-3); bucket size: overhead.zero_bucket_elements,"
    " default hidden_size^2 as HF Trainer's 'auto' sets it (transformers/integrations/deepspeed.py; "
    "DeepSpeed's own default is 5e8)"
)
FREED_LOGITS_SRC = (
    "c10/cuda/CUDACachingAllocator.cpp: a freed block serves only requests it can hold (blocks are split, "
    "never merged with their neighbours while allocated); the loss's fp32 [tokens, V] gradients are twice "
    "its size, so the segment stays reserved beside them. PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True "
    "(overhead.expandable_segments) maps one growing segment per stream and reuses it"
)
STREAM_POOLS_SRC = (
    "FSDP2 _fsdp_collectives.py foreach_reduce allocates the reduce-scatter output (whose views are the "
    "sharded .grad) in its reduce-scatter stream; CUDACachingAllocator.cpp: 'Once freed, blocks can be "
    "re-allocated on the same stream, but not on any other stream', so zero_grad(set_to_none) leaves them "
    "in that stream's pool"
)
ALL_GATHER_POOL_SRC = (
    "FSDP2 _fsdp_collectives.py foreach_all_gather allocates each unit's flat all-gather output and its "
    "param_dtype shard copy in the all-gather copy-in stream; _fsdp_param_group.py wait_for_unshard keeps "
    "the previous output until the next unit's copy-out in forward (comm_ctx.all_gather_state), so the "
    "root's (embedding, final norm, lm_head) and the first block's are allocated together; "
    "CUDACachingAllocator.cpp caches blocks per stream, so that pool stays reserved beside the default "
    "stream's"
)
PAGED_SRC = (
    "bitsandbytes optim/optimizer.py get_state_buffer -> F.get_paged: cudaMallocManaged unified memory "
    "(csrc/pythonInterface.cpp cget_managed_ptr), prefetched to the GPU before each update and evicted to "
    "host memory by the driver under pressure: outside torch.cuda.max_memory_allocated/reserved, seen by "
    "nvidia-smi; not counted against the GPU's capacity (the driver pages it out, slowing the step)"
)
DDP_SRC = (
    "torch.nn.parallel.DistributedDataParallel: without gradient_as_bucket_view the all-reduce buckets "
    "hold a second copy of every gradient (PyTorch DDP docs)"
)


RULES_SOURCE = (
    "c10/cuda/CUDACachingAllocator.cpp: requests rounded up to 512 B (round_size); <= 1 MiB from 2 MiB small "
    "segments, < 10 MiB from 20 MiB segments, larger ones from a segment rounded up to 2 MiB "
    "(get_allocation_size); the rest of a block stays free when >= 512 B (small) or > 1 MiB (large: "
    "should_split), and freed blocks stay reserved until empty_cache. Applied to the tensors the estimate "
    "knows at each moment (each parameter, gradient and optimizer-state tensor, or its ZeRO/FSDP shard; each "
    "tensor a block saves; the loss's [tokens, V] tensors; every other kind as one tensor), packed from an "
    "empty cache. Not modelled: the order the step really allocates and frees in (a freed block too small for "
    "a later request, other than the 16-bit logits: freed_logits), the loading phase, communication buckets, "
    "kernels' workspaces; torch's max_memory_allocated counts the rounded blocks, the estimate's allocated "
    "the tensors' bytes. GMLake (Guo et al., ASPLOS 2024) measured about 15% fragmentation on LLM training"
)


def _reserve_text(plan: Plan) -> tuple[str, str]:
    """Formula and source of the allocator reserve: the user's percentage, or the allocator's rules."""
    o = plan.overhead
    if o.allocator_reserve_percent is not None:
        return (
            f"{o.allocator_reserve_percent:g}% of the tensor peak (overhead.allocator_reserve_percent)",
            "set by the plan in place of the caching allocator's rules (unset: the rules). " + RULES_SOURCE,
        )
    if o.expandable_segments:
        return (
            "each moment's live tensors, 512 B blocks, rounded up to 2 MiB per pool "
            "(overhead.expandable_segments), largest over the step, less the peak's tensors",
            "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True: one segment per stream and pool grows in 2 MiB "
            "pages and freed ranges serve any later request (CUDACachingAllocator.cpp ExpandableSegment). "
            + RULES_SOURCE,
        )
    return (
        "the segments each moment's live tensors fill (512 B rounding; 2 MiB / 20 MiB / 2 MiB-rounded segments; "
        "split rests), largest over the step, less the peak's tensors and freed_logits",
        RULES_SOURCE,
    )
