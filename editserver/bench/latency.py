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
  own overhead is a measured ratio, not a guess. ``editserver/nextEdit`` latency (after a
  rename at a definition, so call sites are asked about too) is reported as well.
- Bounded: at most 500 samples; everything is loopback.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

MAX_SAMPLES = 500
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


def pct(values: list[float], p: float) -> float | None:
    v = sorted(values)
    return round(v[min(len(v) - 1, int(p * len(v)))], 1) if v else None


def stats(values: list[float]) -> dict:
    return {
        "n": len(values),
        "p50_ms": pct(values, 0.50),
        "p95_ms": pct(values, 0.95),
        "mean_ms": round(statistics.fmean(values), 1) if values else None,
    }


def _position(text: str) -> tuple[int, int]:
    lines = text.split("\n")
    return len(lines) - 1, len(lines[-1].encode("utf-16-le")) // 2


async def measure(url: str, samples: int, debounce_ms: int, next_edits: int, log_file: str | None) -> dict:
    import httpx
    from lsprotocol import types
    from pygls.lsp.client import LanguageClient

    from lsp.settings import Settings

    client = LanguageClient("editserver-bench", "0.1")
    ready = asyncio.Event()

    @client.feature("editserver/status")
    def _status(params: Any) -> None:
        if getattr(params, "state", None) == "ready":
            ready.set()

    cmd = [sys.executable, "-m", "editserver.cli", "lsp", "--server-url", url, "--no-autostart"]
    if log_file:
        cmd += ["--log-file", log_file]
    await client.start_io(*cmd)
    await client.initialize_async(
        types.InitializeParams(
            capabilities=types.ClientCapabilities(),
            initialization_options={"debounceMs": debounce_ms, "telemetry": {"enabled": False}},
        )
    )
    client.initialized(types.InitializedParams())
    await asyncio.wait_for(ready.wait(), 60)
    uri = "file:///bench/config_io.py"
    text = HEADER
    client.text_document_did_open(
        types.DidOpenTextDocumentParams(
            types.TextDocumentItem(uri=uri, language_id="python", version=1, text=text)
        )
    )
    model_ms: list[float] = []
    cache_ms: list[float] = []
    direct_ms: list[float] = []
    http = httpx.AsyncClient(timeout=120, trust_env=False)
    line_tokens = Settings().fim_line_max_tokens

    async def direct(prefix: str) -> float:
        """The same prefix straight to the HTTP API (what the LSP asks, minus the LSP)."""
        body = {
            "model": "editserver",
            "prompt": prefix,
            "suffix": "",
            "max_tokens": line_tokens,  # the canvas the LSP asks for a single line
            "temperature": 0,
            "stop": ["\n"],
        }
        t0 = time.perf_counter()
        r = await http.post(url + "/v1/fim/completions", json=body)
        r.raise_for_status()
        return (time.perf_counter() - t0) * 1000

    state = {"text": text, "version": 1}

    async def keystroke(ch: str) -> tuple[float, list]:
        """Type one character at the end and ask for a completion there; (ms, items)."""
        line, char = _position(state["text"])
        state["version"] += 1
        t0 = time.perf_counter()
        client.text_document_did_change(
            types.DidChangeTextDocumentParams(
                text_document=types.VersionedTextDocumentIdentifier(uri=uri, version=state["version"]),
                content_changes=[
                    types.TextDocumentContentChangePartial(
                        range=types.Range(types.Position(line, char), types.Position(line, char)), text=ch
                    )
                ],
            )
        )
        state["text"] += ch
        line, char = _position(state["text"])
        res = await client.text_document_inline_completion_async(
            types.InlineCompletionParams(
                context=types.InlineCompletionContext(
                    trigger_kind=types.InlineCompletionTriggerKind.Automatic
                ),
                text_document=types.TextDocumentIdentifier(uri=uri),
                position=types.Position(line, char),
            )
        )
        ms = (time.perf_counter() - t0) * 1000
        return ms, list(res.items if res is not None and not isinstance(res, list) else (res or []))

    last_id = None
    typed_along = False
    script = (TYPED * (samples // len(TYPED) + 1))[:samples]
    for ch in script:
        ms, items = await keystroke(ch)
        sid = items[0].command.arguments[0]["id"] if items else None
        if sid is not None and sid == last_id:
            cache_ms.append(ms)
        else:
            model_ms.append(ms)
            direct_ms.append(await direct(state["text"]))  # interleaved: both see the same machine load
        last_id = sid or last_id
        if items and not typed_along:
            # once: type along the first suggestion; these answers come from the LSP's cache
            typed_along = True
            for along_ch in items[0].insert_text[:TYPE_ALONG]:
                ms, along = await keystroke(along_ch)
                hit = along and along[0].command.arguments[0]["id"] == sid
                (cache_ms if hit else model_ms).append(ms)
    text, version = state["text"], state["version"]

    # next edit after a rename at a definition (call sites are asked about too)
    ne_ms: list[float] = []
    for i in range(next_edits):
        name = f"load_config_v{i}" if i else "load_config"
        new = f"load_config_v{i + 1}"
        at = text.index(f"def {name}(") + 4
        line = text.count("\n", 0, at)
        col = at - (text.rfind("\n", 0, at) + 1)
        version += 1
        t0 = time.perf_counter()
        client.text_document_did_change(
            types.DidChangeTextDocumentParams(
                text_document=types.VersionedTextDocumentIdentifier(uri=uri, version=version),
                content_changes=[
                    types.TextDocumentContentChangePartial(
                        range=types.Range(types.Position(line, col), types.Position(line, col + len(name))),
                        text=new,
                    )
                ],
            )
        )
        text = text[:at] + new + text[at + len(name) :]
        await client.protocol.send_request_async(
            "editserver/nextEdit",
            {"textDocument": {"uri": uri}, "position": {"line": line, "character": col + len(new)}},
        )
        ne_ms.append((time.perf_counter() - t0) * 1000)
    await client.shutdown_async(None)
    client.exit(None)
    await client.stop()

    await http.aclose()

    report = {
        "debounce_ms": debounce_ms,
        "keystroke_to_suggestion": stats(model_ms + cache_ms),
        "model_answers": stats(model_ms),
        "cache_answers": stats(cache_ms),
        "direct_http_fim": stats(direct_ms),
        "next_edit": stats(ne_ms),
    }
    if report["model_answers"]["p50_ms"] and report["direct_http_fim"]["p50_ms"]:
        report["lsp_over_direct_p50_ratio"] = round(
            report["model_answers"]["p50_ms"] / report["direct_http_fim"]["p50_ms"], 2
        )
    return report


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
    p.add_argument("--next-edits", type=int, default=5, help="nextEdit requests to time")
    p.add_argument("--threads", type=int, default=1, help="torch threads of the self-started server")
    p.add_argument("--log-file", default=None, help="LSP debug log")
    p.add_argument("--json", action="store_true", help="print JSON only")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from editserver.bench.load import LOOPBACK, LocalServer, ServerStartError

    if not 1 <= args.samples <= MAX_SAMPLES:
        print(f"--samples must be 1..{MAX_SAMPLES}", file=sys.stderr)
        return 2
    if args.url:
        from urllib.parse import urlparse

        if urlparse(args.url).hostname not in LOOPBACK:
            print("latency benchmarks run against loopback only", file=sys.stderr)
            return 2
        report = asyncio.run(
            measure(args.url.rstrip("/"), args.samples, args.debounce_ms, args.next_edits, args.log_file)
        )
    else:
        extra = ["--model", str(args.model)] if args.model else []
        try:
            with LocalServer(extra, threads=args.threads) as server:
                report = asyncio.run(
                    measure(server.url, args.samples, args.debounce_ms, args.next_edits, args.log_file)
                )
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
    return 0
