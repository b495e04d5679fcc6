"""The offline acceptance-rate replay harness (``editserver replay``).

Every git repository is a recording of what a developer did next. The harness replays commits
hunk by hunk, asks the model for the next edit (and for the rest of added lines, FIM) at each step,
and labels the answers against what the developer actually did:

- ``points``: records -> replay points (developer hunk order, file state, history, prompt);
- ``sources``: record files and git repositories (via ``model.train.gitmine``) -> points, sampled with a seed;
- ``suggest``: the in-process engine or a running server answers;
- ``judge``: accepted / rejected / not shown, exact match, kept rate; FIM exact match, prefix, label;
- ``metrics``: rates, utility, latency, threshold sweeps, the aggregate and threshold choice (edit, FIM);
- ``runner``: asks, logs incrementally (resumable), shows progress;
- ``harness``: settings -> result (tuning phase, evaluation phase, checkpoint config, outputs);
- ``report`` and ``svg``: the self-contained HTML report.
"""
