"""The LSP tells the server each next-edit region's kind: ``edit_kind`` on ``/v1/edit/completions``
is ``cross_file`` for a region in another file than the edited one (``Ask.distance > 0``), so the
server holds it to the checkpoint's cross-file threshold, and ``in_file`` for the edited file's own.
The model is a stand-in (httpx.MockTransport) that records the bodies it is sent.
"""

from __future__ import annotations

import json

import httpx

from editserver.lsp.documents import Document
from editserver.lsp.model_client import READY, ModelClient
from editserver.lsp.nextedit.ask import ask_region
from editserver.lsp.nextedit.plan import Ask
from editserver.lsp.treesitter import Region

SRC = "from shop.pricing import compute\n\n\ndef total(items):\n    return compute(items)\n"


def recording_client(bodies: list[dict]) -> ModelClient:
    def answer(request: httpx.Request) -> httpx.Response:
        bodies.append(json.loads(request.content))
        content = "```\n" + SRC.replace("compute", "compute_total") + "```"
        return httpx.Response(
            200,
            json={
                "choices": [{"message": {"role": "assistant", "content": content}, "finish_reason": "stop"}],
                "editserver": {"score": 0.9, "above_threshold": True},
            },
        )

    client = ModelClient("http://127.0.0.1:9", autostart=False)
    client.state = READY
    client._http = httpx.AsyncClient(transport=httpx.MockTransport(answer))
    return client


async def test_another_files_region_is_sent_as_cross_file():
    bodies: list[dict] = []
    client = recording_client(bodies)
    doc = Document("file:///app/orders.py", SRC, 1, "python")
    history = "--- shop/pricing.py\n+++ shop/pricing.py\n@@ -1 +1 @@\n-def compute(items):\n+def compute_total(items):\n"
    try:
        for distance in (1, 0):
            ask = Ask(doc, None, "app/orders.py", Region(0, 4), SRC.index("compute"), 10, distance=distance)
            assert await ask_region(client, ask, history, 5.0) is not None
    finally:
        await client._http.aclose()
    assert [b["edit_kind"] for b in bodies] == ["cross_file", "in_file"]
    assert all(b["messages"][0]["content"].count("<|code_to_edit|>") == 1 for b in bodies)
