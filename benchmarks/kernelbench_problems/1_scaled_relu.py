import os

import torch
import torch.nn as nn

# Sizes for CI (the Triton interpreter); benchmarks/kernelbench.py --scale N enlarges them for a GPU.
SCALE = int(os.environ.get("KERNELBENCH_SCALE", "1"))


class Model(nn.Module):
    """y = relu(x) * scale: a memory-bound elementwise op."""

    def __init__(self, scale: float):
        super().__init__()
        self.scale = scale

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(x) * self.scale


batch_size = 32 * SCALE
dim = 128


def get_inputs():
    return [torch.randn(batch_size, dim)]


def get_init_inputs():
    return [2.5]
