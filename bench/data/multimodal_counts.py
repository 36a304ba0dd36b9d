#!/usr/bin/env python3
"""Write tests/data/multimodal_counts.json: what transformers builds from each multimodal config.json of
tests/data/multimodal (Gemma 3, Llama 4).

Usage, from the repository root (an environment with torch and transformers):  python -m bench.data.multimodal_counts
[-o tests/data/multimodal_counts.json]

For each config (its ``_source`` key dropped): ``AutoConfig.for_model(**config)`` and
``AutoModelForImageTextToText.from_config`` on ``torch.device("meta")`` (no memory, no weights); parameters counted
once each (tied weights once), split into the text model (``language_model`` and ``lm_head``), the vision tower
(``vision_tower`` / ``vision_model``) and the projector (``multi_modal_projector``).
"""

from __future__ import annotations

import argparse
import json
import sys
import warnings
from pathlib import Path
from typing import Any

import torch
import transformers

CONFIGS = Path("tests/data/multimodal")
OUT = Path("tests/data/multimodal_counts.json")


def part_of(name: str) -> str:
    """The part of a multimodal model a parameter belongs to, from its name."""
    if "multi_modal_projector" in name:
        return "projector"
    if "vision_tower" in name or "vision_model" in name:
        return "vision_tower"
    return "text"


def count(config: dict[str, Any]) -> dict[str, Any]:
    cfg = transformers.AutoConfig.for_model(**{k: v for k, v in config.items() if k != "_source"})
    with torch.device("meta"), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model = transformers.AutoModelForImageTextToText.from_config(cfg)
    parts = {"text": 0, "vision_tower": 0, "projector": 0}
    for name, p in model.named_parameters():  # deduplicated: a tied lm_head is listed once
        parts[part_of(name)] += p.numel()
    return {"class": type(model).__name__, "total": sum(parts.values()), **parts}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0] if __doc__ else None)
    ap.add_argument("-o", "--out", type=Path, default=OUT)
    args = ap.parse_args(argv)
    out: dict[str, Any] = {
        "_doc": "python -m bench.data.multimodal_counts: AutoModelForImageTextToText.from_config on the meta device",
        "versions": {"torch": torch.__version__, "transformers": transformers.__version__},
    }
    for path in sorted(CONFIGS.glob("*.json")):
        out[path.stem] = {
            "hf_repo": json.loads(path.read_text())["_source"]["hf_repo"],
            **count(json.loads(path.read_text())),
        }
        print(path.stem, out[path.stem], file=sys.stderr)
    args.out.write_text(json.dumps(out, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
