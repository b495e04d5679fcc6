"""Serving: weights, tokenizer and transformer; the decode plan and the one denoising loop.

Nothing here imports ``model.train``: a reader of the serving path never opens training code.
"""
