"""Regenerate the screenshots of README.md and docs/ from the real app: ``python screenshots/generate.py``.

Each shot starts `VramplanApp` headless at a terminal size (`App.run_test(size=...)`), presses keys like a user (or
runs a command of the command table) and saves an SVG (`App.save_screenshot`) next to this script. The config.json
shot reads a Falcon-7B config.json written to a temporary directory (tiiuae/falcon-7b's keys).
"""

from __future__ import annotations

import asyncio
import json
import os
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from vramplan.core.plan.schema.plan import default_plan
from vramplan.tui.app import VramplanApp

ROOT = Path(__file__).resolve().parent.parent

HERE = Path(__file__).resolve().parent


@dataclass(frozen=True)
class Shot:
    name: str
    size: tuple[int, int]
    keys: tuple[str, ...] = ()
    changes: dict[str, Any] = field(default_factory=dict)
    no_color: bool = False
    actions: tuple[str, ...] = ()  # planner actions (the command table's), run before the keys


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
    Shot("export-80x24", (80, 24), actions=("export",)),
    Shot(
        "export-deepspeed-80x24",
        (80, 24),
        changes={"strategy.pipeline_parallel": 2, "strategy.zero_stage": 1},
        actions=("export('deepspeed')",),
    ),
    Shot(  # a mixture of experts: active vs total parameters, the experts in the legend, EP and the experts path
        "moe-mixtral-160x48",
        (160, 48),
        changes={
            "model.preset": "mixtral-8x7b",
            "hardware.gpu": "h200",
            "strategy.expert_parallel": 8,
            "strategy.gradient_checkpointing": "none",
        },
        keys=("4",) + ("tab",) * 10,  # Strategies, down to how the experts run
    ),
    Shot("gpu-guide-80x24", (80, 24), keys=("g",), changes={"training.tokens": 10_000_000_000}),
    Shot("pinned-80x24", (80, 24), keys=("P", "z", "c")),
    Shot("compare-80x24", (80, 24), keys=("P", "z", "c", "d")),
    Shot(  # the Model pane on Falcon-7B's config.json, scrolled to Falcon's structure keys
        "config-json-80x24",
        (80, 24),
        changes={"model.hf_config": "$FALCON"},
        actions=("load_config",),
        keys=("tab",) * 15,  # from the path to the last row, Falcon's activation
    ),
)

FALCON_7B = {  # tiiuae/falcon-7b config.json, the keys transformers reads for the architecture
    "_name_or_path": "tiiuae/falcon-7b",
    "model_type": "falcon",
    "alibi": False,
    "bias": False,
    "hidden_size": 4544,
    "multi_query": True,
    "new_decoder_architecture": False,
    "num_attention_heads": 71,
    "num_hidden_layers": 32,
    "parallel_attn": True,
    "vocab_size": 65024,
}


WORK = Path(tempfile.gettempdir()) / "vramplan-screenshots"  # the current directory of the shots (export paths)


def falcon_config() -> str:
    directory = WORK / "falcon-7b"
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "config.json").write_text(json.dumps(FALCON_7B, indent=2))
    return str(directory)


async def take(shot: Shot) -> Path:
    if shot.no_color:
        os.environ["NO_COLOR"] = "1"
    try:
        changes = {k: falcon_config() if v == "$FALCON" else v for k, v in shot.changes.items()}
        plan = default_plan().with_changes(changes) if changes else None
        app = VramplanApp(plan=plan)
    finally:
        os.environ.pop("NO_COLOR", None)
    async with app.run_test(size=shot.size) as pilot:
        await pilot.pause()
        for action in shot.actions:
            await app.planner.run_action(action)
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
    WORK.mkdir(exist_ok=True)
    os.chdir(WORK)
    for shot in SHOTS:
        print(await take(shot))


if __name__ == "__main__":
    asyncio.run(main())
