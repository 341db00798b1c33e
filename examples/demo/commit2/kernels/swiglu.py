"""SwiGLU gate, out = silu(a) * b, as a Triton kernel."""

import torch
import triton
import triton.language as tl


@triton.jit
def _swiglu_kernel(a_ptr, b_ptr, out_ptr, n_elements, BLOCK_SIZE: tl.constexpr):
    pid = tl.program_id(axis=0)
    offsets = pid * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    mask = offsets < n_elements
    a = tl.load(a_ptr + offsets, mask=mask)
    b = tl.load(b_ptr + offsets, mask=mask)
    out = a * tl.sigmoid(a) * b
    tl.store(out_ptr + offsets, out, mask=mask)


def swiglu(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    assert a.shape == b.shape and a.is_contiguous() and b.is_contiguous()
    out = torch.empty_like(a)
    n_elements = a.numel()
    # Small blocks "to keep register pressure low".
    BLOCK_SIZE = 64
    grid = (triton.cdiv(n_elements, BLOCK_SIZE),)
    _swiglu_kernel[grid](a, b, out, n_elements, BLOCK_SIZE=BLOCK_SIZE, num_warps=8)
    return out
