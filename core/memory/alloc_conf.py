"""The CUDA caching allocator's settings: ``PYTORCH_CUDA_ALLOC_CONF`` read as
c10/cuda/CUDAAllocatorConfig.cpp of pytorch/pytorch at commit 001074d25084 parses it (``max_split_size_mb``,
``roundup_power2_divisions``, ``garbage_collection_threshold``, ``expandable_segments``), checked as it checks them;
`core.memory.caching_allocator` places blocks by them."""

from __future__ import annotations

from typing import NamedTuple

from vramplan.core.memory.allocator import LARGE_BUFFER
from vramplan.core.plan.helpers.units import GiB, MiB

UNLIMITED = (1 << 64) - 1  # size_t max: max_split_size's default ("unlimited")
POWER2_INTERVALS = 16  # kRoundUpPowerOfTwoIntervals: 1 MiB .. 64 GiB


class AllocatorConfig(NamedTuple):
    """The allocator's settings (PYTORCH_CUDA_ALLOC_CONF, `parse_alloc_conf`) and the device it runs on.

    ``capacity_bytes``: what ``cudaMalloc`` can still give when the step starts (the GPU's memory less the CUDA
    context and whatever else holds it); None: unlimited (no out-of-memory errors). ``memory_fraction``:
    ``torch.cuda.set_per_process_memory_fraction`` of ``device_bytes`` (needed by
    ``garbage_collection_threshold``, as in the allocator)."""

    max_split_size: int = UNLIMITED
    max_non_split_rounding: int = LARGE_BUFFER
    expandable_segments: bool = False
    garbage_collection_threshold: float = 0.0
    roundup_power2_divisions: tuple[int, ...] = (0,) * POWER2_INTERVALS
    capacity_bytes: int | None = None
    memory_fraction: float | None = None
    device_bytes: int = 80 * GiB

    @property
    def allowed_bytes(self) -> int | None:
        """``allowed_memory_maximum``: what a set memory fraction allows, else None."""
        return None if self.memory_fraction is None else int(self.memory_fraction * self.device_bytes)

    @property
    def gc_enabled(self) -> bool:
        return self.memory_fraction is not None and self.garbage_collection_threshold > 0.0


def parse_alloc_conf(text: str, **device: int | float | None) -> AllocatorConfig:
    """A PYTORCH_CUDA_ALLOC_CONF value (``max_split_size_mb:128,expandable_segments:True``, ...) as a config; the
    device keywords (``capacity_bytes``, ``memory_fraction``, ``device_bytes``) pass through. Raises ValueError
    on a key or value the allocator would refuse (``CUDAAllocatorConfig::parseArgs``)."""
    out: dict[str, object] = {k: v for k, v in device.items() if v is not None}
    for item in _conf_items(text):
        key, _, value = item.partition(":")
        key, value = key.strip(), value.strip()
        if key == "max_split_size_mb":
            mb = _number(key, value)
            if mb < LARGE_BUFFER // MiB:
                raise ValueError(f"max_split_size_mb: must be at least {LARGE_BUFFER // MiB}, got {value}")
            out["max_split_size"] = int(mb) * MiB
        elif key == "max_non_split_rounding_mb":
            mb = _number(key, value)
            if mb < LARGE_BUFFER // MiB:
                raise ValueError(f"max_non_split_rounding_mb: must be at least {LARGE_BUFFER // MiB}, got {value}")
            out["max_non_split_rounding"] = int(mb) * MiB
        elif key == "expandable_segments":
            if value not in ("True", "False"):
                raise ValueError(f"expandable_segments: expected True or False, got {value!r}")
            out["expandable_segments"] = value == "True"
        elif key == "garbage_collection_threshold":
            threshold = _number(key, value)
            if not 0.0 < threshold < 1.0:
                raise ValueError(f"garbage_collection_threshold: must be between 0 and 1, got {value}")
            out["garbage_collection_threshold"] = threshold
        elif key == "roundup_power2_divisions":
            out["roundup_power2_divisions"] = _divisions(value)
        elif key in ("backend", "release_lock_on_cudamalloc", "pinned_use_cuda_host_register"):
            continue  # no effect on what is reserved
        else:
            raise ValueError(f"unknown allocator setting {key!r}")
    return AllocatorConfig(**out)  # type: ignore[arg-type]


def _conf_items(text: str) -> list[str]:
    """The settings of a PYTORCH_CUDA_ALLOC_CONF value, split on commas outside ``[...]``."""
    items, depth, start = [], 0, 0
    for i, ch in enumerate(text):
        depth += ch == "["
        depth -= ch == "]"
        if ch == "," and depth == 0:
            items.append(text[start:i])
            start = i + 1
    items.append(text[start:])
    return [s for s in (x.strip() for x in items) if s]


def _number(key: str, value: str) -> float:
    try:
        return float(value)
    except ValueError:
        raise ValueError(f"{key}: expected a number, got {value!r}") from None


def _divisions(value: str) -> tuple[int, ...]:
    """``roundup_power2_divisions:4`` (every interval) or ``[256:1,512:2,1024:4,>:8]``, as
    ``AcceleratorAllocatorConfig::parseRoundUpPower2Divisions`` (c10/core/AllocatorConfig.cpp) reads it: each key a
    power of two in MiB names the interval of index log2(key); the first key also fills every interval below it,
    ``>`` every interval after the last key's; intervals no key names stay 0 (no rounding)."""
    if not value.startswith("["):
        n = int(_number("roundup_power2_divisions", value))
        _check_power2(n)
        return (n,) * POWER2_INTERVALS
    out = [0] * POWER2_INTERVALS
    last, first = 0, True
    for part in value.strip("[]").split(","):
        key, _, val = part.partition(":")
        n = int(_number("roundup_power2_divisions", val))
        _check_power2(n)
        if key.strip() == ">":
            out[last + 1 :] = [n] * (POWER2_INTERVALS - last - 1)
            continue
        mb = int(_number("roundup_power2_divisions", key))
        if mb <= 0 or mb & (mb - 1):
            raise ValueError(f"roundup_power2_divisions: the interval {key.strip()} is not a power of two")
        index = min(mb.bit_length() - 1, POWER2_INTERVALS - 1)
        if first:
            out[:index] = [n] * index
            first = False
        out[index] = n
        last = index
    return tuple(out)


def _check_power2(n: int) -> None:
    if n < 0 or (n and n & (n - 1)):
        raise ValueError(f"roundup_power2_divisions: {n} is not a power of two")
