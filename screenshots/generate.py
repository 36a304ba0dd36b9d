"""Regenerate the README's screenshots from the real app: ``python screenshots/generate.py``.

Each shot starts `VramplanApp` headless at a terminal size (`App.run_test(size=...)`), presses keys like a user and
saves an SVG (`App.save_screenshot`) next to this script.
"""

from __future__ import annotations

import asyncio
import os
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from core.plan import default_plan  # noqa: E402
from tui.app import VramplanApp  # noqa: E402

HERE = Path(__file__).resolve().parent


@dataclass(frozen=True)
class Shot:
    name: str
    size: tuple[int, int]
    keys: tuple[str, ...] = ()
    changes: dict[str, Any] = field(default_factory=dict)
    no_color: bool = False


SHOTS = (
    Shot("planner-80x24", (80, 24)),
    Shot("planner-160x48", (160, 48)),
    Shot(
        "over-capacity-80x24",
        (80, 24),
        keys=("4",),
        changes={"strategy.zero_stage": 0, "strategy.gradient_checkpointing": "none"},
    ),
    Shot("explain-overhead-80x24", (80, 24), keys=("e", "end")),
    Shot(
        "offload-lora-72b-160x48",
        (160, 48),
        changes={
            "model.preset": "qwen2.5-72b",
            "training.method": "qlora",
            "training.lora_targets": ["all-linear"],
            "strategy.offload_optimizer": "cpu",
        },
    ),
    Shot("help-80x24", (80, 24), keys=("question_mark",)),
    Shot(
        "strategies-time-80x24",
        (80, 24),
        keys=("4",),
        changes={"training.tokens": 10_000_000_000, "hardware.price_per_gpu_hour": 2.0},
    ),
    Shot(
        "fit-advisor-80x24",
        (80, 24),
        keys=("5",),
        changes={"strategy.zero_stage": 0, "strategy.gradient_checkpointing": "none"},
    ),
    Shot(
        "checklist-160x48",
        (160, 48),
        keys=("5", "down", "down", "down"),
        changes={
            "model.preset": "llama-2-13b",
            "training.precision": "fp16-autocast",
            "training.loss_scaling": "none",
            "training.learning_rate": 1e-3,
            "training.micro_batch_size": 4,
        },
    ),
    Shot("narrow-40x12", (40, 12)),
    Shot("no-color-80x24", (80, 24), no_color=True),
)


async def take(shot: Shot) -> Path:
    if shot.no_color:
        os.environ["NO_COLOR"] = "1"
    try:
        plan = default_plan().with_changes(shot.changes) if shot.changes else None
        app = VramplanApp(plan=plan)
    finally:
        os.environ.pop("NO_COLOR", None)
    async with app.run_test(size=shot.size) as pilot:
        await pilot.pause()
        for key in shot.keys:
            await pilot.press(key)
            await app.workers.wait_for_complete()  # the fit advisor runs in a worker
        await pilot.wait_for_scheduled_animations()
        await pilot.pause(0.2)  # work that follows a burst of changes (tui/widgets/settle.py)
        name = f"{shot.name}.svg"
        app.save_screenshot(name, str(HERE))
    return HERE / name


async def main() -> None:
    for shot in SHOTS:
        print(await take(shot))


if __name__ == "__main__":
    asyncio.run(main())
