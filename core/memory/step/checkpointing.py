"""What activation checkpointing keeps outside the saved tensors: non-reentrant checkpointing's closures hold
their inputs' RoPE tables, position ids and masks (`core.memory.activations.block.closure_bytes`) for every
micro-batch in flight until the last block's backward releases them."""

from __future__ import annotations

from collections.abc import Iterator

from vramplan.core.memory.step.moments import (
    BACKWARD_END,
    BACKWARD_START,
    BLOCK_MOMENTS,
    FORWARD_END,
    Contribution,
    Mechanism,
    StepView,
)
from vramplan.core.memory.terms import Term, headline

CHECKPOINT_BUFFERS = headline(
    "checkpoint_buffers",
    "RoPE cos/sin, position ids, eager mask kept by checkpoint closures",
    source="torch/utils/checkpoint.py non-reentrant checkpoint keeps its inputs' closures alive",
)


def live(v: StepView) -> Iterator[Contribution]:
    m, closure = v.stage.in_flight, v.a.closure
    for moment in (FORWARD_END, BACKWARD_START, *BLOCK_MOMENTS):
        yield moment, "checkpoint_buffers", m * closure
    yield BACKWARD_END, "checkpoint_buffers", (m - 1) * closure  # released with the last block's backward


def headlines(v: StepView) -> tuple[Term, ...]:
    return (CHECKPOINT_BUFFERS,)


CHECKPOINTING = Mechanism("checkpoint closures", live, headlines)
