"""`python -m scheduler_sim`: the same as the `scheduler-sim` command."""
from .cli import main

raise SystemExit(main())
