"""How soon Ctrl-C ends `vramplan measure` (the bound tests/measure/test_measure_stop.py used to hold: it checks what
the stop leaves, this how fast): the run stops after the phase that is running, so SIGINT to the process's end is
about one step, the partial report and the interpreter's exit. The floor, measured in the same process: the time
between two of its progress lines ("step k/"), one measured step as its parent sees it. Each round runs the test's
tiny LLaMA on the CPU, sends SIGINT after the third step and times the process's end.

Usage: python -m bench.bench_measure_stop [ROUNDS]   (default 5; the measure extra installed: torch, transformers)
"""

from __future__ import annotations

import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

TINY = {  # tests/measure/test_measure_stop.py's model
    "model_type": "llama",
    "vocab_size": 512,
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 4,
    "tie_word_embeddings": False,
}
ARGV = ["measure", "--hf-config", "config.json", "--gpus", "1", "--device", "cpu", "--steps", "100000"]
ARGV += ["--set", "training.seq_len=32", "--set", "training.micro_batch_size=1"]


def one_round(folder: Path) -> tuple[float, float, float]:
    """Seconds from SIGINT to the handler's line ("stopping after this phase"), from SIGINT to the process's end,
    and between its second and third step lines."""
    code = f"import sys; from vramplan.__main__ import main; sys.exit(main({ARGV!r}))"
    env = {**os.environ, "VRAMPLAN_DETECT": "0", "OMP_NUM_THREADS": "1"}
    proc = subprocess.Popen(
        [sys.executable, "-c", code], cwd=folder, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env
    )
    assert proc.stderr is not None
    steps: dict[int, float] = {}
    for line in proc.stderr:
        for k in (2, 3):
            if f"step {k}/" in line:
                steps[k] = time.perf_counter()
        if 3 in steps:
            break
    else:
        raise SystemExit(f"vramplan measure ended before its third step (exit {proc.wait()})")
    t0 = time.perf_counter()
    proc.send_signal(signal.SIGINT)
    heard_s = 0.0
    for line in proc.stderr:
        if "stopping after this phase" in line:
            heard_s = time.perf_counter() - t0
            break
    proc.communicate()
    stop_s = time.perf_counter() - t0
    if proc.returncode != 130:
        raise SystemExit(f"vramplan measure did not stop on SIGINT (exit {proc.returncode})")
    return heard_s, stop_s, steps[3] - steps[2]


def main() -> int:
    rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 5
    with tempfile.TemporaryDirectory() as tmp:
        (Path(tmp) / "config.json").write_text(json.dumps(TINY))
        runs = [one_round(Path(tmp)) for _ in range(rounds)]
    heard, stop, floor = (statistics.median(r[i] for r in runs) for i in range(3))
    print(f"vramplan measure, SIGINT after step 3 (tiny LLaMA, CPU), median of {rounds} runs")
    print(f"  SIGINT to its 'stopping' line  {heard * 1000:8.1f} ms  {heard / floor:5.1f}x a step")
    print(f"  SIGINT to the process's end    {stop * 1000:8.0f} ms  {stop / floor:5.1f}x a step")
    print(f"  one step (the floor)           {floor * 1000:8.0f} ms")
    return 0


if __name__ == "__main__":
    sys.exit(main())
