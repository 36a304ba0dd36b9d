"""The plan's ``[stack]`` table: the training framework and the package versions that change memory, and the
defaults each stack gives the mechanism keys a user did not set (`core.plan.stack.defaults`).

A plan states what it trains; the stack decides how the framework runs it when the plan does not say: whether
gradient checkpointing is reentrant, which dtype LoRA adapters get, whether LoRA dropout is on, which linears a
4-bit base quantizes, which bitsandbytes generation runs. Each row of `core.plan.stack.defaults.STACK_DEFAULTS` is
one default of one (framework, version range), with the framework file it was read from; the first row that
matches a key wins, and
the ``custom`` rows (any framework) give today's behaviour. An explicit key always wins: the plan fills only the
keys its data leaves out (`Plan`'s validator), and remembers which (`Plan.stack_chosen`), so that an export writes
them out as the stack's, never as the user's.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any, ClassVar, Literal, NamedTuple

from pydantic import BaseModel, Field, field_validator, model_validator

from vramplan.core.plan.helpers.field_values import FROZEN_TABLE, caseless_choices, strict_scalars

Framework = Literal[
    "hf-trainer",
    "trl",
    "accelerate",
    "axolotl",
    "llamafactory",
    "torchtune",
    "torchtitan",
    "litgpt",
    "deepspeed",
    "megatron",
    "unsloth",
    "custom",
]
FRAMEWORKS: tuple[str, ...] = Framework.__args__  # type: ignore[attr-defined]
PACKAGES: tuple[str, ...] = (
    "torch",
    "transformers",
    "peft",
    "bitsandbytes",
    "deepspeed",
    "accelerate",
    "trl",
    "torchtune",
    "litgpt",
)
# The frameworks that run models through transformers' PreTrainedModel (its gradient_checkpointing_enable, PEFT)
HF_FAMILY: tuple[str, ...] = ("hf-trainer", "trl", "accelerate", "axolotl", "llamafactory", "unsloth", "custom")

_VERSION = re.compile(r"^\d{1,6}(\.\d{1,6}){0,4}([-+._]?[A-Za-z0-9]{1,32}){0,6}$")
MAX_VERSION_CHARS = 64


def version_tuple(text: str) -> tuple[int, ...]:
    """The release numbers of a version string: ``"0.43.1"`` -> (0, 43, 1), ``"2.5.0+cu124"`` -> (2, 5, 0),
    ``"1.0.0rc1"`` -> (1, 0, 0) (a pre-release counts as its release: the code it runs is that release's)."""
    out = []
    for part in text.split("."):
        digits = re.match(r"\d+", part)
        if digits is None:
            break
        out.append(int(digits.group()))
        if digits.end() != len(part):
            break
    return tuple(out)


class StackConfig(BaseModel):
    """``[stack]``: what runs the training (``framework``) and the versions of the packages that change memory.
    Unset versions: the newest behaviour the table knows."""

    model_config = FROZEN_TABLE
    TABLE: ClassVar[str] = "stack"

    framework: Framework = Field(
        default="custom", description="the training framework whose defaults fill the keys a plan leaves unset"
    )
    torch: str | None = Field(default=None, description="PyTorch version (checkpointing, allocator)")
    transformers: str | None = Field(default=None, description="transformers version (gradient checkpointing)")
    peft: str | None = Field(default=None, description="PEFT version (adapter dtype)")
    bitsandbytes: str | None = Field(default=None, description="bitsandbytes version (what a 4-bit linear keeps)")
    deepspeed: str | None = Field(default=None, description="DeepSpeed version")
    accelerate: str | None = Field(default=None, description="accelerate version")
    trl: str | None = Field(default=None, description="TRL version")
    torchtune: str | None = Field(default=None, description="torchtune version (which linears QLoRA quantizes)")
    litgpt: str | None = Field(default=None, description="litgpt version (FSDP1 or FSDP2 for LoRA)")

    @model_validator(mode="before")
    @classmethod
    def _caseless(cls, data: Any) -> Any:
        return caseless_choices(cls, strict_scalars(cls, data, cls.TABLE))

    @field_validator(*PACKAGES, mode="before")
    @classmethod
    def _version(cls, v: Any) -> Any:
        if v is None:
            return v
        if isinstance(v, int | float) and not isinstance(v, bool) and re.fullmatch(r"\d{1,6}(\.\d{1,6})?", str(v)):
            v = str(v)  # TOML's transformers = 4.38 is a float
        if not isinstance(v, str):
            raise ValueError('a version is a string such as "4.38.2"')  # pydantic_error adds "(got ...)"
        v = v.strip()
        if len(v) > MAX_VERSION_CHARS or not _VERSION.match(v):
            raise ValueError('not a version (a release such as "0.43.1" or "2.5.0+cu124")')
        return v


class StackDefault(NamedTuple):
    """One default of one stack: ``key`` takes ``value`` under ``frameworks`` when ``package``'s version lies in
    [``since``, ``before``) (unset bounds: open; an unset version matches only a row open towards the newest),
    and when each of ``when``'s plan keys has one of its values. ``source`` is the framework file it was read
    from."""

    key: str
    value: Any
    frameworks: tuple[str, ...]
    source: str
    package: str = ""
    since: tuple[int, ...] = ()
    before: tuple[int, ...] = ()
    when: tuple[tuple[str, tuple[Any, ...]], ...] = ()

    def matches(self, stack: StackConfig, value_of: Callable[[str], Any]) -> bool:
        if stack.framework not in self.frameworks:
            return False
        if any(value_of(key) not in values for key, values in self.when):
            return False
        if not self.package:
            return True
        stated = getattr(stack, self.package)
        if stated is None:
            return not self.before  # unset: the newest release
        v = version_tuple(stated)
        return (not self.since or v >= self.since) and (not self.before or v < self.before)
