#!/usr/bin/env python3
"""Measure QLoRA (bitsandbytes NF4 + PEFT LoRA) training steps on the CPU into tests/data/qlora/qlora_cpu.json.

Usage, from the repository root (an environment with torch, transformers, peft, accelerate and bitsandbytes >= 0.48,
whose CPU path runs NF4 quantisation and the 4-bit matmul forward and backward):

    python -m bench.data.qlora_cpu [-o tests/data/qlora/qlora_cpu.json] [--only ID ...]

Method (the profile pass of bench/measure/measure_step.py, whose profiler analysis is `vramplan.measure.cpu`): a
tiny Llama built from its config with random weights (`torch.manual_seed(seed)`; vocab 1000, h 256, i 688, 8 heads,
2 or 4 layers) is saved as bf16 in a temporary folder; each case starts ``torch.profiler(profile_memory=True)``
(so the allocator's running total counts every live tensor), loads it with ``from_pretrained(quantization_config=
BitsAndBytesConfig(load_in_4bit, nf4, double quant, compute dtype), dtype=bfloat16)`` (or plain bf16 for the
``lora_*`` baselines), optionally ``prepare_model_for_kbit_training``, then ``get_peft_model(LoraConfig(r=8,
alpha 16, ...))`` (adapters fp32, PEFT's default) and ``AdamW(foreach)``; ``steps`` optimizer steps of one
micro-batch (forward with labels, ``del out``, backward, step, ``zero_grad(set_to_none=True)``), each phase in a
``record_function`` range. The second (steady) step's peak is what tests/core/memory/test_stack_mechanisms.py compares.
Parameters, quantisation state, gradients (after the first backward) and optimizer states (after the first step)
are enumerated by storage. A saved pass (fresh load, one forward + loss under ``saved_tensors_hooks``, de-duplicated
by storage, parameter storages set apart) gives the saved activations. The weights from_pretrained reads from
the safetensors file are mapped (no allocator event) until copied; they are copied into allocated memory right after
the load, as a GPU run holds them in its allocator's memory.

``emulate_old_bnb`` re-creates bitsandbytes <= 0.43.1's ``ctx.tensors = (A, B)`` in ``MatMul4Bit.forward``
(each 4-bit linear's input kept on the autograd context until its backward; bitsandbytes PR #1270 removed it).

The committed file was first written on 2026-12-01 by the QLoRA issue's research script (not kept) with torch
2.13.0+cpu, transformers 5.24.0, peft 0.21.2, bitsandbytes 0.50.2, accelerate 1.15.0; this script re-creates it
(docs/data.md names the rerun and its differences). Its per-op breakdowns (``live_at_steady_peak_by_op``,
``largest_allocs_under_bnb_ops``) and the saved pass's by-module and by-producer tables are not re-created.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import json
import platform
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import torch

OUT = Path("tests/data/qlora/qlora_cpu.json")
PREFIX = "VP"

BASE: dict[str, Any] = {
    "vocab_size": 1000,
    "hidden_size": 256,
    "intermediate_size": 688,
    "num_layers": 2,
    "num_heads": 8,
    "num_kv_heads": 8,
    "micro_batch_size": 2,
    "seq_len": 128,
    "quantize": True,
    "double_quant": True,
    "compute_dtype": "bfloat16",
    "prepare": False,
    "gradient_checkpointing": False,
    "gc_kwargs": None,
    "targets": "qv",
    "lora_rank": 8,
    "lora_alpha": 16,
    "lora_dropout": 0.0,
    "emulate_old_bnb": False,
    "steps": 2,
    "seed": 0,
    "lr": 0.001,
}
OLD = {"emulate_old_bnb": True}
PREP_GC = {"prepare": True, "gradient_checkpointing": True}
L4 = {"num_layers": 4, "micro_batch_size": 1, "seq_len": 64}
CASES: dict[str, tuple[dict[str, Any], str]] = {
    "q_base": ({}, "NF4 + double quant, compute bf16, bf16 load, LoRA q,v, no prepare, no GC"),
    "q_nodq": ({"double_quant": False}, "as q_base without double quantization"),
    "q_all": ({"targets": "all-linear"}, "as q_base, LoRA on all linears"),
    "q_dropout": ({"lora_dropout": 0.05}, "as q_base with lora_dropout 0.05"),
    "q_compute_default": ({"compute_dtype": None}, "as q_base, BitsAndBytesConfig default compute dtype"),
    "q_gc": ({"gradient_checkpointing": True}, "as q_base with HF GC (use_reentrant=False)"),
    "q_prep": ({"prepare": True}, "prepare_model_for_kbit_training(use_gradient_checkpointing=False)"),
    "q_prep_gc": (PREP_GC, "prepare_model_for_kbit_training() defaults: GC on, PEFT's default kwargs (reentrant)"),
    "q_prep_gc_nr": (
        {**PREP_GC, "gc_kwargs": {"use_reentrant": False}},
        "prepare_model_for_kbit_training(gradient_checkpointing_kwargs={'use_reentrant': False})",
    ),
    "q_all_prep_gc": (
        {**PREP_GC, "targets": "all-linear"},
        "the common HF recipe: prepare (GC, reentrant) + all-linear",
    ),
    "q_old_bnb": (OLD, "as q_base, bitsandbytes <= 0.43.1 ctx.tensors = (A, B)"),
    "q_old_bnb_all": ({**OLD, "targets": "all-linear"}, "as q_all, old bitsandbytes"),
    "lora_bf16": ({"quantize": False}, "same checkpoint loaded in bf16, plain LoRA q,v (baseline)"),
    "lora_bf16_all": ({"quantize": False, "targets": "all-linear"}, "bf16 LoRA all-linear (baseline)"),
    "q_l4_b1_s64": (L4, "as q_base, 4 layers, b1 s64"),
    "q_l4_b1_s64_old": ({**L4, **OLD}, "as q_l4_b1_s64, old bitsandbytes"),
    "q_gc_old": (
        {"gradient_checkpointing": True, **OLD},
        "as q_gc (non-reentrant GC), old bitsandbytes: ctx.tensors is not a saved tensor, checkpointing cannot drop it",
    ),
    "q_prep_gc_old": (
        {**PREP_GC, **OLD},
        "as q_prep_gc (PEFT default: reentrant GC, forward under no_grad), old bitsandbytes",
    ),
    "q_prep_old": (
        {"prepare": True, **OLD},
        "as q_prep (fp32 activations: every 4-bit linear casts its input to bf16), old bitsandbytes",
    ),
}


def case(cid: str) -> dict[str, Any]:
    changes, note = CASES[cid]
    return {**BASE, **changes, "id": cid, "note": note}


def checkpoint(c: dict[str, Any], folder: Path) -> Path:
    """The tiny Llama's bf16 checkpoint for this case's layer count (random weights from the seed)."""
    import transformers

    path = folder / f"llama_l{c['num_layers']}_seed{c['seed']}"
    if not path.exists():
        torch.manual_seed(c["seed"])
        cfg = transformers.LlamaConfig(
            vocab_size=c["vocab_size"],
            hidden_size=c["hidden_size"],
            intermediate_size=c["intermediate_size"],
            num_hidden_layers=c["num_layers"],
            num_attention_heads=c["num_heads"],
            num_key_value_heads=c["num_kv_heads"],
            attention_dropout=0.0,
            tie_word_embeddings=False,
            use_cache=False,
        )
        transformers.AutoModelForCausalLM.from_config(cfg).to(torch.bfloat16).save_pretrained(path)
    return path


class OldBnb:
    """bitsandbytes <= 0.43.1: ``ctx.tensors = (A, B)``, the input kept until backward (`held` records their
    storages by address, keeping no reference)."""

    def __init__(self) -> None:
        from bitsandbytes.autograd import _functions as bnbf

        self.fn = bnbf.MatMul4Bit
        self.orig = self.fn.forward
        self.held: dict[int, int] = {}  # storage address -> bytes (no reference kept: the step frees them)

    def __enter__(self) -> OldBnb:
        orig, held = self.orig, self.held

        def forward(ctx: Any, A: torch.Tensor, B: torch.Tensor, *args: Any, **kw: Any) -> torch.Tensor:
            out = orig(ctx, A, B, *args, **kw)
            if any(ctx.needs_input_grad[:2]):
                ctx.tensors = (A, ctx.tensors[1])
                held[A.untyped_storage().data_ptr()] = A.untyped_storage().nbytes()
            return out

        self.fn.forward = staticmethod(forward)
        return self

    def __exit__(self, *exc: object) -> None:
        self.fn.forward = self.orig


def load(c: dict[str, Any], path: Path) -> tuple[Any, Any, torch.Tensor]:
    """The case's model (quantised or bf16, prepared, LoRA), its optimizer and a batch."""
    import peft
    import transformers

    kw: dict[str, Any] = {"dtype": torch.bfloat16}
    if c["quantize"]:
        compute = getattr(torch, c["compute_dtype"]) if c["compute_dtype"] else None
        kw["quantization_config"] = transformers.BitsAndBytesConfig(
            load_in_4bit=True,
            bnb_4bit_quant_type="nf4",
            bnb_4bit_use_double_quant=c["double_quant"],
            **({"bnb_4bit_compute_dtype": compute} if compute else {}),
        )
    model = transformers.AutoModelForCausalLM.from_pretrained(path, **kw)
    for prm in model.parameters():  # weights read from the safetensors file are mapped, not allocated: copy them
        if type(prm).__name__ != "Params4bit":  # into the allocator's memory, where a GPU run holds them
            prm.data = prm.data.clone()
    torch.manual_seed(c["seed"])
    ids = torch.randint(0, c["vocab_size"], (c["micro_batch_size"], c["seq_len"]), dtype=torch.int64)
    if c["prepare"]:
        extra = {"gradient_checkpointing_kwargs": c["gc_kwargs"]} if c["gc_kwargs"] else {}
        model = peft.prepare_model_for_kbit_training(
            model, use_gradient_checkpointing=c["gradient_checkpointing"], **extra
        )
    elif c["gradient_checkpointing"]:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    targets = ["q_proj", "v_proj"] if c["targets"] == "qv" else c["targets"]
    lora = peft.LoraConfig(
        r=c["lora_rank"], lora_alpha=c["lora_alpha"], lora_dropout=c["lora_dropout"], target_modules=targets,
        task_type="CAUSAL_LM",
    )  # fmt: skip
    model = peft.get_peft_model(model, lora)
    model.train()
    opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=c["lr"], foreach=True)
    return model, opt, ids


def storages(tensors: list[torch.Tensor]) -> int:
    seen: dict[int, int] = {}
    for t in tensors:
        s = t.untyped_storage()
        seen[s.data_ptr()] = s.nbytes()
    return sum(seen.values())


def params_info(model: Any) -> dict[str, Any]:
    """Parameter bytes by kind (Parameter, bitsandbytes' Params4bit, LoRA) and dtype, and the NF4 quantisation
    state (absmax, code, offset; the nested state2's absmax and code under double quantisation)."""
    by: dict[str, int] = {}
    seen: set[int] = set()
    qs: dict[str, int] = {}
    for name, p in model.named_parameters():
        s = p.untyped_storage()
        if s.data_ptr() in seen:
            continue
        seen.add(s.data_ptr())
        kind = "lora" if "lora_" in name else type(p).__name__
        key = f"{kind}:{str(p.dtype).removeprefix('torch.')}"
        by[key] = by.get(key, 0) + s.nbytes()
        q = getattr(p, "quant_state", None)
        if q is None:
            continue
        parts = {"absmax": q.absmax, "code": q.code, "offset": getattr(q, "offset", None)}
        if q.nested:
            parts |= {"nested_absmax": q.state2.absmax, "nested_code": q.state2.code}
        for k, t in parts.items():
            if isinstance(t, torch.Tensor):
                kk = f"{k}:{str(t.dtype).removeprefix('torch.')}"
                qs[kk] = qs.get(kk, 0) + t.untyped_storage().nbytes()
    return {
        "bytes_by_kind_dtype": by,
        "quant_state_bytes": qs,
        "quant_state_total": sum(qs.values()),
        "numel_total": sum(p.numel() for p in model.parameters()),
        "numel_trainable": sum(p.numel() for p in model.parameters() if p.requires_grad),
    }


def grads_info(model: Any) -> dict[str, Any]:
    by: dict[str, int] = {}
    for p in model.parameters():
        if p.grad is not None:
            k = str(p.grad.dtype).removeprefix("torch.")
            by[k] = by.get(k, 0) + p.grad.untyped_storage().nbytes()
    return {"bytes": sum(by.values()), "by_dtype": by}


def optimizer_info(opt: Any) -> dict[str, Any]:
    by: dict[str, int] = {}
    for state in opt.state.values():
        for k, t in state.items():
            if isinstance(t, torch.Tensor):
                kk = f"{k}:{str(t.dtype).removeprefix('torch.')}"
                by[kk] = by.get(kk, 0) + t.untyped_storage().nbytes()
    return {"bytes": sum(by.values()), "by_key": by}


def profile_pass(c: dict[str, Any], path: Path) -> tuple[Any, dict[str, Any]]:
    from torch.profiler import ProfilerActivity, profile, record_function

    info: dict[str, Any] = {"losses": []}
    gc.collect()
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        model, opt, ids = load(c, path)
        labels = ids.clone()
        for step in range(1, c["steps"] + 1):
            with record_function(f"{PREFIX}:{step}:forward:1"):
                out = model(input_ids=ids, labels=labels)
                loss = out.loss
                del out
            with record_function(f"{PREFIX}:{step}:backward:1"):
                loss.backward()
            if step == 1:
                info["grads"] = grads_info(model)
            info["losses"].append(loss.item())
            if step != 1:
                del loss
            with record_function(f"{PREFIX}:{step}:optimizer:0"):
                opt.step()
            if step == 1:
                del loss
                info["optimizer"] = optimizer_info(opt)
                params = params_info(model)
                info["enumerated_baseline"] = {
                    "params": storages(list(model.parameters())),
                    "quant_state": params["quant_state_total"],
                    "buffers": storages(list(model.buffers())),
                    "inputs": storages([ids, labels]),
                    "optimizer_state": info["optimizer"]["bytes"],
                }
            with record_function(f"{PREFIX}:{step}:zero_grad:0"):
                opt.zero_grad(set_to_none=True)
        info["params"] = params_info(model)
        del model, opt, ids, labels
        gc.collect()
    return prof, info


def memory(prof: Any) -> dict[str, Any]:
    from vramplan.measure.cpu import analyse

    out: dict[str, Any] = {}
    for s in analyse(prof).steps:
        out[f"step{s.step}"] = {
            "baseline": s.baseline_bytes,
            "peak": s.peak_bytes,
            "peak_phase": s.peak_phase,
            "phases": {p.phase: {"start": p.start, "peak": p.peak, "end": p.end} for p in s.phases},
        }
    return out


def saved_pass(c: dict[str, Any], path: Path, old: OldBnb | None) -> dict[str, Any]:
    """One forward + loss of a fresh load under saved-tensor hooks: saved storages, parameters set apart."""
    model, _, ids = load(c, path)
    param_ptrs = {p.untyped_storage().data_ptr() for p in model.parameters()}
    saved: dict[int, torch.Tensor] = {}

    def pack(t: torch.Tensor) -> torch.Tensor:
        saved.setdefault(t.untyped_storage().data_ptr(), t)
        return t

    if old is not None:
        old.held.clear()
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        loss = model(input_ids=ids, labels=ids.clone()).loss
    by: dict[str, int] = {}
    excluded = 0
    for ptr, t in saved.items():
        n = t.untyped_storage().nbytes()
        if ptr in param_ptrs:
            excluded += n
            continue
        k = str(t.dtype).removeprefix("torch.")
        by[k] = by.get(k, 0) + n
    held = {ptr: n for ptr, n in (old.held if old else {}).items() if ptr not in saved}
    out = {
        "activation_bytes": sum(by.values()),
        "by_dtype": by,
        "excluded_param_bytes": excluded,
        "old_bnb_ctx_held_bytes": sum(held.values()),
        "num_storages": len(saved) - len(saved.keys() & param_ptrs),
    }
    del loss, model
    return out


def measure(c: dict[str, Any], folder: Path) -> dict[str, Any]:
    t0 = time.time()
    path = checkpoint(c, folder)
    old = OldBnb() if c["emulate_old_bnb"] else None
    with old if old is not None else contextlib.nullcontext():
        prof, info = profile_pass(c, path)
        mem = memory(prof)
        del prof
        saved = saved_pass(c, path, old)
    return {"case": c, **info, "memory": mem, "saved": saved, "seconds": round(time.time() - t0, 1)}


def versions() -> dict[str, Any]:
    import accelerate
    import bitsandbytes
    import peft
    import transformers

    return {
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "peft": peft.__version__,
        "bitsandbytes": bitsandbytes.__version__,
        "accelerate": accelerate.__version__,
        "python": platform.python_version(),
        "machine": platform.machine(),
        "threads": torch.get_num_threads(),
    }


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("-o", "--out", type=Path, default=OUT)
    ap.add_argument("--only", nargs="*", default=None, help="case ids (default: all)")
    args = ap.parse_args(argv)
    torch.set_num_threads(2)
    results: dict[str, Any] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for cid in args.only or list(CASES):
            results[cid] = measure(case(cid), Path(tmp))
            steady = results[cid]["memory"][f"step{results[cid]['case']['steps']}"]
            print(f"{cid}: steady peak {steady['peak']:,} B", file=sys.stderr)
    doc = {
        "versions": versions(),
        "method": "QLoRA (bitsandbytes NF4 + PEFT LoRA) training steps on the CPU, measured the way "
        "bench/measure/measure_step.py measures: python -m bench.data.qlora_cpu (its docstring)",
        "cases": results,
    }
    args.out.write_text(json.dumps(doc, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
