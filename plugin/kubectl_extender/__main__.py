"""`python -m kubectl_extender`, and the entry point of the single-file plugin (zipapp)."""

import sys

# What pip's requires-python and krew's caveats say, checked for the zipapp, which any
# python3 on PATH may run (written so that an old one still parses it).
if sys.version_info < (3, 11):  # noqa: UP036
    sys.exit("kubectl-extender needs python3 3.11 or newer; this python3 is "
             + ".".join(str(n) for n in sys.version_info[:2]))

from kubectl_extender.cli import main  # noqa: E402

sys.exit(main())
