"""CPU weight layouts for serving: int8 (``--quantize int8``), int8 with int8 step activations
(``--quantize w8a8``) and oneDNN-packed (``--quantize packed``).

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
- ``packed`` keeps the weights' values and dtype and only stores them in oneDNN's blocked layout
  (``mkldnn._reorder_linear_weight``), multiplied by ``mkldnn._linear_pointwise``, the pair
  PyTorch's own compiler uses for frozen CPU linears. A denoising step multiplies a block of 8-32
  rows, where MKL's plain GEMM is far from the machine's peak: at the Qwen2-0.5B shapes on a 2-core
  AVX2 CPU (2026-12-04, fp32) the packed product took 0.33-0.59x the time for 8-16 rows, and
  1.2-1.3x for a 577-row context forward, so a product of more than ``PACKED_MAX_ROWS`` rows
  unpacks the weight (``to_dense``, a copy) and runs the plain GEMM: one copy of the weights is
  kept, and each kind of product gets the faster kernel. Results
  differ from the plain product by float rounding only (max 2e-4 at those shapes). A CPU or dtype
  oneDNN cannot pack (bf16 without AVX-512 or AVX-NE-CONVERT) keeps the plain layer. ``auto`` (the
  server's default) packs on a CPU: the shipped model gave the same 200 HumanEval answers either way.
- ``w8a8`` stores the same int8 weights and, for a step's block of rows (up to
  ``PACKED_MAX_ROWS``), quantizes the activations to int8 too, per call (dynamic, one scale for the
  block), and multiplies with PyTorch's x86 quantized engine (``quantized::linear_dynamic``, fbgemm
  or oneDNN integer kernels), which AVX2 runs natively where it only emulates bf16: at the
  Qwen2-0.5B shape on a 2-core AVX2 CPU a step after the context took 0.54x the packed fp32 one
  (docs/experiments.md). A product of more rows (a context's forward) multiplies by the
  dequantized weights instead, so the keys every later step reads are weight-only int8: one scale
  for a whole context would let its largest activations (a model's outlier channels, LLM.int8()
  section 3) flatten the rest. The activations' rounding changes answers more than int8 weights
  alone (the shipped model: 151 of 200 HumanEval single-line answers the same as packed, pass@1
  the same), so nothing chooses it by default.
- Every linear layer of the transformer blocks and an untied output head are converted; the
  embedding table stays (a step reads only its rows), and so does a head tied to it. A converted
  model serves; it does not train.
"""

from __future__ import annotations

import warnings

import torch
from torch import nn

QUANTIZE = ("auto", "none", "int8", "packed", "w8a8")
# above this many rows (a context's forward, not a step's block) the packed weight is unpacked for
# MKL's plain GEMM, faster there (module docstring); the copy costs a few percent of that product
PACKED_MAX_ROWS = 128


def _context_sized(x: torch.Tensor) -> bool:
    """Whether ``x`` [..., in] holds more than ``PACKED_MAX_ROWS`` rows: a context's forward, not a step."""
    return x.numel() // x.shape[-1] > PACKED_MAX_ROWS


def int8_per_channel(w: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(q [out, in] int8, scale [out] fp32): symmetric absmax per output channel (module docstring)."""
    w = w.detach().float()
    scale = w.abs().amax(dim=1).clamp_min(1e-8) / 127.0  # [out]
    return (w / scale[:, None]).round().clamp(-127, 127).to(torch.int8).contiguous(), scale


class Int8Linear(nn.Module):
    """``nn.Linear`` with int8 weights [out, in] and one scale per output channel."""

    def __init__(self, linear: nn.Linear):
        super().__init__()
        w = linear.weight.detach()
        # the kernel's fp32-activation path is a slow fallback (module docstring): fp32 models
        # multiply in bf16 and get their output back in fp32
        dtype = torch.bfloat16 if w.dtype == torch.float32 else w.dtype
        q, scale = int8_per_channel(w)
        self.in_features, self.out_features = linear.in_features, linear.out_features
        self.register_buffer("qweight", q)
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


class W8A8Linear(nn.Module):
    """int8 weights [out, in] (one scale per output channel); a step's block of rows is quantized to
    int8 on the fly for the CPU's quantized engine, a context's forward uses the dequantized weights
    (module docstring)."""

    def __init__(self, linear: nn.Linear):
        super().__init__()
        q, scale = int8_per_channel(linear.weight)
        self.in_features, self.out_features = linear.in_features, linear.out_features
        self.register_buffer("qweight", q)
        self.register_buffer("scales", scale)
        self.bias = None if linear.bias is None else nn.Parameter(linear.bias.detach(), requires_grad=False)
        with warnings.catch_warnings():  # the quantized-tensor API warns of its future removal
            warnings.simplefilter("ignore")
            zero = torch.zeros_like(scale, dtype=torch.long)
            qt = torch.quantize_per_channel(q.float() * scale[:, None], scale.double(), zero, 0, torch.qint8)
            bias = None if self.bias is None else self.bias.float()
            self.packed = torch.ops.quantized.linear_prepack(qt, bias)  # opaque: never saved

    @staticmethod
    def available() -> bool:
        """Whether this PyTorch has the step's product here: an x86 quantized engine in use (fbgemm or
        oneDNN) and the dynamic linear op (its quantized-tensor API is marked for removal)."""
        try:
            torch.ops.quantized.linear_dynamic  # noqa: B018 (a lookup that raises when absent)
        except (AttributeError, RuntimeError):
            return False
        return torch.backends.quantized.engine in ("x86", "fbgemm", "onednn")

    @property
    def weight(self) -> torch.Tensor:
        """The dequantized weight [out, in] (for code that reads ``.weight``; not the hot path)."""
        return self.qweight.float() * self.scales[:, None]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        shape = x.shape
        if _context_sized(x):  # weight-only int8 (module docstring)
            return torch.nn.functional.linear(x, self.weight.to(x.dtype), self.bias)
        # reduce_range: 7-bit activations, so AVX2's int8 multiply-add (u8 x s8 pairs summed in
        # int16) cannot saturate
        y = torch.ops.quantized.linear_dynamic(
            x.reshape(-1, shape[-1]).float().contiguous(), self.packed, True
        )
        return y.to(x.dtype).reshape(*shape[:-1], self.out_features)  # [*, out]


class PackedLinear(nn.Module):
    """``nn.Linear`` with its weight [out, in] in oneDNN's blocked layout (module docstring)."""

    def __init__(self, linear: nn.Linear, packed: torch.Tensor):
        super().__init__()
        self.in_features, self.out_features = linear.in_features, linear.out_features
        self.packed = packed  # an opaque oneDNN tensor: not a parameter, never saved
        self.bias = None if linear.bias is None else nn.Parameter(linear.bias.detach(), requires_grad=False)

    @staticmethod
    def of(linear: nn.Linear) -> nn.Module:
        """The packed layer, or ``linear`` itself where oneDNN cannot pack its weight here."""
        try:
            packed = torch.ops.mkldnn._reorder_linear_weight(linear.weight.detach(), 16)
        except (RuntimeError, AttributeError):  # no oneDNN, or this CPU lacks the dtype's path
            return linear
        return PackedLinear(linear, packed)

    @property
    def weight(self) -> torch.Tensor:
        """The weight [out, in] as a plain tensor (for code that reads ``.weight``; not the hot path)."""
        return self.packed.to_dense()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if _context_sized(x):  # the plain GEMM is faster there
            return torch.nn.functional.linear(x, self.packed.to_dense(), self.bias)
        return torch.ops.mkldnn._linear_pointwise(x.contiguous(), self.packed, self.bias, "none", [], "")


def parameter_count(model: nn.Module) -> int:
    """The model's size in parameters, whatever form its weights are stored in: a converted layer's
    weight (an int8 buffer, or an opaque packed tensor that is no parameter) counts as the
    ``out x in`` values it stands for."""
    n = sum(p.numel() for p in model.parameters())
    for m in model.modules():
        if isinstance(m, (Int8Linear, W8A8Linear, PackedLinear)):
            n += m.in_features * m.out_features
    return n


def quantize(model: nn.Module, how: str) -> nn.Module:
    """``model`` with its block linears (and an untied head) in int8 or packed (``how``); in place."""
    if how not in QUANTIZE:
        raise ValueError(f"quantize must be one of {QUANTIZE}, got {how!r}")
    on_cpu = all(p.device.type == "cpu" for p in model.parameters())
    if how == "auto":  # the same weights, faster steps on a CPU (module docstring); elsewhere as they are
        how = "packed" if on_cpu else "none"
    if how == "none":
        return model
    if not on_cpu:
        raise ValueError(f"--quantize {how} runs on the CPU only")
    if how == "w8a8" and not W8A8Linear.available():
        raise ValueError("--quantize w8a8 needs PyTorch's x86 quantized engine (fbgemm or oneDNN)")
    convert = {"int8": Int8Linear, "w8a8": W8A8Linear}.get(how, PackedLinear.of)
    for block in model.layers:
        for name, mod in list(block.named_modules()):
            if isinstance(mod, nn.Linear) and mod.out_features > 1:
                parent = block.get_submodule(name.rsplit(".", 1)[0]) if "." in name else block
                setattr(parent, name.rsplit(".", 1)[-1], convert(mod))
    if getattr(model, "lm_head", None) is not None and isinstance(model.lm_head, nn.Linear):
        model.lm_head = convert(model.lm_head)
    return model
