"""Model and inference configuration: one dataclass each, with named presets.

Design decisions:
- ``ModelConfig`` holds only what shapes the weights; ``InferenceConfig`` holds what the sampler and
  the server read at run time (effort presets, selectivity thresholds). Both are saved together in the
  checkpoint's ``config.json`` so a checkpoint carries the thresholds the replay harness tuned for it.
- Next edit has a threshold per kind (in-file, cross-file) beside the joint one; a config without
  them (written before they existed) reads both as the joint one, so old checkpoints serve as before.
- ``rope_theta = 1e6`` (Qwen2's value) keeps the slowest rotary frequency's wavelength
  (2*pi*theta^((d-2)/d) ~ 5e6 positions for d=64) far above the 32,768-token window, so positions stay
  distinguishable across the whole context.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

CONTEXT_LENGTH = 32768


@dataclass(frozen=True)
class ModelConfig:
    vocab_size: int = 8192
    dim: int = 384
    n_layers: int = 6
    n_heads: int = 6
    n_kv_heads: int = 2  # grouped-query attention: n_heads / n_kv_heads queries share one K/V head
    ffn_dim: int = 1024  # SwiGLU hidden width
    rope_theta: float = 1_000_000.0
    max_seq_len: int = CONTEXT_LENGTH
    norm_eps: float = 1e-6
    tie_embeddings: bool = True
    # a next-edit canvas position also sees the region token it would copy, as an input and a copy
    # logit (transformer.py, model/infer/draft.py); checkpoints from before it load with False
    canvas_draft: bool = False

    @property
    def head_dim(self) -> int:
        return self.dim // self.n_heads

    def __post_init__(self) -> None:
        if self.dim % self.n_heads:
            raise ValueError("dim must be divisible by n_heads")
        if self.n_heads % self.n_kv_heads:
            raise ValueError("n_heads must be divisible by n_kv_heads")

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> ModelConfig:
        names = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: v for k, v in d.items() if k in names})


PRESETS: dict[str, ModelConfig] = {
    # Tests: a few thousand parameters besides the embedding; runs a step in milliseconds.
    "tiny": ModelConfig(dim=64, n_layers=2, n_heads=4, n_kv_heads=2, ffn_dim=128),
    # Sized for 2 AVX2 CPU cores: 6.8M parameters (4.7M besides the embedding), 2.4k training tokens/s
    # at 256-token rows in fp32, 2.4x the throughput of ``small`` (measured side by side).
    "mini": ModelConfig(dim=256, n_layers=6, n_heads=4, n_kv_heads=2, ffn_dim=768),
    # ~12.6M parameters with an 8k vocabulary (1k training tokens/s on 2 AVX2 cores).
    "small": ModelConfig(dim=384, n_layers=6, n_heads=6, n_kv_heads=2, ffn_dim=1024),
    # For a GPU: 22.0M parameters, the largest shape of this family that ships under the 48 MB
    # checkpoint cap (44 MB in bf16). Its earlier shape (dim 512, FFN 1536) had 40.4M: 81 MB in bf16.
    "base": ModelConfig(dim=384, n_layers=12, n_heads=6, n_kv_heads=2, ffn_dim=1024),
}


@dataclass(frozen=True)
class EffortPreset:
    """How hard the sampler works: a lower threshold unmasks more tokens per step (faster, riskier)."""

    threshold: float  # Fast-dLLM confidence threshold tau
    block_size: int  # semi-autoregressive block length
    # when set, sampler.JointRule: the joint error bound (nats), plus every token clearing threshold
    gamma: float | None = None
    # the joint rule reads the top-2 margin p1 - p2 as each token's certainty, not p1 (sampler.py)
    margin: bool = False
    # the joint rule also commits a token predicted the same at the previous step whose certainty
    # (p1, or p1 - p2 with margin) is at least this (sampler.py, temporal stability); None: never
    stable: float | None = None
    # FIM requests' block length (None: block_size). A small block keeps a loose rule from committing
    # the far end of a one-line canvas before its start is written (the shipped low: 8,
    # docs/experiments.md, decoding rules), while a next-edit rewrite, copied from its draft, keeps
    # the long block it commits at once
    fim_block_size: int | None = None
    # A single-line FIM request's (stops include "\n") step budget per block (None: none): its last
    # step commits every position still masked (sampler.StepBudget). The shipped low and instant: 3,
    # as many tasks passed at 5% more tokens per step; medium keeps none: a budget of 5 lost one
    # HumanEval task but 58 -> 43 exact held-out lines (docs/experiments.md, decoding rules)
    line_steps: int | None = None
    # FIM only: of two adjacent undecided positions predicting the same token, a step commits the more
    # certain one (sampler.JointRule.one_copy). The shipped low, instant and medium: true
    # (docs/experiments.md, decoding rules). A next-edit rewrite copies real doubles (blank lines,
    # brackets) from its draft.
    one_copy: bool = False

    def block_for(self, edit: bool) -> int:
        """The block length of a next-edit (``edit``) or FIM request at this effort."""
        return self.block_size if edit or self.fim_block_size is None else self.fim_block_size


@dataclass
class InferenceConfig:
    efforts: dict[str, EffortPreset] = field(
        default_factory=lambda: {
            # the joint rule at low and instant: more tokens per step at less pass@1 cost than
            # thresholds 0.7 and 0.5 (docs/experiments.md); at medium a bound this tight only lets a
            # near-certain token (an indentation run) carry the next one: 1.11 tokens/step against
            # threshold 0.9's 0.95 at the same pass@1 (docs/experiments.md)
            "instant": EffortPreset(threshold=0.7, block_size=32, gamma=0.25),
            "low": EffortPreset(threshold=0.9, block_size=32, gamma=0.1),
            "medium": EffortPreset(threshold=0.9, block_size=32, gamma=0.02),
            "high": EffortPreset(threshold=0.99, block_size=16),
        }
    )
    default_effort: str = "medium"
    # The effort of next-edit requests that name none (None: default_effort). A rewrite is mostly
    # copied from its region, so the looser bound loses nothing there: the shipped checkpoint edits at
    # instant (renames 85.3% exact at 16.0 tokens/step vs medium's 82.6% at 7.8; docs/experiments.md,
    # decoding rules).
    edit_effort: str | None = None
    fim_max_tokens: int = 64  # canvas length when a request names no max_tokens; where a canvas starts
    # A one-line FIM request's (stops hold a newline) first canvas: the setting the shipped
    # checkpoint's FIM figures and thresholds were measured at (the LSP's 32 tokens); it grows past
    # this only while the line goes on (model/infer/engine.py)
    line_max_tokens: int = 32
    # The row length the model was trained on: FIM and next-edit inputs are cut to fit it as training
    # rows were (the prefix/suffix nearest the cursor; the edit prompt's outer context), since a model
    # trained on short rows has never seen longer distances. None keeps everything.
    window_tokens: int | None = None
    # Added to the copy logit of every draft token (model/infer/transformer.py) in next-edit decoding; FIM
    # has no draft. A prior toward keeping the region as drafted: the shipped +4 took the shipped
    # weights from 85.3% to 91.1% exact on 190 held-out renames at instant, and from 63 to 23 wrong
    # suggestions on 300 held-out commit points (docs/experiments.md, decoding rules). 0: the gate as trained.
    draft_bias: float = 0.0
    edit_slack_tokens: int = 32  # extra canvas beyond the region's own length for a rewrite
    # trained with a next-edit canvas positioned at its region (prompt.edit_canvas_pos); older
    # checkpoints continued the canvas after the prompt
    edit_canvas_at_region: bool = False
    score_aggregate: str = "mean"  # how per-token confidences become one suggestion score
    # Next edits scoring below their kind's threshold are suppressed (tuned by replay). The joint one
    # was tuned over both kinds together; the in-file (the edited file) and cross-file (a file that
    # follows the change) ones each over their own points, since the two kinds' scores mean
    # different things. None (configs from before them): the joint one (``edit_threshold``).
    selectivity_threshold: float = 0.0
    in_file_threshold: float | None = None
    cross_file_threshold: float | None = None
    fim_threshold: float = 0.0  # FIM completions scoring below this are not shown (tuned by replay)
    # Shorter canvases also decoded for a single-line FIM request (one whose stop sequences include
    # "\n"), in the same batch; the answer with the highest summed log-confidence wins (model/infer/engine.py).
    # The canvas length is a length prior for these models, and no one length suits every line.
    # Empty: the request's own canvas only.
    line_canvases: tuple[int, ...] = ()

    def to_dict(self) -> dict:
        d = dataclasses.asdict(self)
        return d

    def edit_threshold(self, cross_file: bool = False) -> float:
        """The next-edit threshold of a region in the edited file, or in another file (``cross_file``)."""
        own = self.cross_file_threshold if cross_file else self.in_file_threshold
        return self.selectivity_threshold if own is None else own

    @classmethod
    def from_dict(cls, d: dict) -> InferenceConfig:
        d = dict(d)
        if "fim_window_tokens" in d:  # its name before it also cut next-edit prompts
            d.setdefault("window_tokens", d.pop("fim_window_tokens"))
        if "efforts" in d:
            d["efforts"] = {k: EffortPreset(**v) for k, v in d["efforts"].items()}
        if "line_canvases" in d:
            d["line_canvases"] = tuple(int(n) for n in d["line_canvases"])
            if any(n < 1 for n in d["line_canvases"]):
                raise ValueError(f"line_canvases must be positive, got {d['line_canvases']}")
        names = {f.name for f in dataclasses.fields(cls)}
        cfg = cls(**{k: v for k, v in d.items() if k in names})
        for name, e in cfg.efforts.items():  # a stability threshold only the joint rule reads
            if e.line_steps is not None and e.line_steps < 1:
                raise ValueError(f"effort {name!r}: line_steps must be at least 1, got {e.line_steps}")
            if e.one_copy and e.gamma is None:
                raise ValueError(f"effort {name!r}: one_copy needs a gamma (the joint rule)")
            if e.stable is not None and (e.gamma is None or not 0.0 <= e.stable <= 1.0):
                raise ValueError(
                    f"effort {name!r}: stable needs a gamma and a value in [0, 1], got {e.stable}"
                )
        for key in ("default_effort", "edit_effort"):  # a typo fails at load, not on a user's request
            name = getattr(cfg, key)
            if name is not None and name not in cfg.efforts:
                raise ValueError(f"{key} {name!r} is not one of the efforts {sorted(cfg.efforts)}")
        return cfg
