"""``python -m editserver.cli``: the same as the ``editserver`` command."""

import sys

from editserver.cli.main import main

sys.exit(main())
