"""Token editing: a step may also rewrite tokens it has already written in the current block
(LLaDA2.1's token-to-token editing), a piece of a decode plan (model/infer/plan.py ``revise``).

Design decisions:
- The rule, from the publisher's own description (inclusionAI/LLaDA2.0 @3df907b
  ``llada2_1_tech_report.pdf``, section 2, Eq. 1-3): with v_i the top candidate at position i, a step
  unmasks the set Gamma (masked positions, the mask-to-token rule: model/infer/unmasking.py) and
  edits the set Delta = {i : x_i != v_i and p(v_i) > tau_edit}; every position in either set takes
  v_i. Editing is what lets the unmasking threshold drop (its "S mode").
- Which positions may be edited, and for how long (unchecked against the publisher's modeling file,
  whose 2.1 ``generate`` was not read: the diffusers ``LLaDA2Pipeline`` documentation and SGLang's
  ``JointThreshold`` decoder, both third-party, agree): the written, non-prompt tokens of the current
  block only; finished blocks never change (so the exact block cache stays exact:
  model/infer/block_cache.py). Once a block has no mask left, steps go on while the previous step
  changed something, at most ``post_steps`` of them (``max_post_steps``, 16).
- A committed end-of-text ends its row (the loop's rule, model/infer/sampler.py): it and the
  positions after it are never edited. The publisher's loop keeps decoding after an end-of-text
  inside the block and cuts the answer there; the tokens before it are the ones that matter. A row
  the ``done`` hook ends (a stop sequence, an end of turn) still takes its block's editing steps on
  the tokens before its first end-of-text; the answer is cut at its stop as usual.
- Plain tensor code over one block [B, n]; the loop keeps the per-row counters (``Decode``), this
  piece only decides. Frozen and hashable, so a plan that holds one still keys a batch.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from editserver.model.infer.unmasking import first_true


@dataclass(frozen=True)
class TokenEdit:
    """Rewrite written tokens of the current block whose new top candidate differs with p > ``threshold``."""

    threshold: float = 0.5  # tau_edit (``editing_threshold``)
    post_steps: int = 16  # steps a full block may still take while they edit (``max_post_steps``)

    def editable(
        self,
        tokens: torch.Tensor,  # [B, N] the canvas
        fixed: torch.Tensor,  # [B, N] committed
        real: torch.Tensor,  # [B, N] positions of each row's own canvas
        blk: slice,
        eot_id: int,
    ) -> torch.Tensor:
        """[B, n] the block's written canvas tokens before each row's first committed end-of-text."""
        end = first_true(fixed & (tokens == eot_id))  # [B]
        col = torch.arange(blk.start, blk.stop, device=tokens.device)[None, :]  # [1, n]
        return fixed[:, blk] & real[:, blk] & (col < end[:, None])

    def select(
        self,
        tok: torch.Tensor,  # [B, n] each position's top candidate v_i
        conf: torch.Tensor,  # [B, n] its probability
        current: torch.Tensor,  # [B, n] the tokens written there
        editable: torch.Tensor,  # [B, n]
    ) -> torch.Tensor:
        """[B, n] Delta: editable positions whose candidate differs and clears the threshold (Eq. 2)."""
        return editable & (tok != current) & (conf > self.threshold)

    def goes_on(self, changed: torch.Tensor, post: torch.Tensor) -> torch.Tensor:
        """[B] rows whose full block takes one more step: the last step changed something
        (``changed`` [B]) and fewer than ``post_steps`` steps (``post`` [B]) were taken since it filled."""
        return changed & (post < self.post_steps)
