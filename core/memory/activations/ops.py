"""The two building blocks every decoder block's saved tensors are made of: a norm, and the linears that read one
input (their saved inputs, LoRA tensors and autocast's weight copies). Sources: `core.memory.activations.block`."""

from __future__ import annotations

from vramplan.core.memory.activations.context import ActCtx, Saved


def norm_saved(
    c: ActCtx, out: Saved, label: str, x_rg: bool, w_trained: bool, in_bytes: int, shared: bool = False
) -> bool:
    """Saved tensors of one norm; returns whether its output requires grad. ``shared``: its input was already saved
    by another norm of the block (GPT-NeoX/Falcon parallel blocks normalise the block input twice)."""
    T, h = c.T, c.arch.h
    kind = c.arch.fam.norm
    if kind == "rms":
        if x_rg:
            out.add(f"{label}: fp32 input + rsqrt", 4 * T * h + 4 * T, T * h + T, False)
        if w_trained:
            out.add(f"{label}: normalized", in_bytes * T * h, T * h, False)
    elif kind == "rms_offset":  # GemmaRMSNorm: (x.float() * rsqrt) * (1 + w.float()), cast back at the end
        if x_rg:
            out.add(f"{label}: fp32 input + rsqrt + (1 + w)", 4 * T * h + 4 * T + 4 * h, T * h + T + h, False)
        if w_trained:
            out.add(f"{label}: normalized (fp32)", 4 * T * h, T * h, False)
    elif x_rg or w_trained:
        stats = (2 * in_bytes if c.cpu and in_bytes < 4 else 8) * T  # mean and rstd, fp32 on CUDA
        if shared:
            out.add(f"{label}: mean/rstd (input shared)", stats, 2 * T, False)
        else:
            out.add(f"{label}: input + mean/rstd", in_bytes * T * h + stats, T * h + 2 * T, False)
    return x_rg or w_trained


def linears_saved(
    c: ActCtx, out: Saved, roles: tuple[str, ...], in_bytes: int, in_rg: bool, input_saved: bool, split_in: bool
) -> tuple[dict[str, bool], bool]:
    """Linears that consume one input tensor: their saved inputs, LoRA tensors and autocast weight copies.

    Returns, per role, whether the output requires grad, and whether the input tensor itself is saved.
    ``input_saved``: the input is already a saved storage. Falcon's linears multiply by ``weight.T`` (a view, not a
    leaf), so autocast does not cache their bf16 weight copies (``cached_cast`` caches leaves only).
    """
    arch, T = c.arch, c.T
    autocast = c.reg.compute == "autocast"
    cached = arch.fam.model_type != "falcon"
    need_input = False
    out_rg: dict[str, bool] = {}
    for role in roles:
        lin = arch.linear(role)
        d_in = lin.d_in
        if c.full:
            if autocast and in_bytes == 4:
                out.add(f"{role}_proj: bf16 copy of input", 2 * T * d_in, T * d_in, split_in)
            else:
                need_input = True
            if autocast:
                out.cache += 2 * lin.weight_params if cached else 0
                if in_rg:
                    out.copies += 2 * lin.weight_params
        elif autocast and not c.quantized and in_rg:
            out.copies += 2 * lin.weight_params  # frozen weight's bf16 copy, needed for the input gradient
            out.frozen_copies += 2 * lin.weight_params
        if role in c.lora:
            r = c.rank
            copy = c.lora_copy_bytes
            if copy:
                out.add(f"{role} LoRA A: own copy of input", copy * T * d_in, T * d_in, split_in)
            else:
                need_input = True
            out.add(f"{role} LoRA A output", c.lora_out_bytes * T * r, T * r, False)
            if autocast:
                a_w, b_w = 2 * r * d_in, 2 * r * lin.d_out
                out.cache += a_w + b_w
                out.copies += b_w + (a_w if in_rg else 0)
        out_rg[role] = c.full or role in c.lora or in_rg
    if need_input and not input_saved:
        d_in = arch.linear(roles[0]).d_in
        out.add(f"{'/'.join(roles)} input", in_bytes * T * d_in, T * d_in, split_in)
    return out_rg, need_input or input_saved
