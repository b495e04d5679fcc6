"""The rename scenario on the shipped checkpoint: rename a function at its definition, ask for the next
edit, and see whether the model's edits rename the call sites.

Plumbing (the call sites are asked about, edits are well formed) is asserted; how many call sites the
model renames is reported as a rate (``record_property`` and stdout) and gated at
``EDITSERVER_RENAME_MIN_RATE`` (default 0.5; the shipped checkpoints have renamed 6 of 6, the
same in every run, since 2026-11-25). The rate swung between 1 and 4 of 6 from run to run while a
batch decoded every row on the longest row's canvas: whether an occurrence was batched with the
twelve-line cursor region depended on timing, and the longer canvas changed its answer
(model/infer/sampler.py ``canvas_lens``).
"""

from __future__ import annotations

import os
import re

import pytest

from tests.lsp.conftest import lsp_session

pytestmark = pytest.mark.slow

CASES = {
    "python": (
        "file:///work/orders.py",
        "def price(order):\n    return order.qty * order.unit\n\n\n"
        + "".join(f"def step_{i}(x):\n    y = x + {i}\n    return y * 2\n\n\n" for i in range(6))
        + "def invoice(orders):\n    return sum(price(o) for o in orders)\n\n\n"
        "def cheapest(orders):\n    return min(orders, key=lambda o: price(o))\n",
        "price",
        "order_price",
    ),
    "javascript": (
        "file:///work/orders.js",
        "function price(order) {\n  return order.qty * order.unit;\n}\n\n"
        + "".join(f"function step{i}(x) {{\n  const y = x + {i};\n  return y * 2;\n}}\n\n" for i in range(6))
        + "function invoice(orders) {\n  return orders.map((o) => price(o)).reduce((a, b) => a + b, 0);\n}\n\n"
        "function first(orders) {\n  return price(orders[0]);\n}\n",
        "price",
        "orderPrice",
    ),
    "go": (
        "file:///work/orders.go",
        "package orders\n\nfunc price(o Order) int {\n\treturn o.Qty * o.Unit\n}\n\n"
        + "".join(f"func step{i}(x int) int {{\n\ty := x + {i}\n\treturn y * 2\n}}\n\n" for i in range(6))
        + "func invoice(orders []Order) int {\n\tt := 0\n\tfor _, o := range orders {\n\t\tt += price(o)\n\t}\n\treturn t\n}\n\n"
        "func first(orders []Order) int {\n\treturn price(orders[0])\n}\n",
        "price",
        "orderPrice",
    ),
}


def apply_edits(text: str, edits: list[dict]) -> str:
    lines = text.split("\n")
    starts = [0]
    for ln in lines:
        starts.append(starts[-1] + len(ln) + 1)

    def off(p: dict) -> int:  # ASCII fixtures: UTF-16 units == code points
        return starts[p["line"]] + p["character"]

    for e in sorted(edits, key=lambda e: -off(e["range"]["start"])):
        a, b = off(e["range"]["start"]), off(e["range"]["end"])
        text = text[:a] + e["newText"] + text[b:]
    return text


async def test_rename_at_definition_yields_call_site_edits(shipped_server, record_property):
    renamed_sites = total_sites = 0
    async with lsp_session(shipped_server, {"debounceMs": 0, "telemetry": {"enabled": False}}) as s:
        for language, (uri, src, old, new) in CASES.items():
            s.open(uri, src, language)
            at = src.index(old + "(")
            line = src.count("\n", 0, at)
            col = at - (src.rfind("\n", 0, at) + 1)
            s.replace(uri, (line, col), (line, col + len(old)), new)
            text = src[:at] + new + src[at + len(old) :]
            res = await s.request(
                "editserver/nextEdit",
                {"textDocument": {"uri": uri}, "position": {"line": line, "character": col + len(new)}},
            )
            call = re.compile(rf"\b{old}\(")
            sites = [i for i, ln in enumerate(text.split("\n")) if call.search(ln)]
            asked = {
                ln
                for r in res["regions"]
                if r["reason"] == "occurrence"
                for ln in range(r["range"]["start"]["line"], r["range"]["end"]["line"])
            }
            assert set(sites) <= asked, (language, sites, res["regions"])  # plumbing: every call site asked
            after = apply_edits(text, res["edits"])
            fresh = re.compile(rf"\b{new}\(")
            # call sites renamed: new-name calls gained, as long as old-name calls went away with them
            gained = len(fresh.findall(after)) - len(fresh.findall(text))
            gone = len(sites) - len(call.findall(after))
            done = max(0, min(gained, gone, len(sites)))
            for e in res["edits"]:
                print(f"  edit at line {e['range']['start']['line']}: {e['newText'][:80]!r}")
            renamed_sites += done
            total_sites += len(sites)
            print(f"{language}: {done}/{len(sites)} call sites renamed; score {res['score']:.3f}")
    rate = renamed_sites / total_sites
    record_property("rename_call_site_rate", rate)
    print(f"rename -> call-site edits: {renamed_sites}/{total_sites} = {rate:.0%}")
    assert rate >= float(os.environ.get("EDITSERVER_RENAME_MIN_RATE", "0.5"))
