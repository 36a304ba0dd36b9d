"""NaN loss: precision, loss scaling, gradient clipping and the learning rate, judged against the plan.

Each rule cites where it comes from. Fixes here rarely change memory or time (loss scaling, clipping and the
learning rate cost nothing); they are still measured, so a precision change shows its real cost.
"""

from __future__ import annotations

from typing import NamedTuple

from vramplan.core.advice.checks.base import Context, Item, Rule
from vramplan.core.plan.helpers.units import fmt_count
from vramplan.core.plan.schema.objectives import OBJECTIVES
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
PRETRAIN_LR_SRC = (
    "pretraining peaks for AdamW: GPT-3 (Brown et al. 2020) Table 2.1 (125M 6e-4 ... 175B 0.6e-4), LLaMA (Touvron "
    "et al. 2023) Table 2 (7B/13B 3e-4, 33B/65B 1.5e-4), Llama 2 (Touvron et al. 2023b) §2.2 and Table 1 (7B/13B "
    "3e-4, 34B/70B 1.5e-4)"
)
LR_SRC = (
    "fine-tuning every weight: 2e-5 (Llama 2 SFT, Touvron et al. 2023b §3.1; TRL SFTConfig's default; Tulu 2, "
    "Ivison et al. 2023: 2e-5 for 7B/13B, 1e-5 for 70B); LoRA/QLoRA SFT: the QLoRA paper's hyperparameters "
    "(Dettmers et al. 2023: 7B/13B 2e-4, 33B/65B 1e-4); DPO: 5e-7 to 1e-6 (Zephyr, Tunstall et al. 2023; TRL "
    "DPOConfig's default 1e-6), QLoRA DPO 5e-6 (alignment-handbook zephyr-7b-beta config_qlora.yaml); GRPO: 1e-6 "
    "(DeepSeekMath, Shao et al. 2024 §4.2; TRL GRPOConfig's default); PPO: 3e-6 (TRL PPOConfig's default); LoRA "
    "in RL about 10x the full rate (TRL docs lora_without_regret.md: 1e-5 against 1e-6, after Schulman et al. "
    "2025); Lion takes a 3-10x smaller rate than AdamW (Chen et al. 2023); " + PRETRAIN_LR_SRC
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
    seq = c.batch[1]
    if seq >= LONG_SEQUENCE:
        risks.append(f"sequences of {seq:,} tokens (long sums in attention and the loss)")
    fix = None
    if not fp16:
        status, detail = "ok", f"{t.regime} does not compute in fp16."
    elif not risks:
        status = "ok"
        detail = f"fp16 with {fmt_count(params)} parameters and {seq:,}-token sequences: within common practice."
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


class LrRule(NamedTuple):
    """The usual peak learning rate for a plan's objective, method, size and optimizer (`LR_SRC`): ``low`` to
    ``high`` (equal: "about"), what it is for, and the pretraining peak at this size to say beside it (full SFT
    only; 0 otherwise: pretraining's own rule is that peak)."""

    low: float
    high: float
    what: str
    pretrain: float = 0.0

    def text(self) -> str:
        return f"about {self.high:.0e}" if self.low == self.high else f"{self.low:.0e} to {self.high:.0e}"


ADAMW_LIKE = ("adamw", "adamw-8bit", "paged-adamw", "paged-adamw-8bit")
# objective -> (full fine-tuning rates, LoRA/QLoRA rates), AdamW (see LR_SRC)
RL_RATES: dict[str, tuple[tuple[float, float], tuple[float, float]]] = {
    "dpo": ((5e-7, 1e-6), (5e-6, 1e-5)),
    "grpo": ((1e-6, 1e-6), (1e-5, 1e-5)),
    "ppo": ((1e-6, 3e-6), (1e-5, 3e-5)),
}
# GPT-3 Table 2.1: parameters -> peak learning rate, the low end of the pretraining rates (LLaMA's the high end)
GPT3_RATES: tuple[tuple[float, float], ...] = (
    (125e6, 6e-4), (350e6, 3e-4), (760e6, 2.5e-4), (1.3e9, 2e-4), (2.7e9, 1.6e-4), (6.7e9, 1.2e-4), (13e9, 1e-4),
    (175e9, 0.6e-4),
)  # fmt: skip
WARN_FACTOR = 2.5  # above 2.5x the usual high end: warn; above 10x that (or 10x the pretraining peak): fail


def lr_rule(objective: str, method: str, optimizer: str, params: int) -> LrRule | None:
    """The usual learning rate for this objective, method, size and optimizer (see `LR_SRC`); None when vramplan
    has no reference (SGD, Adafactor)."""
    if optimizer not in (*ADAMW_LIKE, "lion"):
        return None
    adapters = method != "full"
    kind = "LoRA" if method == "lora" else "QLoRA" if method == "qlora" else "full fine-tuning"
    if OBJECTIVES[objective].from_scratch:  # pretraining: no fine-tuning rate, the peak itself
        # LLaMA/Llama 2's peak at this size on top; GPT-3's of the next size up (its largest past 175B) below it
        high = _pretrain_peak(params)
        low = min(high, next((lr for n, lr in GPT3_RATES if n >= params), GPT3_RATES[-1][1]))
        rule = LrRule(low, high, "pretraining")
    elif objective in RL_RATES:
        low, high = RL_RATES[objective][adapters]
        rule = LrRule(low, high, f"{objective.upper()} with {kind}")
    elif adapters:
        rule = LrRule(1e-4, 2e-4, f"{kind} SFT") if params < 2e10 else LrRule(5e-5, 1e-4, f"{kind} SFT")
    else:
        low, high = (1e-5, 2e-5) if params < 3e10 else (5e-6, 1e-5)
        rule = LrRule(low, high, "full fine-tuning (SFT)", _pretrain_peak(params))
    if optimizer == "lion":
        return rule._replace(low=rule.low / 3, high=rule.high / 3, pretrain=rule.pretrain / 3)
    return rule


def _pretrain_peak(params: int) -> float:
    """The usual pretraining peak at this size: LLaMA's and Llama 2's (GPT-3's below 1B and past 100B)."""
    return 6e-4 if params < 1e9 else 3e-4 if params < 2e10 else 1.5e-4 if params < 1e11 else 6e-5


def learning_rate(c: Context) -> Item:
    t = c.plan.training
    lr = t.learning_rate
    rule = lr_rule(t.objective, t.method, t.optimizer, c.est.params_total)
    ticked = _ticked(c, "nan.learning_rate")
    title = "Learning rate"
    size = fmt_count(c.est.params_total)
    if rule is None:
        said = "not set in the plan (training.learning_rate)" if lr is None else f"{lr:g}"
        detail = f"{said} with {t.optimizer}: vramplan has no reference rate for it; check it by hand."
        return Item("nan.learning_rate", "nan", "manual", title, detail, LR_SRC, ticked=ticked)
    what = f"{rule.what} of {size} parameters with {t.optimizer}"
    scratch = f"pretraining from scratch, objective pretrain: about {rule.pretrain:.0e}" if rule.pretrain else ""
    if lr is None:
        detail = f"not set in the plan (training.learning_rate): check yours by hand; usual for {what}: "
        detail += rule.text() + (f" ({scratch})" if scratch else "")
        return Item("nan.learning_rate", "nan", "manual", title, detail + ".", LR_SRC, ticked=ticked)
    warn_above = rule.high * WARN_FACTOR
    fix = None
    if lr <= warn_above:
        status, detail = "ok", f"{lr:g} for {what} (usual: {rule.text()}{'; ' + scratch if scratch else ''})."
    else:
        status = "fail" if lr > 10 * max(warn_above, rule.pretrain) else "warn"
        top = f"the usual {rule.high:.0e}" if rule.low == rule.high else f"the top of the usual {rule.text()}"
        detail = (
            f"{lr:g} is {lr / rule.high:.1f}x {top} for {what}{f' ({scratch})' if scratch else ''}: a "
            "common cause of loss spikes and NaN."
        )
        fix = c.measure(f"learning rate {rule.high:g}", {"training.learning_rate": rule.high})
    return Item("nan.learning_rate", "nan", status, title, detail, LR_SRC, fix)


def data(c: Context) -> Item:
    n, seq = c.batch
    return Item(
        "nan.data",
        "nan",
        "manual",
        "Every batch has targets",
        f"a micro-batch of {n} x {seq} tokens whose labels are all -100 (padding, or a "
        "prompt masked out by completion-only training) gives a mean loss of 0/0 = NaN; so do inf/NaN inputs "
        "and empty sequences: check the data pipeline.",
        "PyTorch CrossEntropyLoss docs: reduction='mean' divides by the number of non-ignored targets",
        ticked=_ticked(c, "nan.data"),
    )


RULES: tuple[Rule, ...] = (loss_scaling, bf16_support, fp16_range, grad_clip, learning_rate, data)
