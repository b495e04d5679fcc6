"""The replay from settings to result: points, suggester, tuning phase, evaluation phase, outputs.

Design decisions:
- ``ReplayConfig`` is the one typed view of the command line (editserver/cli/replay.py parses
  into it); tests build it directly and may pass their own suggester.
- The threshold in force, in order: ``--threshold`` (with ``--aggregate``), else the one tuned in
  this run on the ``tune`` inputs, else the source's own (the checkpoint's config in-process; the
  server's per-suggestion decision over HTTP). The FIM threshold likewise (``--fim-threshold``,
  tuned, the source's own), on the aggregate in force for edits: a checkpoint has one aggregate.
- Tuning compares every aggregate the source can score (all of ``model.infer.scoring`` in-process) on the
  training repositories and keeps the (aggregate, threshold) with the best utility; with
  ``write_config`` it is written into the checkpoint (``update_inference_config``), which is where the
  server reads it to suppress weak suggestions. Evaluation inputs never influence the choice.
- Next edit then gets a threshold per kind (replay/kinds.py): in-file and cross-file points are
  tuned apart on that aggregate, a kind with too few acceptances keeping the joint threshold, and
  all three are written (``selectivity_threshold``, ``in_file_threshold``, ``cross_file_threshold``).
  The per-kind rule is the one in force for evaluation, as on the server; ``--threshold`` is one
  number for both kinds. The result's ``per_kind`` compares each kind under the joint threshold and
  under the per-kind ones on the same held-out answers.
- FIM is tuned on FIM points of the same tuning records (``tune_fim`` of them), after the edits:
  its threshold is swept 0.00-1.00 on the aggregate the edits chose (the one ``write_config``
  writes, so the one the server will score FIM with), with the same utility (+0.75 exact rest of
  line, -0.25 a shown wrong one, 0 not shown) and the same choice rule (metrics.best_threshold),
  and written as ``fim_threshold``. Either kind may be tuned without the other (a budget of 0).
- The result dict is the ``--json`` document; the HTML report is rendered from it and also embedded
  in it (``report_html``), written next to it as ``OUT.html`` too.
"""

from __future__ import annotations

import hashlib
import json
from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path

from editserver.options import opt
from editserver.replay import kinds, metrics
from editserver.replay.crossfile import quiet_summary
from editserver.replay.points import Options
from editserver.replay.runner import PhaseResult, RowLog, run_phase
from editserver.replay.sources import (
    Budget,
    cross_from_record_files,
    from_record_files,
    from_repository,
    record_files,
)
from editserver.replay.suggest import EngineSuggester, HttpSuggester, Suggester

SOURCE, WALK, THRESHOLD, OUTPUT = (
    "source of suggestions",
    "what to replay",
    "selectivity threshold",
    "output",
)


@dataclass
class ReplayConfig:
    """The replay's settings; each field with ``opt`` is also its command-line flag."""

    repos: list[str] = opt(
        factory=list, help="git repositories to mine (gitpython)", metavar="REPO_PATH", positional=True
    )
    records: list[str] = opt(
        factory=list,
        metavar="FILE",
        help="commit-edit record files (*.jsonl.xz) or directories of them to evaluate on",
    )
    tune_records: list[str] = opt(
        factory=list,
        metavar="FILE",
        help="record files of *training* repositories to choose the aggregate and threshold on",
    )
    server_url: str | None = opt(None, "a running editserver (POST /v1/edit/completions)", group=SOURCE)
    # checkpoint directory (in-process; also where --write-config writes)
    model: str | None = opt(
        None, "checkpoint directory (default: the shipped one)", metavar="DIR", group=SOURCE
    )
    in_process: bool = opt(False, "call model.infer.engine.Engine directly", group=SOURCE)
    device: str = opt("cpu", "cpu or cuda (in-process)", group=SOURCE)
    effort: str | None = opt(
        None,
        "sampler effort (default: the checkpoint's)",
        choices=["instant", "low", "medium", "high"],
        group=SOURCE,
    )
    batch_size: int = opt(
        1, "requests in flight together: one decoded batch in-process, concurrent over HTTP", group=SOURCE
    )
    max_points: int = opt(300, "next-edit requests evaluated", group=WALK)
    max_fim: int = opt(200, "FIM requests evaluated (0: none)", group=WALK)
    tune_points: int = opt(300, "next-edit requests to tune on", group=WALK)
    tune_fim: int = opt(200, "FIM requests to tune the FIM threshold on (0: leave it untuned)", group=WALK)
    max_cross: int = opt(
        100, "cross-file next-edit requests from record files, evaluated and tuned on (0: none)", group=WALK
    )
    max_commits: int | None = opt(500, "repositories: newest N non-merge commits", group=WALK)
    rev: str | None = opt(None, "repositories: revision or range, e.g. v1.0..main (default HEAD)", group=WALK)
    sample: int | None = opt(None, "repositories: a seeded sample of N of those commits", group=WALK)
    threshold: float | None = opt(None, "evaluate with this threshold instead", group=THRESHOLD)
    aggregate: str | None = opt(
        None, "score aggregate for --threshold (model/infer/scoring.py)", group=THRESHOLD
    )
    fim_threshold: float | None = opt(None, "evaluate FIM with this threshold instead", group=THRESHOLD)
    write_config: bool = opt(
        False,
        "write the tuned thresholds (next edit, FIM) and aggregate into --model DIR/config.json",
        group=THRESHOLD,
    )
    json_out: str | None = opt(
        None,
        "write the result (summary, fim, every labelled suggestion, report) to OUT; OUT.html holds the "
        "report, OUT.log.jsonl the finished requests",
        flag="--json",
        metavar="OUT",
        group=OUTPUT,
    )
    html_out: str | None = opt(
        None, "report path (default OUT.html)", flag="--html", metavar="FILE", group=OUTPUT
    )
    markdown_out: str | None = opt(
        None, "headline tables as Markdown", flag="--markdown", metavar="FILE", group=OUTPUT
    )
    resume: bool = opt(False, "continue from OUT.log.jsonl of an interrupted run", group=OUTPUT)
    progress: bool = opt(True, "no progress bar", flag="--no-progress", negate=True, group=OUTPUT)
    points: Options = field(default_factory=Options)

    def identity(self) -> dict:
        """The settings that decide which requests are made and how they are answered."""
        d = asdict(self)
        # budgets are left out: a resumed run may ask for more points and keeps the ones it has
        for k in (
            "threshold",
            "aggregate",
            "fim_threshold",
            "write_config",
            "json_out",
            "html_out",
            "markdown_out",
            "resume",
            "progress",
            "batch_size",
            "max_points",
            "max_fim",
            "tune_points",
            "tune_fim",
        ):
            d.pop(k)
        # the weights answer the requests: a resumed log of another checkpoint must not be mixed in
        if self.model and (Path(self.model) / "model.safetensors").is_file():
            d["weights_sha256"] = file_digest(Path(self.model) / "model.safetensors")
        return d


def file_digest(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()[:16]


def make_suggester(cfg: ReplayConfig) -> Suggester:
    if cfg.in_process or (cfg.server_url is None and cfg.model is not None):
        from editserver.model.infer.engine import Engine

        return EngineSuggester(
            Engine.load(cfg.model, device=cfg.device), cfg.effort, cfg.points.seed, cfg.batch_size
        )
    if cfg.server_url is None:
        raise ValueError("name a source of suggestions: --server-url URL or --in-process [--model DIR]")
    return HttpSuggester(cfg.server_url, cfg.effort, cfg.points.seed)


def collect(cfg: ReplayConfig, stats: Counter):
    budget = Budget(cfg.max_points, cfg.max_fim)
    edits, fims = (
        from_record_files(record_files(cfg.records), budget, cfg.points, stats) if cfg.records else ([], [])
    )
    for repo in cfg.repos:
        left = Budget(max(0, budget.max_points - len(edits)), max(0, budget.max_fim - len(fims)))
        e, f = from_repository(
            repo, left, cfg.points, stats, max_commits=cfg.max_commits, rev=cfg.rev, sample=cfg.sample
        )
        edits += e
        fims += f
    edits += cross_from_record_files(record_files(cfg.records), cfg.max_cross, cfg.points, stats)
    tune_edits, tune_fims = [], []
    if cfg.tune_records:
        tune_edits, tune_fims = from_record_files(
            record_files(cfg.tune_records), Budget(cfg.tune_points, cfg.tune_fim), cfg.points, Counter()
        )
        if cfg.tune_points:  # no tuning on cross-file points alone
            tune_edits += cross_from_record_files(
                record_files(cfg.tune_records), cfg.max_cross, cfg.points, Counter()
            )
    return edits, fims, tune_edits, tune_fims


def _aggregates(rows: list[dict], s: Suggester) -> list[str]:
    """The aggregates the rows were scored with (all of model.infer.scoring in-process), else the source's."""
    names = sorted({k for r in rows for k in (r.get("scores") or {})})
    return names or [s.score_aggregate or "server"]


def tune(rows: list[dict], s: Suggester) -> dict:
    comparison = metrics.compare_aggregates(rows, _aggregates(rows, s))
    agg, thr = metrics.choose(comparison, prefer=s.score_aggregate)
    return {
        "aggregates": comparison,
        "chosen": {
            "score_aggregate": agg,
            "selectivity_threshold": thr,
            "utility": comparison[agg]["best_utility"],
        },
        "per_kind": kinds.tune_kinds(rows, agg, thr),
        "summary_untuned": metrics.summarize(rows, None, s.score_aggregate),
        "summary_tuned": metrics.summarize(rows, thr, agg),
    }


def tune_fim(rows: list[dict], aggregate: str | None, s: Suggester) -> dict:
    """The FIM threshold with the best utility on ``rows`` under ``aggregate`` (fixed: see above)."""
    curve = metrics.sweep(rows, aggregate)
    best = metrics.best_threshold(curve)
    return {
        "score_aggregate": aggregate,
        "auc": metrics.auc(rows, aggregate),
        "curve": curve,
        "chosen": {"fim_threshold": best["threshold"], "utility": best["utility"]},
        "summary_untuned": metrics.fim_summary(rows, None, s.score_aggregate),
        "summary_tuned": metrics.fim_summary(rows, best["threshold"], aggregate),
    }


def write_thresholds(model_dir: str | Path, tuning: dict) -> None:
    """What this run tuned, into the checkpoint's ``config.json`` (``inference``)."""
    from editserver.model.infer.checkpoint import update_inference_config
    from editserver.model.infer.scoring import AGGREGATES

    changes = {}
    if "chosen" in tuning:
        changes["selectivity_threshold"] = tuning["chosen"]["selectivity_threshold"]
        # always both, fallbacks too: a kind's threshold tuned for earlier weights must not survive
        for kind, k in tuning.get("per_kind", {}).items():
            changes[f"{kind}_threshold"] = k["threshold"]
        if tuning["chosen"]["score_aggregate"] in AGGREGATES:
            changes["score_aggregate"] = tuning["chosen"]["score_aggregate"]
    if "fim" in tuning:
        changes["fim_threshold"] = tuning["fim"]["chosen"]["fim_threshold"]
    update_inference_config(model_dir, **changes)


def run(cfg: ReplayConfig, suggester: Suggester | None = None) -> dict:
    if not (cfg.records or cfg.repos):
        raise ValueError("nothing to replay: name a REPO_PATH or --records FILE")
    if cfg.write_config and not cfg.model:
        raise ValueError("--write-config needs --model DIR (the checkpoint to write the threshold into)")
    if cfg.write_config and not cfg.tune_records:
        raise ValueError(
            "--write-config needs --tune-records (tune on training repositories, never on what you report)"
        )
    stats: Counter = Counter()
    edits, fims, tune_edits, tune_fims = collect(cfg, stats)
    s = suggester or make_suggester(cfg)
    log_path = Path(cfg.json_out).with_suffix(".log.jsonl") if cfg.json_out else None
    log = RowLog(log_path, cfg.identity(), cfg.resume)
    complete = True
    tuning = None
    tres = PhaseResult()
    try:
        if tune_edits or tune_fims:
            tres = run_phase("tune", tune_edits, tune_fims, s, log, cfg.batch_size, cfg.progress)
            complete = tres.complete
            if complete:
                tuning = tune(tres.edits, s) if tres.edits else {}
                if tres.fims:
                    fagg = tuning["chosen"]["score_aggregate"] if tres.edits else s.score_aggregate
                    tuning["fim"] = tune_fim(tres.fims, fagg, s)
                if cfg.write_config:
                    write_thresholds(cfg.model, tuning)
                    tuning["written_to"] = str(Path(cfg.model) / "config.json")
        res = (
            run_phase("eval", edits, fims, s, log, cfg.batch_size, cfg.progress)
            if complete
            else PhaseResult()
        )
        complete = complete and res.complete
    finally:
        log.close()
        if isinstance(s, HttpSuggester):
            s.close()
    server_decides = isinstance(s, HttpSuggester) and cfg.aggregate is None
    # (per-kind rule in force, joint threshold it is compared with, aggregate)
    if cfg.threshold is not None:
        thr, joint, agg = cfg.threshold, cfg.threshold, cfg.aggregate or s.score_aggregate
    elif tuning and "chosen" in tuning:
        joint, agg = tuning["chosen"]["selectivity_threshold"], tuning["chosen"]["score_aggregate"]
        thr = kinds.tuned_rule(tuning["per_kind"])
    else:
        thr, joint, agg = kinds.source_rule(s), s.threshold, cfg.aggregate or s.score_aggregate
        if server_decides:
            thr = None  # the server's own above_threshold decides, per kind
    if cfg.fim_threshold is not None:
        fim = (cfg.fim_threshold, agg)
    elif tuning and "fim" in tuning:
        fim = (tuning["fim"]["chosen"]["fim_threshold"], tuning["fim"]["score_aggregate"])
    else:
        fim = (None if server_decides else s.fim_threshold, agg)
    result = assemble(cfg, s, res.edits, res.fims, (thr, agg), fim, tuning, stats, complete)
    result["per_kind"] = kinds.compare(res.edits, joint, thr, agg)
    # labelled too: more KTO data, never in the reported figures
    result["tune_suggestions"], result["tune_fim_completions"] = tres.edits, tres.fims
    if cfg.json_out:
        write_outputs(cfg, result)
    return result


def assemble(
    cfg: ReplayConfig,
    s: Suggester,
    edits: list[dict],
    fims: list[dict],
    edit_rule: tuple[kinds.Rule, str | None],
    fim_rule: tuple[float | None, str | None],
    tuning: dict | None,
    stats: Counter,
    complete: bool,
) -> dict:
    """The result document; each ``*_rule`` is the (threshold, aggregate) in force for its kind (the
    next edit's threshold may be one per kind, replay/kinds.py)."""
    thr, agg = edit_rule
    for rows, (t, a) in ((edits, edit_rule), (fims, fim_rule)):
        for r in rows:
            r["shown"] = metrics.is_shown(r, t, a)
            r["shown_score"] = metrics.row_score(r, a)
    robustness = dict(stats)
    errors = Counter(r["error"].split(":")[0] for r in edits + fims if r.get("error"))
    robustness.update({f"request_error:{k}": v for k, v in errors.items()})
    return {
        "summary": metrics.summarize(edits, thr, agg),
        # the edits that follow a change into another file, and the points where silence is right
        "cross_file": metrics.summarize([r for r in edits if r.get("where") == "cross_file"], thr, agg),
        "in_file": metrics.summarize([r for r in edits if r.get("where", "in_file") == "in_file"], thr, agg),
        "quiet": quiet_summary(edits, thr, agg),
        **metrics.breakdown(edits, thr, agg),
        "fim": metrics.fim_block(fims, *fim_rule),
        "sweep": metrics.sweep(edits, agg) if edits else [],
        "tuning": tuning,
        "robustness": robustness,
        "complete": complete,
        "suggester": s.name,
        "model_meta": getattr(s, "meta", None),
        "settings": {
            **cfg.identity(),
            **asdict(cfg),
            "inputs": [*cfg.repos, *cfg.records],
            "seed": cfg.points.seed,
        },
        "suggestions": edits,
        "fim_completions": fims,
    }


def write_outputs(cfg: ReplayConfig, result: dict) -> None:
    from editserver.replay.report import markdown, render

    out = Path(cfg.json_out)
    html_path = Path(cfg.html_out) if cfg.html_out else out.with_suffix(".html")
    html = render(result)
    out.parent.mkdir(parents=True, exist_ok=True)
    html_path.write_text(html, encoding="utf-8")
    doc = {**result, "report": str(html_path), "report_html": html}
    tmp = out.with_suffix(out.suffix + ".tmp")
    tmp.write_text(json.dumps(doc, indent=1, default=str), encoding="utf-8")
    tmp.replace(out)  # never leave a half-written JSON behind
    if cfg.markdown_out:
        Path(cfg.markdown_out).write_text(markdown(result), encoding="utf-8")
