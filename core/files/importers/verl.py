"""verl's trainer config (verl/trainer/config/ppo_trainer.yaml and the examples built on it: ``python -m
verl.trainer.main_ppo --config-name ...``) -> plan keys.

``algorithm.adv_estimator`` ``gae`` is PPO (a critic), ``grpo`` (and the other critic-free estimators) GRPO with
``num_generations`` = ``actor_rollout_ref.rollout.n``. ``data.max_prompt_length`` / ``max_response_length``;
``actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu`` (sequences per micro-batch); the actor's ``strategy``
``fsdp``/``fsdp2`` shards the policy (ZeRO-3 in plan terms: verl's FSDP full shard) with FSDP mixed precision
(bf16 compute over fp32 sharded parameters), ``fsdp_config.param_offload`` / ``optimizer_offload``;
``model.path``, ``enable_gradient_checkpointing``, ``lora_rank`` (0: full). The reference exists when
``actor.use_kl_loss`` or ``algorithm.use_kl_in_reward``: beta = ``kl_loss_coef`` or ``kl_ctrl.kl_coef``; its
``fsdp_config.param_offload`` is ``rl.frozen_offload``. Rollout: verl's hybrid engine colocates vLLM (or SGLang) on
the training GPUs: ``gpu_memory_utilization``, ``tensor_model_parallel_size``, ``free_cache_engine`` (the engine
releases its memory for the update: sleep mode); ``name: hf`` generates in the training process.
``trainer.n_gpus_per_node`` / ``nnodes``. ``${a.b}`` references to other keys of the file are followed.
"""

from __future__ import annotations

import re
from typing import Any

from vramplan.core.files.importers.config_values import count, flag, number
from vramplan.core.files.importers.models import read_model
from vramplan.core.files.importers.record import ImportLog, Section
from vramplan.core.plan.schema.objectives import OBJECTIVES

NOT_PLANNED = "a data, logging, scheduling or sampling setting: no memory or step-time effect planned"
REF = re.compile(r"^\$\{([A-Za-z0-9_.]+)\}$")


def resolve(data: dict[str, Any], value: Any, depth: int = 0) -> Any:
    """A ``${a.b.c}`` value as the key it names (followed a few times); anything else as it is."""
    m = REF.match(value) if isinstance(value, str) else None
    if m is None or depth > 4:
        return value
    node: Any = data
    for part in m.group(1).split("."):
        if not isinstance(node, dict) or part not in node:
            return None
        node = node[part]
    return resolve(data, node, depth + 1)


class Reader:
    """One verl config: sections read with their ``${...}`` references followed."""

    def __init__(self, data: dict[str, Any], log: ImportLog) -> None:
        self.data, self.log = data, log
        self.top = log.section(data)

    def value(self, sec: Section, name: str) -> Any:
        return resolve(self.data, sec.get(name))

    def count(self, sec: Section, name: str, plan_key: str, note: str = "") -> int | None:
        if not sec.has(name):
            return None
        raw = self.value(sec, name)
        n = count(raw)
        if n is None:
            self.log.ignore(sec.key(name), sec.data[name], "not a whole number >= 1 (null: verl's default)")
        else:
            self.log.set(sec.key(name), raw, plan_key, n, note)
        return n


def read(data: dict[str, Any], log: ImportLog) -> None:
    r = Reader(data, log)
    algo = r.top.sub("algorithm")
    estimator = str(r.value(algo, "adv_estimator") or "gae").lower()
    objective = "ppo" if estimator == "gae" else "grpo"
    key = "algorithm.adv_estimator" if algo.has("adv_estimator") else "(no algorithm.adv_estimator)"
    log.set(key, estimator, "training.objective", objective, "gae trains a critic (PPO); the others do not")
    ds = r.top.sub("data")
    r.count(ds, "max_prompt_length", "rl.max_prompt_length")
    r.count(ds, "max_response_length", "rl.max_completion_length")
    ds.rest(NOT_PLANNED)
    arr = r.top.sub("actor_rollout_ref")
    _actor(r, arr, objective)
    _reference(r, arr, algo)
    _rollout(r, arr.sub("rollout"), objective)
    arr.rest(NOT_PLANNED)
    algo.rest(NOT_PLANNED)
    tr = r.top.sub("trainer")
    r.count(tr, "n_gpus_per_node", "hardware.gpus_per_node")
    r.count(tr, "nnodes", "hardware.nodes")
    tr.rest(NOT_PLANNED)
    critic = r.top.sub("critic")
    if OBJECTIVES[objective].value_model:
        critic.get("model")
        log.used("critic", None, "PPO's value model: the policy's architecture (rl.value_model unset)")
    critic.rest("the critic is planned as the policy's architecture with the actor's sharding")
    rm = r.top.sub("reward_model")
    if flag(r.value(rm, "enable")):
        log.used("reward_model.enable", True, "a reward model: the policy's architecture (rl.reward_model unset)")
    rm.rest("a function reward, or a reward model planned as the policy's architecture")
    r.top.rest(NOT_PLANNED)


def _actor(r: Reader, arr: Section, objective: str) -> None:
    model = arr.sub("model")
    read_model(r.log, "actor_rollout_ref.model.path", r.value(model, "path"))
    if model.has("enable_gradient_checkpointing"):
        on = flag(r.value(model, "enable_gradient_checkpointing"))
        r.log.set(
            model.key("enable_gradient_checkpointing"), on, "strategy.gradient_checkpointing", "full" if on else "none"
        )
    rank = count(r.value(model, "lora_rank")) if model.has("lora_rank") else None
    r.log.set(
        model.key("lora_rank") if model.has("lora_rank") else "(no lora_rank)",
        rank or 0,
        "training.method",
        "lora" if rank else "full",
    )
    if rank:
        r.log.set(model.key("lora_rank"), rank, "training.lora_rank", rank)
    model.rest(NOT_PLANNED)
    actor = arr.sub("actor")
    r.count(
        actor, "ppo_micro_batch_size_per_gpu", "training.micro_batch_size", "sequences (completions) per micro-batch"
    )
    strategy = str(r.value(actor, "strategy") or "fsdp").lower()
    if strategy.startswith("fsdp"):
        r.log.set(actor.key("strategy"), strategy, "strategy.zero_stage", 3, "verl's FSDP: full shard")
        r.log.set(
            actor.key("strategy"),
            strategy,
            "training.precision",
            "bf16-fsdp",
            "verl's FSDP mixed precision: bf16 compute over fp32 sharded parameters",
        )
        fsdp = actor.sub("fsdp_config")
        for name, plan_key in (
            ("param_offload", "strategy.offload_parameters"),
            ("optimizer_offload", "strategy.offload_optimizer"),
        ):
            if fsdp.has(name):
                on = flag(r.value(fsdp, name))
                r.log.set(fsdp.key(name), on, plan_key, "cpu" if on else "none")
        fsdp.rest(NOT_PLANNED)
    else:
        r.log.ignore(actor.key("strategy"), strategy, "Megatron's actor is not modelled; the plan's sharding kept")
    grad_clip = number(r.value(actor, "grad_clip")) if actor.has("grad_clip") else None
    if grad_clip is not None:
        r.log.set(actor.key("grad_clip"), grad_clip, "training.grad_clip", grad_clip if grad_clip > 0 else None)
    actor.rest(NOT_PLANNED)


def _reference(r: Reader, arr: Section, algo: Section) -> None:
    """verl builds the reference when the KL is in the loss (use_kl_loss) or in the reward (use_kl_in_reward)."""
    actor = r.log.section(arr.data.get("actor"), arr.key("actor"))
    kl_loss = flag(resolve(r.data, actor.data.get("use_kl_loss")))
    kl_reward = flag(r.value(algo, "use_kl_in_reward"))
    ref = arr.sub("ref")
    if kl_loss:
        beta = number(resolve(r.data, actor.data.get("kl_loss_coef", 0.001)))
        r.log.set("actor_rollout_ref.actor.use_kl_loss", True, "rl.beta", beta if beta is not None else 0.001)
    elif kl_reward:
        ctrl = algo.sub("kl_ctrl")
        beta = number(r.value(ctrl, "kl_coef"))
        r.log.set("algorithm.use_kl_in_reward", True, "rl.beta", beta if beta is not None else 0.001)
        ctrl.rest(NOT_PLANNED)
    else:
        key = "(use_kl_loss and use_kl_in_reward false)"
        r.log.set(key, False, "rl.beta", 0.0, "no KL term")
        r.log.set(key, False, "rl.reference", "none", "verl builds no reference model")
        ref.rest("no reference model (no KL term)")
        return
    fsdp = ref.sub("fsdp_config")
    if fsdp.has("param_offload"):
        on = flag(r.value(fsdp, "param_offload"))
        r.log.set(fsdp.key("param_offload"), on, "rl.frozen_offload", "cpu" if on else "none")
    r.log.set("(actor_rollout_ref.ref)", None, "rl.frozen_sharding", "sharded", "verl shards it with FSDP")
    fsdp.rest(NOT_PLANNED)
    ref.rest(NOT_PLANNED)


def _rollout(r: Reader, ro: Section, objective: str) -> None:
    name = str(r.value(ro, "name") or "vllm").lower()
    if name == "hf":
        r.log.set(ro.key("name"), name, "rl.generation", "hf")
        ro.rest("generation in the training process (hf)")
        return
    r.log.set(
        ro.key("name") if ro.has("name") else "(no rollout.name)",
        name,
        "rl.generation",
        "vllm-colocate",
        "verl's hybrid engine colocates the engine with the actor" + ("" if name == "vllm" else f" ({name})"),
    )
    util = number(r.value(ro, "gpu_memory_utilization")) if ro.has("gpu_memory_utilization") else None
    if util is not None and 0 < util <= 1:
        r.log.set(ro.key("gpu_memory_utilization"), util, "rl.vllm_gpu_memory_utilization", util)
    r.count(ro, "tensor_model_parallel_size", "rl.vllm_tensor_parallel_size")
    if ro.has("free_cache_engine"):
        on = bool(flag(r.value(ro, "free_cache_engine")))
        r.log.set(ro.key("free_cache_engine"), on, "rl.vllm_enable_sleep_mode", on, "the engine frees its memory")
    if OBJECTIVES[objective].groups:
        r.count(ro, "n", "rl.num_generations", "responses per prompt")
    ro.rest(NOT_PLANNED)
