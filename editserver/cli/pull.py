"""``editserver pull NAME``: download an open-weight diffusion code model into the Hugging Face cache.

Design decisions:
- A short name (``dream-coder-7b`` ...) maps to its publisher's repository
  (model/infer/hub.py ``PULLABLE``); ``--model NAME`` on the other commands then finds it.
- huggingface_hub's ``hf_hub_download``, one file at a time: config.json, the tokenizer files that
  exist, then the safetensors index and exactly the shards it names (or the single weights file).
  Each file shows a progress bar. A connection dropped mid-file is taken up again in the same run
  (huggingface_hub's retry); a ``pull`` run again after an interruption fetches only the files it
  still lacks, since a file already in the cache is never fetched again. huggingface_hub 2.x starts
  a half-downloaded file over rather than continuing its partial copy across runs.
- Errors are one line and exit status 2: an unknown name (with the list), a repository or file the
  hub does not have, no network.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path


def register(sub: argparse._SubParsersAction) -> None:
    from editserver.model.infer.hub import PULLABLE

    p = sub.add_parser("pull", help="download an open-weight model into the Hugging Face cache")
    p.add_argument("name", help=f"one of: {', '.join(PULLABLE)}")
    p.add_argument("--revision", default=None, help="branch, tag or commit (default: the repository's main)")
    p.set_defaults(func=run)


def pull(name: str, revision: str | None = None) -> Path:
    """The cached directory of ``name`` after downloading what the loader reads (module docstring)."""
    from huggingface_hub import hf_hub_download
    from huggingface_hub.errors import EntryNotFoundError

    from editserver.model.infer.hf.loader import INDEX, WEIGHTS
    from editserver.model.infer.hub import PULLABLE, files_to_try

    repo = PULLABLE.get(name)
    if repo is None:
        raise ValueError(f"unknown model {name!r}; pullable: {', '.join(PULLABLE)}")

    def get(filename: str, required: bool = True) -> Path | None:
        try:
            return Path(hf_hub_download(repo, filename, revision=revision))
        except EntryNotFoundError:
            if required:
                raise FileNotFoundError(f"{repo} has no {filename}") from None
            return None

    config = get("config.json")
    for f in files_to_try(name):
        get(f, required=False)
    index = get(INDEX, required=False)
    if index is None:
        get(WEIGHTS)
    else:
        for shard in sorted(set(json.loads(index.read_text()).get("weight_map", {}).values())):
            get(shard)
    d = config.parent
    if not (d / "tokenizer.json").is_file() and not (d / "vocab.json").is_file():
        raise FileNotFoundError(f"{repo} has neither tokenizer.json nor vocab.json")
    return d


def run(args: argparse.Namespace) -> int:
    try:
        d = pull(args.name, args.revision)
    except (ValueError, FileNotFoundError, OSError) as exc:
        print(f"editserver pull: {exc}", file=sys.stderr)
        return 2
    except Exception as exc:  # huggingface_hub's HTTP and repository errors
        print(f"editserver pull: cannot download {args.name}: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 2
    print(f"editserver pull: {args.name} is in {d}; serve it with `editserver serve --model {args.name}`")
    return 0
