import os

import torch
import torch.nn as nn

# Sizes for CI (the Triton interpreter); benchmarks/kernelbench.py --scale N enlarges them for a GPU.
SCALE = int(os.environ.get("KERNELBENCH_SCALE", "1"))


class Model(nn.Module):
    """C = A @ B for small square matrices."""

    def __init__(self):
        super().__init__()

    def forward(self, A: torch.Tensor, B: torch.Tensor) -> torch.Tensor:
        return torch.matmul(A, B)


N = 32 * SCALE


def get_inputs():
    return [torch.randn(N, N), torch.randn(N, N)]


def get_init_inputs():
    return []
