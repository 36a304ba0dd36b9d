"""Precision regimes and optimizers: bytes per parameter, per gradient, per optimizer-state element.

Regimes are named after what frameworks really keep in memory:

- ``fp32``: fp32 weights, gradients, optimizer state, activations.
- ``bf16-autocast`` / ``fp16-autocast``: PyTorch AMP (``torch.autocast``). The model stays fp32 (weights,
  gradients, AdamW state); matmuls run in 16 bit on bf16 copies of their inputs and weights. HF Trainer
  ``--bf16``, Lightning ``bf16-mixed``. Source: torch/csrc/autograd/autocast_mode.cpp (lower-precision op lists,
  the cast cache for leaf tensors that require grad), measured in ../shared/oracle (llama_bf16mixed).
- ``bf16-master`` / ``fp16-master``: 16-bit weights and gradients, fp32 master weights and fp32 optimizer
  state (DeepSpeed ``bf16``/``fp16`` with ZeRO, Megatron): the ZeRO paper's 2 + 2 + 12 bytes (Rajbhandari et
  al. 2020, §3.1).
- ``bf16-pure``: everything bf16, AdamW state in the parameter dtype (Lightning ``bf16-true``,
  ``model.to(torch.bfloat16)``): 2 + 2 + 4 bytes, measured in ../shared/oracle (llama_bf16).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

Compute = Literal["fp32", "autocast", "half"]


@dataclass(frozen=True, slots=True, eq=False)
class Regime:
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
}


def regime(name: str) -> Regime:
    return REGIMES[name]


@dataclass(frozen=True, slots=True)
class OptimizerSpec:
    name: str
    dense_states: int  # full-size state tensors per parameter
    int8_states: bool  # states stored as 8-bit with blockwise fp32 absmax
    factored: bool  # Adafactor: row + column statistics for matrices
    loop_temps: int  # per-tensor temporaries (largest tensor) of the for-loop implementation
    foreach_temps: int  # whole-model temporaries of the foreach implementation
    source: str


OPTIMIZERS: dict[str, OptimizerSpec] = {
    "adamw": OptimizerSpec(
        "AdamW",
        2,
        False,
        False,
        2,
        1,
        "torch/optim/adamw.py: exp_avg + exp_avg_sq per parameter; foreach step: torch._foreach_sqrt of all "
        "exp_avg_sq (one model-sized temporary), for-loop: sqrt and div of the largest tensor; fused: none "
        "(measured: ../shared/oracle llama_base, llama_adamw_forloop)",
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

INT8_BLOCK = 256  # bitsandbytes blockwise 8-bit optimizer state: one fp32 absmax per 256 values


def resolve_impl(impl: str, regime_: Regime) -> str:
    """``auto``: DeepSpeed's FusedAdam for the master regimes, PyTorch's CUDA default (foreach) otherwise
    (torch/optim/optimizer.py ``_default_to_fused_or_foreach``)."""
    if impl != "auto":
        return impl
    return "fused" if regime_.master_bytes else "foreach"


def quantized_bytes(n_in: int, n_out: int, fmt: str, double_quant: bool) -> int:
    """Storage of one quantized weight matrix (bitsandbytes).

    nf4/fp4: 4 bits per value plus one absmax per 64-value block, fp32 or, with double quantization, 8-bit with
    an fp32 constant per 256 blocks (Dettmers et al. 2023, QLoRA §3: 0.5 -> 0.127 bits per parameter).
    int8 (LLM.int8): 1 byte per value plus an fp32 scale per output row (``Int8Params.SCB``)."""
    n = n_in * n_out
    if fmt == "int8":
        return n + 4 * n_out
    blocks = -(-n // 64)
    absmax = blocks + 4 * -(-blocks // 256) if double_quant else 4 * blocks
    return -(-n // 2) + absmax
