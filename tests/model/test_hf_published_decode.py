"""``--decode published``: each family's published generation loop, written out plainly here, and the
engine's published plan choose the same token at the same place at every step.

- Dream (``generation_utils.py``, ``alg="entropy"``, ``steps`` = the canvas): every step runs the
  model over prompt, canvas and suffix, shifts the logits one to the right, and commits the masked
  position of lowest entropy with its most likely token.
- LLaDA (``generate.py``, ``remasking="low_confidence"``, ``block_length`` 32, one token per step):
  inside the current 32-token block, the masked position of highest probability.

Both with the tokens the server never proposes removed (mask and layout tags), as the engine does.
"""

from __future__ import annotations

import pytest
import torch

from editserver.model.infer.engine import Engine, FimRequest, SamplingOptions
from tests.hf_models import make_published


def reference_step(
    engine: Engine, ctx: list[int], canvas: list[int], suf: list[int]
) -> tuple[torch.Tensor, ...]:
    """One step of the family's published loop from ``canvas``: (masked positions [M], their score
    [M], their most likely token [M]); the loop commits the best-scoring one (module docstring)."""
    model, mask = engine.model, engine.tok.mask_id
    x = torch.tensor([[*ctx, *canvas, *suf]])  # [1, L]
    dream = engine.family != "llada"
    with torch.no_grad():
        logits = model(x).float()  # [1, L, V]
    if dream:  # Dream predicts position i from i - 1
        logits = torch.cat([logits[:, :1], logits[:, :-1]], dim=1)
    logits = logits[0, len(ctx) : len(ctx) + len(canvas)]  # [n, V]
    logits[:, [mask, *engine.suppressed_ids()]] = float("-inf")
    masked = (torch.tensor(canvas) == mask).nonzero()[:, 0]  # [M]
    if not dream:  # LLaDA: only the current 32-token block of the canvas
        masked = masked[masked < (int(masked[0]) // 32 + 1) * 32]
    p = torch.softmax(logits[masked], dim=-1)  # [M, V]
    best_p, best_tok = p.max(dim=-1)
    score = (p * torch.log(p + 1e-10)).sum(-1) if dream else best_p  # -H(p), as Dream writes it; p1
    return masked, score, best_tok


@pytest.mark.parametrize("name", ["Dream-v0-Instruct-7B", "LLaDA-8B-Instruct"])
def test_published_loop_chooses_the_same_tokens_step_by_step(name, tmp_path):
    engine = Engine.load(make_published(tmp_path, name)[0])
    n = 40  # more than one LLaDA block
    req = FimRequest("def add(a, b):\n    return ", "\n\nprint(add(1, 2))\n", max_tokens=n)
    ctx, suf, _ = engine.fim_layout(req, n)
    seen: list[list[int]] = []
    plan = engine.plan(FimRequest("x", options=SamplingOptions(published=True)))
    assert plan.fixed_canvas and plan.cache is engine.layout.exact_cache
    assert plan.rule.entropy == (engine.family != "llada") and plan.block_size == (
        32 if "LLaDA" in name else 1 << 20
    )

    import editserver.model.infer.sampler as sampler

    real_apply = sampler._apply

    def spy(
        c, blk, commit, tok, conf, hooks, eot, edit=None, rewrite=None
    ):  # the canvas after each step, before any early end
        real_apply(c, blk, commit, tok, conf, sampler.Hooks(), eot, edit, rewrite)
        seen.append(c.tokens[0, :n].tolist())

    sampler._apply = spy
    try:
        out = engine.complete(
            FimRequest(req.prefix, req.suffix, max_tokens=n, options=SamplingOptions(published=True))
        )
    finally:
        sampler._apply = real_apply
    mask = engine.tok.mask_id
    assert len(seen) == n and out.steps == n, "one token per step over the whole canvas"
    before = [mask] * n
    for k, after in enumerate(seen):
        changed = [i for i in range(n) if after[i] != before[i]]
        assert len(changed) == 1, f"step {k} committed {changed}"
        i = changed[0]
        masked, score, best = reference_step(engine, ctx, before, suf or [])
        j = int((masked == i).nonzero()[0, 0])
        # the published loop's choice: the best score (ties within float noise of the two forwards)
        assert float(score[j]) >= float(score.max()) - 1e-5, f"step {k}: position {i} is not the loop's"
        assert after[i] == int(best[j]), f"step {k}: token {after[i]} is not the loop's"
        before = after
