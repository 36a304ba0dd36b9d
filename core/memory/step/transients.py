"""The step's transients: the gradient of the hidden states flowing between blocks and each block's backward
working set (its recomputation included, `core.memory.activations.stage`), a 4-bit lm_head's dequantized weight at
the loss, and the optimizer step's own temporaries (`core.memory.states.optimizer.step_temporaries`)."""

from __future__ import annotations

from collections.abc import Iterator

from vramplan.core.memory.step.moments import (
    BACKWARD_END,
    BACKWARD_START,
    FIRST_BLOCK,
    FORWARD_END,
    LAST_BLOCK,
    OPTIMIZER_STEP,
    Contribution,
    Mechanism,
    StepView,
)
from vramplan.core.memory.terms import Term, headline
from vramplan.core.plan.schema.precision import resolve_impl


def live(v: StepView) -> Iterator[Contribution]:
    a = v.a
    yield FORWARD_END, "temporaries", a.head_work
    yield BACKWARD_START, "temporaries", a.head_work if v.stage.last else a.dy
    yield LAST_BLOCK, "temporaries", a.dy + a.layer_work
    yield FIRST_BLOCK, "temporaries", a.dy + a.layer_work
    yield BACKWARD_END, "temporaries", a.dy
    yield OPTIMIZER_STEP, "temporaries", v.st.optimizer_temp


def headlines(v: StepView) -> tuple[Term, ...]:
    impl = resolve_impl(v.sc.optimizer_impl, v.sc.reg)
    return (
        headline(
            "temporaries",
            "largest transient: optimizer step ({}), a block's backward, or the embedding gradient",
            impl,
            source="torch/optim/adam.py _multi_tensor_adam (AdamW subclasses Adam): _foreach_sqrt(exp_avg_sq) is one "
            "model-sized temporary; DeepSpeed flattens the fp32 gradient partition for the step",
        ),
    )


TRANSIENTS = Mechanism("transients", live, headlines)
