"""What an answer shows: the suppression rules of next edit and FIM, pure functions of a Completion.

Design decisions:
- The handlers shape every answer (JSON, plain stream, diffusing stream) from one ``View`` (the text
  to send, the finish_reason to report, the outcome), so the three can never disagree, and the rules
  are tested without a server.
- Nothing worth showing is answered with each protocol's own "nothing": next edit returns the region
  as sent (Zed and Continue diff it and show nothing), FIM returns "" (editors show no ghost text).
  Such an answer is complete, so its finish_reason is "stop"; the model's own stays in the
  ``editserver`` field (``model_finish_reason``), with the score and the model's text.
- Next-edit outcomes, first match wins: ``cancelled``; ``truncated`` (ran out of canvas: a partial
  rewrite would cut the region short); ``unchanged`` (the region as it was, or only its layout
  moved); ``empty`` (it would delete the whole region, on a vacuous score); ``below_threshold`` (the
  checkpoint's threshold for the request's kind: ``in_file_threshold`` or ``cross_file_threshold``);
  ``shown``.
- FIM outcomes, first match wins: ``cancelled``; ``empty`` (nothing but blanks: nothing to insert);
  ``below_threshold`` (the checkpoint's ``fim_threshold``: users would rather see no suggestion than
  a wrong one); ``shown``. A FIM answer cut by ``max_tokens`` is shown with finish_reason ``length``,
  as OpenAI reports it: the start of a line is something a user may accept word by word, unlike a
  region rewrite that stops halfway.
- A shown FIM answer then goes through protocol/postprocess.py (the rules the LSP applies too), so
  every HTTP client gets the same cleaned text: ``fim_postprocessed`` returns the new view and what
  was trimmed. An answer the rules empty becomes outcome ``trimmed`` (text ""); one they shortened
  reports finish_reason ``stop`` (it is complete as sent). The request's own ``stop`` was applied by
  the engine first, and the rules only shorten, so it always wins.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from editserver.model.infer.engine import Completion
from editserver.protocol.postprocess import trim

Kind = Literal["fim", "edit"]
OUTCOMES = ("shown", "unchanged", "empty", "below_threshold", "truncated", "cancelled", "trimmed")


@dataclass(frozen=True)
class View:
    text: str  # what the client gets: the model's text, or the protocol's "nothing"
    finish_reason: str  # what the client is told
    outcome: str  # one of OUTCOMES

    @property
    def suppressed(self) -> bool:
        return self.outcome != "shown"


def edit_view(c: Completion) -> View:
    region = c.region or ""
    if c.finish_reason == "cancelled":
        return View(region, "cancelled", "cancelled")
    if c.finish_reason != "stop":
        return View(region, "stop", "truncated")
    if c.unchanged:
        return View(region, "stop", "unchanged")
    if region.strip() and not c.text.strip():
        return View(region, "stop", "empty")
    if not c.above_threshold:
        return View(region, "stop", "below_threshold")
    return View(c.text, "stop", "shown")


def fim_view(c: Completion) -> View:
    if c.finish_reason == "cancelled":
        return View("", "cancelled", "cancelled")
    if not c.text.strip():
        return View("", "stop", "empty")
    if not c.above_threshold:
        return View("", "stop", "below_threshold")
    return View(c.text, c.finish_reason, "shown")


def view(kind: Kind, c: Completion) -> View:
    return edit_view(c) if kind == "edit" else fim_view(c)


def fim_postprocessed(v: View, model_text: str, prompt: str, suffix: str) -> tuple[View, dict]:
    """The FIM view after the shared post-processing, and the ``postprocess`` part of the
    ``editserver`` field: ``{trimmed: [rule, ...], model_text}``. ``model_text`` is always the model's
    own text before any rule, so a withheld answer reports it too (the same as ``suggestion``)."""
    if v.outcome != "shown":
        return v, {"trimmed": [], "model_text": model_text}
    t = trim(v.text, prompt, suffix)
    info = {"trimmed": t.trimmed, "model_text": v.text}
    if not t.text:
        return View("", "stop", "trimmed"), info
    if t.text != v.text:
        return View(t.text, "stop", "shown"), info
    return v, info
