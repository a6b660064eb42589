"""`python -m extender` is the `extender` console script."""

from extender.cli import main

raise SystemExit(main())
