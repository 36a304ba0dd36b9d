"""The optimizer step on the GPU: memory-bound, the bytes its kernels read and write over this rank's partition.

A fused step (``fused=True``: one kernel per group of tensors) reads the weight, the gradient and each state once and
writes the weight and the states once (`core.time.flops.optimizer_bytes_per_element`: 28 B per element for AdamW in
fp32). The default foreach implementation (torch/optim/adam.py ``_multi_tensor_adam``) runs one pass per operation
(lerp of the first moment, mul and addcmul of the second, sqrt, div, add of eps, addcdiv of the weight, the weight
decay's mul), each reading and writing whole tensors: about 3 x the fused traffic (21 element accesses against 7 for
fp32 AdamW). The for-loop implementation runs the same passes tensor by tensor: the same bytes, ten kernels per
tensor."""

from __future__ import annotations

from vramplan.core.time.chip import Chip
from vramplan.core.time.kernels import Work, memory

FOREACH_TRAFFIC = 3.0  # foreach / for-loop passes against the fused kernel's one
PASSES = 10  # the foreach step's operations, each a kernel per chunk of tensors (or per tensor in the for-loop)
FOREACH_TENSORS_PER_KERNEL = 48  # multi_tensor_apply's tensor lists (torch/csrc: depth_to_max_tensors, 36-110)
OPTIMIZER_STEP_SRC = (
    "memory-bound: elements x bytes read and written per element / usable HBM; foreach and for-loop 3 x the fused "
    "kernel's traffic (torch/optim/adam.py _multi_tensor_adam runs one pass per operation: 21 accesses per element "
    "against the fused kernel's 7); kernels: 10 passes, per chunk of 48 tensors (foreach) or per tensor (for-loop)"
)


def optimizer_step(elements: float, bytes_per_element: int, tensors: int, impl: str, chip: Chip) -> Work:
    """One optimizer step over ``elements`` of this rank's partition in ``tensors`` tensors."""
    traffic = elements * bytes_per_element * (1.0 if impl == "fused" else FOREACH_TRAFFIC)
    if impl == "for-loop":
        kernels = PASSES * tensors
    else:
        chunks = -(-tensors // FOREACH_TENSORS_PER_KERNEL)
        kernels = chunks * (1 if impl == "fused" else PASSES)
    return memory(traffic, kernels, chip)
