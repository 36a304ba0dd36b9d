"""Precision regimes and optimizers: bytes per parameter, per gradient, per optimizer-state element.

Regimes are named after what frameworks really keep in memory:

- ``fp32``: fp32 weights, gradients, optimizer state, activations.
- ``bf16-autocast`` / ``fp16-autocast``: PyTorch AMP (``torch.autocast``). The model stays fp32 (weights,
  gradients, AdamW state); matmuls run in 16 bit on bf16 copies of their inputs and weights. HF Trainer
  ``--bf16``, Lightning ``bf16-mixed``. Source: aten/src/ATen/autocast_mode.cpp (lower-precision op lists,
  the cast cache for leaf tensors that require grad), measured in ../shared/oracle (llama_bf16mixed).
- ``bf16-master`` / ``fp16-master``: 16-bit weights and gradients, fp32 master weights and fp32 optimizer
  state (DeepSpeed ``bf16``/``fp16`` with ZeRO, Megatron): the ZeRO paper's 2 + 2 + 12 bytes (Rajbhandari et
  al. 2020, §3.1).
- ``bf16-pure``: everything bf16, AdamW state in the parameter dtype (Lightning ``bf16-true``,
  ``model.to(torch.bfloat16)``): 2 + 2 + 4 bytes, measured in ../shared/oracle (llama_bf16).
- ``bf16-fsdp``: FSDP2 ``MixedPrecisionPolicy(param_dtype=bf16, reduce_dtype=fp32)`` over ``fully_shard``'ed fp32
  parameters (torchtitan's default, accelerate's FSDP mixed precision): fp32 shards, fp32 sharded gradients and
  fp32 AdamW states (4 + 4 + 8 bytes, all sharded), bf16 all-gathered parameters and bf16 compute, so the
  activations are those of ``bf16-pure`` (no fp32 residual stream, no autocast weight copies). Sources:
  torch/distributed/fsdp/_fully_shard/_fsdp_api.py (MixedPrecisionPolicy: "The optimizer step uses the sharded
  parameter in the original dtype"), _fsdp_collectives.py foreach_reduce (reduce-scatter in reduce_dtype).
"""

from __future__ import annotations

from typing import Literal, NamedTuple

Compute = Literal["fp32", "autocast", "half"]


class Regime(NamedTuple):
    """A precision regime: bytes per element of each kind of state, and the compute dtype. (A record: a dataclass
    took 1.2 ms to define at start.)"""

    name: str
    weight_bytes: int  # each model weight as held for compute
    grad_bytes: int
    master_bytes: int  # fp32 master copy held by the optimizer (0 when the weights are the master)
    state_bytes: int  # optimizer-state element
    compute: Compute
    half: Literal["bf16", "fp16"] | None
    summary: str

    @property
    def act_bytes(self) -> int:
        """Outputs of matmuls (activations inside a block)."""
        return 4 if self.compute == "fp32" else 2

    @property
    def resid_bytes(self) -> int:
        """The residual stream between blocks: fp32 under autocast (fp32 embedding + fp32 adds)."""
        return 2 if self.compute == "half" else 4

    @property
    def compute_dtype(self) -> str:
        return self.half or "fp32"


REGIMES: dict[str, Regime] = {
    "fp32": Regime("fp32", 4, 4, 0, 4, "fp32", None, "fp32 weights, gradients, optimizer state and activations"),
    "bf16-autocast": Regime(
        "bf16-autocast",
        4,
        4,
        0,
        4,
        "autocast",
        "bf16",
        "PyTorch AMP: fp32 model and optimizer, bf16 matmuls on saved bf16 copies",
    ),
    "fp16-autocast": Regime(
        "fp16-autocast",
        4,
        4,
        0,
        4,
        "autocast",
        "fp16",
        "PyTorch AMP with GradScaler: fp32 model and optimizer, fp16 matmuls",
    ),
    "bf16-master": Regime(
        "bf16-master", 2, 2, 4, 4, "half", "bf16", "bf16 weights and grads, fp32 master + optimizer (ZeRO 2+2+12)"
    ),
    "fp16-master": Regime(
        "fp16-master", 2, 2, 4, 4, "half", "fp16", "fp16 weights and grads, fp32 master + optimizer (ZeRO 2+2+12)"
    ),
    "bf16-pure": Regime("bf16-pure", 2, 2, 0, 2, "half", "bf16", "everything bf16, optimizer state in bf16"),
    "bf16-fsdp": Regime(
        "bf16-fsdp",
        4,
        4,
        0,
        4,
        "half",
        "bf16",
        "FSDP2 mixed precision: fp32 sharded weights, gradients and optimizer, bf16 gathered weights and compute",
    ),
}


def regime(name: str) -> Regime:
    return REGIMES[name]


class OptimizerSpec(NamedTuple):
    name: str
    dense_states: int  # full-size state tensors per parameter
    int8_states: bool  # states stored as 8-bit with blockwise fp32 absmax
    factored: bool  # Adafactor: row + column statistics for matrices
    loop_temps: int  # per-tensor temporaries (largest tensor) of the for-loop implementation
    foreach_temps: int  # whole-model temporaries of the foreach implementation
    source: str
    paged: bool = False  # bitsandbytes paged: states of large tensors in CUDA unified memory, outside the allocator
    fp32_states: bool = False  # states are fp32 whatever the parameters' dtype (bitsandbytes' 32-bit optimizers)


OPTIMIZERS: dict[str, OptimizerSpec] = {
    "adamw": OptimizerSpec(
        "AdamW",
        2,
        False,
        False,
        2,
        1,
        "torch/optim/adam.py (AdamW subclasses Adam): exp_avg + exp_avg_sq per parameter; foreach step: "
        "torch._foreach_sqrt of all exp_avg_sq (one model-sized temporary), for-loop: sqrt and div of the largest "
        "tensor; fused: none (measured: ../shared/oracle llama_base, llama_adamw_forloop)",
    ),
    "adamw-8bit": OptimizerSpec(
        "AdamW 8-bit (bitsandbytes)",
        2,
        True,
        False,
        0,
        0,
        "bitsandbytes optim/optimizer.py Optimizer2State: state1/state2 uint8 with blockwise (256) fp32 absmax; "
        "the update is one fused kernel per tensor (Dettmers et al. 2022, 8-bit Optimizers)",
    ),
    "paged-adamw": OptimizerSpec(
        "paged AdamW (bitsandbytes, 32-bit)",
        2,
        False,
        False,
        0,
        0,
        "bitsandbytes optim/optimizer.py get_state_buffer: tensors of >= 1e5 elements get their fp32 states from "
        "F.get_paged (cudaMallocManaged, csrc/pythonInterface.cpp cget_managed_ptr): unified memory the driver pages "
        "to the host under pressure, outside torch.cuda.max_memory_allocated; smaller tensors' states are ordinary "
        "allocations",
        paged=True,
        fp32_states=True,
    ),
    "paged-adamw-8bit": OptimizerSpec(
        "paged AdamW 8-bit (bitsandbytes)",
        2,
        True,
        False,
        0,
        0,
        "bitsandbytes PagedAdamW8bit: uint8 states with blockwise (256) fp32 absmax; tensors of >= 1e5 elements page "
        "their uint8 states (cudaMallocManaged), the absmax stays an ordinary allocation; tensors under 4096 "
        "elements keep fp32 states (min_8bit_size)",
        paged=True,
    ),
    "sgd": OptimizerSpec("SGD", 0, False, False, 0, 0, "torch/optim/sgd.py: no state without momentum"),
    "sgd-momentum": OptimizerSpec(
        "SGD with momentum",
        1,
        False,
        False,
        0,
        0,
        "torch/optim/sgd.py: one momentum_buffer per parameter, updated in place",
    ),
    "adafactor": OptimizerSpec(
        "Adafactor",
        0,
        False,
        True,
        3,
        3,
        "Shazeer & Stern 2018; transformers optimization.py Adafactor (beta1=None): row + column second moments "
        "for matrices, a full one for vectors; the step upcasts and squares one tensor at a time",
    ),
    "lion": OptimizerSpec(
        "Lion",
        1,
        False,
        False,
        2,
        2,
        "Chen et al. 2023 (Lion); lion-pytorch: one exp_avg per parameter, update = sign(...) built per tensor",
    ),
}

INT8_BLOCK = 256  # bitsandbytes blockwise 8-bit optimizer state: one fp32 absmax per 256 values (>= 0.44.0)
PAGED_MIN_ELEMENTS = 100_000  # bitsandbytes get_state_buffer: smaller tensors are never paged
MIN_8BIT_ELEMENTS = 4096  # bitsandbytes Optimizer2State min_8bit_size: smaller tensors keep fp32 states
QUANT_STATE_BYTES = 64  # a 4-bit QuantState's 16-entry fp32 code
NESTED_STATE_BYTES = 1024 + 4  # double quantization: the nested state's 256-entry fp32 code and the fp32 offset


def resolve_impl(impl: str, regime_: Regime) -> str:
    """``auto``: DeepSpeed's FusedAdam for the master regimes, PyTorch's CUDA default (foreach) otherwise
    (torch/optim/optimizer.py ``_default_to_fused_or_foreach``)."""
    if impl != "auto":
        return impl
    return "fused" if regime_.master_bytes else "foreach"


def quantized_bytes(n_in: int, n_out: int, fmt: str, double_quant: bool) -> int:
    """Storage of one quantized weight matrix (bitsandbytes).

    nf4/fp4: 4 bits per value plus one absmax per 64-value block, fp32 or, with double quantization, 8-bit with
    an fp32 constant per 256 blocks (Dettmers et al. 2023, QLoRA §3: 0.5 -> 0.127 bits per parameter), plus each
    QuantState's own tensors (bitsandbytes functional.py ``quantize_4bit``): the 16-entry fp32 NF4/FP4 code (64 B)
    and, with double quantization, the nested state's 256-entry fp32 code and fp32 offset (1,024 + 4 B); measured
    on the CPU with bitsandbytes 0.50.2 (tests/data/qlora_cpu.json).
    int8 (LLM.int8): 1 byte per value plus an fp32 scale per output row (``Int8Params.SCB``)."""
    n = n_in * n_out
    if fmt == "int8":
        return n + 4 * n_out
    blocks = -(-n // 64)
    if double_quant:
        return -(-n // 2) + blocks + 4 * -(-blocks // 256) + QUANT_STATE_BYTES + NESTED_STATE_BYTES
    return -(-n // 2) + 4 * blocks + QUANT_STATE_BYTES
