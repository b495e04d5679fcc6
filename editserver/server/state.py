"""What the request handlers share: the loaded engine, its scheduler and the served settings.

Design decisions:
- One ``Served`` per app, on ``app.state.served``: module-level handlers (routes.py) read it from
  the request instead of closing over ``create_app``'s locals, so each handler is testable and small.
"""

from __future__ import annotations

from dataclasses import dataclass

from fastapi import Request

from editserver.model.infer.engine import Engine
from editserver.server.metrics import Metrics
from editserver.server.scheduler import Scheduler
from editserver.server.schemas import Limits
from editserver.server.settings import Settings


@dataclass
class Served:
    settings: Settings
    engine: Engine
    scheduler: Scheduler
    metrics: Metrics
    limits: Limits
    thresholds: dict[str, float]  # the threshold in force per kind ("fim", "in_file", "cross_file")
    created: int  # when the model was loaded (the model cards' ``created``)

    @property
    def cap(self) -> int:
        return self.limits.max_output_tokens


def served(request: Request) -> Served:
    return request.app.state.served
