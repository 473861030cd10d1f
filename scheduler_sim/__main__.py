"""`python -m scheduler_sim`: the same as the `scheduler-sim` command."""
from .cli.entry import main_entry

raise SystemExit(main_entry())
