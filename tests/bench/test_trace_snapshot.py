"""The prepared GPU script bench/measure/trace_snapshot.py in the modes that need no GPU: a snapshot's event trace
(as torch.cuda.memory._snapshot() lays it out) replayed through the allocator model against its real reserved bytes,
from a saved pickle; and the CPU run of a tiny plan (vramplan measure's CPU method against vramplan trace on CPU
kernels)."""

from __future__ import annotations

import json
import pickle
from pathlib import Path

import pytest

from bench.measure import trace_snapshot
from vramplan.core.memory.alloc_conf import AllocatorConfig
from vramplan.core.plan.helpers.units import MiB


def snapshot() -> dict[str, object]:
    """What PyTorch's allocator records for 3 MiB then 5 MiB, the 5 MiB freed, then 30 MiB: a 20 MiB segment for the
    first (split for the second), a 30 MiB one for the third."""
    s = 0x7F00_0000_0000
    trace = [
        {"action": "segment_alloc", "addr": s, "size": 20 * MiB, "stream": 0},
        {"action": "alloc", "addr": s, "size": 3 * MiB, "stream": 0},
        {"action": "alloc", "addr": s + 3 * MiB, "size": 5 * MiB, "stream": 0},
        {"action": "free_requested", "addr": s + 3 * MiB, "size": 5 * MiB, "stream": 0},
        {"action": "free_completed", "addr": s + 3 * MiB, "size": 5 * MiB, "stream": 0},
        {"action": "segment_alloc", "addr": s + 40 * MiB, "size": 30 * MiB, "stream": 0},
        {"action": "alloc", "addr": s + 40 * MiB, "size": 30 * MiB, "stream": 0},
    ]
    return {"segments": [], "device_traces": [trace]}


def test_empty_cache_in_a_snapshot_is_replayed_as_one() -> None:
    # the 30 MiB block freed, then torch.cuda.empty_cache(): its segment goes (the 20 MiB one holds the 3 MiB
    # block, split: kept), as the model's release_cached_blocks does
    s = 0x7F00_0000_0000
    snap = snapshot()
    trace = snap["device_traces"][0]  # type: ignore[index]
    trace += [
        {"action": "free_requested", "addr": s + 40 * MiB, "size": 30 * MiB, "stream": 0},
        {"action": "free_completed", "addr": s + 40 * MiB, "size": 30 * MiB, "stream": 0},
        {"action": "segment_free", "addr": s + 40 * MiB, "size": 30 * MiB, "stream": 0},
    ]
    events, real = trace_snapshot.snapshot_events(snap)
    assert [e[0] for e in events] == [1, 1, 0, 1, 0, 2] and real[-2:] == [50 * MiB, 20 * MiB]
    result = trace_snapshot.compare_snapshot(snap, AllocatorConfig())
    assert result["events_where_reserved_agree"] == 1.0 and result["largest_reserved_difference_bytes"] == 0


def test_a_snapshot_trace_is_replayed_and_compared(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    events, real = trace_snapshot.snapshot_events(snapshot())
    assert [e[0] for e in events] == [1, 1, 0, 1] and real == [20 * MiB, 20 * MiB, 20 * MiB, 50 * MiB]
    result = trace_snapshot.compare_snapshot(snapshot(), AllocatorConfig())
    assert result["events_where_reserved_agree"] == 1.0 and result["peak_error"] == 0.0
    path = tmp_path / "snap.pickle"
    path.write_bytes(pickle.dumps(snapshot()))
    assert trace_snapshot.main(["--snapshot", str(path)]) == 0
    assert json.loads(capsys.readouterr().out)["real_peak_reserved_bytes"] == 50 * MiB


def test_the_cpu_mode_runs_a_tiny_plan(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("torch", reason="the measure extra (torch) is not installed")
    pytest.importorskip("transformers", reason="the measure extra (transformers) is not installed")
    tiny = {"model_type": "llama", "vocab_size": 512, "hidden_size": 64, "intermediate_size": 128}
    tiny |= {"num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2, "tie_word_embeddings": False}
    (tmp_path / "config.json").write_text(json.dumps(tiny))
    args = ["--hf-config", str(tmp_path / "config.json"), "--gpus", "1", "--set", "training.seq_len=64"]
    monkeypatch.setitem(trace_snapshot.PLANS, "tiny", {"tiny-llama": args})
    out = tmp_path / "r.json"
    assert trace_snapshot.main(["--device", "cpu", "--plans", "tiny", "-o", str(out)]) == 0
    row = json.loads(out.read_text())["tiny-llama"]
    assert abs(row["trace_allocated_error"]) < 0.01  # the fake step and the real one, on the CPU
    assert "model_on_real_events" not in row  # no CUDA snapshot on the CPU
