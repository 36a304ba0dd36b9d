"""The estimate's output is pinned: `vramplan estimate --json` of 1,200 seeded random valid plans has the digest
stored in tests/data/behaviour_digest.json (bench/data/behaviour_digest.py). A restructuring must leave it as it
is; a change that moves figures rewrites the file with `--reason`, which the file keeps."""

from __future__ import annotations

import json
import subprocess
import sys

from bench.data.behaviour_digest import PLANS, TARGET, digests, documents
from tests.conftest import ROOT


def test_estimate_json_of_the_random_plans_is_unchanged() -> None:
    stored = json.loads(TARGET.read_text())
    assert stored["plans"] == PLANS >= 1000 and stored["reasons"]
    now = digests(documents())
    moved = [i for i, (a, b) in enumerate(zip(stored["memory"], now["memory"], strict=True)) if a != b]
    timed = [i for i, (a, b) in enumerate(zip(stored["time"], now["time"], strict=True)) if a != b]
    assert (moved[:10], timed[:10]) == ([], []), (
        f"memory moved in {len(moved)} plans, time in {len(timed)}: run `python -m bench.data.behaviour_digest "
        "--reason ...` if the change is meant to move them"
    )
    assert now["digest"] == stored["digest"]


def test_the_digest_reads_what_the_command_prints(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """The documents the digest is made of are byte for byte what `vramplan estimate --json` writes."""
    changes, text = next(d for d in documents(n=20) if d[0]["training.method"] != "full")  # a list key too
    args = [sys.executable, "-m", "vramplan", "estimate", "--json"]
    for key, value in changes.items():
        args += ["--set", f"{key}={json.dumps(list(value) if isinstance(value, tuple) else value)}"]
    env = {"VRAMPLAN_CONFIG_DIR": str(tmp_path), "VRAMPLAN_DETECT": "0", "PATH": "/usr/bin:/bin"}
    r = subprocess.run(args, capture_output=True, text=True, cwd=ROOT, env=env, check=False)
    assert r.returncode == 0, r.stderr
    assert r.stdout == text + "\n"
