"""GPU memory outside the step's tensors: named, adjustable terms (the plan's ``[overhead]`` table)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from core.result import OverheadTerm
from core.units import MiB

if TYPE_CHECKING:
    from core.plan import Plan
    from core.states import States


def overhead_terms(plan: Plan, st: States, tensor_peak: int) -> tuple[OverheadTerm, ...]:
    o, s = plan.overhead, plan.strategy
    dp, tp, pp = plan.data_parallel, s.tensor_parallel, s.pipeline_parallel
    terms = [
        OverheadTerm(
            "cuda_context",
            o.cuda_context_mib * MiB,
            f"{o.cuda_context_mib} MiB (overhead.cuda_context_mib)",
            "CUDA context, kernel images and cuBLAS/cuDNN handles: 287 MiB lazy / 667 MiB eager module loading "
            "(pytorch/pytorch#86509), ~400 MiB typical with CUDA >= 11.7 (pytorch/pytorch#109888)",
        ),
        OverheadTerm(
            "allocator_reserve",
            int(tensor_peak * o.allocator_reserve_percent / 100),
            f"{o.allocator_reserve_percent:g}% of the tensor peak (overhead.allocator_reserve_percent)",
            "PyTorch's caching allocator rounds blocks (512 B, 2 MiB, 20 MiB segments: "
            "c10/cuda/CUDACachingAllocator.cpp) and keeps freed blocks reserved; GMLake (ASPLOS'24) measured 15% "
            "average fragmentation on LLM training; PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True lowers it",
        ),
    ]
    groups = sum(1 for n in (dp, tp, pp) if n > 1)
    if groups:
        terms.append(
            OverheadTerm(
                "nccl",
                groups * o.nccl_mib_per_group * MiB,
                f"{groups} process group(s) x {o.nccl_mib_per_group} MiB (overhead.nccl_mib_per_group)",
                "NCCL's own cudaMalloc'd channel buffers (NCCL_BUFFSIZE 4 MiB per channel and peer), invisible to "
                "PyTorch's allocator: ~1.6 GB for one communicator with all-reduce (NVIDIA/nccl#864)",
            )
        )
    if s.zero_stage >= 1 and dp > 1:
        h = plan.model.hidden_size
        bucket = o.zero_bucket_elements if o.zero_bucket_elements is not None else h * h
        elems = min(bucket, st.trainable_local)
        buffers = 2 if s.zero_stage == 3 else 1  # overlap_comm: DeepSpeed's default is on for ZeRO-3 only
        terms.append(
            OverheadTerm(
                "zero_buckets",
                buffers * elems * st.grad_bytes,
                f"{buffers} x min(reduce_bucket_size {bucket:.3g}, trainable {st.trainable_local:,}) x "
                f"{st.grad_bytes} B",
                "DeepSpeed gradient reduce buckets (stage_1_and_2.py / stage3.py ipg buffers, two with overlap_comm, "
                "which deepspeed/runtime/zero/config.py turns on for ZeRO-3); bucket size: "
                "overhead.zero_bucket_elements, default hidden_size^2 as HF Trainer's 'auto' sets it "
                "(transformers/integrations/deepspeed.py; DeepSpeed's own default is 5e8)",
            )
        )
    if s.zero_stage == 0 and dp > 1 and not o.ddp_gradient_as_bucket_view:
        terms.append(
            OverheadTerm(
                "ddp_buckets",
                st.grads,
                "one bucket copy of the gradients (overhead.ddp_gradient_as_bucket_view = false)",
                "torch.nn.parallel.DistributedDataParallel: without gradient_as_bucket_view the all-reduce buckets "
                "hold a second copy of every gradient (PyTorch DDP docs)",
            )
        )
    return tuple(terms)
