"""Inline completion on the shipped checkpoint: whatever the model writes, the LSP's post-processing
guarantees hold on it (no broken characters, one line mid-line, no closing bracket the line has)."""

from __future__ import annotations

import pytest

from tests.lsp.conftest import lsp_session

pytestmark = pytest.mark.slow

SRC = (
    "import os\n\n\n"
    "def list_python_files(root):\n"
    "    out = []\n"
    "    for name in os.listdir(root):\n"
    "        if name.endswith('.py'):\n"
    "            out.append(os.path.join(root, name))\n"
    "    return out\n\n\n"
    "def main():\n"
    "    files = list_python_files('.')\n"
    "    print(len(files))\n"
)
URI = "file:///work/files.py"
PAIRS = {")": "(", "]": "[", "}": "{"}
LINES = SRC.split("\n")


async def test_postprocessing_invariants_on_real_output(shipped_server):
    shown = 0
    async with lsp_session(shipped_server, {"debounceMs": 0, "telemetry": {"enabled": False}}) as s:
        s.open(URI, SRC, "python")
        for line, text in enumerate(LINES):
            for col in sorted({len(text) - len(text.lstrip()), len(text) // 2, len(text)}):
                res = await s.inline(URI, line, col)
                for item in res.items:
                    shown += 1
                    ins = item.insert_text
                    rest = text[col:]
                    assert ins.strip() and "\ufffd" not in ins
                    assert all(ch in "\t\n" or ord(ch) >= 32 for ch in ins)
                    if rest.strip():
                        assert "\n" not in ins, (line, col, ins)  # mid-line: one line
                        closer = rest.lstrip()[:1]
                        if closer in PAIRS and ins.rstrip().endswith(closer):
                            # a closer the line already has is only kept when the suggestion opened it
                            both = text[:col] + ins
                            assert both.count(PAIRS[closer]) >= both.count(closer), (line, col, ins)
    assert shown, "no suggestion was shown, so nothing above was checked"
