"""``python -m tpo_agents.integrations.verl``: see :mod:`tpo_agents.integrations.verl.cli`."""

import sys

from .cli import main

sys.exit(main())
