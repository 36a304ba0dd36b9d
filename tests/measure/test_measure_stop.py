"""Ctrl-C stops `vramplan measure` cleanly: SIGINT after a progress line ends the process within 5 s with exit
code 130 and a partial report on stdout, and nothing is written. Skipped without the measure extra."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytest.importorskip("torch", reason="the measure extra (torch) is not installed")
pytest.importorskip("transformers", reason="the measure extra (transformers) is not installed")

TINY = {
    "model_type": "llama",
    "vocab_size": 512,
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 4,
    "tie_word_embeddings": False,
}


def test_sigint_half_way_stops_within_5_s_with_a_partial_report_and_writes_nothing(tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text(json.dumps(TINY))
    before = sorted(p.name for p in tmp_path.iterdir())
    argv = ["measure", "--hf-config", "config.json", "--gpus", "1", "--device", "cpu", "--steps", "100000"]
    argv += ["--set", "training.seq_len=32", "--set", "training.micro_batch_size=1"]
    code = f"import sys; from vramplan.__main__ import main; sys.exit(main({argv!r}))"
    proc = subprocess.Popen(
        [sys.executable, "-c", code],
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "VRAMPLAN_DETECT": "0", "OMP_NUM_THREADS": "1"},  # a tiny model: threads only contend
    )
    assert proc.stderr is not None
    seen = []
    deadline = time.monotonic() + 120  # importing torch and transformers on a loaded 2-core machine
    for line in proc.stderr:
        seen.append(line)
        if "step 3/" in line or time.monotonic() > deadline:  # warm-up and two measured steps are done
            break
    assert any("step 3/" in line for line in seen), "".join(seen)[-2000:]
    t0 = time.monotonic()
    proc.send_signal(signal.SIGINT)
    try:
        out, err = proc.communicate(timeout=5)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.communicate()
        pytest.fail("vramplan measure did not stop within 5 s of SIGINT")
    elapsed = time.monotonic() - t0
    assert proc.returncode == 130, err[-2000:]
    assert elapsed < 5
    assert "PARTIAL" in out and "parameters" in out and "max allocated" in out, out
    assert "of 100001 steps" in out
    assert sorted(p.name for p in tmp_path.iterdir()) == before  # nothing written
