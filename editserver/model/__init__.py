"""The diffusion edit model.

- ``model.infer``: what serving needs (weights, tokenizer, transformers of each family, the decode
  plan and the one denoising loop, ``Engine``).
- ``model.train``: corpora, the masked-diffusion loss, the training loop, alignment.

Importing this package is cheap: torch is loaded only by the submodules that need it.
"""
