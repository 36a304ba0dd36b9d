"""One kit case on real PyTorch: build the model from its config with random weights (directly on the device, in
the dtype it trains in), quantize it for QLoRA, add LoRA, then run the training loop of
../shared/oracle/README.md (forward with labels, loss = out.loss, `del out`, loss.backward(), the loss dropped,
optimizer.step(), zero_grad(set_to_none=True)) for warm-up and measured steps, and meter every step.

Meters: `CudaMeter` reads torch.cuda's allocator (memory_allocated, max_memory_allocated, max_memory_reserved, the
peak statistics reset before each step) and, after the steps, the process's GPU memory (nvidia-smi, else
torch.cuda.mem_get_info). `CpuMeter` reads the CPU allocator's running total from torch.profiler's memory events
(the method of measure_step.py), so the same loop is checked on a CPU.
"""

from __future__ import annotations

import gc
import os
import statistics
import subprocess
import time
import warnings
from contextlib import nullcontext
from typing import Any

import torch
import transformers
from gpu_plans import hf_config_kwargs, peft_targets, tokens_per_step

DTYPE = {"fp32": torch.float32, "bf16": torch.bfloat16}


class Phase:
    """Where a case is (build, step N ...), for the row of a case that failed."""

    def __init__(self) -> None:
        self.name = "start"


def storage_bytes(tensors: Any) -> int:
    seen: dict[int, int] = {}
    for t in tensors:
        if t is not None and t.device.type != "meta":
            s = t.untyped_storage()
            seen[s.data_ptr()] = s.nbytes()
    return sum(seen.values())


def logical_numel(p: torch.Tensor) -> int:
    """The weights a parameter stands for: a 4-bit one stores two per byte (its quant state keeps the shape)."""
    qs = getattr(p, "quant_state", None)
    return int(torch.Size(qs.shape).numel()) if qs is not None and getattr(qs, "shape", None) else p.numel()


def quant_state_bytes(model: torch.nn.Module) -> int:
    """The bytes of every 4-bit weight's quantization state (absmax, code, nested state of double quant)."""
    out = 0
    for p in model.parameters():
        qs = getattr(p, "quant_state", None)
        while qs is not None:
            out += storage_bytes(t for t in (qs.absmax, qs.code) if torch.is_tensor(t))
            qs = getattr(qs, "state2", None)
    return out


def quantize_4bit(model: torch.nn.Module, c: dict[str, Any], device: torch.device) -> int:
    """Replace every block linear by a bitsandbytes Linear4bit holding its quantized weight, as transformers' 4-bit
    loading does (quantizers/quantizer_bnb_4bit.py, integrations/bitsandbytes.replace_with_bnb_linear): the output
    layer stays 16-bit (quantizers/base.get_keys_to_not_convert). Returns the number of linears quantized."""
    import bitsandbytes as bnb

    out = model.get_output_embeddings()
    names = [n for n, m in model.named_modules() if type(m) is torch.nn.Linear and m is not out]
    for name in names:  # one at a time: each 16-bit weight is freed once its module is replaced
        mod = model.get_submodule(name)
        new = bnb.nn.Linear4bit(
            mod.in_features,
            mod.out_features,
            bias=mod.bias is not None,
            compute_dtype=DTYPE[c["compute_dtype"]],
            compress_statistics=c["double_quant"],
            quant_type=c["quant_type"],
            device="meta",
        )
        w = bnb.nn.Params4bit(
            mod.weight.data,
            requires_grad=False,
            compress_statistics=c["double_quant"],
            quant_type=c["quant_type"],
            module=new,
        )
        new.weight = w.to(device)  # quantizes (Params4bit.to -> _quantize)
        if mod.bias is not None:
            new.bias = torch.nn.Parameter(mod.bias.data, requires_grad=False)
        new.requires_grad_(False)
        model.set_submodule(name, new)
        del mod, w, new
    model.is_loaded_in_4bit = True  # what from_pretrained sets; peft.prepare_model_for_kbit_training reads it
    return len(names)


def build(c: dict[str, Any], device: torch.device) -> tuple[torch.nn.Module, torch.optim.Optimizer, torch.Tensor]:
    """Model (random weights from the seed), optimizer and batch of a resolved case, on `device`."""
    torch.manual_seed(c["seed"])
    family, kw = hf_config_kwargs(c)
    cfg = transformers.AutoConfig.for_model(family, **kw)
    dtype = torch.float32 if c["precision"] in ("fp32", "bf16-mixed") and c["method"] != "qlora" else torch.bfloat16
    with torch.device(device):
        model = transformers.AutoModelForCausalLM.from_config(cfg, attn_implementation=c["attention"], dtype=dtype)
    ids = torch.randint(0, cfg.vocab_size, (c["micro_batch_size"], c["seq_len"]), dtype=torch.int64, device=device)
    model.train()
    if c["method"] == "qlora":
        quantize_4bit(model, c, device)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)
        if c["kbit_prepare"]:
            import peft

            # PEFT's default checkpointing is reentrant (it passes no use_reentrant, torch's default is True);
            # said explicitly here, as torch asks
            model = peft.prepare_model_for_kbit_training(
                model,
                use_gradient_checkpointing=c["gradient_checkpointing"],
                gradient_checkpointing_kwargs={"use_reentrant": True},
            )
        elif c["gradient_checkpointing"]:
            model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
        if c["method"] != "full":
            import peft

            lora = peft.LoraConfig(
                r=c["lora_rank"],
                lora_alpha=c["lora_alpha"],
                lora_dropout=c["lora_dropout"],
                target_modules=peft_targets(c),
                task_type="CAUSAL_LM",
            )
            model = peft.get_peft_model(model, lora)
    params = [p for p in model.parameters() if p.requires_grad]
    impl = c["optimizer_impl"]
    flags = {"fused": True} if impl == "fused" else {"foreach": impl == "foreach"}
    if c["optimizer"] == "adamw":
        opt: torch.optim.Optimizer = torch.optim.AdamW(params, lr=c["lr"], **flags)
    else:
        opt = torch.optim.SGD(params, lr=c["lr"], **flags)
    return model, opt, ids


def opt_state_bytes(opt: torch.optim.Optimizer) -> int:
    return storage_bytes(v for st in opt.state.values() for v in st.values() if torch.is_tensor(v))


def nvidia_smi_process_bytes() -> int | None:
    """This process's GPU memory as nvidia-smi reports it (None without nvidia-smi or when it lists no such pid)."""
    try:
        out = subprocess.run(
            ["nvidia-smi", "--query-compute-apps=pid,used_memory", "--format=csv,noheader,nounits"],
            capture_output=True,
            text=True,
            timeout=15,
            check=True,
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    for line in out.splitlines():
        parts = [p.strip() for p in line.split(",")]
        if len(parts) == 2 and parts[0] == str(os.getpid()) and parts[1].isdigit():
            return int(parts[1]) * 2**20
    return None


class Span:
    """One metered stretch (the build, a step): start/peak/end allocated bytes, peak reserved, seconds."""

    def __init__(self, meter: Any, name: str) -> None:
        self.meter, self.name, self.figures = meter, name, {}

    def __enter__(self) -> Span:
        self.meter.enter(self)
        return self

    def __exit__(self, *exc: Any) -> None:
        self.meter.exit(self)


class CudaMeter:
    device = torch.device("cuda")

    def __init__(self, used_before_init: int | None) -> None:
        """`used_before_init`: the GPU's used bytes before this process touched CUDA (nvidia-smi), for the
        mem_get_info fallback of the process's memory."""
        torch.cuda.init()
        torch.empty(1, device="cuda")
        torch.cuda.synchronize()
        free, total = torch.cuda.mem_get_info()
        self.used_before_init = used_before_init
        used = total - free - torch.cuda.memory_reserved()  # less the one block the probe tensor took
        self.context_bytes = used - used_before_init if used_before_init is not None else None

    def start_case(self) -> None:
        gc.collect()
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()
        self.retries0 = torch.cuda.memory_stats().get("num_alloc_retries", 0)

    def enter(self, span: Span) -> None:
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        span.figures["start_allocated"] = torch.cuda.memory_allocated()
        span.t0 = time.perf_counter()

    def exit(self, span: Span) -> None:
        torch.cuda.synchronize()
        span.figures |= {
            "seconds": time.perf_counter() - span.t0,
            "peak_allocated": torch.cuda.max_memory_allocated(),
            "peak_reserved": torch.cuda.max_memory_reserved(),
            "end_allocated": torch.cuda.memory_allocated(),
        }

    def at_failure(self) -> dict[str, Any]:
        """The allocator's figures when a case failed (an out-of-memory error: how far it got)."""
        free, total = torch.cuda.mem_get_info()
        return {
            "peak_allocated_bytes": torch.cuda.max_memory_allocated(),
            "peak_reserved_bytes": torch.cuda.max_memory_reserved(),
            "allocated_bytes": torch.cuda.memory_allocated(),
            "device_free_bytes": free,
            "device_total_bytes": total,
        }

    def finish(self, spans: list[Span]) -> None:
        pass

    def process(self) -> dict[str, Any]:
        smi = nvidia_smi_process_bytes()
        free, total = torch.cuda.mem_get_info()
        used = total - free
        if smi is not None:
            proc, src = smi, "nvidia-smi"
        elif self.used_before_init is not None:
            proc, src = used - self.used_before_init, "mem_get_info - used before CUDA init"
        else:
            proc, src = None, "none"
        return {
            "process_bytes": proc,
            "process_source": src,
            "device_used_bytes": used,
            "context_bytes": self.context_bytes,
            "alloc_retries": torch.cuda.memory_stats().get("num_alloc_retries", 0) - self.retries0,
        }


class CpuMeter:
    """The CPU allocator's running total from torch.profiler(profile_memory=True): every allocation event carries
    it, each span is a record_function range (measure_step.py's method)."""

    device = torch.device("cpu")

    def start_case(self) -> None:
        from torch.profiler import ProfilerActivity, profile

        gc.collect()
        self.prof = profile(activities=[ProfilerActivity.CPU], profile_memory=True)
        self.prof.__enter__()
        self.n = 0

    def enter(self, span: Span) -> None:
        from torch.profiler import record_function

        self.n += 1
        span.tag = f"KIT:{self.n}"
        span.rf = record_function(span.tag)
        span.rf.__enter__()
        span.t0 = time.perf_counter()

    def exit(self, span: Span) -> None:
        span.figures["seconds"] = time.perf_counter() - span.t0
        span.rf.__exit__(None, None, None)

    def at_failure(self) -> dict[str, Any]:
        return {}

    def finish(self, spans: list[Span]) -> None:
        """Stop the profiler; each span's start/peak/end allocated bytes from the allocation events in its range."""
        import bisect

        from torch._C._profiler import _EventType

        self.prof.__exit__(None, None, None)
        allocs, ranges = [], {}
        stack = list(self.prof.profiler.kineto_results.experimental_event_tree())
        while stack:
            e = stack.pop()
            stack.extend(e.children)
            if e.tag == _EventType.Allocation and e.extra_fields.device.type == "cpu":
                allocs.append((e.start_time_ns, e.extra_fields.alloc_size, e.extra_fields.total_allocated))
            elif e.name.startswith("KIT:"):
                ranges[e.name] = (e.start_time_ns, e.end_time_ns)
        allocs.sort(key=lambda a: a[0])
        offset = allocs[0][2] - allocs[0][1]  # the counter is process-wide: totals from this session's start
        totals = [a[2] - offset for a in allocs]
        times = [a[0] for a in allocs]
        for span in spans:
            t0, t1 = ranges[span.tag]
            i, j = bisect.bisect_left(times, t0), bisect.bisect_right(times, t1)
            start = totals[i - 1] if i else 0
            span.figures |= {
                "start_allocated": start,
                "peak_allocated": max(totals[i:j], default=start),
                "end_allocated": totals[j - 1] if j > i else start,
                "peak_reserved": None,
            }
        del self.prof

    def process(self) -> dict[str, Any]:
        return {
            "process_bytes": None,
            "process_source": "none (CPU)",
            "device_used_bytes": None,
            "context_bytes": None,
            "alloc_retries": 0,
        }


def train_steps(model, opt, ids, c, meter, phase: Phase) -> tuple[list[Span], list[torch.Tensor]]:
    """warmup_steps + steps optimizer steps, each of grad_accum_steps micro-batches; each step one span."""
    ac = torch.autocast(ids.device.type, dtype=torch.bfloat16) if c["precision"] == "bf16-mixed" else nullcontext()
    ga, spans, losses = c["grad_accum_steps"], [], []
    for k in range(c["warmup_steps"] + c["steps"]):
        kind = "warm-up" if k < c["warmup_steps"] else "measured"
        phase.name = f"step {k + 1} ({kind})"
        with Span(meter, phase.name) as span:
            for _ in range(ga):
                with ac:
                    out = model(input_ids=ids, labels=ids)
                    loss = out.loss / ga if ga > 1 else out.loss
                del out
                loss.backward()
                losses.append(loss.detach())
                del loss
            grad_bytes = storage_bytes(p.grad for p in model.parameters() if p.grad is not None)
            opt.step()
            opt.zero_grad(set_to_none=True)
        span.figures |= {"step": k + 1, "kind": kind, "grad_bytes": grad_bytes}
        spans.append(span)
    return spans, losses


def run_case(c: dict[str, Any], meter, phase: Phase) -> dict[str, Any]:
    """Build and train one resolved case; the `measured` figures of its row (gpu_results' docstring)."""
    meter.start_case()
    phase.name = "build"
    with Span(meter, "build") as built:
        model, opt, ids = build(c, meter.device)
    params = list(model.parameters())
    info = {
        "params_total": sum(logical_numel(p) for p in params),
        "params_trainable": sum(p.numel() for p in params if p.requires_grad),
        "param_bytes": storage_bytes(params),
        "quant_state_bytes": quant_state_bytes(model),
        "buffer_bytes": storage_bytes(model.buffers()),
        "param_dtypes": sorted({str(p.dtype).removeprefix("torch.") for p in params}),
        "trainable_dtypes": sorted({str(p.dtype).removeprefix("torch.") for p in params if p.requires_grad}),
    }
    del params
    spans, losses = train_steps(model, opt, ids, c, meter, phase)
    info["optimizer_state_bytes"] = opt_state_bytes(opt)
    phase.name = "after the steps"
    meter.finish([built, *spans])
    proc = meter.process()
    loss_values = [float(x) for x in losses]
    del model, opt, ids, losses
    steps = [s.figures for s in spans]
    measured = [s for s in steps if s["kind"] == "measured"]
    step_s = statistics.median(s["seconds"] for s in measured)
    reserved = [s["peak_reserved"] for s in steps if s["peak_reserved"] is not None]
    return {
        **info,
        "grad_bytes": measured[-1]["grad_bytes"],
        "build_seconds": built.figures["seconds"],
        "build_peak_allocated_bytes": built.figures["peak_allocated"],
        "first_step_peak_allocated_bytes": steps[0]["peak_allocated"],
        "steady_peak_allocated_bytes": max(s["peak_allocated"] for s in measured),
        "peak_allocated_bytes": max(s["peak_allocated"] for s in steps),
        "peak_reserved_bytes": max(reserved) if reserved else None,
        **proc,
        "step_seconds": step_s,
        "tokens_per_second": tokens_per_step(c) / step_s,
        "losses": loss_values,
        "steps": steps,
    }
