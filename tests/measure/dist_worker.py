"""One rank of the 2-process gloo test of `vramplan.measure.distributed` (run by torchrun from
test_measure_distributed.py): a tiny model with transformers-style blocks, sharded as the plan says, one step,
every rank's figures gathered on rank 0 and printed as JSON."""

from __future__ import annotations

import json
import sys

import torch

from vramplan.core.plan.schema.plan import plan_from_dict
from vramplan.measure.distributed import close_worker, gather_figures, init_worker, launch_for, rank, wrap_model
from vramplan.measure.records import RankFigures


class Block(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.up = torch.nn.Linear(32, 64)
        self.down = torch.nn.Linear(64, 32)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.down(torch.relu(self.up(x)))


class Tiny(torch.nn.Module):
    _no_split_modules = ("Block",)

    def __init__(self) -> None:
        super().__init__()
        self.blocks = torch.nn.ModuleList(Block() for _ in range(3))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for b in self.blocks:
            x = b(x)
        return x


def run(zero_stage: int) -> dict[str, object]:
    plan = plan_from_dict(
        {"model": {"preset": "llama-3.2-1b"}, "hardware": {"gpus_per_node": 2}, "strategy": {"zero_stage": zero_stage}}
    )
    launch = launch_for(plan, "cpu", 2)
    torch.manual_seed(0)
    model = wrap_model(Tiny(), launch, plan)
    opt = torch.optim.AdamW(model.parameters())
    model(torch.randn(4, 32)).sum().backward()
    opt.step()
    local = sum((p.to_local() if hasattr(p, "to_local") else p).numel() for p in model.parameters())
    fig = RankFigures(rank(), local * 4, None, None, None, None, None, None, None, None)
    figures = gather_figures(fig)
    return {"wrap": launch.wrap, "type": type(model).__name__, "params": [f.params_bytes for f in figures]}


def main(stages: list[int]) -> None:
    init_worker("cpu")
    out = {str(z): run(z) for z in stages}
    if rank() == 0:
        print(json.dumps(out))
    close_worker()


if __name__ == "__main__":
    main([int(a) for a in sys.argv[1:]])
