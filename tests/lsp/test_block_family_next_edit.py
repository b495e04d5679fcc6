"""Next edits and inline completions end to end on a block-diffusion family: the real ``editserver
serve`` (loopback) on the tiny SDAR fixture (tests/hf_sdar.py, random weights), the real LSP over stdio
pointed at it, a rename typed at a definition, then ``editserver/nextEdit``; and an inline completion
asked mid-line, which the server answers through the chat template (SDAR has no FIM tokens).

Random weights make the rewrite's text arbitrary, so the checks are on structure and path: the reply
is well formed and carries an id, the server is the SDAR model on its block grid (``/v1/models``),
its counters show the next-edit asks decoded there, every one answered (200), and the LSP reported no
error.
"""

from __future__ import annotations

import re

import httpx
import pytest

from tests.hf_sdar import make_sdar
from tests.lsp.conftest import lsp_session, serving
from tests.lsp.test_next_edit import SRC, URI


@pytest.fixture(scope="module")
def sdar_server(tmp_path_factory):
    root = tmp_path_factory.mktemp("sdar")
    d, _ = make_sdar(root)
    with serving(d, root / "serve.log", "--dtype", "fp32") as url:
        yield url


def _samples(metrics: str, name: str, **labels: str) -> list[tuple[dict, float]]:
    """``name``'s samples (labels, value) whose labels include ``labels`` (Prometheus text format)."""
    out = []
    for m in re.finditer(rf"^{name}(?:{{([^}}]*)}})? (\S+)$", metrics, re.M):
        have = dict(re.findall(r'(\w+)="([^"]*)"', m.group(1) or ""))
        if all(have.get(k) == v for k, v in labels.items()):
            out.append((have, float(m.group(2))))
    return out


def _counter(metrics: str, name: str, **labels: str) -> float:
    return sum(n for _, n in _samples(metrics, name, **labels))


async def test_next_edit_through_the_lsp_on_an_sdar_server(sdar_server, base_options):
    card = httpx.get(f"{sdar_server}/v1/models").json()["data"][0]
    assert (card["family"], card["block_size"]) == ("sdar", 4)
    async with lsp_session(sdar_server, base_options) as s:
        s.open(URI, SRC, "python")
        for i, ch in enumerate("_total"):  # a rename typed at the definition
            s.replace(URI, (0, 11 + i), (0, 11 + i), ch)
        res = await s.request(
            "editserver/nextEdit", {"textDocument": {"uri": URI}, "position": {"line": 0, "character": 17}}
        )
        assert isinstance(res["id"], str) and res["id"]
        assert isinstance(res["edits"], list) and isinstance(res["score"], (int, float))
        assert res["regions"] and all({"range", "reason"} <= set(r) for r in res["regions"])
        for e in res["edits"]:
            assert e["textDocument"] == {"uri": URI, "version": s.versions[URI]}
            assert set(e) == {"textDocument", "range", "newText"} and isinstance(e["newText"], str)
        assert not any(m.type == 1 for m in s.messages), [m.message for m in s.messages]  # no error shown
        assert not any(st.get("state") == "error" for st in s.statuses), s.statuses
    metrics = httpx.get(f"{sdar_server}/metrics").text
    assert _counter(metrics, "editserver_denoise_steps_total", kind="edit") > 0  # decoded on the SDAR model
    assert _counter(metrics, "editserver_edit_outcomes_total") >= 1
    edits = _samples(metrics, "editserver_requests_total", endpoint="/v1/edit/completions")
    assert edits and all(labels["status"] == "200" for labels, _ in edits)  # every ask answered
    assert sum(n for _, n in edits) >= len(res["regions"])  # one ask per region at least


async def test_inline_completion_through_the_lsp_on_an_sdar_server(sdar_server, base_options):
    async with lsp_session(sdar_server, base_options) as s:
        s.open(URI, SRC, "python")
        res = await s.inline(URI, 6, 4)  # start of "print(total)": after indentation, mid-line
        # random weights: the answer may be trimmed away; when shown, it is one clean line at the cursor
        for item in res.items if res is not None else []:
            assert "\n" not in item.insert_text and "\ufffd" not in item.insert_text
            assert item.command.command == "editserver.inlineAccepted"
        assert not any(m.type == 1 for m in s.messages), [m.message for m in s.messages]  # no error shown
        assert not any(st.get("state") == "error" for st in s.statuses), s.statuses
    metrics = httpx.get(f"{sdar_server}/metrics").text
    assert (
        _counter(metrics, "editserver_denoise_steps_total", kind="fim")
        + _counter(metrics, "editserver_denoise_steps_total", kind="line")
        > 0
    )  # decoded on the SDAR model
    fims = _samples(metrics, "editserver_requests_total", endpoint="/v1/fim/completions")
    assert fims and all(labels["status"] == "200" for labels, _ in fims)  # answered
