"""`python -m kubectl_extender`, and the entry point of the single-file plugin (zipapp)."""

import sys

from kubectl_extender.cli import main

sys.exit(main())
