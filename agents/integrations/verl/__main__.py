"""``python -m agents.integrations.verl``: see :mod:`agents.integrations.verl.cli`."""

import sys

from .cli import main

sys.exit(main())
