"""``python -m lsp``: the language server (what ``editserver lsp`` runs)."""

import sys

from lsp.cli import main

sys.exit(main())
