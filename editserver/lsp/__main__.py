"""``python -m editserver.lsp``: the language server (what ``editserver lsp`` runs)."""

import sys

from editserver.lsp.cli import main

sys.exit(main())
