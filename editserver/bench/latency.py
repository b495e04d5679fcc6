"""``editserver bench latency``: keystroke-to-suggestion latency through the whole stack.

Design decisions:
- Measures what a user waits for: a real ``editserver lsp`` process driven over stdio by pygls'
  LanguageClient, talking HTTP to a real ``editserver serve`` (started here with ``--model`` on a free
  loopback port, or an existing one with ``--url``). Each sample is one keystroke (``didChange``)
  followed at once by ``textDocument/inlineCompletion``; the clock runs from sending the keystroke to
  receiving the answer, so debounce, sync, tree-sitter, prompt building, HTTP and the model are all in.
- Answers served from the LSP's cache (the user typed along a suggestion; the run does so once, for
  a few keystrokes, at the first suggestion it gets) are reported separately from answers that
  needed the model, since the mix depends on the typing script.
- Side by side in the same run, each prefix the LSP sent to the model is also sent straight to
  ``/v1/fim/completions`` right after (interleaved, so both see the same machine load), so the LSP's
  own overhead is a measured ratio, not a guess.
- Next edits: a real rename of a function with several uses, through a second LSP process
  (automatic trigger, streamed partial results): the time to the first edit shown and to all of
  them.
- ``--nvim N``: ``<Esc>`` after a rename to the first next edit drawn in headless Neovim
  (``bench/nvim.py``), against the same server once the other scenarios are done.
- Cross-file next edits (``bench/index.py``): a rename of a function used in 3 other files of a
  generated workspace (2,000 files by default), each sample a fresh LSP on the indexed workspace:
  the time to the first in-file and the first cross-file edit shown, and how many uses the reply's
  edits rename; the first sample also reports the index's cold build.
- Bounded: at most 500 samples; everything is loopback.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import re
import sys
import time
from pathlib import Path
from typing import Any

from editserver.bench import _lspclient as lspclient
from editserver.bench._stats import latency_stats

MAX_SAMPLES = 500
# the canvas the LSP asks for a one-line completion (lsp/settings.py fim_line_max_tokens); a copy,
# since editserver must not import the LSP (the layers point the other way)
LSP_LINE_MAX_TOKENS = 32
TYPE_ALONG = 8  # keystrokes typed along the last suggestion (served from the LSP's cache)

HEADER = '''import json
from pathlib import Path


def load_config(path: Path) -> dict:
    """Read a JSON config file and fill in defaults."""
    data = json.loads(path.read_text())
    data.setdefault("name", path.stem)
    return data


def save_config(path: Path, data: dict) -> None:
'''
TYPED = '    text = json.dumps(data, indent=2)\n    path.write_text(text + "\\n")\n    print("saved", path)\n'


def _position(text: str) -> tuple[int, int]:
    lines = text.split("\n")
    return len(lines) - 1, len(lines[-1].encode("utf-16-le")) // 2


def progress_bar(total: int, enabled: bool = True):
    """A tqdm bar on stderr over every timed keystroke and rename (stdout keeps the report)."""
    from tqdm import tqdm

    return tqdm(total=total, desc="latency", unit="sample", file=sys.stderr, disable=not enabled)


class _Typist:
    """One LSP with one open document typed into at its end, and the same prefixes sent straight to
    the HTTP API beside it."""

    def __init__(self, client, http, url: str):
        self.client, self.http, self.url = client, http, url
        self.uri, self.text, self.version = "file:///bench/config_io.py", HEADER, 1
        lspclient.open_document(client, self.uri, self.text)

    async def direct(self) -> float:
        """The current prefix straight to the HTTP API (what the LSP asks, minus the LSP), in ms."""
        body = {
            "model": "editserver",
            "prompt": self.text,
            "suffix": "",
            "max_tokens": LSP_LINE_MAX_TOKENS,  # the canvas the LSP asks for a single line
            "temperature": 0,
            "stop": ["\n"],
        }
        t0 = time.perf_counter()
        r = await self.http.post(self.url + "/v1/fim/completions", json=body)
        r.raise_for_status()
        return lspclient.since_ms(t0)

    async def keystroke(self, ch: str) -> tuple[float, list]:
        """Type one character at the end and ask for a completion there; (ms, items)."""
        from lsprotocol import types

        at = _position(self.text)
        self.version += 1
        t0 = time.perf_counter()
        lspclient.change(self.client, self.uri, self.version, at, at, ch)
        self.text += ch
        res = await self.client.text_document_inline_completion_async(
            types.InlineCompletionParams(
                context=types.InlineCompletionContext(
                    trigger_kind=types.InlineCompletionTriggerKind.Automatic
                ),
                text_document=types.TextDocumentIdentifier(uri=self.uri),
                position=types.Position(*_position(self.text)),
            )
        )
        ms = lspclient.since_ms(t0)
        return ms, list(res.items if res is not None and not isinstance(res, list) else (res or []))


async def _type(typist: _Typist, samples: int, bar) -> dict[str, list[float]]:
    """Time ``samples`` keystrokes: answers from the model (each beside a direct HTTP request) and
    from the LSP's cache (once, typing along the first suggestion)."""
    got: dict[str, list[float]] = {"model": [], "cache": [], "direct": []}
    last_id, typed_along = None, False
    for ch in (TYPED * (samples // len(TYPED) + 1))[:samples]:
        bar.update()
        ms, items = await typist.keystroke(ch)
        sid = items[0].command.arguments[0]["id"] if items else None
        if sid is not None and sid == last_id:
            got["cache"].append(ms)
        else:
            got["model"].append(ms)
            got["direct"].append(await typist.direct())  # interleaved: both see the same machine load
        last_id = sid or last_id
        if items and not typed_along:
            # once: type along the first suggestion; these answers come from the LSP's cache
            typed_along = True
            for along_ch in items[0].insert_text[:TYPE_ALONG]:
                ms, along = await typist.keystroke(along_ch)
                hit = along and along[0].command.arguments[0]["id"] == sid
                got["cache" if hit else "model"].append(ms)
    return got


async def measure(
    url: str,
    samples: int,
    debounce_ms: int,
    next_edits: int,
    log_file: str | None,
    cross_file: int = 0,
    workspace_files: int = 2000,
    progress: bool = False,
) -> dict:
    import httpx

    client = await lspclient.start(
        url, options={"debounceMs": debounce_ms}, log_file=log_file, ready_timeout=60
    )
    bar = progress_bar(samples + next_edits + cross_file, progress)
    async with httpx.AsyncClient(timeout=120, trust_env=False) as http:
        try:
            got = await _type(_Typist(client, http, url), samples, bar)
        finally:
            await lspclient.stop(client)
    report = {
        "debounce_ms": debounce_ms,
        "keystroke_to_suggestion": latency_stats(got["model"] + got["cache"]),
        "model_answers": latency_stats(got["model"]),
        "cache_answers": latency_stats(got["cache"]),
        "direct_http_fim": latency_stats(got["direct"]),
    }
    if next_edits:
        report["next_edit"] = await measure_next_edit(url, next_edits, log_file, bar)
    if cross_file:
        from editserver.bench.index import measure_cross_file

        report["cross_file"] = await measure_cross_file(url, cross_file, workspace_files, bar)
    bar.close()
    if report["model_answers"]["p50_ms"] and report["direct_http_fim"]["p50_ms"]:
        report["lsp_over_direct_p50_ratio"] = round(
            report["model_answers"]["p50_ms"] / report["direct_http_fim"]["p50_ms"], 2
        )
    return report


# ---- next edits after a rename ---------------------------------------------------------------
OLD, NEW = "shorten", "clip"
SOURCE = '''import textwrap


def shorten(text, limit):
    """Cut text to at most limit characters."""
    return textwrap.shorten(text, limit, placeholder="...")


def title(name):
    return shorten(name, 20).title()


def summary(items):
    lines = [shorten(str(item), 60) for item in items]
    return "\\n".join(lines)


class Report:
    def __init__(self, heading):
        self.heading = shorten(heading, 40)

    def render(self, body):
        return self.heading + "\\n" + shorten(body, 400)


def log_line(level, message):
    print(level, shorten(message, 120))
'''
USES = len(re.findall(rf"(?<![.\w]){OLD}\(", SOURCE)) - 1  # besides the definition (textwrap's is not ours)


class _Renamer:
    """One ``editserver lsp`` process with one open document, renamed back and forth."""

    def __init__(self):
        self.uri, self.text, self.version = "file:///bench/shorten.py", SOURCE, 1
        self.first_partial: float | None = None

    async def start(self, url: str, log_file: str | None) -> None:
        def partial(params: Any) -> None:
            if self.first_partial is None:
                self.first_partial = time.perf_counter()

        log = f"{log_file}.next" if log_file else None
        self.client = await lspclient.start(
            url, log_file=log, handlers={"editserver/nextEditPartial": partial}
        )
        lspclient.open_document(self.client, self.uri, self.text)

    async def rename(self, old: str, new: str) -> tuple[float, float, int]:
        """(ms to the first edit shown, ms to all, uses renamed by the reply's edits)."""
        at = self.text.index(f"def {old}(") + 4
        line = self.text.count("\n", 0, at)
        col = at - (self.text.rfind("\n", 0, at) + 1)
        self.version += 1
        self.first_partial = None
        t0 = time.perf_counter()
        lspclient.change(self.client, self.uri, self.version, (line, col), (line, col + len(old)), new)
        self.text = self.text[:at] + new + self.text[at + len(old) :]
        res = await lspclient.next_edit(self.client, self.uri, line, col + len(new))
        t_all = lspclient.since_ms(t0)
        edits = [lspclient.plain(e) for e in getattr(res, "edits", None) or []]
        t_first = (self.first_partial - t0) * 1000 if self.first_partial is not None else t_all
        if not edits:
            t_first = t_all  # nothing shown: the user waited the whole request
        after = lspclient.apply_edits(self.text, edits)
        # uses carried to the new name; textwrap.shorten renamed too (a wrong edit) counts against
        renamed = USES - len(re.findall(rf"(?<![.\w]){old}\(", after)) - ("textwrap.clip(" in after)
        # the benchmark's document keeps the rename only (the next sample renames back)
        return t_first, t_all, renamed


async def measure_next_edit(url: str, samples: int, log_file: str | None, bar=None) -> dict:
    renamer = _Renamer()
    await renamer.start(url, log_file)
    got: dict[str, list] = {"first": [], "all": [], "renamed": []}
    names = [OLD, NEW]
    try:
        for i in range(samples):
            old, new = names[i % 2], names[(i + 1) % 2]
            if bar is not None:
                bar.update()
            first, all_, renamed = await renamer.rename(old, new)
            got["first"].append(first)
            got["all"].append(all_)
            got["renamed"].append(renamed)
    finally:
        await lspclient.stop(renamer.client)
    return {
        "uses": USES,
        "samples": samples,
        "first_shown": latency_stats(got["first"]),
        "all_shown": latency_stats(got["all"]),
        "renamed_per_sample": got["renamed"],
    }


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "latency", help="keystroke-to-suggestion latency through LSP -> HTTP -> model (p50/p95)"
    )
    src = p.add_mutually_exclusive_group()
    src.add_argument(
        "--model", type=Path, default=None, help="checkpoint for a self-started server (default: shipped)"
    )
    src.add_argument("--url", default=None, help="an already running editserver (loopback)")
    p.add_argument("--samples", type=int, default=60, help=f"keystrokes to time (max {MAX_SAMPLES})")
    p.add_argument(
        "--debounce-ms", type=int, default=75, help="the LSP's debounce (default: its default, 75)"
    )
    p.add_argument("--next-edits", type=int, default=10, help="renames to time for next edits (0: none)")
    p.add_argument(
        "--cross-file", type=int, default=3, help="renames carried into other files to time (0: none)"
    )
    p.add_argument(
        "--workspace-files", type=int, default=2000, help="source files of the cross-file workspace"
    )
    p.add_argument(
        "--nvim",
        type=int,
        default=0,
        help="renames in headless Neovim, <Esc> to the first edit drawn (0: none)",
    )
    p.add_argument("--threads", type=int, default=1, help="torch threads of the self-started server")
    p.add_argument("--log-file", default=None, help="LSP debug log")
    p.add_argument("--json", action="store_true", help="print JSON only")
    p.add_argument("--no-progress", action="store_true", help="no progress bar on stderr")
    p.set_defaults(func=run)


def _measure_all(url: str, args: argparse.Namespace) -> dict:
    """Every scenario against one server; ``--nvim`` last, once the LSP scenarios have left it idle."""
    report = asyncio.run(
        measure(
            url,
            args.samples,
            args.debounce_ms,
            args.next_edits,
            args.log_file,
            args.cross_file,
            args.workspace_files,
            not args.no_progress,
        )
    )
    if args.nvim:
        from editserver.bench.nvim import measure_nvim

        nv = measure_nvim(url, args.nvim)
        report["nvim"] = {**nv, **latency_stats([ms for ms in nv["esc_to_first_edit_ms"] if ms is not None])}
    return report


def run(args: argparse.Namespace) -> int:
    from editserver.bench.load import LOOPBACK, LocalServer, ServerStartError

    if not 1 <= args.samples <= MAX_SAMPLES:
        print(f"--samples must be 1..{MAX_SAMPLES}", file=sys.stderr)
        return 2
    if args.nvim:
        from editserver.bench.nvim import missing

        if missing():
            print(f"editserver bench latency: --nvim {missing()}", file=sys.stderr)
            return 2
    if args.url:
        from urllib.parse import urlparse

        if urlparse(args.url).hostname not in LOOPBACK:
            print("latency benchmarks run against loopback only", file=sys.stderr)
            return 2
        report = _measure_all(args.url.rstrip("/"), args)
    else:
        extra = ["--model", str(args.model)] if args.model else []
        try:
            with LocalServer(extra, threads=args.threads) as server:
                report = _measure_all(server.url, args)
        except ServerStartError as e:
            print(str(e).rstrip(), file=sys.stderr)
            return 2
    if args.json:
        print(json.dumps(report))
        return 0
    print(json.dumps(report, indent=2))
    k = report["keystroke_to_suggestion"]
    print(
        f"\nkeystroke -> suggestion (debounce {args.debounce_ms} ms): p50 {k['p50_ms']} ms, p95 {k['p95_ms']} ms"
    )
    ne = report.get("next_edit")
    if ne:
        print(
            f"next edits after a rename ({ne['uses']} uses): first shown p50 {ne['first_shown']['p50_ms']} ms,"
            f" all shown p50 {ne['all_shown']['p50_ms']} ms"
        )
    cf = report.get("cross_file")
    if cf:
        print(
            f"rename used in {cf['files_using']} other files of {cf['workspace_files']}: first in-file edit p50"
            f" {cf['first_in_file']['p50_ms']} ms, first cross-file edit p50 {cf['first_cross_file']['p50_ms']} ms,"
            f" uses renamed {cf['renamed_per_sample']} of {cf['uses']}; index cold build {cf['index']['seconds']} s"
        )
    nv = report.get("nvim")
    if nv:
        print(
            f"<Esc> -> first next edit drawn in headless Neovim: p50 {nv['p50_ms']} ms, p95 {nv['p95_ms']} ms"
        )
    return 0
