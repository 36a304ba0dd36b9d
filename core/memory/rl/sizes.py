"""The physical quantities of DPO/GRPO/PPO memory that supervised fine-tuning does not have, one function each.

Bytes are per training GPU (per tensor-parallel rank of the policy); every docstring names the code its formula
follows. The update phase itself is the SFT estimator's (`core.memory.peak`) on the sequences the objective
trains on.
"""

from __future__ import annotations

from vramplan.core.plan.architecture.arch import Arch

# TRL's fused lm-head (trl/kernels/chunked_logprob.py TOKEN_CHUNK_SIZE, trl/trainer/utils.py
# _CHUNKED_LOGPROB_CHUNK_SIZE): the projection runs on [4096 tokens, 32768 vocabulary] tiles, in one buffer
# of 32768 columns whatever the vocabulary (measured on the CPU: docs/rl.md, Validation).
LOGPROB_TOKEN_TILE = 4096
LOGPROB_VOCAB_TILE = 32768
ID_BYTES = 8  # int64 token ids and attention masks (tokenizers, TRL's collators)
LOGP_BYTES = 4  # per-token log-probabilities, fp32 (TRL selective_log_softmax / the fused head's output)


def kv_cache_bytes(arch: Arch, sequences: int, tokens: int, elem: int, tp: int = 1) -> int:
    """The key/value cache of ``sequences`` sequences of ``tokens`` tokens:
    ``2 x L x kv_heads x head_dim x elem x sequences x tokens / tp`` (transformers cache_utils.py DynamicLayer:
    one key and one value tensor [b, kv_heads, s, head_dim] per layer; vLLM's KV blocks hold the same per token,
    vllm/v1/kv_cache_interface.py FullAttentionSpec.page_size_bytes)."""
    return 2 * arch.L * arch.kv * arch.d * elem * sequences * tokens // tp


def kv_bytes_per_token(arch: Arch, elem: int, tp: int = 1) -> int:
    """One token's keys and values over all layers (`kv_cache_bytes` of one token)."""
    return kv_cache_bytes(arch, 1, 1, elem, tp)


def decode_logits_bytes(arch: Arch, sequences: int, act_bytes: int) -> int:
    """``model.generate``'s logits of one decoding step: ``b x V`` in the model's dtype (only the last position:
    transformers generation/utils.py passes ``logits_to_keep = 1``), its fp32 copy for the logits processors and
    the fp32 probabilities ``softmax`` samples from (``_sample``): ``b x V x (act + 4 + 4)``."""
    return sequences * arch.V * (act_bytes + 8)


def forward_working_bytes(arch: Arch, sequences: int, tokens: int, act_bytes: int, tp: int = 1) -> int:
    """A forward without gradients (``torch.no_grad``: nothing is saved for backward) holds the residual stream
    and one block's largest intermediate at a time: the MLP's gate, up and activated outputs,
    ``3 x b x s x f x act / tp``, beside two ``b x s x h`` residual tensors (transformers modeling_llama.py
    LlamaMLP.forward, LlamaDecoderLayer.forward); flash attention keeps no ``s x s`` scores."""
    T = sequences * tokens
    return (3 * T * arch.f // tp + 2 * T * arch.h) * act_bytes


def head_positions(sequences: int, tokens: int, scored: int, *, cpu: bool) -> int:
    """The rows TRL's fused lm-head projects (trl/trainer/utils.py ``add_fused_lm_head``): with Triton (CUDA)
    only the scored positions (``hidden_states[mask]``: the completions), elsewhere (the CPU) every position but
    the last of each sequence (``hidden_states.reshape(-1, H)``)."""
    return sequences * (tokens - 1) if cpu else scored


def fused_head_forward_bytes(arch: Arch, positions: int, act_bytes: int, *, cpu: bool) -> int:
    """TRL's fused lm-head forward (trl/kernels/chunked_logprob.py ChunkedLogProbFunction.forward): one
    projection buffer ``mm_buf = [min(N, 4096), 32768]`` in the compute dtype, 32768 columns whatever the
    vocabulary, and seven fp32 ``[N]`` running statistics; on the CPU the torch fold (``_forward_tile``) adds
    three fp32 ``[n, min(V, 32768)]`` temporaries of a tile (``tile.float()``, ``z``, ``e``). No ``[b, s, V]``
    logits exist."""
    rows = min(positions, LOGPROB_TOKEN_TILE)
    fold = 3 * rows * min(arch.V, LOGPROB_VOCAB_TILE) * 4 if cpu else 0
    return rows * LOGPROB_VOCAB_TILE * act_bytes + 7 * positions * LOGP_BYTES + fold


def fused_head_backward_bytes(arch: Arch, positions: int, act_bytes: int, *, trained_head: bool, cpu: bool) -> int:
    """The fused head's backward (ChunkedLogProbFunction.backward): the tile buffer again, fp32 zeros for the
    hidden states' gradient ``[N, h]`` and, when the lm_head trains, its weight's ``[V, h]``; on the CPU six fp32
    ``[n, min(V, 32768)]`` temporaries of a tile (``y``, ``z``, ``log_p``, ``p``, ``grad``, the target mask)."""
    rows = min(positions, LOGPROB_TOKEN_TILE)
    fold = 6 * rows * min(arch.V, LOGPROB_VOCAB_TILE) * 4 if cpu else 0
    weight = arch.V * arch.h * 4 if trained_head else 0
    return rows * LOGPROB_VOCAB_TILE * act_bytes + positions * arch.h * 4 + weight + fold


def rollout_bytes(sequences: int, prompt: int, completion: int, logp_tensors: int) -> int:
    """The generated batch TRL keeps for the update (grpo_trainer.py ``_generate_and_score_completions``): prompt
    and completion ids and masks (int64) and the per-token fp32 log-probabilities of the completions (old policy,
    reference), ``b x (s x 2 x 8 + c x 4 x k)``."""
    return sequences * ((prompt + completion) * 2 * ID_BYTES + completion * LOGP_BYTES * logp_tensors)


def frozen_weight_bytes(params: int, elem: int, *, tp: int, dp: int, sharded: bool) -> int:
    """A frozen model's weights on one GPU: ``N x elem / tp``, and ``/ dp`` when sharded like the policy
    (trl/models/utils.py ``prepare_deepspeed``: ZeRO-3 shards the reference as well, any other stage loads it
    whole on every GPU (stage 0); ``prepare_fsdp`` shards it under FSDP)."""
    return params * elem // tp // (dp if sharded else 1)


def vllm_weight_bytes(params: int, tp: int) -> int:
    """vLLM's copy of the policy, in 16 bit (the checkpoint's dtype, ``dtype = "auto"``), split over its
    tensor-parallel GPUs: ``N x 2 / tp`` (vllm/model_executor/model_loader)."""
    return params * 2 // tp


def vllm_engine_bytes(capacity: int, utilization: float, weights: int, one_sequence_kv: int) -> int:
    """What a vLLM engine takes of each of its GPUs: ``gpu_memory_utilization x total memory``, of which the KV
    cache is what the weights and the profiled activations leave (vllm/v1/worker/gpu_worker.py
    ``determine_available_memory``: ``requested_memory = total x gpu_memory_utilization``, KV cache =
    requested - non-KV memory). When the weights and one sequence's KV cache do not fit in that share, the engine
    cannot start ("No available memory for the cache blocks"); the figure is then what it would need."""
    budget = int(capacity * utilization)
    return max(budget, weights + one_sequence_kv)


def vllm_kv_budget_bytes(capacity: int, utilization: float, weights: int) -> int:
    """The KV cache a vLLM engine has per GPU: its share of the GPU less its weights (`vllm_engine_bytes`)."""
    return max(0, int(capacity * utilization) - weights)
