"""Ctrl-C stops `vramplan measure` cleanly: SIGINT after a progress line ends the process with exit code 130 and a
partial report on stdout, and nothing is written. Skipped without the measure extra."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
from pathlib import Path
from typing import IO

import pytest

from tests.waiting import HANG_S

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


def test_sigint_half_way_stops_with_a_partial_report_and_writes_nothing(tmp_path: Path) -> None:
    """Each wait is for a line the process prints or for its end (a watchdog kills it only if it hangs: `HANG_S`).
    Asked for 100,000 steps, it ends only because SIGINT stopped it; how soon after the signal is
    bench/bench_measure_stop.py's."""
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
    watchdog = threading.Timer(HANG_S, proc.kill)
    watchdog.start()
    try:
        seen = lines_until(proc.stderr, "step 3/")  # warm-up and two measured steps are done
        assert seen[-1:] and "step 3/" in seen[-1], "".join(seen)[-2000:]
        proc.send_signal(signal.SIGINT)
        heard = lines_until(proc.stderr, "stopping after this phase")  # the handler took the signal
        assert heard[-1:] and "stopping after this phase" in heard[-1], "".join(seen + heard)[-2000:]
        out, err = proc.communicate()
    finally:
        watchdog.cancel()
        proc.kill()  # a no-op once it has ended
    assert proc.returncode == 130, err[-2000:]
    assert "PARTIAL" in out and "parameters" in out and "max allocated" in out, out
    assert "of 100001 steps" in out
    assert sorted(p.name for p in tmp_path.iterdir()) == before  # nothing written


def lines_until(stream: IO[str], text: str) -> list[str]:
    """The lines read from ``stream`` up to the first that holds ``text``, or up to its end."""
    seen = []
    for line in stream:
        seen.append(line)
        if text in line:
            break
    return seen
