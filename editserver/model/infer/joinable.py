"""A decode that requests can join while it runs: the engine's side of step-level admission.

Design decisions:
- ``Engine.open(plan)`` returns a ``Running``; ``join`` turns a request into its rows with the
  ``member`` function it was given (the engine's: layout, hooks, and the completion built when its
  rows are done) and adds them to the one denoising loop (model/infer/sampler.py ``Decode``); ``run``
  decodes to the end, calling an ``admit`` hook at each block boundary. ``Engine.complete_batch`` is
  a ``Running`` that nobody joins.
- It takes the pieces it needs as plain values and functions (the model, the tokens never proposed,
  the device, how a request plans and how it becomes rows), never the engine, so it knows nothing of
  requests beyond handing them to those functions, and the engine imports it, not the reverse.
- Only greedy plans take joiners once running: sampled rows draw from one shared ``torch.Generator``,
  so a joiner would change its neighbours' draws.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

import torch

from editserver.model.infer.loop_types import Member, Tokens
from editserver.model.infer.plan import DecodePlan
from editserver.model.infer.sampler import Decode

if TYPE_CHECKING:
    from editserver.model.infer.checkpoint import ServedModel
    from editserver.model.infer.requests import Completion, EditRequest, FimRequest

    Request = FimRequest | EditRequest


class Running:
    """A decode of requests of one plan that more can join at its block boundaries (model/infer/
    sampler.py ``Decode``): each request's answer goes to its ``deliver`` as soon as its rows are done,
    and equals its answer alone. Greedy plans only take joiners (``Running.admits``): sampled rows
    share one ``torch.Generator``, so a joiner would change its neighbours' draws.

    ``plan_of(req)`` is the request's decode plan (a joiner must have this decode's); ``member(req,
    plan, deliver)`` its rows as a member of the decode (model/infer/loop_types.py ``Member``)."""

    def __init__(
        self,
        model: ServedModel,
        plan: DecodePlan,
        tokens: Tokens,
        device: str,
        plan_of: Callable[[Request], DecodePlan],
        member: Callable[[Request, DecodePlan, Callable[[Completion], None]], Member],
    ):
        self.plan, self.plan_of, self.member = plan, plan_of, member
        self.decode = Decode(
            model,
            plan,
            tokens,
            generator=torch.Generator(device=device).manual_seed(plan.sampling.seed),
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

    def join(self, req: Request, deliver: Callable[[Completion], None]) -> None:
        """Add ``req``; ValueError (ContextTooLongError, PromptError) when it cannot join, the decode
        unchanged. Once running, only at a block boundary (inside ``run``'s ``admit``)."""
        if self.plan_of(req) != self.plan:
            raise ValueError("a batch holds requests of one decode plan")
        if self.decode.running and not self.admits:
            raise ValueError("a sampled decode takes no requests once it runs")
        self.decode.join(self.member(req, self.plan, deliver))

    def run(self, admit: Callable[[Running], None] | None = None) -> None:
        """Decode to the end; ``admit(self)`` at each block boundary may ``join`` more requests."""
        self.decode.run(None if admit is None or not self.admits else lambda _: admit(self))
