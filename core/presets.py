"""Model and hardware presets: TOML data validated into frozen models, looked up by id.

Built-in files live in the ``presets`` package (``presets/models/*.toml``, ``presets/hardware/*.toml``). Each file
carries a ``source``: where its figures come from.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, PositiveInt, ValidationError

from core.errors import PlanError
from core.tomlio import read_toml
from core.units import MiB


class GpuSpec(BaseModel):
    """One accelerator. Throughputs are dense (no 2:4 sparsity); link bandwidths are per direction."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    id: str
    name: str
    vendor: str = "nvidia"
    memory_mib: PositiveInt = Field(description="usable device memory, as nvidia-smi reports memory.total")
    bf16: bool = Field(description="native BF16 tensor math")
    bf16_tflops: float = Field(ge=0, description="dense BF16 tensor TFLOP/s with FP32 accumulate")
    fp16_tflops: float = Field(ge=0, description="dense FP16 tensor TFLOP/s with FP32 accumulate")
    fp32_tflops: float = Field(gt=0, description="FP32 (non-tensor) TFLOP/s")
    tf32_tflops: float | None = Field(default=None, ge=0)
    memory_bandwidth_gbs: float = Field(gt=0)
    gpu_link: str
    gpu_link_gbs: float = Field(gt=0, description="GPU-GPU bandwidth inside a node, GB/s per direction")
    host_link: str
    host_link_gbs: float = Field(gt=0, description="GPU-host bandwidth, GB/s per direction")
    internode_gbs: float = Field(gt=0, description="network bandwidth per GPU between nodes, GB/s per direction")
    flash_attention: bool = Field(description="FlashAttention-2 kernels available (Ampere and newer)")
    match: tuple[str, ...] = ()
    price_per_gpu_hour: float | None = Field(default=None, ge=0)
    source: str
    note: str = ""

    @property
    def memory_bytes(self) -> int:
        return self.memory_mib * MiB

    def tflops(self, dtype: str) -> float:
        """Dense peak for the compute dtype of a regime: bf16, fp16 or fp32."""
        return {"bf16": self.bf16_tflops, "fp16": self.fp16_tflops, "fp32": self.fp32_tflops}[dtype]


class ModelPreset(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    id: str
    name: str
    order: int = 1000
    params: PositiveInt | None = Field(default=None, description="published total parameter count")
    source: str
    config: dict[str, Any]


@dataclass
class Registry:
    models: dict[str, ModelPreset] = field(default_factory=dict)
    gpus: dict[str, GpuSpec] = field(default_factory=dict)
    origin: dict[str, str] = field(default_factory=dict)  # "models/<id>" -> "built-in" | path of a user file
    problems: list[str] = field(default_factory=list)  # broken user files: "path: problem"

    def sorted_models(self) -> list[ModelPreset]:
        return sorted(self.models.values(), key=lambda m: (m.order, m.id))

    def sorted_gpus(self) -> list[GpuSpec]:
        return sorted(self.gpus.values(), key=lambda g: (g.memory_mib, g.id))


def _first_error(exc: ValidationError) -> str:
    err = exc.errors()[0]
    loc = ".".join(str(p) for p in err["loc"])
    return f"{loc}: {err['msg']}" if loc else err["msg"]


def _load_dir(reg: Registry, directory: Path, kind: str, strict: bool, label: str | None = None) -> None:
    if not directory.is_dir():
        return
    schema = ModelPreset if kind == "models" else GpuSpec
    target: dict[str, Any] = reg.models if kind == "models" else reg.gpus
    for path in sorted(directory.glob("*.toml")):
        try:
            data = read_toml(path)
            data.setdefault("id", path.stem)
            item = schema.model_validate(data)
        except PlanError as exc:
            if strict:
                raise
            reg.problems.append(exc.line())
            continue
        except ValidationError as exc:
            if strict:
                raise PlanError(_first_error(exc), str(path)) from None
            reg.problems.append(f"{path}: {_first_error(exc)}")
            continue
        target[item.id] = item
        reg.origin[f"{kind}/{item.id}"] = label or str(path)


def load_registry(extra_dirs: Iterable[Path] = ()) -> Registry:
    """Built-in presets, then each extra directory (its ``models/`` and ``hardware/``) overriding by id."""
    from presets import DATA_DIR

    reg = Registry()
    _load_dir(reg, DATA_DIR / "models", "models", strict=True, label="built-in")
    _load_dir(reg, DATA_DIR / "hardware", "hardware", strict=True, label="built-in")
    for d in extra_dirs:
        _load_dir(reg, d / "models", "models", strict=False)
        _load_dir(reg, d / "hardware", "hardware", strict=False)
    return reg


@cache
def registry() -> Registry:
    return load_registry()


def suggest(name: str, choices: Iterable[str]) -> str:
    close = difflib.get_close_matches(name, list(choices), n=3, cutoff=0.5)
    return f"; did you mean {', '.join(close)}?" if close else ""


def model_preset(preset_id: str, where: str = "model.preset") -> ModelPreset:
    reg = registry()
    try:
        return reg.models[preset_id]
    except KeyError:
        hint = suggest(preset_id, reg.models) or " (vramplan presets models lists them)"
        raise PlanError(f"unknown model preset {preset_id!r}{hint}", where) from None


def gpu(gpu_id: str, where: str = "hardware.gpu") -> GpuSpec:
    reg = registry()
    try:
        return reg.gpus[gpu_id]
    except KeyError:
        hint = suggest(gpu_id, reg.gpus) or " (vramplan presets hardware lists them)"
        raise PlanError(f"unknown GPU preset {gpu_id!r}{hint}", where) from None
