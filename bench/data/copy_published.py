#!/usr/bin/env python3
"""Copy ../shared/published (the published GPU measurements) into tests/data/published for the test suite.

Usage, from the repository root:  python -m bench.data.copy_published [SOURCE]   (SOURCE: ../shared/published)

Copies `cases.json`, `configs/` and `user_presets/` unchanged (the source's `check.py` and README stay there: the
suite runs the same comparison in process, bench/data/published_rows.py) and writes a README.md naming the copy
date and this command. Re-run it when the shared directory gains cases, then update the counts that
tests/core/memory/test_published_gpu.py asserts and regenerate the accuracy file (python -m bench.data.accuracy).
"""

from __future__ import annotations

import datetime
import json
import shutil
import sys
import textwrap
from pathlib import Path

DEST = Path("tests/data/published")
COPIED = ("cases.json", "configs", "user_presets")
COMMAND = "python -m bench.data.copy_published ../shared/published"

README = """# Published GPU measurements (copy of ../shared/published)

Copied unchanged from `../shared/published/` on {date} by `{command}` (run from the repository root): `cases.json`
({n} cases), `configs/` and `user_presets/`. Used by tests/core/memory/test_published_gpu.py, which runs in process what
that directory's `check.py` runs through the CLI (bench/data/published_rows.py builds each case's plan), and by
`python -m bench.data.accuracy`, which writes the estimate's expected error (core/memory/accuracy.json) from these
cases.

`cases.json` holds training-step memory and throughput figures that other people measured on real GPUs and
published ({sources}). Each case has its source (`source`), the published figure and unit, the configuration as
published (`config`, `notes`), what vramplan 0.1.0 could not express (`not_expressible`), the closest plan as
`vramplan` arguments (`vramplan_args`, written with the keys of vramplan 0.1.0) and the plan keys that express the
techniques and the stack the run used (`future_sets`). Cases with a `released` field were kept out of the shared
file as an unseen check until 2026-12; they have no `predicted_*` fields.

`configs/` holds the config.json files those arguments name; `user_presets/hardware/` holds three GPUs the presets
lack (RTX A6000, RTX A5000, and the 96 GB H100 of Meta's Grand Teton nodes that torchtitan used) as user presets
(`VRAMPLAN_CONFIG_DIR`).

How a figure is compared depends on how it was measured: `peak_allocated` is what
`torch.cuda.max_memory_allocated()` reports (-> `memory.per_gpu.allocated`), `peak_reserved` is
`torch.cuda.max_memory_reserved()` (-> `reserved`), `nvidia_smi` is the whole process (-> `total`). Throughput
rows compare tokens/s/GPU; bound rows (`published_bound` over/under) compare the fit verdict. Read each source's
caveats (`notes`) before trusting a number: a published figure is evidence about a mechanism, not a number to fit.
"""

SOURCES = {
    "torchtune": "torchtune's README and tutorials",
    "litgpt": "litgpt's resource tables",
    "torchtitan": "torchtitan's performance docs",
    "aai": "Answer.AI's fsdp_qlora benchmark tables",
    "peft": "PEFT's README and accelerate guides",
    "fms": "IBM fms-fsdp's throughput table",
    "unsloth": "Unsloth's 'Hugging Face + FA2' maximum-context table",
    "llamafactory": "LLaMA-Factory's context-length table",
    "qlora": "the QLoRA paper's 65B-on-48GB claim",
    "deepspeed": "DeepSpeed ZeRO-Offload's 10B-on-one-V100 claim",
}


def copy(src: Path, dest: Path = DEST, date: str | None = None) -> int:
    """Copy the published cases from ``src`` into ``dest``; returns the number of cases."""
    cases = json.loads((src / "cases.json").read_text())
    dest.mkdir(parents=True, exist_ok=True)
    for name in COPIED:
        target = dest / name
        if target.is_dir():
            shutil.rmtree(target)
        if (src / name).is_dir():
            shutil.copytree(src / name, target)
        else:
            shutil.copyfile(src / name, target)
    counts = {k: sum(str(c["id"]).startswith(k) for c in cases) for k in SOURCES}
    sources = ", ".join(f"{v} ({counts[k]})" for k, v in SOURCES.items() if counts[k])
    text = README.format(date=date or datetime.date.today().isoformat(), command=COMMAND, n=len(cases), sources=sources)
    title, *paragraphs = text.split("\n\n")
    wrapped = [textwrap.fill(" ".join(p.split()), 116, break_on_hyphens=False) for p in paragraphs]
    (dest / "README.md").write_text("\n\n".join([title, *wrapped]) + "\n")
    return len(cases)


def main(argv: list[str]) -> int:
    src = Path(argv[0] if argv else "../shared/published")
    if not (src / "cases.json").is_file():
        print(f"copy_published: no cases.json in {src}", file=sys.stderr)
        return 2
    n = copy(src)
    print(f"copied {n} cases from {src} to {DEST}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
