"""`python -m scheduler_sim`: the same as the `scheduler-sim` command."""
from .cli.main import main_entry

raise SystemExit(main_entry())
