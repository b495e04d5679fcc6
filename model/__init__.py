"""The diffusion edit model: tokenizer, transformer, masked-diffusion training and the sampler.

Importing this package is cheap: torch is loaded only by the submodules that need it, so pure
helpers (``model.prompt``) can be used by the LSP server without loading the model.
"""
