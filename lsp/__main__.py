"""``python -m lsp``: the same as ``editserver lsp``."""

import sys

from editserver.commands.lsp import main

sys.exit(main())
