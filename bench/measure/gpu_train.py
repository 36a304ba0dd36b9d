"""One kit case on real PyTorch: build the model from its config with random weights (directly on the device, in
the dtype it trains in), quantize it for QLoRA, add LoRA, then run the training loop of
../shared/oracle/README.md (forward with labels, loss = out.loss, `del out`, loss.backward(), the loss dropped,
optimizer.step(), zero_grad(set_to_none=True)) for warm-up and measured steps, and meter every step.

What `vramplan measure` already does is the package's (`vramplan.measure`): checkpointing, LoRA and the optimizer
(`build`), autocast and the micro-batch's forward (`forward`), storage counting (`tensors`), and the meters: each
metered stretch (the build, a step) is one phase of `cuda.CudaMeter` or `cpu.CpuProfiler`. This module keeps the
kit's own: the model built directly on the device, the 4-bit quantization, and the figures of its results file.

Meters: `CudaMeter` reads torch.cuda's allocator (memory_allocated, max_memory_allocated, max_memory_reserved, the
peak statistics reset before each step) and, after the steps, the process's GPU memory (nvidia-smi, else
torch.cuda.mem_get_info). `CpuMeter` reads the CPU allocator's running total from torch.profiler's memory events
(the method of measure_step.py), so the same loop is checked on a CPU.
"""

from __future__ import annotations

import gc
import statistics
import time
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import torch
import transformers
from gpu_plans import hf_config_kwargs, peft_targets, tokens_per_step

from vramplan.measure import cuda
from vramplan.measure.build import add_lora, enable_checkpointing, make_optimizer
from vramplan.measure.cpu import CpuProfiler
from vramplan.measure.forward import autocast_to, forward_loss
from vramplan.measure.tensors import optimizer_state, storage_bytes

DTYPE = {"fp32": torch.float32, "bf16": torch.bfloat16}


class Phase:
    """Where a case is (build, step N ...), for the row of a case that failed."""

    def __init__(self) -> None:
        self.name = "start"


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
    if c["kbit_prepare"]:
        import peft

        with warnings.catch_warnings():
            warnings.simplefilter("ignore", FutureWarning)
            # PEFT's default checkpointing is reentrant (it passes no use_reentrant, torch's default is True);
            # said explicitly here, as torch asks
            model = peft.prepare_model_for_kbit_training(
                model,
                use_gradient_checkpointing=c["gradient_checkpointing"],
                gradient_checkpointing_kwargs={"use_reentrant": True},
            )
    elif c["gradient_checkpointing"]:
        enable_checkpointing(model, reentrant=False)
    if c["method"] != "full":
        model = add_lora(model, c["lora_rank"], c["lora_alpha"], c["lora_dropout"], peft_targets(c))
    params = [p for p in model.parameters() if p.requires_grad]
    opt = make_optimizer(params, c["optimizer"], c["optimizer_impl"], c["lr"])
    return model, opt, ids


class Span:
    """One metered stretch (the build, a step): its `figures` (start/peak/end allocated bytes, peak reserved,
    seconds, and what the loop adds)."""

    def __init__(self, name: str) -> None:
        self.name, self.figures, self.index = name, dict[str, Any](), 0


class CudaMeter:
    """The kit's figures from `vramplan.measure.cuda`: each span one phase of its `CudaMeter` (peaks reset at the
    start, read after a synchronize at the end); the CUDA context, the process's memory and the allocator's retries
    beside them."""

    device = torch.device("cuda")

    def __init__(self, used_before_init: int | None) -> None:
        """`used_before_init`: the GPU's used bytes before this process touched CUDA (nvidia-smi), for the
        mem_get_info fallback of the process's memory."""
        torch.cuda.init()
        torch.empty(1, device="cuda")
        cuda.synchronize()
        used = cuda.used_bytes()[0] - cuda.reserved_bytes()  # less the one block the probe tensor took
        self.used_before_init = used_before_init
        self.context_bytes = used - used_before_init if used_before_init is not None else None
        self.meter = cuda.CudaMeter()

    def start_case(self) -> None:
        self.meter = cuda.CudaMeter()
        self.meter.start()  # garbage collected, cache emptied, peaks reset
        self.retries0 = torch.cuda.memory_stats().get("num_alloc_retries", 0)

    @contextmanager
    def span(self, name: str) -> Iterator[Span]:
        s = Span(name)
        s.index = len(self.meter.phases) + 1
        try:
            with self.meter.phase(s.index, "span", 0):
                yield s
        finally:
            p = self.meter.phases[-1]
            s.figures |= {
                "start_allocated": p["start"],
                "seconds": p["seconds"],
                "peak_allocated": p["peak"],
                "peak_reserved": p["reserved_peak"],
                "end_allocated": p["end"],
            }

    def at_failure(self) -> dict[str, Any]:
        """The allocator's figures when a case failed (an out-of-memory error: how far it got)."""
        used, total = cuda.used_bytes()
        peak, reserved = cuda.peak_bytes()
        return {
            "peak_allocated_bytes": peak,
            "peak_reserved_bytes": reserved,
            "allocated_bytes": self.meter.allocated_bytes(),
            "device_free_bytes": total - used,
            "device_total_bytes": total,
        }

    def finish(self, spans: list[Span]) -> None:
        pass

    def process(self) -> dict[str, Any]:
        smi = cuda.nvidia_smi_process_bytes()
        used, _ = cuda.used_bytes()
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
    """The CPU allocator's running total from torch.profiler(profile_memory=True), read by `vramplan.measure.cpu`
    (measure_step.py's method): each span is one phase of a `CpuProfiler` session."""

    device = torch.device("cpu")

    def start_case(self) -> None:
        gc.collect()
        self.prof = CpuProfiler()
        self.prof.start()
        self.n = 0

    @contextmanager
    def span(self, name: str) -> Iterator[Span]:
        self.n += 1
        s = Span(name)
        s.index = self.n
        with self.prof.phase(s.index, "span", 0):
            t0 = time.perf_counter()
            try:
                yield s
            finally:
                s.figures["seconds"] = time.perf_counter() - t0

    def at_failure(self) -> dict[str, Any]:
        return {}

    def finish(self, spans: list[Span]) -> None:
        """Stop the profiler; each span's start/peak/end allocated bytes from the allocation events in its range."""
        self.prof.stop()
        fig = self.prof.figures()
        assert fig is not None
        phases = {p.step: p for step in fig.steps for p in step.phases}
        for span in spans:
            p = phases[span.index]
            span.figures |= {
                "start_allocated": p.start,
                "peak_allocated": p.peak,
                "end_allocated": p.end,
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
    autocast = "bf16" if c["precision"] == "bf16-mixed" else None
    ga, spans, losses = c["grad_accum_steps"], [], []
    for k in range(c["warmup_steps"] + c["steps"]):
        kind = "warm-up" if k < c["warmup_steps"] else "measured"
        phase.name = f"step {k + 1} ({kind})"
        with meter.span(phase.name) as span:
            for _ in range(ga):
                with autocast_to(autocast, ids.device.type):
                    loss = forward_loss(model, ids, ids, ga)
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
    with meter.span("build") as built:
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
    info["optimizer_state_bytes"] = optimizer_state(opt)["bytes"]
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
