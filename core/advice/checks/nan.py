"""NaN loss: precision, loss scaling, gradient clipping and the learning rate, judged against the plan.

Each rule cites where it comes from. Fixes here rarely change memory or time (loss scaling, clipping and the
learning rate cost nothing); they are still measured, so a precision change shows its real cost.
"""

from __future__ import annotations

from vramplan.core.advice.checks.base import Context, Item, Rule
from vramplan.core.plan.helpers.units import fmt_count
from vramplan.core.plan.schema.precision import REGIMES

LOSS_SCALING_SRC = (
    "Micikevicius et al. 2018 (Mixed Precision Training) §3.2: fp16 gradients underflow without loss scaling; "
    "dynamic scaling backs off on inf/NaN (PyTorch torch.amp.GradScaler docs; DeepSpeed fp16.loss_scale = 0)"
)
BF16_SRC = (
    "bf16 tensor cores arrive with Ampere (sm_80; NVIDIA A100 whitepaper); on Volta and Turing (V100, T4) "
    "torch.cuda.is_bf16_supported(including_emulation=False) is False: bf16 is emulated at fp32 speed or kernels "
    "(FlashAttention, fused optimizers) refuse it"
)
FP16_RANGE_SRC = (
    "fp16's largest value is 65504; outlier features of magnitude 20x and more emerge around 6.7B parameters "
    "(Dettmers et al. 2022, LLM.int8() §4); BLOOM (Le Scao et al. 2022) moved to bf16 after fp16 instabilities; "
    "OPT-175B (Zhang et al. 2022 §2.5) diverged repeatedly in fp16; HF transformers docs: models pretrained in "
    "bf16 can overflow in fp16"
)
CLIP_SRC = (
    "Pascanu et al. 2013 (exploding gradients); GPT-3 (Brown et al. 2020, App. B) and LLaMA (Touvron et al. 2023 "
    "§2.3) clip the global norm at 1.0; HF TrainingArguments max_grad_norm = 1.0"
)
LR_SRC = (
    "peak pretraining learning rates for AdamW: GPT-3 Table 2.1 (125M 6e-4 ... 175B 0.6e-4), LLaMA Table 2 "
    "(7B/13B 3e-4, 33B/65B 1.5e-4); LoRA/QLoRA: the QLoRA paper's hyperparameters (Dettmers et al. 2023: 7B/13B "
    "2e-4, 33B/65B 1e-4); Lion takes a 3-10x smaller rate than AdamW (Chen et al. 2023); fine-tuning every "
    "weight usually runs at 1e-5 to 2e-5 (Alpaca, Vicuna)"
)
LONG_SEQUENCE = 16_384
LARGE_MODEL = 6_700_000_000
FP16_FOR_BF16 = {
    "bf16-autocast": "fp16-autocast",
    "bf16-master": "fp16-master",
    "bf16-pure": "fp16-master",
    "bf16-fsdp": "fp16-master",
}


def _ticked(c: Context, item: str) -> bool:
    return item in c.plan.checklist.ticked


def loss_scaling(c: Context) -> Item:
    t = c.plan.training
    fp16 = REGIMES[t.regime].compute_dtype == "fp16"
    fix = None
    if not fp16:
        status, detail = "ok", f"{t.regime} has fp32's exponent range: no loss scaling needed."
    elif t.loss_scaling == "dynamic":
        status, detail = "ok", f"{t.regime} with dynamic loss scaling."
    else:
        status = "fail" if t.loss_scaling == "none" else "warn"
        how = "no loss scaling" if t.loss_scaling == "none" else "a static loss scale"
        detail = (
            f"{t.regime} with {how}: small fp16 gradients flush to zero and a fixed scale cannot follow "
            "the gradients' range, so steps overflow to inf/NaN; use dynamic loss scaling (GradScaler)."
        )
        fix = c.measure("dynamic loss scaling", {"training.loss_scaling": "dynamic"})
    return Item("nan.loss_scaling", "nan", status, "Loss scaling with fp16", detail, LOSS_SCALING_SRC, fix)


def bf16_support(c: Context) -> Item:
    t, gpu = c.plan.training, c.gpu
    wants_bf16 = REGIMES[t.regime].compute_dtype == "bf16"
    fix = None
    if not wants_bf16:
        status, detail = "ok", f"{t.regime} does not use bf16."
    elif gpu.bf16:
        status, detail = "ok", f"{gpu.name} computes in bf16 natively."
    else:
        status = "fail"
        target = FP16_FOR_BF16[t.regime]
        detail = (
            f"{t.regime} on {gpu.name}, which has no bf16 tensor cores: emulated at fp32 speed or refused by "
            f"kernels. Use {target} with dynamic loss scaling (or fp32)."
        )
        changes = {"training.precision": target}
        if t.loss_scaling != "dynamic":
            changes["training.loss_scaling"] = "dynamic"
        fix = c.measure(f"{target} with dynamic loss scaling", changes)
    return Item("nan.bf16_support", "nan", status, "bf16 on this GPU", detail, BF16_SRC, fix)


def fp16_range(c: Context) -> Item:
    t, gpu = c.plan.training, c.gpu
    fp16 = REGIMES[t.regime].compute_dtype == "fp16"
    params = c.est.params_total
    risks = []
    if params >= LARGE_MODEL:
        risks.append(f"{fmt_count(params)} parameters (outlier activations grow with scale)")
    if t.seq_len >= LONG_SEQUENCE:
        risks.append(f"sequences of {t.seq_len:,} tokens (long sums in attention and the loss)")
    fix = None
    if not fp16:
        status, detail = "ok", f"{t.regime} does not compute in fp16."
    elif not risks:
        status = "ok"
        detail = f"fp16 with {fmt_count(params)} parameters and {t.seq_len:,}-token sequences: within common practice."
    else:
        status = "warn"
        detail = f"fp16 (max 65504) with {' and '.join(risks)}: overflow to inf/NaN is likely."
        if gpu.bf16:
            target = t.regime.replace("fp16", "bf16")
            detail += f" {gpu.name} has bf16: use {target}."
            fix = c.measure(target, {"training.precision": target})
        else:
            detail += f" {gpu.name} has no bf16: keep dynamic loss scaling, upcast softmax and the loss to fp32."
    return Item("nan.fp16_range", "nan", status, "fp16 range", detail, FP16_RANGE_SRC, fix)


def grad_clip(c: Context) -> Item:
    clip = c.plan.training.grad_clip
    fix = None
    if clip is not None and clip > 0:
        status, detail = "ok", f"gradients clipped at a global norm of {clip:g}."
    else:
        status = "warn"
        why = "not set in the plan (training.grad_clip)" if clip is None else "disabled (training.grad_clip = 0)"
        detail = f"gradient clipping is {why}: one bad batch can blow the weights up; most recipes clip at 1.0."
        fix = c.measure("clip gradients at 1.0", {"training.grad_clip": 1.0})
    return Item("nan.grad_clip", "nan", status, "Gradient clipping", detail, CLIP_SRC, fix)


def reference_lr(method: str, optimizer: str, params: int) -> float | None:
    """The published peak learning rate for AdamW at this size and method (see `LR_SRC`); None when vramplan has
    no reference (SGD, Adafactor)."""
    if optimizer not in ("adamw", "adamw-8bit", "lion"):
        return None
    if method == "full":
        ref = 6e-4 if params < 1e9 else 3e-4 if params < 2e10 else 1.5e-4 if params < 1e11 else 6e-5
    else:
        ref = 2e-4 if params < 2e10 else 1e-4
    return ref / 3 if optimizer == "lion" else ref


HIGH_FACTOR = {"full": 1.0, "lora": 2.5, "qlora": 2.5}  # above factor x reference: warn; 10x that: fail


def learning_rate(c: Context) -> Item:
    t = c.plan.training
    lr = t.learning_rate
    ref = reference_lr(t.method, t.optimizer, c.est.params_total)
    ticked = _ticked(c, "nan.learning_rate")
    title = "Learning rate"
    if lr is None:
        hint = f"; about {ref:.0e} or less for {t.method} with {t.optimizer} at this size" if ref else ""
        detail = f"not set in the plan (training.learning_rate): check yours by hand{hint}."
        return Item("nan.learning_rate", "nan", "manual", title, detail, LR_SRC, ticked=ticked)
    if ref is None:
        detail = f"{lr:g} with {t.optimizer}: vramplan has no reference rate for it; check it by hand."
        return Item("nan.learning_rate", "nan", "manual", title, detail, LR_SRC, ticked=ticked)
    high = ref * HIGH_FACTOR[t.method]
    size = fmt_count(c.est.params_total)
    fix = None
    if lr <= high:
        status = "ok"
        detail = f"{lr:g} for {t.method} training of {size} parameters with {t.optimizer} (published: {ref:g})."
    else:
        status = "fail" if lr > 10 * high else "warn"
        detail = (
            f"{lr:g} is {lr / ref:.1f}x the published peak rate for {t.method} training of {size} parameters with "
            f"{t.optimizer} ({ref:g}): a common cause of loss spikes and NaN."
        )
        fix = c.measure(f"learning rate {ref:g}", {"training.learning_rate": ref})
    return Item("nan.learning_rate", "nan", status, title, detail, LR_SRC, fix)


def data(c: Context) -> Item:
    t = c.plan.training
    return Item(
        "nan.data",
        "nan",
        "manual",
        "Every batch has targets",
        f"a micro-batch of {t.micro_batch_size} x {t.seq_len} tokens whose labels are all -100 (padding, or a "
        "prompt masked out by completion-only training) gives a mean loss of 0/0 = NaN; so do inf/NaN inputs "
        "and empty sequences: check the data pipeline.",
        "PyTorch CrossEntropyLoss docs: reduction='mean' divides by the number of non-ignored targets",
        ticked=_ticked(c, "nan.data"),
    )


RULES: tuple[Rule, ...] = (loss_scaling, bf16_support, fp16_range, grad_clip, learning_rate, data)
