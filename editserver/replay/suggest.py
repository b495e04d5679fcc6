"""Where suggestions come from: the engine in-process, or a running ``editserver serve`` over HTTP.

Design decisions:
- One small interface (``edit(points)``, ``fim(points)``, each a list in and a list out) so the
  runner, the metrics and the tests do not care which source answers; the tests add scripted
  suggesters (always right, always wrong, silent) behind the same interface.
- The replay needs the model's suggestion even when a threshold would hide it, to sweep thresholds
  afterwards: in-process that is ``Completion.text``; over HTTP it is the ``editserver.suggestion``
  field the server adds (falling back to the message content, or the FIM text, which is "" when
  the server suppressed it).
- In-process, every aggregate of ``model.infer.scoring`` is computed from the per-token confidences, so
  aggregates can be compared; over HTTP only the server's own score is known. Edits and FIM alike.
- ``batch_size`` requests are in flight together: in-process they are decoded as one batch (each
  request's latency is then the batch's wall time, what a user waiting on it would see); over HTTP
  they are sent concurrently and the server schedules them. A request the
  engine refuses (malformed prompt, context too long) becomes an error answer, never a crash.
- Requests are greedy (temperature 0) with a fixed seed: replays are reproducible.
- Every edit request says its kind (a cross-file point's region is in another file than the edited
  one), in-process as ``EditRequest.cross_file`` and over HTTP as ``edit_kind``, so the source
  applies the threshold the server would (replay/kinds.py).
"""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Protocol

from editserver.protocol.prompt import parse_edit_response
from editserver.replay.points import EditPoint, FimPoint


@dataclass
class EditAnswer:
    text: str | None  # the model's rewritten region (None: nothing came back)
    score: float | None = None  # the score the source reports (its configured aggregate)
    scores: dict[str, float] = field(default_factory=dict)  # every aggregate, when computable
    above_threshold: bool | None = None  # the source's own selectivity decision
    latency_ms: float = 0.0
    error: str | None = None


@dataclass
class FimAnswer:
    text: str | None  # the model's completion, even when the source would not show it
    latency_ms: float = 0.0
    error: str | None = None
    score: float | None = None  # as EditAnswer's
    scores: dict[str, float] = field(default_factory=dict)
    above_threshold: bool | None = None  # the source's own FIM threshold decision


class Suggester(Protocol):
    name: str
    score_aggregate: str | None  # the aggregate behind ``EditAnswer.score`` and ``FimAnswer.score``
    threshold: float | None  # the joint next-edit threshold (None: the source does not say)
    # the next-edit threshold it applies per kind (in_file, cross_file: replay/kinds.py); a source
    # without it applies ``threshold`` to both
    thresholds: dict[str, float | None]
    fim_threshold: float | None  # the threshold it applies to FIM

    def edit(self, points: list[EditPoint]) -> list[EditAnswer]: ...

    def fim(self, points: list[FimPoint]) -> list[FimAnswer]: ...


FIM_MAX_TOKENS = 32  # the LSP's single-line canvas (lsp/settings.py); cut at the first newline


class EngineSuggester:
    """``model.infer.engine.Engine`` called directly (``--in-process --model DIR``)."""

    def __init__(self, engine, effort: str | None = None, seed: int = 0, batch_size: int = 1):
        self.engine = engine
        self.effort = effort
        self.seed = seed
        self.batch_size = max(1, batch_size)
        self.meta = dict(engine.ck.meta)  # provenance of the checkpoint (training step, recipe)
        self.name = f"in-process:{engine.ck.meta.get('recipe', 'model')}@{engine.ck.meta.get('step', '?')}"
        self.score_aggregate = engine.inference.score_aggregate
        self.threshold = engine.inference.selectivity_threshold
        self.thresholds = {
            "in_file": engine.inference.edit_threshold(cross_file=False),
            "cross_file": engine.inference.edit_threshold(cross_file=True),
        }
        self.fim_threshold = engine.inference.fim_threshold

    def _options(self, stop: list[str] | None = None):
        from editserver.model.infer.engine import SamplingOptions

        return SamplingOptions(effort=self.effort, seed=self.seed, stop=stop or [])

    def _run(self, reqs: list, convert) -> list:
        out = []
        for i in range(0, len(reqs), self.batch_size):
            chunk = reqs[i : i + self.batch_size]
            try:
                out += [convert(c) for c in self.engine.complete_batch(chunk)]
            except Exception:  # one bad request must not sink its batch: retry them one by one
                for r in chunk:
                    t0 = time.perf_counter()
                    try:
                        out.append(convert(self.engine.complete(r)))
                    except Exception as e:  # engine refusals are data for the robustness table
                        out.append(convert(None, f"{type(e).__name__}: {e}", time.perf_counter() - t0))
        return out

    def edit(self, points: list[EditPoint]) -> list[EditAnswer]:
        from editserver.model.infer.engine import EditRequest
        from editserver.model.infer.scoring import AGGREGATES, aggregate

        def convert(c, error: str | None = None, dt: float = 0.0) -> EditAnswer:
            if c is None:
                return EditAnswer(None, latency_ms=dt * 1000, error=error)
            # what the server's score aggregates (the answer and the decision to stop), so a threshold
            # tuned on these scores is applied by the server to the same number
            scores = {name: aggregate(c.scored_confidences, name) for name in AGGREGATES}
            return EditAnswer(c.text, c.score, scores, c.above_threshold, c.latency_s * 1000)

        reqs = [
            EditRequest(prompt=p.prompt, options=self._options(), cross_file=p.where == "cross_file")
            for p in points
        ]
        return self._run(reqs, convert)

    def fim(self, points: list[FimPoint]) -> list[FimAnswer]:
        from editserver.model.infer.engine import FimRequest
        from editserver.model.infer.scoring import AGGREGATES, aggregate

        def convert(c, error: str | None = None, dt: float = 0.0) -> FimAnswer:
            if c is None:
                return FimAnswer(None, dt * 1000, error)
            # from what the engine's score aggregates (with the decision to stop), so the threshold
            # tuned on ``scores[a]`` is the one the server applies to ``score`` under aggregate ``a``
            scores = {name: aggregate(c.scored_confidences, name) for name in AGGREGATES}
            return FimAnswer(c.text, c.latency_s * 1000, None, c.score, scores, c.above_threshold)

        reqs = [
            FimRequest(
                prefix=p.prefix, suffix=p.suffix, max_tokens=FIM_MAX_TOKENS, options=self._options(["\n"])
            )
            for p in points
        ]
        return self._run(reqs, convert)


def strip_fence(content: str | None) -> str | None:
    """The region inside the ```` ``` ```` fence of an ``/v1/edit/completions`` answer (unfenced
    content is taken as the region itself)."""
    if content is None:
        return None
    region = parse_edit_response(content)
    return content if region is None else region


class HttpSuggester:
    """A running ``editserver serve`` (or any Inception-compatible server) at ``base_url``."""

    def __init__(
        self,
        base_url: str,
        effort: str | None = None,
        seed: int = 0,
        api_key: str | None = None,
        timeout_s: float = 120.0,
        model: str = "mercury-edit",
    ):
        import httpx

        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self.client = httpx.Client(base_url=base_url.rstrip("/"), headers=headers, timeout=timeout_s)
        self.name = f"http:{base_url}"
        self.effort, self.seed, self.model = effort, seed, model
        self.score_aggregate: str | None = None
        self.threshold: float | None = None  # the joint one: a server reports only the one it applied
        self.thresholds: dict[str, float | None] = {}
        self.fim_threshold: float | None = None

    def _post(self, path: str, body: dict) -> tuple[dict | None, float, str | None]:
        import httpx

        if self.effort:
            body["reasoning_effort"] = self.effort
        body.update(model=self.model, temperature=0, seed=self.seed)
        t0 = time.perf_counter()
        try:
            r = self.client.post(path, json=body)
        except httpx.HTTPError as e:
            return None, (time.perf_counter() - t0) * 1000, f"{type(e).__name__}: {e}"
        dt = (time.perf_counter() - t0) * 1000
        try:
            data = r.json()
        except ValueError:
            return None, dt, f"HTTP {r.status_code}: not JSON"
        if r.status_code != 200:
            msg = data.get("error", {}).get("message", "") if isinstance(data, dict) else ""
            return None, dt, f"HTTP {r.status_code}: {msg}"
        return data, dt, None

    def _edit_one(self, p: EditPoint) -> EditAnswer:
        # the kind decides which of the server's thresholds applies (ours; other servers ignore it)
        body = {"messages": [{"role": "user", "content": p.prompt}], "edit_kind": p.where}
        data, dt, err = self._post("/v1/edit/completions", body)
        if data is None:
            return EditAnswer(None, latency_ms=dt, error=err)
        info = data.get("editserver") or {}
        content = strip_fence((data.get("choices") or [{}])[0].get("message", {}).get("content"))
        # a suppressed edit comes back as the unchanged region; the model's own text is in the extra field
        text = info.get("suggestion") if info.get("suggestion") is not None else content
        if info.get("threshold") is not None:
            self.thresholds[info.get("edit_kind") or p.where] = float(info["threshold"])
        return EditAnswer(text, info.get("score"), {}, info.get("above_threshold"), dt)

    def _fim_one(self, p: FimPoint) -> FimAnswer:
        body = {"prompt": p.prefix, "suffix": p.suffix, "max_tokens": FIM_MAX_TOKENS, "stop": ["\n"]}
        data, dt, err = self._post("/v1/fim/completions", body)
        if data is None:
            return FimAnswer(None, dt, err)
        info = data.get("editserver") or {}
        content = (data.get("choices") or [{}])[0].get("text")
        # a suppressed completion comes back as ""; the model's own text is in the extra field
        text = info.get("suggestion") if info.get("suggestion") is not None else content
        if info.get("threshold") is not None:
            self.fim_threshold = float(info["threshold"])
        return FimAnswer(text, dt, None, info.get("score"), {}, info.get("above_threshold"))

    def _map(self, fn, points: list) -> list:
        if len(points) <= 1:
            return [fn(p) for p in points]
        # a chunk is sent concurrently (the server batches them); answers keep the points' order
        with ThreadPoolExecutor(max_workers=len(points)) as pool:
            return list(pool.map(fn, points))

    def edit(self, points: list[EditPoint]) -> list[EditAnswer]:
        return self._map(self._edit_one, points)

    def fim(self, points: list[FimPoint]) -> list[FimAnswer]:
        return self._map(self._fim_one, points)

    def close(self) -> None:
        self.client.close()
