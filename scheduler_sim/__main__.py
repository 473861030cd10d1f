"""`python -m scheduler_sim`: the same as the `scheduler-sim` command."""
from .cli.main import main

raise SystemExit(main())
