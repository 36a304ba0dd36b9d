"""A multimodal model's vision tower and projector in the model states (`core.plan.architecture.vision` counts
them): held whole by the first pipeline stage, beside the token embedding it feeds (transformers'
``*ForConditionalGeneration.get_image_features`` runs before the decoder), and not split by tensor parallelism
(the tensor-parallel plans of Megatron and torchtitan shard the decoder's linears). Frozen unless
``training.vision_tower = trained``: LLaMA-Factory's ``freeze_vision_tower`` and ``freeze_multi_modal_projector``
default to true, and a frozen tower is held in the weights' dtype with no gradient and no optimizer state (ZeRO-3
and FSDP shard it with the rest). What the tower's forward computes and keeps for the images is not in the
estimate: a frozen tower saves nothing for backward (no parameter and no input of it requires grad), a trained one
would; the text side's image tokens are part of ``seq_len``."""

from __future__ import annotations

from vramplan.core.memory.states.record import StateCtx
from vramplan.core.memory.states.stages import Stage
from vramplan.core.memory.terms import Term

SOURCE = (
    "transformers models/gemma3/modeling_gemma3.py, models/llama4/modeling_llama4.py (vision tower and projector); "
    "LLaMA-Factory hparams/model_args.py (freeze_vision_tower, freeze_multi_modal_projector: true)"
)


def vision_held(sc: StateCtx, stage: Stage) -> int:
    """The vision parameters this rank's stage holds: all of them on the first stage, none elsewhere."""
    return sc.arch.vision_params if stage.first else 0


def vision_frozen(sc: StateCtx, stage: Stage) -> int:
    """Of those, the ones it does not train (all, unless the tower is trained)."""
    return 0 if sc.vision_trained else vision_held(sc, stage)


def with_vision(term: Term, sc: StateCtx, stage: Stage) -> Term:
    """The parameters' headline term, saying what of it is the vision tower."""
    held = vision_held(sc, stage)
    if not held:
        return term
    how = "trained" if sc.vision_trained else "frozen"
    return term.then(", incl. the vision tower and projector ({:,} params, {})", held, how).sourced(
        f"{term.source}; {SOURCE}"
    )


def vision_note(vision_params: int, trained: bool) -> str:
    """What the estimate leaves out of a multimodal model, in one line (empty for a text model)."""
    if not vision_params:
        return ""
    how = "trained" if trained else "frozen, it saves nothing for backward"
    return (
        f"vision tower and projector: {vision_params:,} params in the weights ({how}); its forward over the "
        "images is not estimated (the image tokens are in seq_len)"
    )
