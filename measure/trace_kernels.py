"""What the CUDA kernels allocate where the CPU kernels that fake tensors run (`vramplan.measure.tracer`) allocate
otherwise: `vramplan trace` runs the step on fake CPU tensors (backward on fake CUDA tensors needs a CUDA build) and
corrects each op's outputs, and adds the kernel's own temporaries, to what CUDA would allocate. Each correction names
the kernel it was read from; `CORRECTIONS` lists them for the report (the same differences as
`vramplan.core.memory.activations.context.CPU_DIFFERENCES`, and the CUDA kernels' workspaces).

`cuda_outputs(func, args, out)` returns the op's outputs as CUDA lays them out; `cuda_temporaries(func, args, out)`
the bytes of the buffers the CUDA kernel allocates and frees inside the op (through the caching allocator, so
``max_memory_allocated`` sees them). `AutocastAsCuda` is a function mode applying CUDA autocast's fp32 list where the
CPU's differs (it runs above autocast, so autograd saves what CUDA's autocast would)."""

from __future__ import annotations

from typing import Any

import torch
from torch.overrides import TorchFunctionMode

aten = torch.ops.aten

CORRECTIONS: tuple[str, ...] = (
    "LayerNorm's mean/rstd in fp32 (aten/src/ATen/native/cuda/layer_norm_kernel.cu: acc_type of the input)",
    "SDPA flash/efficient output laid out [b, s, a, d] (flash_attn/flash_api.cpp mha_fwd: out = empty_like(q) of "
    "the [b, s, a, d] query), so o_proj's reshape is a view; fp32 runs the efficient kernel, whose log-sum-exp is "
    "padded to 32 queries (mem_eff_attention/kernel_forward.h kAlignLSE)",
    "flash attention backward's temporaries: softmax_d [b, a, s_128] fp32, dq_accum [b, s_128, a, d_32] fp32 and, "
    "with grouped/multi-query attention, dk/dv expanded to every head (flash_attn/flash_api.cpp mha_bwd)",
    "cuBLAS workspace allocated through the caching allocator at the first matmul (aten/src/ATen/cuda/"
    "CublasHandlePool.cpp getChosenWorkspaceSize: 4096 KiB x 8 on Hopper and later, else 4096 KiB x 2 + 16 KiB x 8)",
    "CUDA autocast's fp32 ops the CPU's autocast runs in 16 bit: layer_norm, group_norm, pow, softplus "
    "(aten/src/ATen/autocast_mode.cpp, the AutocastCUDA fp32 list)",
)


def _round(n: int, m: int) -> int:
    return -(-n // m) * m


def grouped_mm_output(func: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """``torch._grouped_mm``'s output for inputs its fake (meta) kernel refuses: it checks CUDA's bf16-only rule
    (torch/_meta_registrations.py ``_meta_grouped_mm_common``), while transformers runs the CPU kernel in fp32 too
    (integrations/moe.py ``_can_use_grouped_mm``). Shapes as the kernel's: (2-D, 3-D) -> [m, n]; (2-D, 2-D) with
    offsets -> [groups, m, n]; (3-D, 2-D) -> [m, n] per group stacked; (3-D, 3-D) -> [groups, m, n]. None when the
    fake kernel takes the inputs (bf16)."""
    if func is not aten._grouped_mm.default:
        return None
    a, b = args[0], args[1]
    if a.dtype == torch.bfloat16:
        return None
    offs = args[2] if len(args) > 2 else kwargs.get("offs")
    dtype = kwargs.get("out_dtype") or a.dtype
    if a.dim() == 2 and b.dim() == 3:
        shape: tuple[int, ...] = (a.shape[0], b.shape[-1])
    elif a.dim() == 2 and b.dim() == 2 and offs is not None:
        shape = (offs.shape[0], a.shape[0], b.shape[-1])
    elif a.dim() == 3 and b.dim() == 2:
        shape = (a.shape[1], b.shape[-1])
    else:
        shape = (a.shape[0], a.shape[1], b.shape[-1])
    return torch.empty(shape, dtype=dtype)


def cuda_outputs(func: Any, args: tuple[Any, ...], out: Any) -> Any:
    """`out` as the CUDA kernel would return it (new fake tensors where the layout or dtype differs)."""
    if func is aten.native_layer_norm.default:
        y, mean, rstd = out
        if mean.dtype != torch.float32:
            mean = torch.empty(mean.shape, dtype=torch.float32)
            rstd = torch.empty(rstd.shape, dtype=torch.float32)
        return (y, mean, rstd)
    if func is aten._scaled_dot_product_flash_attention_for_cpu.default:
        o, lse = out
        b, a, s, d = o.shape
        o = torch.empty((b, s, a, d), dtype=o.dtype).transpose(1, 2)
        if o.dtype == torch.float32:  # no flash kernel for fp32 on CUDA: the efficient kernel's padded lse
            lse = torch.empty((b, a, _round(s, 32)), dtype=torch.float32)
        return (o, lse)
    return out


def cuda_temporaries(func: Any, args: tuple[Any, ...], out: Any) -> tuple[int, ...]:
    """The bytes of each buffer the CUDA kernel of `func` allocates and frees within the op."""
    if func is aten._scaled_dot_product_flash_attention_for_cpu_backward.default:
        q, k = args[1], args[2]  # grad_out, query, key, value, out, logsumexp, ...
        b, a, s, d = q.shape
        a_kv, s_k = k.shape[1], k.shape[2]
        if q.dtype == torch.float32:  # the efficient kernel's backward: grad of the fp32 lse-padded delta
            return (4 * b * a * _round(s, 32),)
        s128, d32 = _round(s, 128), _round(d, 32 if d <= 128 else 64)
        temps = [4 * b * a * s128, 4 * b * s128 * a * d32]
        if a_kv != a:
            temps += [q.element_size() * b * s_k * a * d] * 2
        return tuple(temps)
    return ()


MATMULS = frozenset(
    {aten.mm.default, aten.addmm.default, aten.bmm.default, aten.baddbmm.default, aten._grouped_mm.default}
)


def cublas_workspace_bytes(hopper_or_later: bool = True) -> int:
    """``getChosenWorkspaceSize``'s default (CUBLAS_WORKSPACE_CONFIG unset)."""
    return 4096 * 1024 * 8 if hopper_or_later else 4096 * 1024 * 2 + 16 * 1024 * 8


class AutocastAsCuda(TorchFunctionMode):  # type: ignore[misc]
    """Under CPU autocast, run the ops CUDA's autocast runs in fp32 (and the CPU's does not) on fp32 inputs: the
    casts happen above autograd, as CUDA autocast's do, so the fp32 copies are what backward saves."""

    FUNCS = frozenset(
        {
            torch.nn.functional.layer_norm,
            torch.nn.functional.group_norm,
            torch.nn.functional.softplus,
            torch.pow,
            torch.Tensor.pow,
            torch.Tensor.__pow__,
        }
    )

    def __torch_function__(self, func: Any, types: Any, args: tuple[Any, ...] = (), kwargs: Any = None) -> Any:
        kwargs = kwargs or {}
        if func in self.FUNCS and torch.is_autocast_enabled("cpu"):
            args = tuple(_up(a) for a in args)
            kwargs = {k: _up(v) for k, v in kwargs.items()}
            with torch.autocast("cpu", enabled=False):
                return func(*args, **kwargs)
        return func(*args, **kwargs)


def _up(x: Any) -> Any:
    if isinstance(x, torch.Tensor) and x.dtype in (torch.bfloat16, torch.float16):
        return x.float()
    return x
