"""The two building blocks every decoder block's saved tensors are made of: a norm, and the linears that read one
input (their saved inputs, LoRA tensors and autocast's weight copies). Sources: `core.memory.activations.block`."""

from __future__ import annotations

from vramplan.core.memory.activations.context import ActCtx, Saved


def norm_saved(
    c: ActCtx,
    out: Saved,
    label: str,
    x_rg: bool,
    w_trained: bool,
    in_bytes: int,
    shared: bool = False,
    src_bytes: int = 0,
) -> bool:
    """Saved tensors of one norm; returns whether its output requires grad. ``shared``: its input was already saved
    by another norm of the block (GPT-NeoX/Falcon parallel blocks normalise the block input twice).

    Compiled (``torch.compile``, inductor's min-cut partitioner: torch/_functorch/partitioners.py), an RMSNorm keeps
    only its fp32 ``rsqrt`` and rebuilds the rest in the backward from the tensor its input was computed from:
    ``src_bytes`` per element of it (the block input for the first norm, the o_proj output for the second, since
    ``h = x + o``); measured on the CPU with a Llama block (../notes: 8Th fewer bytes per bf16 block)."""
    T, h = c.T, c.arch.h
    kind = c.arch.fam.norm
    if c.compiled and kind in ("rms", "rms_offset"):
        if x_rg or w_trained:
            out.add(f"{label}: rsqrt (compiled)", 4 * T, T, False)
            if src_bytes:
                out.add(f"{label}: the tensor its input is rebuilt from (compiled)", src_bytes * T * h, T * h, False)
    elif kind == "rms":
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

    - Compiled, a cast of one input is made once for all the linears that read it (eager: one per linear).
    - Float8 (torchao ``Float8Linear``, full fine-tuning): each linear saves its input cast to e4m3 (1 byte per
      value + an fp32 scale) and its fp8 weight (``manual_float8_matmul_with_args_in_float8.save_for_backward``),
      not a 16-bit input; under ZeRO-3/FSDP the fp8 weight is the all-gathered one, freed and re-gathered.
    - LoRA dropout (``nn.Dropout`` before lora_A): its mask (CUDA: bool) and lora_A's input is the dropout output.
    - bitsandbytes <= 0.43.1 (``MatMul4Bit``: ``ctx.tensors = (A, B)``, removed by PR #1270 in 0.43.2): each 4-bit
      linear whose input requires grad keeps that input (in the compute dtype) until its backward, outside the
      saved tensors: ``held`` (what nothing else saves) and ``held_gc`` (all of it: checkpointing cannot drop it).
    """
    # Long: the docstring is a third of it; the body walks one linear's rules in the order autograd meets them
    arch, T = c.arch, c.T
    autocast = c.reg.compute == "autocast"
    cached = arch.fam.model_type != "falcon"
    need_input = False
    casts: set[int] = set()  # dtypes (bytes) of the copies of this input already made, when compiled
    out_rg: dict[str, bool] = {}

    def cast_copy(label: str, n_bytes: int, d_in: int) -> None:
        if c.compiled and n_bytes in casts:
            return
        casts.add(n_bytes)
        out.add(label, n_bytes * T * d_in, T * d_in, split_in)

    for role in roles:
        lin = arch.linear(role)
        d_in = lin.d_in
        if c.full and c.float8:
            cast_copy(f"{role}_proj: fp8 copy of input", 1, d_in)
            out.add(f"{role}_proj: fp8 input scale", 4, 0, False)
            out.copies += lin.weight_params  # its e4m3 weight
        elif c.full:
            if autocast and in_bytes == 4:
                cast_copy(f"{role}_proj: bf16 copy of input", 2, d_in)
            else:
                need_input = True
            if autocast:
                out.cache += 2 * lin.weight_params if cached else 0
                if in_rg:
                    out.copies += 2 * lin.weight_params
        elif autocast and role not in c.quantized_roles and in_rg:
            out.copies += 2 * lin.weight_params  # frozen weight's bf16 copy, needed for the input gradient
            out.frozen_copies += 2 * lin.weight_params
        if role in c.lora:
            r = c.rank
            copy = c.lora_copy_bytes
            if c.dropout:
                mask = (copy or in_bytes) if c.cpu else 1
                out.add(f"{role} LoRA dropout mask", mask * T * d_in, T * d_in, split_in)
                out.add(f"{role} LoRA A input (dropout output)", (copy or in_bytes) * T * d_in, T * d_in, split_in)
            elif copy:
                cast_copy(f"{role} LoRA A: own copy of input", copy, d_in)
            else:
                need_input = True
            out.add(f"{role} LoRA A output", c.lora_out_bytes * T * r, T * r, False)
            if autocast:
                a_w, b_w = 2 * r * d_in, 2 * r * lin.d_out
                out.cache += a_w + b_w
                out.copies += b_w + (a_w if in_rg else 0)
        out_rg[role] = c.full or role in c.lora or in_rg
    d_in = arch.linear(roles[0]).d_in
    if need_input and not input_saved:
        out.add(f"{'/'.join(roles)} input", in_bytes * T * d_in, T * d_in, split_in)
    if c.bnb_legacy and in_rg:
        quantized = [role for role in roles if role in c.quantized_roles]
        compute = c.dequant_compute_bytes
        if quantized and compute != in_bytes:  # each Linear4bit casts its input: x.to(compute_dtype)
            held = len(quantized) * compute * T * d_in
            out.held += held
            out.held_gc += held
        elif quantized:
            out.held_gc += in_bytes * T * d_in
            if not (need_input or input_saved):
                out.held += in_bytes * T * d_in
    return out_rg, need_input or input_saved
