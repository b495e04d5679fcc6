"""Block diffusion (SDAR / TraDo) as a plan of the one decode loop: block-causal attention in the
open-weight module, the exact block cache, SDAR's per-block rule, and the publisher's loop.

The fixture (tests/hf_sdar.py) mirrors SDAR-4B-Chat's published files with tiny random weights. The
publisher's loop below is written out plainly from JetAstra/SDAR @c2041a8 ``generate.py``
(``block_diffusion_generate``, ``low_confidence_dynamic``) in its greedy limit (the benchmarks'
setting) and without a cache: its stored keys/values are those of the same tokens under the same
mask, so recomputing the window ``x[:, :(k+1)*b]`` gives the same logits.
"""

from __future__ import annotations

import json

import pytest
import torch

from editserver.model.infer.block_cache import BlockCache
from editserver.model.infer.cache import InPlaceNoCache, Rows
from editserver.model.infer.engine import EditRequest, Engine, FimRequest, SamplingOptions
from editserver.model.infer.hf.families import UnsupportedModelError, block_size_of, detect
from editserver.model.infer.loop_types import Hooks, Member, Tokens
from editserver.model.infer.plan import DecodePlan
from editserver.model.infer.sampler import Decode
from editserver.model.infer.unmasking import BlockSchedule
from tests.editserver.test_server import ZED_PROMPT
from tests.helpers import serve_refusal
from tests.hf_sdar import make_sdar


@pytest.fixture(scope="module")
def sdar(tmp_path_factory):
    d, ref = make_sdar(tmp_path_factory.mktemp("sdar"))
    return d, ref, Engine.load(d)


def block_mask(L: int, b: int) -> torch.Tensor:
    """SDAR's mask: tril(ones(nb, nb)) tiled b x b, as an additive float mask [1, 1, L, L]."""
    nb = -(-L // b)
    allowed = torch.tril(torch.ones(nb, nb)).repeat_interleave(b, 0).repeat_interleave(b, 1)[:L, :L]
    return torch.zeros(1, 1, L, L).masked_fill(allowed == 0, float("-inf"))


def test_detected_from_the_published_config(sdar):
    d, _, e = sdar
    raw = json.loads((d / "config.json").read_text())
    cfg = detect(raw, None)
    assert (cfg.family, cfg.block_size, cfg.mask_id) == ("sdar", 4, raw["mask_token_id"])
    assert cfg.qk_norm and not cfg.qkv_bias and not cfg.shift and not cfg.tie_embeddings
    assert e.family == "sdar" and e.layout.block == 4 and isinstance(e.cache, BlockCache)
    assert block_size_of(raw, "SDAR-8B-Chat-b16") == 16 and block_size_of(raw, "TraDo-4B-Instruct") == 4
    assert block_size_of(raw, "SDAR-8B-Chat-b16", override=8) == 8
    assert block_size_of(raw, "hub/models--JetLM--SDAR-8B-Chat-b32/snapshots/0a1b") == 32  # pulled
    assert block_size_of({}, "") == 4  # the older config copy names no block: 4
    with pytest.raises(ValueError):
        block_size_of(raw, "", override=0)


def test_forward_matches_transformers_qwen3_under_the_block_mask(sdar):
    _, ref, e = sdar
    ids = torch.randint(0, 300, (1, 23))
    with torch.no_grad():
        want = ref(ids, attention_mask=block_mask(23, 4)).logits
    got = e.model(ids)
    assert (got - want).abs().max().item() <= 1e-4


def _rows(e, texts: list[str], canvas: int) -> tuple[Rows, list[list[int]]]:
    ctx = [e.tok.encode_chat(t) for t in texts]
    L = max(map(len, ctx))
    ids = torch.full((len(ctx), L), e.tok.eot_id)
    for i, c in enumerate(ctx):
        ids[i, : len(c)] = torch.tensor(c)
    lens = torch.tensor([len(c) for c in ctx])
    return Rows(ids, lens, torch.full_like(lens, canvas)), ctx


def _decode(e, rows: Rows, lead: int, canvas: int, plan: DecodePlan, observe=None):
    tokens = Tokens(e.tok.mask_id, e.tok.eot_id, ())
    d = Decode(e.model, plan, tokens)
    m = Member(rows, canvas, None, Hooks(observe=observe), lead=lead)
    d.join(m)
    d.run()
    return m.result


def published_loop(ref, prompt: list[int], mask_id: int, gen: int, b: int, steps: int, thr: float):
    """SDAR's block_diffusion_generate, greedy, written out plainly; returns each step's block."""
    P = len(prompt)
    nb = -(-(P + gen) // b)
    x = torch.full((1, nb * b), mask_id)
    x[0, :P] = torch.tensor(prompt)
    mask = block_mask(nb * b, b)
    base, extra = divmod(b, steps)
    owed = [base + int(s < extra) for s in range(steps)]
    trace = []
    for k in range(P // b, nb):
        for s in range(steps + 1):
            blk = x[:, k * b : (k + 1) * b]
            masked = blk == mask_id
            if not masked.any():
                break
            with torch.no_grad():
                window = x[:, : (k + 1) * b]
                logits = ref(window, attention_mask=mask[:, :, : (k + 1) * b, : (k + 1) * b]).logits
            logits = logits[:, k * b :].clone()
            logits[..., mask_id] = float("-inf")  # never proposed, as in our loop (module docstring)
            p, x0 = logits.softmax(-1).max(-1)  # [1, b]: greedy limit of the multinomial draw
            conf = torch.where(masked, p, -torch.inf)
            high = conf > thr
            if high.sum() >= owed[s]:
                pick = high
            else:
                pick = torch.zeros_like(high)
                pick[0, conf[0].topk(owed[s]).indices] = True
            blk[pick] = x0[pick]
            trace.append(x[0, P : P + gen].clone())
    return x[0, P : P + gen], trace


@pytest.mark.parametrize("text", ["Say hi.", "Write a function that adds two numbers in Python."])
def test_published_decode_chooses_the_publishers_tokens_step_by_step(sdar, text):
    _, ref, e = sdar
    req = FimRequest(prefix="", suffix="", max_tokens=16, options=SamplingOptions(published=True))
    plan = e.plan(req)
    assert plan.rule == BlockSchedule(0.9, 4) and isinstance(plan.cache, InPlaceNoCache)
    ctx = e.tok.encode_chat(text)
    lead = len(ctx) % 4
    n = 16 - lead  # the canvas ends on the block grid, as the publisher's last block does
    rows, _ = _rows(e, [text], n)
    want, trace = published_loop(ref, ctx, e.tok.mask_id, n, 4, 4, 0.9)
    seen = []
    res = _decode(e, rows, lead, n, plan, lambda c: seen.append(c[0].clone()))
    eot = e.tok.eot_id
    stop = int((want == eot).nonzero()[0]) if bool((want == eot).any()) else n
    assert len(seen) == len(trace) or stop < n
    upto = -(-(stop + lead) // 4) * 4 - lead  # through the block holding the first end of text
    for ours, theirs in zip(seen, trace):  # one entry per step, the same positions committed
        ours = torch.where(ours == e.tok.mask_id, -1, ours)[:upto]
        theirs = torch.where(theirs == e.tok.mask_id, -1, theirs)[:upto]
        assert torch.equal(ours, theirs)
    assert torch.equal(res.tokens[0, :stop], want[:stop])


def test_block_cache_equals_recomputing_everything(sdar):
    """Rows whose contexts end at different places in a block (different leads) decode in one batch
    on the block cache exactly as on the exact reference, token for token; a threshold low enough
    that steps commit several tokens."""
    _, _, e = sdar
    texts = ["a", "def f(x):", "Write a short loop in C."]
    for thr in (0.9, 0.004):
        outs = []
        for cache in (BlockCache(), InPlaceNoCache()):
            plan = DecodePlan("fim", "t", BlockSchedule(thr, 4), 4, cache, fixed_canvas=True)
            got = []
            for t in texts:  # one member per lead: a member's rows share its context's lead
                rows, ctx = _rows(e, [t], 21)
                got.append(_decode(e, rows, len(ctx[0]) % 4, 21, plan).tokens)
            outs.append(got)
        for a, b in zip(*outs):
            assert torch.equal(a, b)


def test_engine_answers_fim_and_edit_through_the_chat_template(sdar):
    _, _, e = sdar
    fim = e.complete(FimRequest(prefix="def add(a, b):\n    return ", suffix="\n", max_tokens=12))
    assert fim.steps >= 1 and fim.canvas_tokens == 12
    assert e.layout.route == "chat"
    edit = e.complete(EditRequest(prompt=ZED_PROMPT, max_tokens=8))
    assert edit.steps >= 1
    with pytest.raises(ValueError, match="4-token blocks"):
        e.plan(FimRequest(prefix="", suffix="", options=SamplingOptions(block_size=8)))


def test_no_longer_refused():
    cfg = {"model_type": "sdar", "architectures": ["SDARForCausalLM"], "hidden_size": 8}
    try:
        detect(
            {
                **cfg,
                "num_attention_heads": 2,
                "num_hidden_layers": 1,
                "intermediate_size": 8,
                "vocab_size": 9,
            },
            3,
        )
    except UnsupportedModelError as err:  # pragma: no cover
        pytest.fail(str(err))


def assert_served(d, tmp_path, family: str, block: int, *flags: str, route: str = "chat") -> None:
    """``editserver serve`` on a block-diffusion directory (loopback): /v1/models reports the family,
    the block in use and the FIM ``route`` (the chat template, or the family's FIM tags); FIM and next
    edit answer."""
    import httpx

    from tests.lsp.conftest import serving

    with serving(d, tmp_path / "serve.log", "--dtype", "fp32", *flags) as url:
        card = httpx.get(f"{url}/v1/models").json()["data"][0]
        assert card["family"] == family and card["block_size"] == block and card["fim_route"] == route
        body = {
            "model": "editserver",
            "prompt": "def add(a, b):\n    return ",
            "suffix": "\n",
            "max_tokens": 12,
        }
        r = httpx.post(f"{url}/v1/fim/completions", json=body, timeout=120)
        assert r.status_code == 200, r.text
        assert r.json()["editserver"]["fim_route"] == route and r.json()["editserver"]["steps"] >= 1
        edit = {
            "model": "mercury-edit",
            "messages": [{"role": "user", "content": ZED_PROMPT}],
            "max_tokens": 16,
        }
        r = httpx.post(f"{url}/v1/edit/completions", json=edit, timeout=120)
        assert r.status_code == 200, r.text
        assert r.json()["object"] == "edit.completion"


def test_served_over_http_with_its_block_and_fim_route(tmp_path):
    """The SDAR directory served with ``--block-size 8`` over its config's 4."""
    d, _ = make_sdar(tmp_path / "model")
    assert_served(d, tmp_path, "sdar", 8, "--block-size", "8")


@pytest.mark.parametrize("model", ["dream", "shipped"])
def test_block_size_for_a_model_without_blocks_exits_2(tmp_path, model):
    """Through the real CLI: ``--block-size`` would change nothing for a model that denoises its whole
    answer at once (an open in-place family, or our own checkpoint), so it is one clear line, exit 2."""
    from tests.hf_models import make_dream

    args = ["--model", str(make_dream(tmp_path / "Dream-v0-Instruct-7B")[0])] if model == "dream" else []
    line = serve_refusal(*args, "--block-size", "8")
    assert "--block-size applies to block-diffusion models" in line, line
    assert ("family dream" in line) if model == "dream" else ("an editserver checkpoint" in line)


def test_prefix_cache_suffix_for_a_block_model_exits_2(tmp_path):
    """Under block-causal attention nothing after a change is reusable, so ``--prefix-cache-suffix``
    would change nothing: one clear line, exit 2, through the real CLI."""
    d, _ = make_sdar(tmp_path / "SDAR-4B-Chat")
    line = serve_refusal("--model", str(d), "--prefix-cache-suffix")
    assert "--prefix-cache-suffix reuses nothing" in line and "(sdar)" in line, line
