"""A local Hugging Face ``config.json`` -> the plan's ``[model]`` keys. Offline: reads one file, never the hub.

Each family names its sizes its own way (GPT-2 ``n_embd``/``n_layer``/``n_head``/``n_inner``, BLOOM ``n_embed``,
Falcon ``multi_query``/``num_kv_heads``/``ffn_hidden_size``/``bias``, GPT-NeoX ``rotary_pct``...). A key the config
leaves out takes the default of the family's transformers config class (read at v5.24), so the parameter count is
what ``AutoModelForCausalLM.from_config`` builds from the same file; sizes without a sensible default are required
and a missing one is named. Mixture-of-experts configs are refused until MoE is modelled.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

from vramplan.core.plan.arch import ACTIVATIONS, FAMILIES
from vramplan.core.plan.errors import PlanError
from vramplan.core.plan.paths import user_path

SUPPORTED: tuple[str, ...] = tuple(FAMILIES)
# keys whose presence (with a value > 0) marks a mixture-of-experts model
MOE_KEYS: tuple[str, ...] = (
    "num_local_experts",
    "num_experts",
    "n_routed_experts",
    "moe_num_experts",
    "num_experts_per_tok",
    "moe_intermediate_size",
)
_MISSING = object()


@dataclass(frozen=True)
class HFModel:
    """What a config.json says, as plan keys."""

    path: Path  # the config.json read
    name: str  # ``_name_or_path`` if the file has one, else its directory's name
    model_type: str
    model: dict[str, Any]  # [model] keys (HF names of the plan), without hf_config


def config_path(path: str | Path) -> Path:
    """The config.json a path names: the file itself, or ``config.json`` inside a checkpoint directory."""
    p = user_path(path)
    if p.is_dir():
        inner = p / "config.json"
        if not inner.is_file():
            raise PlanError("no config.json in this directory", str(p))
        return inner
    if not p.exists():
        raise PlanError("no such file or directory (give a config.json or a checkpoint directory)", str(p))
    return p


def read_hf_config(path: str | Path) -> HFModel:
    """Read and map a config.json (cached on path, size and modification time: a keystroke re-reads nothing)."""
    p = config_path(path)
    try:
        st = p.stat()
    except OSError as exc:
        raise PlanError(f"cannot read: {exc.strerror or exc}", str(p)) from None
    return _read(str(p.resolve()), st.st_size, st.st_mtime_ns)


@lru_cache(maxsize=64)
def _read(path: str, size: int, mtime_ns: int) -> HFModel:
    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise PlanError(f"cannot read: {getattr(exc, 'strerror', None) or exc}", path) from None
    try:
        raw = json.loads(text)
    except json.JSONDecodeError as exc:
        raise PlanError(f"not valid JSON: {exc.msg} (line {exc.lineno}, column {exc.colno})", path) from None
    if not isinstance(raw, dict):
        raise PlanError("not a config.json: expected a JSON object", path)
    try:
        model = map_config(raw)
    except PlanError as exc:
        raise exc.at(path) if exc.where else PlanError(exc.message, path) from None
    name = raw.get("_name_or_path")
    if not isinstance(name, str) or not name.strip():
        name = os.path.basename(os.path.dirname(path)) or path
    return HFModel(Path(path), name, model["model_type"], model)


def map_config(raw: dict[str, Any]) -> dict[str, Any]:
    """The plan's [model] keys for a parsed config.json; a `PlanError` names the offending key."""
    mt = raw.get("model_type")
    moe = [(k, raw[k]) for k in MOE_KEYS if _positive(raw.get(k))]
    if moe:
        key, value = moe[0]
        what = f"model_type {mt!r}, " if isinstance(mt, str) else ""
        raise PlanError(
            f"a mixture-of-experts config ({what}{key} = {value}): only dense models are modelled so far; "
            f"supported model_type: {', '.join(SUPPORTED)}"
        )
    if mt is None:
        raise PlanError(f'no "model_type" key; supported: {", ".join(SUPPORTED)}')
    if mt not in _MAPPERS:
        raise PlanError(f"unsupported model_type {mt!r}; supported: {', '.join(SUPPORTED)}", "model_type")
    return {"model_type": mt, **_MAPPERS[mt](_Keys(raw, mt))}


def _positive(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and v > 0


class _Keys:
    """Typed access to config.json keys; errors name the key (and the family's other names for it)."""

    def __init__(self, raw: dict[str, Any], model_type: str) -> None:
        self.raw, self.mt = raw, model_type

    def _get(self, names: tuple[str, ...], default: Any) -> tuple[str, Any]:
        for n in names:
            if n in self.raw and self.raw[n] is not None:
                return n, self.raw[n]
        if default is _MISSING:
            alt = f" (or {', '.join(repr(n) for n in names[1:])})" if len(names) > 1 else ""
            raise PlanError(f"missing key {names[0]!r}{alt}, needed for model_type {self.mt!r}")
        return names[0], default

    def count(self, *names: str, default: Any = _MISSING) -> int | None:
        key, v = self._get(names, default)
        if v is None:
            return None
        if not isinstance(v, int) or isinstance(v, bool) or v < 1:
            raise PlanError(f"must be a positive integer (got {v!r})", key)
        return v

    def flag(self, *names: str, default: Any = _MISSING) -> bool:
        key, v = self._get(names, default)
        if not isinstance(v, bool):
            raise PlanError(f"must be true or false (got {v!r})", key)
        return v

    def fraction(self, *names: str, default: Any = _MISSING) -> float:
        key, v = self._get(names, default)
        if not isinstance(v, (int, float)) or isinstance(v, bool) or not 0 < v <= 1:
            raise PlanError(f"must be a number in (0, 1] (got {v!r})", key)
        return float(v)

    def act(self, *names: str, default: str) -> str:
        key, v = self._get(names, default)
        if v not in ACTIVATIONS:
            raise PlanError(f"activation {v!r} is not modelled; supported: {', '.join(ACTIVATIONS)}", key)
        return str(v)

    def rotary(self, *names: str, default: float) -> float:
        """A partial-rotary fraction: a top-level key, or ``partial_rotary_factor`` inside rope_parameters."""
        for n in names:
            if n in self.raw and self.raw[n] is not None:
                return self.fraction(n)
        for nested in ("rope_parameters", "rope_scaling"):
            sub = self.raw.get(nested)
            if isinstance(sub, dict) and sub.get("partial_rotary_factor") is not None:
                return _Keys(sub, self.mt).fraction("partial_rotary_factor")
        return default


def _sizes(k: _Keys, *, kv_default: Any) -> dict[str, Any]:
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


def _head_dim(k: _Keys, default: int | None = None) -> dict[str, Any]:
    d = k.count("head_dim", default=default)
    return {} if d is None else {"head_dim": d}


def _llama(k: _Keys) -> dict[str, Any]:
    """LlamaConfig: num_key_value_heads defaults to num_attention_heads, head_dim to h / a, no biases, untied."""
    out = {**_sizes(k, kv_default="heads"), **_head_dim(k)}
    out["tie_word_embeddings"] = k.flag("tie_word_embeddings", default=False)
    out["attention_bias"] = k.flag("attention_bias", default=False)
    out["mlp_bias"] = k.flag("mlp_bias", default=False)
    return out


def _mistral_like(k: _Keys) -> dict[str, Any]:
    """MistralConfig / Qwen2Config: their num_key_value_heads defaults (8, 32) are constants, so it is required."""
    out = {**_sizes(k, kv_default=_MISSING), **_head_dim(k)}
    out["tie_word_embeddings"] = k.flag("tie_word_embeddings", default=False)
    return out


def _gemma(k: _Keys) -> dict[str, Any]:
    """GemmaConfig: head_dim 256 unless given, tied embeddings; ``hidden_act = "gelu"`` means the tanh
    approximation (GemmaConfig.__post_init__ rewrites it)."""
    out = {**_sizes(k, kv_default=_MISSING), "head_dim": k.count("head_dim", default=256)}
    out["tie_word_embeddings"] = k.flag("tie_word_embeddings", default=True)
    out["attention_bias"] = k.flag("attention_bias", default=False)
    act = k.act("hidden_act", "hidden_activation", default="gelu_pytorch_tanh")
    out["hidden_act"] = "gelu_pytorch_tanh" if act == "gelu" else act
    return out


def _phi3(k: _Keys) -> dict[str, Any]:
    out = {**_sizes(k, kv_default="heads"), **_head_dim(k)}
    out["tie_word_embeddings"] = k.flag("tie_word_embeddings", default=False)
    out["partial_rotary_factor"] = k.rotary("partial_rotary_factor", default=1.0)
    return out


def _bloom(k: _Keys) -> dict[str, Any]:
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


def _gpt2(k: _Keys) -> dict[str, Any]:
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
    }


def _gpt_neox(k: _Keys) -> dict[str, Any]:
    """GPTNeoXConfig: rotary_pct 0.25, parallel residual, biases, untied."""
    out = _sizes(k, kv_default="heads")
    out["num_key_value_heads"] = out["num_attention_heads"]
    out["tie_word_embeddings"] = k.flag("tie_word_embeddings", default=False)
    out["use_parallel_residual"] = k.flag("use_parallel_residual", default=True)
    out["attention_bias"] = k.flag("attention_bias", default=True)
    out["hidden_act"] = k.act("hidden_act", default="gelu")
    out["partial_rotary_factor"] = k.rotary("rotary_pct", "partial_rotary_factor", default=0.25)
    return out


def _falcon(k: _Keys) -> dict[str, Any]:
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


_MAPPERS: dict[str, Callable[[_Keys], dict[str, Any]]] = {
    "llama": _llama,
    "mistral": _mistral_like,
    "qwen2": _mistral_like,
    "gemma": _gemma,
    "phi3": _phi3,
    "bloom": _bloom,
    "gpt2": _gpt2,
    "gpt_neox": _gpt_neox,
    "falcon": _falcon,
}
assert set(_MAPPERS) == set(FAMILIES)
