import os

import torch
import torch.nn as nn

# Sizes for CI (the Triton interpreter); benchmarks/kernelbench.py --scale N enlarges them for a GPU.
SCALE = int(os.environ.get("KERNELBENCH_SCALE", "1"))


class Model(nn.Module):
    """gelu(x @ W^T + b): a GEMM with a fused epilogue (the weights come from the seeded init)."""

    def __init__(self, in_features: int, out_features: int):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.nn.functional.gelu(self.linear(x))


batch_size = 16 * SCALE
in_features = 32
out_features = 32


def get_inputs():
    return [torch.randn(batch_size, in_features)]


def get_init_inputs():
    return [in_features, out_features]
