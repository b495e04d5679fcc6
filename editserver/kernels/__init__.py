"""Triton kernels for the diffusion model's hot path, each with a plain-PyTorch reference.

Design decisions:
- One op per module: ``kernels/<op>.py`` holds ``_<op>_kernel`` (the ``@triton.jit`` kernel) and the
  host function ``<op>(...)`` that launches it, and re-exports ``<op>_reference(...)``: the same
  signature and semantics in plain PyTorch, kept in ``kernels/reference.py``. The tests compare the
  two; the references are also what CPU machines run (the model's PyTorch paths call them).
- This package knows nothing of ``model/``: shapes and semantics are documented per op, and the
  model's dispatch (``model/infer/ops.py``) adapts its call sites to them.
- Importing this package or ``kernels.reference`` does not import Triton; importing an op module
  does. CPU machines without Triton import only those two.
- Forward only: no kernel records autograd history; training keeps the PyTorch forms.
- Kernels run on CUDA tensors, or on CPU tensors under ``TRITON_INTERPRET=1`` (Triton's interpreter,
  which must be set before the first op module is imported: ``@triton.jit`` reads it at decoration).
"""

OPS = ("attention", "rmsnorm", "rotary", "swiglu", "token_confidence")
