"""GPU architectures as the prompt describes them: tensor-core instruction shapes, memory features,
and how Triton, CUDA and PyTorch code reaches them. One record per architecture in an explicit
registry; a GPU's marketing name picks its record (and, for the parts we know, its datasheet line).
"""

from __future__ import annotations

import re
from dataclasses import dataclass


@dataclass(frozen=True)
class Arch:
    """One GPU architecture, for the prompt's hardware notes."""

    name: str
    """Family and chip, e.g. 'Hopper (GH100)'."""
    sm: str
    """nvcc target, e.g. 'sm_90a'."""
    names: str
    """Regular expression over the GPU's marketing name (torch.cuda.get_device_name())."""
    tensor_cores: tuple[str, ...]
    """Tensor-core instructions and their shapes per input type."""
    memory: tuple[str, ...]
    """Shared memory, L2 and asynchronous-copy features."""
    triton: tuple[str, ...]
    """How Triton code reaches these features."""
    cuda: tuple[str, ...]
    """How CUDA/C++ (and CuTe/CUTLASS) code reaches them."""
    pytorch: tuple[str, ...] = ()
    """How PyTorch code reaches them."""

    def notes(self, language: str) -> tuple[str, ...]:
        lang = {"triton": self.triton, "cuda": self.cuda, "cpp": self.cuda, "python": self.pytorch}.get(language, ())
        return (*self.tensor_cores, *self.memory, *lang)


_PYTORCH_TC = ("From PyTorch, tensor cores are reached through matmul-like operations in fp16/bf16 (tf32 for fp32 "
               "when allowed); the elementwise work around them is where a hand-written kernel saves memory traffic.",)

ARCHS: tuple[Arch, ...] = (
    Arch("Blackwell (GB100)", "sm_100a", r"\b(G?B200|B100|GB300|B300)\b",
         ("tcgen05.mma (UMMA), issued by one thread for the whole CTA, accumulates in tensor memory (TMEM, 256 KB "
          "per SM): M = 64 or 128 per CTA (256 for a CTA pair, cta_group::2), N a multiple of 8 or 16 up to 256, "
          "K = 16 for fp16/bf16, 32 for fp8/fp6, 64 for block-scaled fp4 (mxf4/nvf4).",),
         ("TMA (cp.async.bulk.tensor) and thread block clusters as on Hopper; 228 KB shared memory per SM, 227 KB "
          "per block with the opt-in attribute.",),
         ("In Triton, tl.dot lowers to tcgen05 for large tiles (BLOCK_M >= 128); tensor descriptors give TMA.",),
         ("In CUDA, reach tcgen05 and TMEM through CuTe's SM100 UMMA atoms and TMA copy atoms (CUTLASS 3.8+).",),
         _PYTORCH_TC),
    Arch("Hopper (GH100)", "sm_90a", r"\b(G?H100|H200|GH200|H800|H20)\b",
         ("Warpgroup MMA (4 warps, 128 threads), wgmma.mma_async: m64nNk16 for fp16/bf16 inputs (fp32 or fp16 "
          "accumulators), m64nNk8 for tf32, m64nNk32 for fp8 (e4m3/e5m2) and int8, N a multiple of 8 up to 256; "
          "A from registers or shared memory, B from shared memory in a swizzled layout.",
          "The Ampere-style mma.sync m16n8k16 still runs on Hopper, at a fraction of its tensor throughput.",),
         ("The Tensor Memory Accelerator (TMA, cp.async.bulk.tensor) copies whole tiles global<->shared "
          "asynchronously, tracked by mbarrier; thread block clusters share distributed shared memory.",
          "228 KB shared memory per SM, up to 227 KB per block with the opt-in attribute; 50 MB of L2.",),
         ("In Triton, tl.dot lowers to wgmma when tiles are large enough (BLOCK_M >= 64, num_warps a multiple "
          "of 4); num_stages pipelines the loads; recent Triton versions expose TMA through tensor descriptors.",),
         ("In CUDA, reach wgmma and TMA through CuTe/CUTLASS (SM90_64xNx16 MMA atoms, SM90_TMA_LOAD) or PTX "
          "(wgmma.mma_async, cp.async.bulk.tensor); thread block clusters share distributed shared memory.",),
         _PYTORCH_TC),
    Arch("Ada (AD10x)", "sm_89", r"\b(L4|L40S?|L20|RTX 40\d0|RTX \d000 Ada)\b",
         ("mma.sync.aligned.m16n8k16 for fp16/bf16 (fp32 accumulate), m16n8k32 for fp8 (e4m3/e5m2) and int8, "
          "m16n8k8 for tf32, per warp; fragments loaded with ldmatrix.",),
         ("cp.async (4, 8 or 16 bytes per thread) for multi-stage global->shared pipelines; no TMA, no clusters; "
          "100 KB shared memory per SM, 99 KB per block.",),
         ("In Triton, tl.dot lowers to mma.sync m16n8k16 (fp16/bf16) or the fp8 form; num_stages >= 2 pipelines "
          "loads with cp.async.",),
         ("In CUDA, use mma.sync through CuTe's SM80/SM89 MMA atoms or WMMA 16x16x16 fragments, and cp.async.",),
         _PYTORCH_TC),
    Arch("Ampere (GA100)", "sm_80", r"\b(A100|A800|A30)\b",
         ("mma.sync.aligned.m16n8k16 for fp16/bf16 (fp32 accumulate), m16n8k8 for tf32, m16n8k32 for int8, per "
          "warp; fragments loaded with ldmatrix (.trans for the B operand).",),
         ("cp.async (4, 8 or 16 bytes per thread, .cg bypasses L1) for multi-stage global->shared pipelines; no TMA; "
          "164 KB shared memory per SM, 163 KB per block with the opt-in attribute; 40 MB of L2.",),
         ("In Triton, tl.dot lowers to mma.sync m16n8k16 (fp16/bf16, tf32 for fp32 inputs); num_stages >= 2 "
          "pipelines loads with cp.async.",),
         ("In CUDA, use mma.sync through CuTe's SM80 MMA atoms (SM80_16x8x16_F32BF16BF16F32_TN) or WMMA 16x16x16 "
          "fragments, and cp.async (CuTe SM80_CP_ASYNC_CACHEGLOBAL, or __pipeline_memcpy_async).",),
         _PYTORCH_TC),
    Arch("Ampere (GA10x)", "sm_86", r"\b(A10G?|A40|A16|A2|RTX 30\d0|RTX A\d000)\b",
         ("mma.sync.aligned.m16n8k16 for fp16/bf16 (fp32 accumulate), m16n8k8 for tf32, m16n8k32 for int8, per "
          "warp; fragments loaded with ldmatrix.",),
         ("cp.async for multi-stage global->shared pipelines; no TMA; 100 KB shared memory per SM, 99 KB per "
          "block.",),
         ("In Triton, tl.dot lowers to mma.sync m16n8k16; num_stages >= 2 pipelines loads with cp.async.",),
         ("In CUDA, use mma.sync through CuTe's SM80 MMA atoms or WMMA 16x16x16 fragments, and cp.async.",),
         _PYTORCH_TC),
    Arch("Turing (TU10x)", "sm_75", r"\b(T4|RTX 20\d0|TITAN RTX|Quadro RTX)\b",
         ("mma.sync m16n8k8 for fp16 (fp32 accumulate), m8n8k16 for int8; no bf16 or tf32 tensor cores.",),
         ("No cp.async; 64 KB shared memory per SM.",),
         ("In Triton, tl.dot lowers to mma.sync m16n8k8 for fp16 inputs.",),
         ("In CUDA, use WMMA 16x16x16 fp16 fragments or mma.sync m16n8k8.",),
         _PYTORCH_TC),
)


def arch_of(gpu_name: str) -> Arch | None:
    """The architecture of a GPU by its marketing name; None when we have no notes for it."""
    for a in ARCHS:
        if re.search(a.names, gpu_name, re.IGNORECASE):
            return a
    return None
