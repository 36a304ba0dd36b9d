#!/usr/bin/env python3
"""Measure the memory of TRL's DPO and GRPO training steps on real PyTorch (CPU), the way measure_step.py does SFT.

Usage:  python bench/measure/measure_rl.py bench/measure/rl_cases.json -o tests/data/rl_truth.json [--only ID ...]
Produced with: torch 2.13.0+cpu, transformers 5.24.0, peft 0.21.2, trl 1.16.0, accelerate 1.16.0, datasets 5.2.0,
Python 3.11.7, on 2026-12-03 (two runs agree to the byte: --check OTHER.json compares two outputs).

A case is a tiny random-weight Llama- or Qwen2-style model (built from its config with torch.manual_seed(seed), saved
to a temporary directory with a WordLevel tokenizer made locally, nothing downloaded) trained for `steps` optimizer
steps by the REAL `trl.DPOTrainer` or `trl.GRPOTrainer` (`hf` generation: use_vllm=False; a trivial reward function
of the completion's text), on the CPU. The model is passed by path, as a TRL recipe does, so the trainer builds the
policy and, where it needs one, the reference copy itself (`create_model_from_path`, float32, sdpa). LoRA: TRL's
`peft_config`. The optimizer is torch AdamW(foreach=True) set on the trainer before `train()` (the oracle's default;
transformers would pick the fused one), max_grad_norm=1.0 (TRL's default clipping), gradient checkpointing per case.

Figures (definitions of ../shared/oracle/README.md, "What each figure means"; all in bytes):
* Peak: torch.profiler(profile_memory=True) from before the model is built; the allocator's running total of every
  CPU alloc/free event, measured from this session's starting value. Each phase runs inside a record_function range
  and an allocation event belongs to the INNERMOST range holding its timestamp. Phases (per optimizer step):
  `generation` (GRPO `_generate_single_turn`: HF `generate` with its KV cache), `scoring` (forwards under no_grad
  outside generation: GRPO's old/reference log-probs in `_generate_and_score_completions`, DPO's reference forward in
  `_compute_loss`; hooked on the policy's and the reference's outermost module), `reward` (`_calculate_rewards`),
  `forward` (`compute_loss` minus its nested scoring), `backward` (`accelerator.backward`), `optimizer` (from the
  `on_pre_optimizer_step` to the `on_optimizer_step` callback), `after` (scheduler + `model.zero_grad()`, up to
  `on_step_end`), `other` (the rest of the step: input preparation, grad clipping). `precompute` is DPO's
  `precompute_ref_log_probs` pass, before the first step. A step runs from its first `training_step` to its
  `on_step_end`; `steady_*` are the last step's figures. Inside the trainer the counter's total before a step
  is below the live weights (observed: 926,624 B against 1,840,340 B enumerated in dpo_llama_full_copy;
  allocations the session does not report, cause not pinned down), so a step's baseline is ENUMERATED at its
  `on_step_begin` (policy and reference parameters and buffers, optimizer states, leftover gradients:
  `baseline_enumerated`) and its peak is that baseline + the measured rise above the step's start:
  steady_baseline_bytes, steady_peak_bytes, steady_peak_above_baseline_bytes, steady_peak_phase (phase of the
  first event reaching the peak), steady_{phase}_peak_above_baseline_bytes, per_step[].phases.{name}.{start,peak,
  end} (counter values).
* Model states: param_bytes (the policy's distinct parameter storages), ref_param_bytes (the reference copy's;
  0 when the trainer has none), grad_bytes (distinct .grad storages after the first backward),
  optimizer_state_bytes (every tensor in optimizer.state after the first step).
* Activations (a second run, same seed, no profiler): torch.autograd.graph.saved_tensors_hooks around the first
  `compute_loss` (the update's forward, including TRL's fused LM head), classified as measure_step.py does
  (parameters, their cast copies and buffers excluded; saved_weight_copy_bytes = the cast copies). TRL 1.16 scores
  tokens with `trl.kernels.chunked_logprob.ChunkedLogProbFunction` (no [b, s, V] logits are saved: it saves the
  hidden states, the targets and two fp32 [N] vectors), so logits_like_bytes (vocab-sized tensors saved from the
  head on) is 0 in every case.
* resolved_case: the case with every default filled in and the shapes the trainer actually ran: DPO `max_length`
  (the padded chosen/rejected length; the policy forward runs 2 x micro_batch_size rows), GRPO `prompt_length`,
  `max_completion_length` (generation is forced to full length with min_new_tokens), completions per micro-batch.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import sys
import tempfile
import time
import warnings

import torch
from torch.profiler import ProfilerActivity, profile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from rl_probe import (
    Probe,
    analyse,
    instrument,
    precompute_figures,
    saved_tensors,
    step_figures,
    summarise,
)

from vramplan.measure.build import make_optimizer
from vramplan.measure.run import versions
from vramplan.measure.tensors import params_info, storage_bytes

DEFAULTS = {
    "family": "llama",
    "vocab_size": 256,
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_layers": 2,
    "num_heads": 4,
    "num_kv_heads": None,
    "tie_embeddings": False,
    "precision": "fp32",
    "method": "full",
    "lora_rank": 8,
    "lora_alpha": 16,
    "lora_targets": "qv",
    "gradient_checkpointing": False,
    "attention": "sdpa",
    "micro_batch_size": 2,
    "steps": 2,
    "lr": 1e-3,
    "seed": 0,
    "optimizer": "adamw",
    "optimizer_impl": "foreach",
    "grad_accum_steps": 1,
}
DPO_DEFAULTS = {"beta": 0.1, "prompt_length": 16, "chosen_length": 16, "rejected_length": 12, "reference": None}
GRPO_DEFAULTS = {
    "beta": 0.0,
    "prompt_length": 8,
    "max_completion_length": 16,
    "num_generations": 2,
    "num_iterations": 1,
    "reference": None,
}
SPECIAL = ["<pad>", "<eos>"]


def resolve(case):
    """The case with its defaults, and the reference the trainer will use (TRL's rules)."""
    obj = case["objective"]
    c = {**DEFAULTS, **(DPO_DEFAULTS if obj == "dpo" else GRPO_DEFAULTS), **case}
    c["num_kv_heads"] = c["num_kv_heads"] or c["num_heads"]
    lora = c["method"] == "lora"
    if obj == "grpo":
        # GRPOTrainer: beta == 0 -> no reference; a PEFT model -> adapters disabled; else a copy from the path
        c["reference"] = "none" if c["beta"] == 0 else "adapter" if lora else "copy"
    elif c["reference"] is None:
        c["reference"] = "adapter" if lora else "copy"
    return c


# ------------------------------------------------------------------------------------------ model and data
def write_model(c, path):
    """A random-weight model and a WordLevel tokenizer (t0..t{V-3}, <pad>, <eos>), saved where TRL loads them."""
    import transformers
    from tokenizers import Tokenizer, models, pre_tokenizers

    words = [f"t{i}" for i in range(c["vocab_size"] - len(SPECIAL))]
    vocab = {w: i for i, w in enumerate(words + SPECIAL)}
    tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token="t0"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    fast = transformers.PreTrainedTokenizerFast(tokenizer_object=tok, pad_token="<pad>", eos_token="<eos>")
    cls = {"llama": transformers.LlamaConfig, "qwen2": transformers.Qwen2Config}[c["family"]]
    cfg = cls(
        vocab_size=c["vocab_size"],
        hidden_size=c["hidden_size"],
        intermediate_size=c["intermediate_size"],
        num_hidden_layers=c["num_layers"],
        num_attention_heads=c["num_heads"],
        num_key_value_heads=c["num_kv_heads"],
        tie_word_embeddings=c["tie_embeddings"],
        attention_dropout=0.0,
        pad_token_id=vocab["<pad>"],
        eos_token_id=vocab["<eos>"],
        bos_token_id=None,
    )
    torch.manual_seed(c["seed"])
    model = transformers.AutoModelForCausalLM.from_config(cfg, attn_implementation=c["attention"])
    model.save_pretrained(path)
    fast.save_pretrained(path)
    return len(words)


def words(rng, n, k):
    return " ".join(f"t{int(x)}" for x in torch.randint(0, k, (n,), generator=rng))


def dataset(c, k):
    """Prompts of exactly prompt_length tokens (DPO: and chosen/rejected responses of their lengths)."""
    from datasets import Dataset

    rng = torch.Generator().manual_seed(c["seed"] + 1)
    n = 64
    rows = {"prompt": [words(rng, c["prompt_length"], k) for _ in range(n)]}
    if c["objective"] == "dpo":
        rows["chosen"] = [" " + words(rng, c["chosen_length"], k) for _ in range(n)]
        rows["rejected"] = [" " + words(rng, c["rejected_length"], k) for _ in range(n)]
    return Dataset.from_dict(rows)


def reward_len(completions, **_):
    """A trivial, deterministic reward: the number of distinct words of the completion."""
    return [float(len(set(str(x).split()))) for x in completions]


def common_args(c, out):
    return dict(
        output_dir=out,
        per_device_train_batch_size=c["micro_batch_size"],
        gradient_accumulation_steps=c["grad_accum_steps"],
        max_steps=c["steps"],
        learning_rate=c["lr"],
        seed=c["seed"],
        data_seed=c["seed"],
        bf16=c["precision"] == "bf16-mixed",
        use_cpu=True,
        report_to="none",
        save_strategy="no",
        logging_steps=10_000,
        disable_tqdm=True,
        dataloader_num_workers=0,
        gradient_checkpointing=c["gradient_checkpointing"],
        gradient_checkpointing_kwargs={"use_reentrant": False},
        model_init_kwargs={"dtype": "float32", "attn_implementation": c["attention"]},
        lr_scheduler_type="constant",
    )


def build_trainer(c, path, out):
    import peft
    import transformers
    import trl

    k = write_model(c, path)
    # passed explicitly: AutoTokenizer would pick the family's own tokenizer class for this tokenizer.json
    tok = transformers.PreTrainedTokenizerFast.from_pretrained(path)
    data = dataset(c, k)
    lora = None
    if c["method"] == "lora":
        t = c["lora_targets"]
        lora = peft.LoraConfig(
            r=c["lora_rank"],
            lora_alpha=c["lora_alpha"],
            lora_dropout=0.0,
            target_modules=["q_proj", "v_proj"] if t == "qv" else t,
            task_type="CAUSAL_LM",
        )
    if c["objective"] == "dpo":
        args = trl.DPOConfig(
            **common_args(c, out),
            beta=c["beta"],
            max_length=None,
            precompute_ref_log_probs=c["reference"] == "precomputed",
            precompute_ref_batch_size=c["micro_batch_size"],
        )
        trainer = trl.DPOTrainer(model=path, args=args, train_dataset=data, processing_class=tok, peft_config=lora)
    else:
        args = trl.GRPOConfig(
            **common_args(c, out),
            beta=c["beta"],
            num_generations=c["num_generations"],
            num_iterations=c["num_iterations"],
            max_completion_length=c["max_completion_length"],
            generation_kwargs={"min_new_tokens": c["max_completion_length"]},
            use_vllm=False,
        )
        trainer = trl.GRPOTrainer(
            model=path, reward_funcs=reward_len, args=args, train_dataset=data, processing_class=tok, peft_config=lora
        )
    trainer.remove_callback(transformers.PrinterCallback)
    return trainer


# ------------------------------------------------------------------------------------------- instrumentation
def set_optimizer(trainer, c):
    """torch AdamW over the trainable parameters, foreach or for-loop as the case says (fused: torch's fused one)."""
    params = [p for p in trainer.model.parameters() if p.requires_grad]
    trainer.optimizer = make_optimizer(params, "adamw", c["optimizer_impl"], c["lr"])


# ------------------------------------------------------------------------------------------------- the passes
def profile_pass(c):
    gc.collect()
    with tempfile.TemporaryDirectory() as tmp, warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
            trainer = build_trainer(c, os.path.join(tmp, "model"), os.path.join(tmp, "out"))
            set_optimizer(trainer, c)
            r = instrument(trainer, c)
            probe = Probe(trainer)
            trainer.train()
            model = trainer.accelerator.unwrap_model(trainer.model)
            ref = trainer.ref_model
            params = params_info(model)
            info = {
                **probe.info,
                "params_total": params["total"],
                "params_trainable": params["trainable"],
                "param_bytes": params["bytes"],
                "ref_param_bytes": storage_bytes(list(ref.parameters())) if ref is not None else 0,
                "ref_params_total": sum(p.numel() for p in ref.parameters()) if ref is not None else 0,
                "shapes": dict(r.shapes),
                "losses": [h["loss"] for h in trainer.state.log_history if "loss" in h],
            }
            del trainer, model, ref, r, probe
            gc.collect()
    return prof, info


def saved_pass(c):
    """Saved tensors of the first compute_loss (the update's forward, with TRL's fused LM head), in a fresh run."""
    out = {}
    with tempfile.TemporaryDirectory() as tmp, warnings.catch_warnings():
        warnings.simplefilter("ignore")
        trainer = build_trainer(c, os.path.join(tmp, "model"), os.path.join(tmp, "out"))
        set_optimizer(trainer, c)
        models = [trainer.model] + ([trainer.ref_model] if trainer.ref_model is not None else [])
        loss_fn = trainer.compute_loss

        def compute_loss(model, inputs, *a, **kw):
            if out:
                return loss_fn(model, inputs, *a, **kw)
            saved = saved_tensors(models, inputs)
            t0 = time.time()
            with saved.active():
                loss = loss_fn(model, inputs, *a, **kw)
            n_src = saved.copy_sources
            out.update(summarise(saved.recs, c["vocab_size"]), seconds=round(time.time() - t0, 2), copy_sources=n_src)
            return loss

        trainer.compute_loss = compute_loss
        trainer.train()
        del trainer
        gc.collect()
    return out


# ----------------------------------------------------------------------------------------------------- a case
def shapes_into(c, shapes):
    """The lengths the trainer ran, into the resolved case."""
    if c["objective"] == "dpo":
        rows, length = shapes["loss_input_ids"][0]
        c["max_length"] = length
        c["policy_rows"] = rows
    else:
        c["prompt_length"] = shapes["prompt_ids"][0][1]
        c["max_completion_length"] = shapes["completion_ids"][0][1]
        c["completions_per_micro_batch"] = shapes["completion_ids"][0][0]
        c["prompts_per_step"] = c["micro_batch_size"] * c["grad_accum_steps"] // c["num_generations"]
    return c


def measure(case):
    # imported before the profiler starts (build_trainer imports them inside it): their import's tensors are no case's
    import datasets  # noqa: F401
    import peft  # noqa: F401
    import transformers  # noqa: F401
    import trl  # noqa: F401

    c = resolve(case)
    t0 = time.time()
    prof, info = profile_pass(c)
    allocs, ranges, owner = analyse(prof)
    del prof
    steps = [step_figures(allocs, ranges, owner, s) for s in range(1, c["steps"] + 1)]
    pre = precompute_figures(allocs, ranges, owner)
    acts = saved_pass(c)
    c = shapes_into(c, info["shapes"])
    first, last = steps[0], steps[-1]
    # The allocator counter misses what other threads allocated before the run (the model loads), so the baselines
    # are enumerated from the tensors and the peaks are baseline + the measured rise above the step's start.
    base1, base = (sum(e.values()) for e in (info["baseline_enumerated"][0], info["baseline_enumerated"][-1]))
    figures = {
        "params_total": info["params_total"],
        "params_trainable": info["params_trainable"],
        "param_bytes": info["param_bytes"],
        "ref_param_bytes": info["ref_param_bytes"],
        "grad_bytes": info["grads"]["bytes"],
        "optimizer_state_bytes": info["optimizer"]["bytes"],
        "activation_bytes": acts["bytes"],
        "head_and_loss_bytes": acts["head_and_loss_bytes"],
        "logits_like_bytes": acts["logits_like_bytes"],
        "saved_weight_copy_bytes": acts["excluded"]["param_copy"],
        "baseline_bytes": base1,
        "peak_bytes": base1 + first["peak_above_baseline_bytes"],
        "peak_phase": first["peak_phase"],
        "steady_baseline_bytes": base,
        "steady_peak_bytes": base + last["peak_above_baseline_bytes"],
        "steady_peak_above_baseline_bytes": last["peak_above_baseline_bytes"],
        "steady_peak_phase": last["peak_phase"],
        "precompute_peak_above_start_bytes": pre["peak"] - pre["start"] if pre else None,
    }
    for ph, p in last["phases"].items():
        figures[f"steady_{ph}_peak_above_baseline_bytes"] = p["peak"] - last["baseline_bytes"]
    return {
        "id": c["id"],
        "resolved_case": c,
        "figures": figures,
        "per_step": steps,
        "activations": acts,
        "grads": info["grads"],
        "optimizer": info["optimizer"],
        "shapes": info["shapes"],
        "baseline_enumerated": info["baseline_enumerated"],
        "losses": info["losses"],
        "seconds": round(time.time() - t0, 2),
        "versions": versions(("torch", "transformers", "peft", "trl", "datasets")),
    }


def quiet():
    """No progress bars or per-step prints (the results go to OUT.json)."""
    import datasets
    import transformers

    datasets.disable_progress_bars()
    transformers.utils.logging.disable_progress_bar()
    transformers.utils.logging.set_verbosity_error()


def check(a_path, b_path):
    """Two outputs agree on every figure and phase (the harness is deterministic)."""
    with open(a_path) as fa, open(b_path) as fb:
        a, b = json.load(fa), json.load(fb)
    bad = 0
    for cid in sorted(set(a) & set(b)):
        for key in ("figures", "per_step", "resolved_case"):
            if a[cid][key] != b[cid][key]:
                bad += 1
                print(f"{cid}: {key} differ")
    print(f"{len(set(a) & set(b))} cases compared, {bad} differing")
    return bad


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("cases")
    ap.add_argument("-o", "--out", required=True)
    ap.add_argument("--only", nargs="*", help="case ids to run (default: all)")
    ap.add_argument("--check", metavar="OTHER", help="after the run, compare OUT.json with another run's output")
    args = ap.parse_args()
    torch.set_num_threads(1)
    quiet()
    with open(args.cases) as fh:
        cases = json.load(fh)["cases"]
    if args.only:
        cases = [x for x in cases if x["id"] in args.only]
    results = {}
    for case in cases:
        results[case["id"]] = r = measure(case)
        f = r["figures"]
        print(
            f"{case['id']:28s} act={f['activation_bytes']:>10,} steady_peak={f['steady_peak_bytes']:>11,} "
            f"({f['steady_peak_phase']}) {r['seconds']}s",
            flush=True,
        )
    with open(args.out, "w") as fh:
        json.dump(results, fh, indent=1, sort_keys=True)
    if args.check:
        sys.exit(1 if check(args.out, args.check) else 0)


if __name__ == "__main__":
    main()
