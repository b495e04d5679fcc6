"""``python -m editserver.lsp``: the language server (what ``editserver lsp`` runs).

Floor 10 (see lsp/__init__.py), the top: over lsp/cli.py.
"""

import sys

from editserver.lsp.cli import main

sys.exit(main())
