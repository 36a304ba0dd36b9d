"""The host's side of a step: the CPU time to issue each kernel. Kernels run asynchronously, so a pass takes the
longer of its GPU time and its host time; small models, small batches and token-by-token generation are bound by
the host (the GPU waits for its next kernel).

- Eager forward (a model's Python modules, op by op): transformers' own benchmark of ``generate`` on an A10 (gemma-2b,
  batch 1, fp16; hf-internal-testing/benchmark_results summary.json: 19.5 ms per token eager, 12.3 ms compiled with
  CUDA graphs, against 8.4 ms to read the weights) is bound by the host: its decoding step launches about 795 kernels
  (18 layers of about 43: two RMSNorms of 7, seven linears, rotary on q and k, 6 each, attention, its output copy,
  the activation and product, two adds, the KV cache's two concatenations), 19.5 ms / 795 = 24.5 us per kernel, the
  module code and ``generate``'s own per-token work included.
- Backward: the autograd engine issues the kernels from C++: the CUDA launch (about 2.7 us per asynchronous launch,
  ocannl#488's probe) and the engine's node (about 1 us: pytorch#41383, an op through the C++ API) = 4 us.
- torch.compile (inductor): its generated wrapper calls each fused kernel directly, about 4 us per launch as the
  backward's; with CUDA graphs (``mode="reduce-overhead"``, vLLM's decoding) a replay costs about 0.6 us per kernel
  (ocannl#488: 0.58 us per graph node).
"""

from __future__ import annotations

from typing import NamedTuple

EAGER_FORWARD_S = 19.5e-3 / 795
ENGINE_S = 4e-6
COMPILED_S = 4e-6
GRAPHED_S = 0.6e-6
LAUNCH_SRC = (
    "host time per kernel: eager forward 24.5 us (transformers' generate benchmark on an A10: 19.5 ms per gemma-2b "
    "token over about 795 kernels), backward 4 us (CUDA launch 2.7 us, ocannl#488; an autograd node ~1 us, "
    "pytorch#41383), compiled 4 us, CUDA graphs 0.6 us (ocannl#488); a pass takes max(GPU time, host time)"
)


class Host(NamedTuple):
    """Host seconds per kernel of each pass."""

    forward: float
    backward: float


def host_costs(compiled: bool, graphed: bool = False) -> Host:
    """The host's time per kernel for an eager, a compiled, or a CUDA-graphed step."""
    if graphed:
        return Host(GRAPHED_S, GRAPHED_S)
    if compiled:
        return Host(COMPILED_S, COMPILED_S)
    return Host(EAGER_FORWARD_S, ENGINE_S)
