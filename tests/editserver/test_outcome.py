"""What each answer shows (editserver/server/outcome.py), on engine ``Completion`` values built directly."""

from __future__ import annotations

import pytest

from editserver.model.infer.engine import Completion
from editserver.server.outcome import fim_view, view


def completion(text: str, finish: str = "stop", above: bool = True, **kw) -> Completion:
    return Completion(
        text=text,
        finish_reason=finish,
        prompt_tokens=5,
        completion_tokens=3,
        score=0.5,
        token_confidences=[0.5] * 3,
        steps=2,
        model_calls=3,
        latency_s=0.01,
        above_threshold=above,
        **kw,
    )


@pytest.mark.parametrize(
    ("text", "finish", "above", "want"),
    [
        ("x + 1", "stop", True, ("x + 1", "stop", "shown")),
        # a line cut by max_tokens is still something to accept word by word
        ("x + 1", "length", True, ("x + 1", "length", "shown")),
        ("x + 1", "stop", False, ("", "stop", "below_threshold")),
        ("x + 1", "length", False, ("", "stop", "below_threshold")),
        ("", "stop", False, ("", "stop", "empty")),
        (" \n\t", "length", False, ("", "stop", "empty")),
        ("x + 1", "cancelled", True, ("", "cancelled", "cancelled")),
    ],
)
def test_fim_view(text, finish, above, want):
    v = fim_view(completion(text, finish, above))
    assert (v.text, v.finish_reason, v.outcome) == want
    assert v.suppressed == (want[2] != "shown")


REGION = "def f(x):\n    return x\n"


@pytest.mark.parametrize(
    ("text", "finish", "above", "unchanged", "outcome"),
    [
        ("def f(y):\n    return y\n", "stop", True, False, "shown"),
        ("def f(y):\n    return y\n", "stop", False, False, "below_threshold"),
        ("def f(y):\n", "length", True, False, "truncated"),
        (REGION, "stop", False, True, "unchanged"),
        ("", "stop", True, False, "empty"),
        ("def f(y):\n", "cancelled", True, False, "cancelled"),
    ],
)
def test_edit_view_is_unchanged_by_the_fim_rules(text, finish, above, unchanged, outcome):
    c = completion(text, finish, above, region=REGION, unchanged=unchanged)
    v = view("edit", c)
    assert v.outcome == outcome
    assert v.text == (text if outcome == "shown" else REGION)
    assert v.finish_reason == ("cancelled" if outcome == "cancelled" else "stop")
