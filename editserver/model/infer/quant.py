"""Weight-only int8 for CPU serving (``--quantize int8``): half the bytes a step reads from memory.

Design decisions:
- A batch-1 denoising step on a CPU is bound by reading the weights (``editserver bench step`` prints
  the floor: weight bytes over the machine's measured bandwidth), so storing them in int8 halves
  the floor against bf16. Activations stay in the model's dtype; only the weights are int8.
- Per output channel, symmetric: w ~ q * s with s = max|w_row| / 127 and q in [-127, 127] (the
  absmax scheme of LLM.int8(), Dettmers et al. 2022, Eq. 1, per row without outlier splitting).
- The matmul is PyTorch's own CPU kernel for exactly this layout, ``aten._weight_int8pack_mm``
  (int8 weights [N, K], one scale per output row, activations and scales in bf16/fp16/fp32), so no
  hand-written kernel is involved; a device without it (CUDA here) is refused up front. Its
  fp32-activation path is a slow fallback (2026-12-03, 2-core CPU: 15-35x slower than the dense fp32
  matmul at the shipped model's and the 0.5B shapes, against 2x faster for bf16), so an fp32 model's
  int8 layers multiply in bf16 and return fp32.
- Every linear layer of the transformer blocks and an untied output head are quantized; the
  embedding table stays (a step reads only its rows), and so does a head tied to it. A quantized
  model serves; it does not train.
"""

from __future__ import annotations

import torch
from torch import nn

QUANTIZE = ("none", "int8")


class Int8Linear(nn.Module):
    """``nn.Linear`` with int8 weights [out, in] and one scale per output channel."""

    def __init__(self, linear: nn.Linear):
        super().__init__()
        w = linear.weight.detach()
        # the kernel's fp32-activation path is a slow fallback (module docstring): fp32 models
        # multiply in bf16 and get their output back in fp32
        dtype = torch.bfloat16 if w.dtype == torch.float32 else w.dtype
        scale = w.float().abs().amax(dim=1).clamp_min(1e-8) / 127.0  # [out]
        q = (w.float() / scale[:, None]).round().clamp(-127, 127).to(torch.int8)  # [out, in]
        self.in_features, self.out_features = linear.in_features, linear.out_features
        self.register_buffer("qweight", q.contiguous())
        self.register_buffer("scales", scale.to(dtype))
        self.bias = None if linear.bias is None else nn.Parameter(linear.bias.detach(), requires_grad=False)

    @property
    def weight(self) -> torch.Tensor:
        """The dequantized weight [out, in] (for code that reads ``.weight``; not the hot path)."""
        return self.qweight.float() * self.scales.float()[:, None]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        shape = x.shape
        y = torch.ops.aten._weight_int8pack_mm(
            x.reshape(-1, shape[-1]).to(self.scales.dtype).contiguous(), self.qweight, self.scales
        ).to(x.dtype)  # [M, out]
        if self.bias is not None:
            y = y + self.bias
        return y.reshape(*shape[:-1], self.out_features)


def quantize(model: nn.Module, how: str) -> nn.Module:
    """``model`` with its block linears (and an untied head) in int8 when ``how`` is "int8"; in place."""
    if how not in QUANTIZE:
        raise ValueError(f"quantize must be one of {QUANTIZE}, got {how!r}")
    if how == "none":
        return model
    if any(p.device.type != "cpu" for p in model.parameters()):
        raise ValueError("--quantize int8 runs on the CPU only (aten._weight_int8pack_mm)")
    for block in model.layers:
        for name, mod in list(block.named_modules()):
            if isinstance(mod, nn.Linear) and mod.out_features > 1:
                parent = block.get_submodule(name.rsplit(".", 1)[0]) if "." in name else block
                setattr(parent, name.rsplit(".", 1)[-1], Int8Linear(mod))
    if getattr(model, "lm_head", None) is not None and isinstance(model.lm_head, nn.Linear):
        model.lm_head = Int8Linear(model.lm_head)
    return model
