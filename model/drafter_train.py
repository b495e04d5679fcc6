"""Training lookahead's drafter (model/drafter.py) on the model's own decoding.

Design decisions:
- Data: one-line FIM tasks cut from Python files (``line_tasks``: a line of an indented body, up to
  60 lines above it as the prefix and 30 below as the suffix, HumanEval's single-line infilling
  layout), decoded by the frozen model one token per step on a 24- or 32-token canvas (the one-line
  request's two rows): the most certain position, implied end-of-text read as the sampler reads it,
  ending at the line's newline as the stop hook does. Every call's block hidden states (bf16), argmax
  tokens and canvas are kept (``collect``). The drafter learns what the model would say, not the
  data, so any Python code serves; the benchmark's tasks are never used.
- Examples: calls t and t + g of one decode (g uniform in 0..``max_gap``; g = 0 keeps the identity
  in view). The drafter reads call t's hidden states and the tokens committed in between, and is
  trained with cross-entropy toward call t + g's whole distribution (recomputed from its stored
  hidden states) at the positions still masked there, up to the first predicted end-of-text (past
  it every position is end-of-text and teaches nothing). The whole distribution, not the argmax:
  a rule picks its sets by the probabilities, so a drafter trained on argmax tokens alone guessed
  overconfident sets (README, session 43).
- Held-out check (``agreement``): from each call, whether the guess for the position the decode
  commits g calls later is the token it commits there, for the frozen predictions and the
  drafter, and the mean run of right guesses from each call (what a lookahead chain gets).
- Only the drafter trains (the model is frozen and shared); AdamW with a warm-up and a cosine decay
  to 10%, bf16 autocast (CPU and GPU); an explicit ``random.Random`` picks the examples.
"""

from __future__ import annotations

import math
import random
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch

from model.api import Engine, FimRequest
from model.data import read_text
from model.drafter import Drafter
from model.sampler import TopKRule, fill_after_eot, first_true, informative


@dataclass
class Trajectories:
    """Every call of some one-token-per-step decodes, in call order within each decode."""

    hidden: torch.Tensor  # [C, N, dim] bf16, the call's final hidden states of the canvas
    tokens: torch.Tensor  # [C, N] its argmax at every position
    conf: torch.Tensor  # [C, N] their probabilities
    canvas: torch.Tensor  # [C, N] the canvas it read
    fixed: torch.Tensor  # [C, N] committed positions of that canvas
    decode: torch.Tensor  # [C] which decode it belongs to

    def calls(self) -> list[list[int]]:
        """Each decode's call indices, in order."""
        out: dict[int, list[int]] = {}
        for i, d in enumerate(self.decode.tolist()):
            out.setdefault(d, []).append(i)
        return list(out.values())


def line_tasks(files: list[Path], n: int, rng: random.Random, per_file: int = 3) -> list[tuple[str, str]]:
    """Up to ``n`` (prefix, suffix) pairs around one line of an indented body, ``per_file`` a file."""
    tasks: list[tuple[str, str]] = []
    for f in files:
        text = read_text(f)
        if text is None:
            continue
        lines = text.splitlines(keepends=True)
        body = [
            i
            for i, line in enumerate(lines)
            if line.startswith("    ") and len(line.strip()) >= 8 and not line.strip().startswith("#")
        ]
        for i in rng.sample(body, min(per_file, len(body))):
            tasks.append(("".join(lines[max(0, i - 60) : i]), "".join(lines[i + 1 : i + 31])))
        if len(tasks) >= n:
            break
    return tasks[:n]


@torch.no_grad()
def collect(
    engine: Engine, tasks: list[tuple[str, str]], rng: random.Random, batch: int = 64
) -> Trajectories:
    """Decode ``tasks`` one token per step and keep every call (module docstring)."""
    m, tk, dev = engine.model, engine.tok, engine.device
    V, N = m.cfg.vocab_size, 32
    bias = torch.zeros(V, device=dev)
    bias[_suppressed(engine)] = float("-inf")
    newline = torch.tensor(["\n" in tk.decode([i]) for i in range(V)], device=dev)  # [V]
    parts: dict[str, list[torch.Tensor]] = {
        k: [] for k in ("hidden", "tokens", "conf", "canvas", "fixed", "decode")
    }
    for b0 in range(0, len(tasks), batch):
        chunk = tasks[b0 : b0 + batch]
        lens = [rng.choice((24, N)) for _ in chunk]
        ctxs = [engine.fim_context(FimRequest(p, s, max_tokens=n), n) for (p, s), n in zip(chunk, lens)]
        ids = torch.full((len(chunk), max(map(len, ctxs))), tk.eot_id, dtype=torch.long)
        for i, c in enumerate(ctxs):
            ids[i, : len(c)] = torch.tensor(c)
        cache = m.encode_context(ids.to(dev), torch.tensor([len(c) for c in ctxs], device=dev))
        cache.canvas_lens = torch.tensor(lens, device=dev)
        real = torch.arange(N, device=dev)[None, :] < cache.canvas_lens[:, None]  # [b, N]
        canvas = torch.where(real, tk.mask_id, tk.eot_id)
        fixed = ~real
        ids_b = torch.arange(b0, b0 + len(chunk), device=dev)
        while True:
            live = (~fixed).any(dim=1)  # [b]
            if not bool(live.any()):
                break
            logits, hid = m.forward_canvas(canvas, cache, hidden=True)  # [b, N, V], [b, N, dim]
            conf, tok = (logits.float() + bias).softmax(-1).max(-1)  # [b, N]
            for k, v in zip(parts, (hid.to(torch.bfloat16), tok, conf.half(), canvas, fixed, ids_b)):
                parts[k].append(v[live].cpu())
            act = ~fixed
            commit = TopKRule(1).select(informative(tok, conf, act, tk.eot_id), act) & live[:, None]
            canvas = torch.where(commit, tok, canvas)
            fixed = fixed | commit
            fill_after_eot(canvas, fixed, tk.eot_id)
            # the stop hook's one-line cut: a committed newline with everything before it committed
            nl = first_true(fixed & newline[canvas] & (canvas != tk.eot_id))  # [b]
            stop = (nl < N) & (first_true(~fixed) > nl)
            canvas[stop[:, None] & ~fixed] = tk.eot_id
            fixed |= stop[:, None]
    return Trajectories(*(torch.cat(v) for v in parts.values()))


def _drafted_logits(
    drafter: Drafter,
    engine: Engine,
    data: Trajectories,
    t: torch.Tensor,
    t2: torch.Tensor,
    where: torch.Tensor,
) -> torch.Tensor:
    """The drafter's logits [M, V] at the ``where`` [b, N] positions of calls ``t2`` [b], read from
    calls ``t`` [b] and the tokens committed in between."""
    m, dev = engine.model, engine.device
    new = (data.fixed[t2] & ~data.fixed[t]).to(dev)  # [b, N]
    x = drafter(data.hidden[t].to(dev, torch.float32), m.embed(data.canvas[t2].to(dev)), new)
    return m.logits(x[where.to(dev)]).float()


def _suppressed(engine: Engine) -> list[int]:
    """Ids the sampler never proposes: the mask and the layout tags."""
    return [engine.tok.mask_id, *engine.suppressed_ids()]


def train(
    drafter: Drafter,
    engine: Engine,
    data: Trajectories,
    steps: int,
    rng: random.Random,
    batch: int = 64,
    lr: float = 1e-3,
    max_gap: int = 6,
    log: Callable[[int, float], None] | None = None,
) -> list[float]:
    """Fit ``drafter`` to the model's later calls (module docstring); the losses, one per step."""
    m, dev = engine.model, engine.device
    for p in m.parameters():
        p.requires_grad_(False)
    decodes = data.calls()
    suppressed = _suppressed(engine)
    opt = torch.optim.AdamW(drafter.parameters(), lr=lr, weight_decay=0.0)
    drafter.train()
    losses = []
    for s in range(steps):
        # warm-up over 100 steps, then a cosine from lr to 10% of it
        scale = min(1.0, (s + 1) / 100) * (0.1 + 0.45 * (1 + math.cos(math.pi * s / max(1, steps))))
        for g in opt.param_groups:
            g["lr"] = lr * scale
        pairs = []
        for _ in range(batch):
            calls = decodes[rng.randrange(len(decodes))]
            a = rng.randrange(len(calls))
            pairs.append((calls[a], calls[min(len(calls) - 1, a + rng.randint(0, max_gap))]))
        t, t2 = (torch.tensor(x) for x in zip(*pairs))  # [b] each
        target = data.tokens[t2]  # [b, N]
        where = ~data.fixed[t2]
        where &= (
            torch.arange(where.shape[1])[None, :]
            <= first_true(where & (target == engine.tok.eot_id))[:, None]
        )
        with torch.autocast(dev.split(":")[0], dtype=torch.bfloat16):
            logits = _drafted_logits(drafter, engine, data, t, t2, where)
            with torch.no_grad():  # the later call's whole distribution, from its hidden states
                soft = m.logits(data.hidden[t2].to(dev, torch.float32)[where.to(dev)]).float()
        logits[:, suppressed] = float("-inf")
        soft[:, suppressed] = float("-inf")
        loss = -(soft.softmax(-1) * logits.log_softmax(-1).clamp_min(-1e4)).sum(-1).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(float(loss.detach()))
        if log is not None:
            log(s, losses[-1])
    drafter.eval()
    return losses


@torch.no_grad()
def agreement(drafter: Drafter, engine: Engine, data: Trajectories, max_gap: int = 6) -> dict:
    """Held-out guesses: per gap g, the share of right guesses at the position the decode commits
    g calls later, frozen and drafted, and the mean run of right guesses from a call (docstring)."""
    checks = []  # (call, later call, the later call's committed position)
    runs: dict[int, list[int]] = {}  # call -> indices into checks, by gap
    for calls in data.calls():
        nxt = []  # the position each call commits: the surest of those newly fixed after it
        for a, b in zip(calls, calls[1:]):
            new = data.fixed[b] & ~data.fixed[a]
            nxt.append(int(torch.where(new, data.conf[a].float(), -1.0).argmax()))
        for i in range(len(calls) - 1):
            for g in range(1, max_gap + 1):
                if i + g >= len(calls) - 1:
                    break
                runs.setdefault(calls[i], []).append(len(checks))
                checks.append((calls[i], calls[i + g], nxt[i + g], g))
    right_f, right_d = [], []
    for c in range(0, len(checks), 512):
        part = checks[c : c + 512]
        t, t2, p, _ = (torch.tensor(x) for x in zip(*part))
        where = torch.zeros_like(data.fixed[t2])
        where[torch.arange(len(part)), p] = True
        logits = _drafted_logits(drafter, engine, data, t, t2, where)  # [b, V], one position a row
        logits[:, _suppressed(engine)] = float("-inf")
        target = data.tokens[t2, p]
        right_d += (logits.argmax(-1).cpu() == target).tolist()
        right_f += (data.tokens[t, p] == target).tolist()
    n, frozen, drafted = Counter(), Counter(), Counter()
    for (_, _, _, g), f, d in zip(checks, right_f, right_d):
        n[g], frozen[g], drafted[g] = n[g] + 1, frozen[g] + f, drafted[g] + d

    def run(right: list[bool]) -> float:
        total = 0
        for idx in runs.values():
            for i in idx:
                if not right[i]:
                    break
                total += 1
        return total / max(1, len(runs))

    return {
        "by_gap": {
            g: {"n": n[g], "frozen": frozen[g] / n[g], "drafter": drafted[g] / n[g]} for g in sorted(n)
        },
        "run_frozen": run(right_f),
        "run_drafter": run(right_d),
    }
