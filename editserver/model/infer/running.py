"""A decode that requests can join while it runs: the engine's side of step-level admission.

Design decisions:
- ``Engine.open(plan)`` returns a ``Running``; ``join`` turns a request into its rows (the engine's
  ``_member``: layout, hooks, and the completion built when its rows are done) and adds them to the
  one denoising loop (model/infer/sampler.py ``Decode``); ``run`` decodes to the end, calling an
  ``admit`` hook at each block boundary. ``Engine.complete_batch`` is a ``Running`` that nobody joins.
- Only greedy plans take joiners once running: sampled rows draw from one shared ``torch.Generator``,
  so a joiner would change its neighbours' draws.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

import torch

from editserver.model.infer.plan import DecodePlan
from editserver.model.infer.sampler import Decode, Tokens

if TYPE_CHECKING:
    from editserver.model.infer.engine import Completion, EditRequest, Engine, FimRequest


class Running:
    """A decode of requests of one plan that more can join at its block boundaries (model/infer/
    sampler.py ``Decode``): each request's answer goes to its ``deliver`` as soon as its rows are done,
    and equals its answer alone. Greedy plans only take joiners (``Running.admits``): sampled rows
    share one ``torch.Generator``, so a joiner would change its neighbours' draws."""

    def __init__(self, engine: Engine, plan: DecodePlan):
        self.engine, self.plan = engine, plan
        # read at every decode, not once at load: ``engine.inference`` may be replaced (server overrides)
        engine.model.draft_bias = engine.inference.draft_bias
        tok = engine.tok
        self.decode = Decode(
            engine.model,
            plan,
            Tokens(tok.mask_id, tok.eot_id, tuple(engine.suppressed_ids())),
            generator=torch.Generator(device=engine.device).manual_seed(plan.sampling.seed),
        )

    @property
    def admits(self) -> bool:
        """Whether requests may join once it runs: greedy decoding draws nothing from the generator,
        and a joiner is one request's rows (fixed lengths side by side are decoded by model/infer/lengths.py)."""
        return self.plan.sampling.temperature <= 0 and not (
            self.plan.fixed_canvas and self.plan.line_canvases
        )

    @property
    def open(self) -> int:
        """Requests still decoding."""
        return len(self.decode.open)

    @property
    def steps(self) -> int:
        return self.decode.steps

    def join(self, req: FimRequest | EditRequest, deliver: Callable[[Completion], None]) -> None:
        """Add ``req``; ValueError (ContextTooLongError, PromptError) when it cannot join, the decode
        unchanged. Once running, only at a block boundary (inside ``run``'s ``admit``)."""
        if self.engine.plan(req) != self.plan:
            raise ValueError("a batch holds requests of one decode plan")
        if self.decode.running and not self.admits:
            raise ValueError("a sampled decode takes no requests once it runs")
        self.decode.join(self.engine._member(req, self.plan, deliver))

    def run(self, admit: Callable[[Running], None] | None = None) -> None:
        """Decode to the end; ``admit(self)`` at each block boundary may ``join`` more requests."""
        self.decode.run(None if admit is None or not self.admits else lambda _: admit(self))
