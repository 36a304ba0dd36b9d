"""The loss's vocabulary-sized tensors through the step (`core.memory.activations.loss` computes them): at the
loss, the logits and their fp32 upcast beside the saved log-softmax; at the start of backward the loss's
gradients; with torchtune's compiled chunked loss, each chunk's partial lm_head gradient."""

from __future__ import annotations

from collections.abc import Iterator

from vramplan.core.memory.step.moments import BACKWARD_START, FORWARD_END, Contribution, Mechanism, StepView
from vramplan.core.memory.terms import Term, headline


def live(v: StepView) -> Iterator[Contribution]:
    a, lay = v.a, v.lay
    yield FORWARD_END, "logits", a.logsm + a.logits_fwd
    yield BACKWARD_START, "logits", a.logsm + a.loss_grads
    if v.stage.last and lay.loss_chunks > 1 and v.ctx.compiled:
        # compiled chunked loss: each chunk's lm_head backward makes a partial [V, h] weight gradient; up to three
        # are alive while autograd's InputBuffer sums them (measured on the CPU, tests/data/chunked_ce.json)
        yield BACKWARD_START, "temporaries", 2 * v.st.head_grad


def headlines(v: StepView) -> tuple[Term, ...]:
    lay, arch, tp = v.lay, v.ctx.arch, v.lay.tp
    if lay.fused_ce_set:
        return (
            headline(
                "logits",
                "fused cross-entropy: logits exist only a chunk of tokens at a time",
                source="Liger fused_linear_cross_entropy / Cut Cross-Entropy (Wijmans et al. 2025)",
            ),
        )
    if lay.loss_parallel:
        return (
            headline(
                "logits",
                "4 x 4 B x b*s*V / {} (fp32 log-softmax + loss_parallel's 3 backward temporaries), V={:,}",
                tp,
                arch.V,
                source="torch/distributed/tensor/parallel/loss.py _nll_loss_and_log_softmax_backward (torchtitan with "
                "TP): zeros_like(x), exp(x), their sum and its product with the gradient beside the saved log-softmax",
            ),
        )
    shard = f" / {tp} (vocab-parallel)" if tp > 1 else ""
    return (
        headline(
            "logits",
            "3 x 4 B x b*s*V{} (fp32 log-softmax + 2 gradients), V={:,}",
            shard,
            arch.V,
            source="transformers ForCausalLMLoss upcasts logits to fp32; at the start of backward the saved "
            "log-softmax and the nll_loss and log_softmax gradients are live (measured in ../shared/oracle)",
        ),
    )


LOSS = Mechanism("loss", live, headlines)
