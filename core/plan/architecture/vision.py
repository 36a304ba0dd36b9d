"""The vision side of a multimodal config.json: the tower and the projector into the text model, counted exactly as
transformers builds them (read at v5.25; `tests/core/plan/test_multimodal.py` checks each against
``AutoModelForImageTextToText.from_config`` on the meta device), and the tokens one image adds to the text sequence.

- gemma3 (``models/siglip/modeling_siglip.py`` SiglipVisionModel, ``models/gemma3/modeling_gemma3.py``
  Gemma3MultiModalProjector): a Conv2d patch embedding (c p^2 h + h), a learned position embedding of
  (image / patch)^2 rows, per layer LayerNorm x 2 (2h each), q/k/v/out_proj with biases (4 (h^2 + h)) and the MLP
  fc1/fc2 with biases (2 h i + i + h); a post LayerNorm; with ``vision_use_head`` the attention-pooling head (probe
  h, nn.MultiheadAttention 4 h^2 + 4 h, LayerNorm 2h, MLP 2 h i + i + h). The projector: ``mm_input_projection_weight``
  [h, text h] and ``mm_soft_emb_norm`` (RMSNorm, h). An image is ``mm_tokens_per_image`` soft tokens (256).
- llama4 (``models/llama4/modeling_llama4.py`` Llama4VisionModel, Llama4VisionPixelShuffleMLP,
  Llama4MultiModalProjector): an unfold + Linear patch embedding without bias (c p^2 h), a class embedding (h) and
  (image / patch)^2 + 1 position rows, LayerNorm pre and post (2h each), per layer as SigLIP's (q/k/v/o and fc1/fc2
  with biases, two LayerNorms); the pixel-shuffle adapter fc1 [intermediate, projector_input] and fc2
  [projector_output, projector_output] without biases; the projector Linear(vision_output_dim, text h) without bias.
  An image tile is (image / patch)^2 x pixel_shuffle_ratio^2 tokens (144 for 336 / 14 and 0.5).

The sizes a vision_config leaves out take its transformers config class's defaults (``AutoConfig.for_model(...)
.to_dict()`` at v5.25).
"""

from __future__ import annotations

from typing import Any, NamedTuple

from vramplan.core.plan.helpers.errors import PlanError, shown

# The vision_config defaults of each multimodal model_type's vision class (AutoConfig.for_model, transformers 5.25)
VISION_DEFAULTS: dict[str, dict[str, Any]] = {
    "gemma3": {
        "hidden_size": 768, "intermediate_size": 3072, "num_hidden_layers": 12, "num_channels": 3, "image_size": 224,
        "patch_size": 16, "vision_use_head": True,
    },
    "llama4": {
        "hidden_size": 768, "intermediate_size": 5632, "num_hidden_layers": 34, "num_channels": 3, "image_size": 448,
        "patch_size": 14, "pixel_shuffle_ratio": 0.5, "projector_input_dim": 4096, "projector_output_dim": 4096,
        "vision_output_dim": 7680,
    },
}  # fmt: skip
VISION_KEYS = frozenset(k for d in VISION_DEFAULTS.values() for k in d) | {"model_type"}


class Vision(NamedTuple):
    """A multimodal model's vision side: the tower's and the projector's parameters, an image's text tokens."""

    tower_params: int
    projector_params: int
    image_tokens: int  # tokens one image (Llama 4: one tile) takes in the text sequence

    @property
    def params(self) -> int:
        return self.tower_params + self.projector_params


def _size(cfg: dict[str, Any], defaults: dict[str, Any], key: str) -> int:
    v = cfg.get(key, defaults[key])
    if not isinstance(v, int) or isinstance(v, bool) or not 1 <= v <= 1 << 20:
        raise PlanError(f"must be a positive integer (got {shown(v)})", f"vision_config.{key}")
    return v


def _vit_layers(h: int, i: int, n: int) -> int:
    """n ViT layers: q/k/v/o with biases, fc1/fc2 with biases, two LayerNorms (weight and bias)."""
    return n * (4 * (h * h + h) + (2 * h * i + i + h) + 4 * h)


def _siglip(cfg: dict[str, Any], text_h: int, raw: dict[str, Any]) -> Vision:
    dv = VISION_DEFAULTS["gemma3"]
    h, i, n = (_size(cfg, dv, k) for k in ("hidden_size", "intermediate_size", "num_hidden_layers"))
    c, img, p = (_size(cfg, dv, k) for k in ("num_channels", "image_size", "patch_size"))
    tower = c * p * p * h + h + (img // p) ** 2 * h + _vit_layers(h, i, n) + 2 * h
    if cfg.get("vision_use_head", dv["vision_use_head"]):
        tower += h + (4 * h * h + 4 * h) + 2 * h + (2 * h * i + i + h)
    tokens = raw.get("mm_tokens_per_image", 256)
    if not isinstance(tokens, int) or isinstance(tokens, bool) or tokens < 1:
        raise PlanError(f"must be a positive integer (got {shown(tokens)})", "mm_tokens_per_image")
    return Vision(tower, h * text_h + h, tokens)


def _llama4(cfg: dict[str, Any], text_h: int, raw: dict[str, Any]) -> Vision:
    dv = VISION_DEFAULTS["llama4"]
    h, i, n = (_size(cfg, dv, k) for k in ("hidden_size", "intermediate_size", "num_hidden_layers"))
    c, img, p = (_size(cfg, dv, k) for k in ("num_channels", "image_size", "patch_size"))
    p_in, p_out, out = (_size(cfg, dv, k) for k in ("projector_input_dim", "projector_output_dim", "vision_output_dim"))
    ratio = cfg.get("pixel_shuffle_ratio", dv["pixel_shuffle_ratio"])
    if not isinstance(ratio, int | float) or isinstance(ratio, bool) or not 0 < ratio <= 1:
        raise PlanError(f"must be a number in (0, 1] (got {shown(ratio)})", "vision_config.pixel_shuffle_ratio")
    patches = (img // p) ** 2
    tower = c * p * p * h + h + (patches + 1) * h + 4 * h + _vit_layers(h, i, n) + i * p_in + p_out * p_out
    return Vision(tower, out * text_h, int(patches * ratio * ratio))


VISION_TOWERS = {"gemma3": _siglip, "llama4": _llama4}


def vision(model_type: str, raw: dict[str, Any], text_h: int) -> Vision:
    """The vision side of a multimodal config.json of ``model_type`` (a key of `VISION_TOWERS`)."""
    cfg = raw.get("vision_config")
    if cfg is None:
        cfg = {}
    if not isinstance(cfg, dict):
        raise PlanError(f"must be an object (got {shown(cfg)})", "vision_config")
    return VISION_TOWERS[model_type](cfg, text_h, raw)
