"""Hostile and odd input (issue 15), shared by the core, CLI and app tests: broken plan files and config.json files
as a tester wrote them, and the strict JSON parsing every ``--json`` output must pass."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

HUGE_INT = "9" * 5000  # more digits than Python converts (tomllib and json raise a plain ValueError)
BIG_INT = "9" * 301  # beyond float range: int -> float raised OverflowError


def strict_json(text: str) -> Any:
    """``json.loads`` that refuses ``NaN``, ``Infinity`` and ``-Infinity`` (Python writes them; JSON has none), as
    ``python -m json.tool`` in strict mode would. One object, nothing after it."""

    def refuse(name: str) -> Any:
        raise ValueError(f"not JSON: {name}")

    return json.loads(text, parse_constant=refuse)


# Dotted keys of 100,000 parts (200 KB): tomllib's time grows with the square of a key's parts (8-45 s for the table
# header; the key of a key/value pair ran out of memory), so the bound is checked before it parses (issue 39)
DOTTED = ".".join(["a"] * 100_000)
DOTTED_KEY_FILES: dict[str, str] = {
    "dotted_table.toml": f"[{DOTTED}]\n",
    "dotted_key.toml": f'[model]\npreset = "llama-7b"\n{DOTTED} = 1\n',
    "dotted_array_table.toml": f"[[{DOTTED}]]\n",
    "dotted_inline.toml": f'[model]\npreset = "llama-7b"\n[training]\nx = {{{DOTTED} = 1}}\n',
}

# 16 broken plan files: the name, and the text (bytes where the file is not UTF-8)
PLAN_FILES: dict[str, str | bytes] = {
    "not_toml.toml": "[model\npreset = 'llama-7b'\n",
    "huge_int.toml": f'[model]\npreset = "llama-7b"\nhidden_size = {HUGE_INT}\n',
    "beyond_float.toml": f'[model]\npreset = "llama-7b"\n[training]\ntokens = {BIG_INT}\n',
    "overhead_beyond_float.toml": f'[model]\npreset = "llama-7b"\n[overhead]\nzero_bucket_elements = {BIG_INT}\n',
    "deep_tables.toml": "[model]\npreset = 'llama-7b'\n[training]\nx = " + "{a = " * 400 + "1" + "}" * 400 + "\n",
    "deep_lists.toml": "[model]\npreset = 'llama-7b'\n[training]\nlora_targets = " + "[" * 400 + "]" * 400 + "\n",
    "model_type_list.toml": "[model]\nmodel_type = []\nvocab_size = 8\nhidden_size = 8\nintermediate_size = 8\n"
    "num_hidden_layers = 1\nnum_attention_heads = 1\n",
    "meta_huge_version.toml": f'[meta]\nvramplan_version = {HUGE_INT}\n[model]\npreset = "llama-7b"\n',
    "bool_batch.toml": '[model]\npreset = "llama-7b"\n[training]\nmicro_batch_size = true\n',
    "inf_price.toml": '[model]\npreset = "llama-7b"\n[hardware]\nprice_per_gpu_hour = inf\n',
    "datetime_title.toml": '[meta]\ntitle = 1979-05-27T07:32:00Z\n[model]\npreset = "llama-7b"\n',
    "latin1.toml": b"[model]\npreset = 'llama-7b' # caf\xe9\n",
    **DOTTED_KEY_FILES,
}


def write_plan_files(directory: Path) -> dict[str, Path]:
    """The broken plan files, plus a FIFO and a directory named like plan files."""
    paths = {}
    for name, text in PLAN_FILES.items():
        p = directory / name
        p.write_bytes(text if isinstance(text, bytes) else text.encode())
        paths[name] = p
    fifo = directory / "fifo.toml"
    os.mkfifo(fifo)
    paths["fifo.toml"] = fifo
    folder = directory / "folder.toml"
    folder.mkdir()
    paths["folder.toml"] = folder
    return paths


SIZES = {"vocab_size": 64, "hidden_size": 16, "intermediate_size": 32, "num_hidden_layers": 2}


def write_config_files(directory: Path) -> dict[str, Path]:
    """Broken config.json files: deep JSON, a list where a name goes, NaN, a huge integer, a symlink loop, a
    FIFO and a dangling link inside a checkpoint directory."""
    texts = {
        "deep.json": '{"model_type": "llama", "x": ' + "[" * 5000 + "]" * 5000 + "}",
        "list_type.json": json.dumps({"model_type": ["llama"], **SIZES, "num_attention_heads": 2}),
        "list_act.json": json.dumps({"model_type": "gpt_neox", **SIZES, "num_attention_heads": 2, "hidden_act": []}),
        "nan.json": '{"model_type": "llama", "vocab_size": NaN, "hidden_size": 16}',
        "huge.json": '{"model_type": "llama", "vocab_size": ' + HUGE_INT + "}",
        "beyond_float.json": json.dumps({"model_type": "llama", **SIZES, "num_attention_heads": 2})[:-1]
        + f', "num_key_value_heads": {BIG_INT}'
        + "}",
    }
    paths = {}
    for name, text in texts.items():
        p = directory / name
        p.write_text(text)
        paths[name] = p
    loop_a, loop_b = directory / "loop_a.json", directory / "loop_b.json"
    loop_a.symlink_to(loop_b.name)
    loop_b.symlink_to(loop_a.name)
    paths["loop_a.json"] = loop_a
    fifo = directory / "fifo.json"
    os.mkfifo(fifo)
    paths["fifo.json"] = fifo
    checkpoint = directory / "checkpoint"
    checkpoint.mkdir()
    (checkpoint / "config.json").symlink_to("missing.json")
    paths["checkpoint"] = checkpoint
    return paths


# Training configs (`--from FILE`, the open dialog) with numbers Python will not convert (issue 39: a ValueError
# traceback in every command, a crash of the app's ctrl+o, and exit 1 from `measure --from`, its "out of memory")
TRAINING_CONFIGS: dict[str, str] = {
    "ds_huge_int.json": '{"train_micro_batch_size_per_gpu": ' + HUGE_INT + ', "zero_optimization": {"stage": 2}}',
    "ds_nan.json": '{"train_micro_batch_size_per_gpu": NaN, "zero_optimization": {"stage": 2}}',
    "trl_huge_int.yaml": f"model_name_or_path: meta-llama/Llama-3.1-8B\nbeta: 0.1\nnum_generations: {HUGE_INT}\n",
    "axolotl_huge_int.yaml": f"base_model: meta-llama/Llama-3.1-8B\nmicro_batch_size: {HUGE_INT}\n",
}


def write_training_configs(directory: Path) -> dict[str, Path]:
    paths = {}
    for name, text in TRAINING_CONFIGS.items():
        p = directory / name
        p.write_text(text)
        paths[name] = p
    return paths
