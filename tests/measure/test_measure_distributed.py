"""The multi-GPU path of `vramplan measure` (issue 29, point 3): which launch a plan gets (pure), the torchrun
command, and a real 2-process gloo run of FSDP2 and DDP on the CPU with a tiny model."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from vramplan.core.plan.schema.plan import plan_from_dict
from vramplan.measure.distributed import WORKER_ENV, is_worker, launch_for, relaunch_command

HERE = Path(__file__).resolve().parent


def plan(**strategy: object) -> object:
    hw = {"gpus_per_node": strategy.pop("gpus", 8), "nodes": strategy.pop("nodes", 1)}
    return plan_from_dict({"model": {"preset": "llama-3.2-1b"}, "hardware": hw, "strategy": strategy})


def test_one_gpu_is_no_relaunch() -> None:
    launch = launch_for(plan(gpus=1), "cuda", 8)
    assert (launch.nproc, launch.wrap, launch.caveats) == (1, "none", ())


@pytest.mark.parametrize(("zero", "wrap", "reshard"), [(3, "fsdp2", True), (2, "fsdp2", False), (0, "ddp", None)])
def test_zero_stage_picks_the_wrapper(zero: int, wrap: str, reshard: bool | None) -> None:
    launch = launch_for(plan(zero_stage=zero), "cuda", 8)
    assert (launch.nproc, launch.wrap, launch.reshard_after_forward) == (8, wrap, reshard)
    assert launch.relaunches
    assert bool(launch.caveats) == (zero == 2)  # ZeRO-2 says FSDP2 shards the parameters between steps


def test_zero_1_is_ddp_and_says_its_optimizer_states_are_whole() -> None:
    launch = launch_for(plan(zero_stage=1), "cuda", 8)
    assert launch.wrap == "ddp" and any("whole optimizer states" in c for c in launch.caveats)


def test_more_nodes_measure_this_one_and_say_so() -> None:
    launch = launch_for(plan(zero_stage=3, nodes=4), "cuda", 8)
    assert launch.nproc == 8 and launch.wrap == "fsdp2"
    assert launch.caveats == (
        "4 nodes: only this one is measured, 8 rank(s); sharded states are 1/8 here, 1/32 in the plan",
    )


def test_fewer_gpus_here_than_per_node() -> None:
    launch = launch_for(plan(zero_stage=3), "cuda", 2)
    assert launch.nproc == 2 and "8 GPUs per node in the plan, 2 here" in launch.caveats[0]
    alone = launch_for(plan(zero_stage=3), "cuda", 1)
    assert alone.nproc == 1 and alone.wrap == "none"


def test_tensor_or_pipeline_parallel_is_one_process_and_one_line() -> None:
    launch = launch_for(plan(tensor_parallel=2, zero_stage=1), "cuda", 8)
    assert launch.nproc == 1 and len(launch.caveats) == 1 and "not reproduced" in launch.caveats[0]


def test_offload_is_said() -> None:
    launch = launch_for(plan(zero_stage=3, offload_optimizer="cpu"), "cuda", 8)
    assert launch.wrap == "fsdp2" and any("offload" in c for c in launch.caveats)


def test_relaunch_command_reruns_the_same_arguments_under_torchrun() -> None:
    cmd = relaunch_command(["measure", "plan.toml", "--json"], 4)
    assert cmd[:6] == [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node=4", "-m"]
    assert cmd[6:] == ["vramplan", "measure", "plan.toml", "--json"]


def test_is_worker_reads_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(WORKER_ENV, raising=False)
    assert not is_worker()
    monkeypatch.setenv(WORKER_ENV, "1")
    monkeypatch.setenv("WORLD_SIZE", "2")
    assert is_worker()


def test_two_gloo_ranks_shard_and_gather() -> None:
    """2 CPU processes (gloo): FSDP2 (ZeRO-3) gives each rank half of every parameter, DDP (ZeRO-0) all of them;
    rank 0 gathers both ranks' figures. Tiny: 3 blocks of 32x64 + 64 and 64x32 + 32 = 4,192 fp32 parameters
    each, 12,576 in all = 50,304 B."""
    pytest.importorskip("torch")
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node=2"]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    r = subprocess.run(
        [*cmd, str(HERE / "dist_worker.py"), "3", "0"], capture_output=True, text=True, env=env, timeout=120
    )
    assert r.returncode == 0, r.stderr[-3000:]
    out = json.loads(r.stdout.strip().splitlines()[-1])
    total = 3 * (32 * 64 + 64 + 64 * 32 + 32) * 4
    assert total == 50_304
    assert out["3"] == {"wrap": "fsdp2", "type": "FSDPTiny", "params": [total // 2, total // 2]}
    assert out["0"] == {"wrap": "ddp", "type": "DistributedDataParallel", "params": [total, total]}


TINY_PLAN = """[model]
model_type = "llama"
vocab_size = 512
hidden_size = 64
intermediate_size = 128
num_hidden_layers = 2
num_attention_heads = 4
num_key_value_heads = 2
[hardware]
gpus_per_node = 2
[training]
micro_batch_size = 1
seq_len = 32
precision = "fp32"
[strategy]
zero_stage = 3
gradient_checkpointing = "none"
attention = "eager"
"""


@pytest.mark.skipif(not os.environ.get("VRAMPLAN_SLOW_TESTS"), reason="about 45 s on 2 cores: VRAMPLAN_SLOW_TESTS=1")
def test_vramplan_measure_relaunches_itself_in_two_gloo_ranks(tmp_path: Path) -> None:
    """The whole path: ``vramplan measure`` of a 2-GPU ZeRO-3 plan on the CPU with 2 gloo ranks allowed relaunches
    under torchrun, shards with FSDP2 and rank 0 reports both ranks: each holds half the parameters, exactly the
    estimate's ZeRO-3 share."""
    pytest.importorskip("transformers")
    plan = tmp_path / "tiny.toml"
    plan.write_text(TINY_PLAN)
    env = {**os.environ, "VRAMPLAN_MEASURE_CPU_RANKS": "2", "OMP_NUM_THREADS": "1"}
    cmd = [sys.executable, "-m", "vramplan", "measure", str(plan), "--device", "cpu", "--steps", "1", "--json"]
    r = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    assert "2 ranks (fsdp2): relaunching under torchrun" in r.stderr
    data = json.loads(r.stdout)
    assert [k["rank"] for k in data["ranks"]] == [0, 1]
    rows = {row["name"]: row for row in data["comparison"]}
    assert data["ranks"][0]["params_bytes"] == data["ranks"][1]["params_bytes"] == rows["parameters"]["predicted_bytes"]
