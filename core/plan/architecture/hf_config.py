"""A local Hugging Face ``config.json`` -> the plan's ``[model]`` keys. Offline: reads one file, never the hub.

Each family names its sizes its own way (GPT-2 ``n_embd``/``n_layer``/``n_head``/``n_inner``, BLOOM ``n_embed``,
Falcon ``multi_query``/``num_kv_heads``/``ffn_hidden_size``/``bias``, GPT-NeoX ``rotary_pct``...). A key the config
leaves out takes the default of the family's transformers config class (read at v5.24), so the parameter count is
what ``AutoModelForCausalLM.from_config`` builds from the same file; sizes without a sensible default are required
and a missing one is named; keys that are not read and not known to be harmless are listed in
``HFModel.ignored`` (shown as a note).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

from vramplan.core.plan.architecture.config import upper_bound
from vramplan.core.plan.architecture.families import FAMILIES
from vramplan.core.plan.architecture.hf_families import NEW_MAPPERS, window_keys
from vramplan.core.plan.architecture.hf_keys import MISSING, ConfigKeys, ignored_keys
from vramplan.core.plan.architecture.hub_cache import repo_id_of
from vramplan.core.plan.architecture.hybrid import HYBRIDS, hybrid_params
from vramplan.core.plan.architecture.vision import VISION_KEYS, vision
from vramplan.core.plan.helpers.errors import PlanError, clip, printable, shown
from vramplan.core.plan.helpers.jsonio import loads_json
from vramplan.core.plan.helpers.paths import user_path
from vramplan.core.plan.helpers.readfile import path_problem, read_regular
from vramplan.core.plan.helpers.tomlio import depth_problem

SUPPORTED: tuple[str, ...] = (*FAMILIES, "gemma3", "llama4")  # the text families, and multimodal configs of them
# keys whose presence (with a value > 0) marks a mixture-of-experts model
MOE_KEYS: tuple[str, ...] = (
    "num_local_experts",
    "num_experts",
    "n_routed_experts",
    "moe_num_experts",
    "num_experts_per_tok",
    "moe_intermediate_size",
)


@dataclass(frozen=True)
class HFModel:
    """What a config.json says, as plan keys."""

    path: Path  # the config.json read
    name: str  # ``_name_or_path`` if the file has one, else its directory's name
    model_type: str
    model: dict[str, Any]  # [model] keys (HF names of the plan), without hf_config
    ignored: tuple[str, ...] = ()  # keys of the file not modelled (neither read nor known to be harmless)


def config_path(path: str | Path) -> Path:
    """The config.json a path names: the file itself, or ``config.json`` inside a checkpoint directory. A
    symlink loop or a dangling link (the path, or a directory's config.json) is said so."""
    p = user_path(path)
    if p.is_dir():
        inner = p / "config.json"
        if inner.is_symlink() or inner.exists():
            problem = path_problem(inner)
            if problem:
                raise PlanError(problem, str(inner))
            return inner
        raise PlanError("no config.json in this directory", str(p))
    problem = path_problem(p)
    if problem == "no such file":
        raise PlanError("no such file or directory (give a config.json or a checkpoint directory)", str(p))
    if problem:
        raise PlanError(problem, str(p))
    return p


def read_hf_config(path: str | Path) -> HFModel:
    """Read and map a config.json (cached on path, size and modification time: a keystroke re-reads nothing)."""
    p = config_path(path)
    try:
        st = p.stat()
        resolved = str(p.resolve())
    except (OSError, RuntimeError) as exc:  # RuntimeError: pathlib's symlink loop on Python < 3.13
        raise PlanError(f"cannot read: {getattr(exc, 'strerror', None) or exc}", str(p)) from None
    return _read(resolved, st.st_size, st.st_mtime_ns, repo_id_of(p))


@lru_cache(maxsize=64)
def _read(path: str, size: int, mtime_ns: int, repo_id: str | None = None) -> HFModel:
    """``repo_id``: the Hub id of a config.json in the Hub cache, its name where the file has none (the snapshot's
    folder is a commit hash, the file a symlink into ``blobs/``)."""
    try:
        text = read_regular(path).decode("utf-8")
    except UnicodeDecodeError as exc:
        raise PlanError(f"not UTF-8 text (byte {exc.start})", path) from None
    raw = parse_json(text, path)
    try:
        model, ignored = map_config_noted(raw)
    except PlanError as exc:
        raise exc.at(path) if exc.where else PlanError(exc.message, path) from None
    name = raw.get("_name_or_path")
    if not isinstance(name, str) or not name.strip():
        name = repo_id or os.path.basename(os.path.dirname(path)) or path
    name = clip(printable(name), 120)  # shown in titles: never an escape sequence to the terminal
    return HFModel(Path(path), name, model["model_type"], model, ignored)


def parse_json(text: str, where: str) -> dict[str, Any]:
    """A config.json's object; `PlanError` for invalid JSON, integers of more than 4,300 digits, and nesting deep
    enough to exhaust the stack (`core.plan.helpers.jsonio.loads_json`). ``NaN`` and ``Infinity`` are read as Python's
    json reads them: Hugging Face wrote config.json with it (Mamba2's and Nemotron-H's ``time_step_limit`` is
    ``[0.0, Infinity]``) and transformers reads it back; a size that is not a whole number is still refused by the
    key that reads it."""
    raw = loads_json(text, where, constants=True)
    if not isinstance(raw, dict):
        raise PlanError("not a config.json: expected a JSON object", where)
    problem = depth_problem(raw)
    if problem:
        raise PlanError(problem, where)
    return raw


# A model without a formula family is refused by the estimate; `vramplan trace` runs any model transformers builds
TRACE_GIVES_IT = "vramplan trace --hf-config gives its memory if transformers builds it"


def map_config(raw: dict[str, Any]) -> dict[str, Any]:
    """The plan's [model] keys for a parsed config.json; a `PlanError` names the offending key."""
    return map_config_noted(raw)[0]


def map_config_noted(raw: dict[str, Any]) -> tuple[dict[str, Any], tuple[str, ...]]:
    """The plan's [model] keys and the config's keys ignored (neither read nor known to be harmless)."""
    mt = raw.get("model_type")
    if mt is not None and not isinstance(mt, str):
        raise PlanError(f"must be a string (got {shown(mt)})", "model_type")
    if mt is None:
        raise PlanError(f'no "model_type" key; supported: {", ".join(SUPPORTED)}')
    if mt in MULTIMODAL and mt not in _MAPPERS:
        return _multimodal(raw, mt)
    if mt in HYBRIDS:  # counted, not estimated: the memory of its blocks is not modelled yet
        raise PlanError(_hybrid_line(raw, mt), "model_type")
    if mt not in _MAPPERS:
        moe = [(k, raw[k]) for k in MOE_KEYS if _positive(raw.get(k))]
        what = f" (a mixture-of-experts config: {moe[0][0]} = {moe[0][1]})" if moe else ""
        line = f"unsupported model_type {shown(mt)}{what}; supported: {', '.join(SUPPORTED)}; {TRACE_GIVES_IT}"
        raise PlanError(line, "model_type")
    keys = ConfigKeys(raw, mt)
    model = {"model_type": mt, **_MAPPERS[mt](keys)}
    for key, value in model.items():  # a size beyond the plan's bounds is named here, with the file
        limit = upper_bound(key)
        if limit is not None and isinstance(value, int | float) and value > limit:
            raise PlanError(f"must be at most {limit:,} (got {shown(value)})", key)
    return model, ignored_keys(raw, keys.read)


# Multimodal model_types: the model_type of their text model (``text_config``'s, which may leave it out) and the
# outer config class's ``tie_word_embeddings`` default: transformers ties the lm_head by the outer config's flag
# (modeling_utils ``get_expanded_tied_weights_keys`` reads ``self.config``; Gemma3Config True, Llama4Config False).
MULTIMODAL: dict[str, tuple[str, bool]] = {"gemma3": ("gemma3_text", True), "llama4": ("llama4_text", False)}
# keys of a multimodal config's outer object that change neither the parameters nor what a step saves
_MULTIMODAL_HARMLESS = frozenset(
    {"boi_token_index", "eoi_token_index", "image_token_index", "image_token_id", "boi_token_id", "eoi_token_id",
     "mm_tokens_per_image", "vision_config", "text_config"}
)  # fmt: skip
# vision_config keys that change neither the parameters nor the text model (activation, norms' epsilon, dropout
# at 0, init, RoPE of the tower, which layer's features are taken)
_VISION_HARMLESS = frozenset(
    {"hidden_act", "layer_norm_eps", "norm_eps", "attention_dropout", "projector_dropout", "initializer_range",
     "torch_dtype", "dtype", "rope_theta", "vision_feature_layer", "vision_feature_select_strategy",
     "num_attention_heads", "multi_modal_projector_bias", "_attn_implementation_autoset"}
)  # fmt: skip


def _multimodal(raw: dict[str, Any], mt: str) -> tuple[dict[str, Any], tuple[str, ...]]:
    """A multimodal config (Gemma 3 4B-27B, Llama 4): its text model read through ``text_config`` as that family's
    config.json is read, and the vision tower and projector counted (`core.plan.architecture.vision`)."""
    text_mt, tied = MULTIMODAL[mt]
    text = raw.get("text_config")
    text = {} if text is None else text
    if not isinstance(text, dict):
        raise PlanError(f"must be an object (got {shown(text)})", "text_config")
    inner_mt = text.get("model_type", text_mt)
    if inner_mt != text_mt:
        raise PlanError(f"a {mt} config's text model is {text_mt!r} (got {shown(inner_mt)})", "text_config.model_type")
    tie = raw.get("tie_word_embeddings", tied)
    if not isinstance(tie, bool):
        raise PlanError(f"must be true or false (got {shown(tie)})", "tie_word_embeddings")
    try:
        model, ignored = map_config_noted({**text, "model_type": text_mt, "tie_word_embeddings": tie})
    except PlanError as exc:
        raise PlanError(exc.message, f"text_config.{exc.where}" if exc.where else "text_config") from None
    seen = vision(mt, raw, model["hidden_size"])
    model = {**model, "model_type": text_mt, "vision_params": seen.params}
    cfg = raw.get("vision_config") or {}
    outer = ignored_keys(raw, {"tie_word_embeddings", *_MULTIMODAL_HARMLESS})
    left = sorted(k for k in cfg if k not in VISION_KEYS and k not in _VISION_HARMLESS)
    return model, (*outer, *(f"text_config.{k}" for k in ignored), *(f"vision_config.{k}" for k in left))


def _hybrid_line(raw: dict[str, Any], mt: str) -> str:
    """Why a hybrid is not estimated, with its exact parameter count (`core.plan.architecture.hybrid`); a config
    whose sizes cannot be counted is said unsupported as any other (``vramplan trace`` still builds it)."""
    try:
        n = hybrid_params(raw)
    except PlanError:
        return f"unsupported model_type {shown(mt)}; supported: {', '.join(SUPPORTED)}; {TRACE_GIVES_IT}"
    return (
        f"unsupported model_type {shown(mt)}: {HYBRIDS[mt]} ({n.total:,} parameters; {n.kinds()} blocks) whose "
        f"state-space / linear-attention blocks' memory is not modelled yet; {TRACE_GIVES_IT}"
    )


def _positive(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and v > 0


def _dropout(
    k: ConfigKeys,
    attention: tuple[str, ...] = (),
    hidden: tuple[str, ...] = (),
    embedding: tuple[str, ...] = (),
    default: float = 0.0,
) -> dict[str, Any]:
    """The dropout probabilities a training step applies (the plan's ``attention_dropout``, ``hidden_dropout``,
    ``embedding_dropout``), from the family's config keys; only those above 0 are set."""
    out: dict[str, Any] = {}
    for key, names in (("attention_dropout", attention), ("hidden_dropout", hidden), ("embedding_dropout", embedding)):
        if not names:
            continue
        k.read.update(names)
        name = next((n for n in names if k.raw.get(n) is not None), None)
        v = default if name is None else k.raw[name]
        if not isinstance(v, int | float) or isinstance(v, bool) or not 0 <= v < 1:
            raise PlanError(f"must be a dropout probability in [0, 1) (got {shown(v)})", name or names[0])
        if v > 0:
            out[key] = float(v)
    return out


def _sizes(k: ConfigKeys, *, kv_default: Any) -> dict[str, Any]:
    h = k.count("hidden_size")
    a = k.count("num_attention_heads")
    return {
        "vocab_size": k.count("vocab_size"),
        "hidden_size": h,
        "intermediate_size": k.count("intermediate_size"),
        "num_hidden_layers": k.count("num_hidden_layers"),
        "num_attention_heads": a,
        "num_key_value_heads": k.count("num_key_value_heads", default=a if kv_default == "heads" else kv_default),
    }


def _head_dim(k: ConfigKeys, default: int | None = None) -> dict[str, Any]:
    d = k.count("head_dim", default=default)
    return {} if d is None else {"head_dim": d}


def _llama(k: ConfigKeys) -> dict[str, Any]:
    """LlamaConfig: num_key_value_heads defaults to num_attention_heads, head_dim to h / a, no biases, untied."""
    out = {**_sizes(k, kv_default="heads"), **_head_dim(k)}
    out["tie_word_embeddings"] = k.flag("tie_word_embeddings", default=False)
    out["attention_bias"] = k.flag("attention_bias", default=False)
    out["mlp_bias"] = k.flag("mlp_bias", default=False)
    return {**out, **_dropout(k, attention=("attention_dropout",))}


def _mistral_like(k: ConfigKeys) -> dict[str, Any]:
    """MistralConfig / Qwen2Config: their num_key_value_heads defaults (8, 32) are constants, so it is required."""
    out = {**_sizes(k, kv_default=MISSING), **_head_dim(k)}
    out["tie_word_embeddings"] = k.flag("tie_word_embeddings", default=False)
    return {**out, **_dropout(k, attention=("attention_dropout",))}


def _gemma(k: ConfigKeys) -> dict[str, Any]:
    """GemmaConfig: head_dim 256 unless given, tied embeddings; ``hidden_act = "gelu"`` means the tanh
    approximation (GemmaConfig.__post_init__ rewrites it)."""
    out = {**_sizes(k, kv_default=MISSING), "head_dim": k.count("head_dim", default=256)}
    out["tie_word_embeddings"] = k.flag("tie_word_embeddings", default=True)
    out["attention_bias"] = k.flag("attention_bias", default=False)
    act = k.act("hidden_act", "hidden_activation", default="gelu_pytorch_tanh")
    out["hidden_act"] = "gelu_pytorch_tanh" if act == "gelu" else act
    return out


def _phi3(k: ConfigKeys) -> dict[str, Any]:
    out = {**_sizes(k, kv_default="heads"), **_head_dim(k)}
    out["tie_word_embeddings"] = k.flag("tie_word_embeddings", default=False)
    out["partial_rotary_factor"] = k.rotary("partial_rotary_factor", default=1.0)
    return out


def _bloom(k: ConfigKeys) -> dict[str, Any]:
    """BloomConfig: n_embed / n_layer / n_head, MLP 4h, tied."""
    h = k.count("hidden_size", "n_embed")
    a = k.count("num_attention_heads", "n_head")
    return {
        "vocab_size": k.count("vocab_size"),
        "hidden_size": h,
        "intermediate_size": 4 * h,  # type: ignore[operator]
        "num_hidden_layers": k.count("num_hidden_layers", "n_layer"),
        "num_attention_heads": a,
        "num_key_value_heads": a,
        "tie_word_embeddings": k.flag("tie_word_embeddings", default=True),
    }


def _gpt2(k: ConfigKeys) -> dict[str, Any]:
    """GPT2Config: n_embd / n_layer / n_head, n_inner (None: 4h), n_positions (1024), gelu_new, tied."""
    if k.raw.get("add_cross_attention"):
        raise PlanError(
            "cross-attention blocks are not modelled (a decoder-only GPT-2 has none)", "add_cross_attention"
        )
    h = k.count("n_embd", "hidden_size")
    a = k.count("n_head", "num_attention_heads")
    return {
        "vocab_size": k.count("vocab_size"),
        "hidden_size": h,
        "intermediate_size": k.count("n_inner", default=None) or 4 * h,  # type: ignore[operator]
        "num_hidden_layers": k.count("n_layer", "num_hidden_layers"),
        "num_attention_heads": a,
        "num_key_value_heads": a,
        "tie_word_embeddings": k.flag("tie_word_embeddings", default=True),
        "max_position_embeddings": k.count("n_positions", "max_position_embeddings", default=1024),
        "hidden_act": k.act("activation_function", default="gelu_new"),
        # GPT2Config's defaults: 0.1 each (modeling_gpt2.py: attn_dropout, resid_dropout, the MLP's dropout, drop)
        **_dropout(k, attention=("attn_pdrop",), hidden=("resid_pdrop",), embedding=("embd_pdrop",), default=0.1),
    }


def _gpt_neox(k: ConfigKeys) -> dict[str, Any]:
    """GPTNeoXConfig: rotary_pct 0.25, parallel residual, biases, untied."""
    out = _sizes(k, kv_default="heads")
    out["num_key_value_heads"] = out["num_attention_heads"]
    out["tie_word_embeddings"] = k.flag("tie_word_embeddings", default=False)
    out["use_parallel_residual"] = k.flag("use_parallel_residual", default=True)
    out["attention_bias"] = k.flag("attention_bias", default=True)
    out["hidden_act"] = k.act("hidden_act", default="gelu")
    out["partial_rotary_factor"] = k.rotary("rotary_pct", "partial_rotary_factor", default=0.25)
    # modeling_gpt_neox.py: hidden_dropout is post_attention_dropout, post_mlp_dropout and emb_dropout
    drop = ("hidden_dropout",)
    return {**out, **_dropout(k, attention=("attention_dropout",), hidden=drop, embedding=drop)}


def _falcon(k: ConfigKeys) -> dict[str, Any]:
    """FalconConfig: key/value heads 1 with ``multi_query`` (default), num_kv_heads with
    ``new_decoder_architecture``, else all heads; ffn_hidden_size 4h; ``bias`` for every linear; tied."""
    h = k.count("hidden_size", "n_embed")
    a = k.count("num_attention_heads", "n_head")
    new = k.flag("new_decoder_architecture", default=False)
    kv = k.count("num_kv_heads", default=a) if new else (1 if k.flag("multi_query", default=True) else a)
    bias = k.flag("bias", default=False)
    out: dict[str, Any] = {
        "vocab_size": k.count("vocab_size"),
        "hidden_size": h,
        "intermediate_size": k.count("ffn_hidden_size", default=None) or 4 * h,  # type: ignore[operator]
        "num_hidden_layers": k.count("num_hidden_layers", "n_layer"),
        "num_attention_heads": a,
        "num_key_value_heads": kv,
        "tie_word_embeddings": k.flag("tie_word_embeddings", default=True),
        "attention_bias": bias,
        "mlp_bias": bias,
        "use_parallel_residual": k.flag("parallel_attn", default=True),
        "alibi": k.flag("alibi", default=False),
        "new_decoder_architecture": new,
        "hidden_act": k.act("activation", default="gelu"),
    }
    n_ln = k.count("num_ln_in_parallel_attn", default=None)
    if n_ln is not None:
        out["num_ln_in_parallel_attn"] = n_ln
    return out


def _mistral(k: ConfigKeys) -> dict[str, Any]:
    """MistralConfig: ``sliding_window`` (4096 by default, null in v0.2+) on every layer."""
    out = _mistral_like(k)
    return out | window_keys(k, out["num_hidden_layers"], 4096, 0)


_MAPPERS: dict[str, Callable[[ConfigKeys], dict[str, Any]]] = {
    "llama": _llama,
    "mistral": _mistral,
    "qwen2": _mistral_like,
    "gemma": _gemma,
    "phi3": _phi3,
    "bloom": _bloom,
    "gpt2": _gpt2,
    "gpt_neox": _gpt_neox,
    "falcon": _falcon,
    **NEW_MAPPERS,
}
assert set(_MAPPERS) == set(FAMILIES)
