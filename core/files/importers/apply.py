"""Laying an imported config over a plan: `import_config` reads the file (`reading`), tells its format (`detect`),
reads its settings (one module per format) and applies them over a base plan, the command line's
``--model``/``--hf-config``/``--gpu``/``--gpus``/``--nodes``/``--set`` winning over the file. DeepSpeed's batch sizes
resolve against the resulting data-parallel size: ``train_batch_size = micro x accumulation x data-parallel``."""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from vramplan.core.files.importers import accelerate, axolotl, deepspeed, llamafactory, torchtune, trl, verl
from vramplan.core.files.importers.config_format import FORMATS, FRAMEWORK_OF, detect_format, is_config_path
from vramplan.core.files.importers.reading import read_data
from vramplan.core.files.importers.record import Auto, Batch, Ignored, ImportLog, Read, shown
from vramplan.core.files.planio import PlanFile, load_plan_file
from vramplan.core.plan.describe import sharding_label
from vramplan.core.plan.helpers.errors import PlanError
from vramplan.core.plan.keys import apply_overrides, parse_set, set_value
from vramplan.core.plan.schema.plan import Plan
from vramplan.core.plan.schema.precision import REGIMES, resolve_impl

READERS: dict[str, Callable[[dict[str, Any], ImportLog], None]] = {
    "deepspeed": deepspeed.read,
    "accelerate": accelerate.read,
    "torchtune": torchtune.read,
    "axolotl": axolotl.read,
    "llamafactory": llamafactory.read,
    "trl": trl.read,
    "verl": verl.read,
}


@dataclass(frozen=True)
class Imported:
    """A plan with a config's settings in it, and the record of what was read, ignored and overridden."""

    path: str
    format: str
    plan: Plan
    reads: tuple[Read, ...]
    ignored: tuple[Ignored, ...]
    overridden: tuple[str, ...] = ()  # plan keys the file sets that the command line set instead

    @property
    def name(self) -> str:
        return Path(self.path).name

    def lines(self) -> list[str]:
        """``read from FILE: key=value -> plan.key=value (how)``, one per setting; then each ignored setting."""
        out = []
        for r in self.reads:
            value = "" if r.value is None else f"={shown(r.value)}"
            if not r.plan_key:
                out.append(f"read from {self.name}: {r.key}{value} ({r.note})")
                continue
            plan_value = "unset" if r.plan_value is None else set_value(r.plan_value)
            note = f" ({r.note})" if r.note else ""
            out.append(f"read from {self.name}: {r.key}{value} -> {r.plan_key}={plan_value}{note}")
        out += [f"{self.name}: command line wins over the file for {key}" for key in self.overridden]
        out += [f"{self.name}: ignored {i.key}={shown(i.value, 40)}: {i.why}" for i in self.ignored]
        return out

    def summary(self) -> str:
        """One line: what was read and ignored, how the plan shards and who launches it (said as assumed where
        the file is silent), what each ``"auto"`` became, how many defaults were assumed (`lines` has each)."""
        parts = [f"imported {self.name} ({FORMATS[self.format]}): {len(self.reads)} settings read, "
                 f"{len(self.ignored)} ignored", self._sharding()]  # fmt: skip
        autos = [r for r in self.reads if r.value == "auto"]
        laid = [f"{r.key} -> {r.plan_key}={'unset' if r.plan_value is None else set_value(r.plan_value)}"
                for r in autos if r.plan_key and r.sets]  # fmt: skip
        rest = len(autos) - len(laid)
        if autos:
            said = ", ".join(
                laid + ([f"{rest} {'other is' if rest == 1 else 'others are'} the plan's"] if rest else [])
            )
            parts.append(f'"auto" read as {self._filler()} fills it: {said}')
        defaults = sum(1 for r in self.reads if r.key.startswith("("))
        if defaults:
            parts.append(f"{defaults} default{'s' if defaults > 1 else ''} assumed where the file is silent")
        if self.overridden:
            parts.append(f"the command line wins for {', '.join(self.overridden)}")
        return "; ".join(parts)

    def _filler(self) -> str:
        """Who fills the file's ``"auto"`` values: the HF Trainer (DeepSpeed JSON, and the trainers that hand their
        settings to TrainingArguments)."""
        return "the HF Trainer" if self.format in ("deepspeed", "axolotl", "llamafactory", "trl") else "accelerate"

    def _sharding(self) -> str:
        """``sharding ZeRO-2``, ``no sharding: DDP (assumed: ...)``, ``the plan's ZeRO-3 (the file does not say)``."""
        s = self.plan.strategy
        # in the words of the file's framework: FSDP's for a file with an FSDP section, else DeepSpeed's ZeRO-N
        fsdp = any("fsdp" in r.key for r in self.reads)
        how = sharding_label(self.plan) if fsdp else f"ZeRO-{s.zero_stage}"
        what = f"sharding {how}" if s.zero_stage else "no sharding"
        read = next((r for r in self.reads if r.plan_key == "strategy.zero_stage"), None)
        if read is None:
            return f"{what}: the plan's (the file does not say)"
        return f"{what} (assumed: {read.note})" if read.key.startswith("(") and read.note else what

    def to_json(self) -> dict[str, Any]:
        return {
            "file": self.path,
            "format": self.format,
            "summary": self.summary(),
            "read": [r.to_json() for r in self.reads],
            "ignored": [i.to_json() for i in self.ignored],
            "overridden": list(self.overridden),
        }


def read_config(path: str | Path) -> ImportLog:
    """A config file's settings as plan changes, with what was ignored (nothing is applied yet)."""
    data, _ = read_data(path)
    fmt = detect_format(data, str(path))
    log = ImportLog(fmt)
    how = "the framework that runs it: its defaults fill the keys the plan leaves unset"
    framework = FRAMEWORK_OF[fmt]
    if fmt == "deepspeed" and _has_auto(data):
        # "auto" values are filled in by transformers' Trainer (integrations/deepspeed.py trainer_config_process)
        framework, how = "hf-trainer", how + ' (its "auto" values are the HF Trainer\'s)'
    log.set(f"({FORMATS[fmt]})", None, "stack.framework", framework, how)
    READERS[fmt](data, log)
    if fmt == "deepspeed":  # an "auto" the plan does not take: say what the HF Trainer fills it with
        log.ignored = [
            replace(i, why=f"{deepspeed.auto_why(i.key)}; {i.why}") if i.value == "auto" and "HF Trainer" not in i.why
            else i for i in log.ignored
        ]  # fmt: skip
    named = [r.key for r in log.reads] + [i.key for i in log.ignored] + list(log.batch.keys.values())
    parts = [part for n in named + [a.key for a in log.autos] for part in named_parts(n)]
    for key, value in data.items():  # the net under every reader: no top-level key goes unmentioned
        if not any(n == key or n.startswith((f"{key}.", f"{key}[", f"(no {key}")) for n in parts):
            log.ignore(str(key), value, "its value gave no plan setting (empty, off or not understood)")
    return log


def named_parts(name: str) -> list[str]:
    """The file keys one record names: ``use_vllm + vllm_mode`` names both, ``bf16/fp16`` both; a default (``(no
    fp16/bf16 enabled)``) names none but itself."""
    return [name] if name.startswith("(") else re.split(r" \+ |/", name)


def _has_auto(data: Any, depth: int = 0) -> bool:
    """Whether a DeepSpeed config holds an ``"auto"`` value (nested tables searched a few levels down)."""
    if isinstance(data, dict) and depth < 4:
        return any(v == "auto" or _has_auto(v, depth + 1) for v in data.values())
    return False


def _user_keys(model: str | None, gpu: str | None, sets: Sequence[str], hf_config: str | None) -> set[str]:
    keys = {parse_set(item)[0] for item in sets}
    if model or hf_config:
        keys |= {"model.preset", "model.hf_config"}
    if gpu:
        keys.add("hardware.gpu")
    return keys


def import_config(
    path: str | Path,
    base: Plan,
    model: str | None = None,
    gpu: str | None = None,
    sets: Sequence[str] = (),
    hf_config: str | None = None,
) -> Imported:
    """``base`` with the config's settings, under the command line's overrides (which win). Every error is one
    `PlanError` naming the file."""
    where = str(path)
    log = read_config(path)
    user = _user_keys(model, gpu, sets, hf_config)
    model_given = bool(model or hf_config)
    file_changes = {
        k: v for k, v in log.changes.items() if k not in user and not (model_given and k.startswith("model."))
    }
    overridden = tuple(k for k in log.changes if k not in file_changes)
    plan = apply_overrides(base, model, gpu, tuple(sets), hf_config)
    try:
        plan = plan.with_changes(file_changes)
        shard_reads: list[Read] = []
        if log.shard_by_gpus and "strategy.zero_stage" not in user:
            n = plan.hardware.total_gpus
            how = "torchtune's distributed recipes shard with FSDP2 fully_shard" if n > 1 else "a single-device recipe"
            zero = 3 if n > 1 else 0
            plan = plan.with_changes({"strategy.zero_stage": zero})
            shard_reads.append(Read("(no fsdp_* keys)", None, "strategy.zero_stage", zero, f"{n} GPU(s): {how}"))
        batch_changes, batch_reads = resolve_batch(log.batch, plan, user, deepspeed_defaults=log.format == "deepspeed")
        batch_reads = shard_reads + batch_reads
        plan = plan.with_changes(batch_changes)
        plan, auto_reads, auto_overridden = resolve_autos(log.autos, plan, user)
    except PlanError as exc:
        raise exc.at(where) from None
    plan = apply_overrides(plan, None, None, tuple(sets))
    overridden += auto_overridden
    reads = [r for r in log.reads if not r.plan_key or r.plan_key in file_changes] + batch_reads + auto_reads
    plan, reads = _auto_impl(plan, reads, user)
    return Imported(where, log.format, plan, tuple(reads), tuple(log.ignored), overridden)


def resolve_autos(autos: Sequence[Auto], plan: Plan, user: set[str]) -> tuple[Plan, list[Read], tuple[str, ...]]:
    """The file's ``"auto"`` values against ``plan`` (which stands for the arguments of the tool that fills them):
    those that set a plan key are laid on it unless the command line set that key; each is a `Read` saying what it
    became."""
    changes: dict[str, Any] = {}
    reads: list[Read] = []
    overridden: list[str] = []
    for a in autos:
        value, how = a.resolve(plan)
        if a.sets and a.plan_key in user:
            overridden.append(a.plan_key)
            continue
        if a.sets:
            changes[a.plan_key] = value
        reads.append(Read(a.key, "auto", a.plan_key, value, how, sets=a.sets))
    return (plan.with_changes(changes) if changes else plan), reads, tuple(overridden)


def _auto_impl(plan: Plan, reads: list[Read], user: set[str]) -> tuple[Plan, list[Read]]:
    """An optimizer implementation read from the file that the plan's ``auto`` picks anyway becomes ``auto`` (an
    exported config carries ``auto`` as what it resolved to)."""
    key = "training.optimizer_impl"
    impl = plan.training.optimizer_impl
    if key in user or impl == "auto" or resolve_impl("auto", REGIMES[plan.training.regime]) != impl:
        return plan, reads
    out = [
        replace(r, plan_value="auto", note=f"{r.note}; auto picks {impl}".lstrip("; ")) if r.plan_key == key else r
        for r in reads
    ]
    return plan.with_changes({key: "auto"}), out


def resolve_batch(b: Batch, plan: Plan, user: set[str], deepspeed_defaults: bool) -> tuple[dict[str, Any], list[Read]]:
    """Micro-batch and accumulation from the sizes a file gives, against ``plan``'s data-parallel size; the sizes
    the command line set (``user``) are taken as given. A total that does not divide is a `PlanError`."""
    dp = plan.data_parallel
    t = plan.training
    micro_user = "training.micro_batch_size" in user
    accum_user = "training.grad_accum_steps" in user
    m = t.micro_batch_size if micro_user else b.micro
    g = t.grad_accum_steps if accum_user else b.accum
    reads: list[Read] = []
    changes: dict[str, Any] = {}

    def take(slot: str, plan_key: str, value: int, note: str = "") -> None:
        if plan_key in user:
            return
        changes[plan_key] = value
        key = b.keys.get(slot, f"(no {slot})")
        stated = {"micro": b.micro, "accum": b.accum, "total": b.total}[slot]
        reads.append(Read(key, stated, plan_key, value, note))

    gpus = f"{dp} data-parallel GPU{'s' if dp > 1 else ''}"
    if b.total is not None:
        total = b.total
        if m is not None and g is not None:
            if m * g * dp != total and not (micro_user or accum_user):  # the command line's sizes are as meant
                raise PlanError(
                    f"train_batch_size {total} != micro-batch {m} x accumulation {g} x {gpus} (DeepSpeed refuses "
                    "it); give the GPU count the config was written for (--gpus N, --nodes N)",
                    b.keys["total"],
                )
        elif g is not None:
            m = _exact(total, g * dp, f"train_batch_size {total} is not a multiple of accumulation {g} x {gpus}")
            take("total", "training.micro_batch_size", m, f"{total} / (accumulation {g} x {gpus})")
        elif m is not None:
            g = _exact(total, m * dp, f"train_batch_size {total} is not a multiple of micro-batch {m} x {gpus}")
            take("total", "training.grad_accum_steps", g, f"{total} / (micro-batch {m} x {gpus})")
        else:
            m = _exact(total, dp, f"train_batch_size {total} is not a multiple of {gpus}")
            take("total", "training.micro_batch_size", m, f"{total} / {gpus}, accumulation 1")
            take("total", "training.grad_accum_steps", 1, "DeepSpeed's default with only a total")
    elif m is not None and g is None and deepspeed_defaults and "accum" not in b.auto:
        take("accum", "training.grad_accum_steps", 1, "DeepSpeed's default")
    if b.micro is not None:
        take("micro", "training.micro_batch_size", b.micro)
    if b.accum is not None:
        take("accum", "training.grad_accum_steps", b.accum)
    return changes, reads


def _exact(total: int, by: int, message: str) -> int:
    if total % by or total < by:
        raise PlanError(message + "; give the GPU count the config was written for (--gpus N, --nodes N)")
    return total // by


def open_file(path: str | Path, base: Plan | None = None) -> PlanFile:
    """What the app's open prompt opens: a plan file, or, over ``base``, a training config (`is_config_path`); the
    import's summary and what it ignored become the notices."""
    if base is None or not is_config_path(path):
        return load_plan_file(path)
    imported = import_config(path, base)
    notices = [f"✔ {imported.summary()}"]
    if imported.ignored:
        notices.append("ignored: " + ", ".join(i.key for i in imported.ignored))
    return PlanFile(str(path), imported.plan, None, None, tuple(notices))
