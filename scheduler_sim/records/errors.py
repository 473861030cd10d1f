"""The exception types that cross layers, and what each one means to a user.

`TraceError` and `UsageError` are the user's fault and map to exit status 2;
`InvariantError` is ours (a bookkeeping equation failed) and maps to exit 3.
Only the command-line layer turns them into messages and exit codes.
"""
from __future__ import annotations

__all__ = ["SimError", "TraceError", "ConfigError", "UsageError", "InvariantError", "PolicyError",
           "WorkerDied"]


class SimError(Exception):
    """Base class of every error the simulator raises on purpose."""


class TraceError(SimError):
    """A trace file is malformed; carries every problem found, not only the first.

    Each entry of `problems` is already a complete `file:line: ...` message.
    """

    def __init__(self, problems: list[str]) -> None:
        self.problems = list(problems)
        super().__init__("\n".join(self.problems))

    def __reduce__(self):  # from a worker process: the problems, not the joined text
        return (type(self), (self.problems,))


class ConfigError(TraceError):
    """A model's config.json or a GPU's spec file cannot be read as one; every problem of
    the file, each a complete `FILE: field 'NAME': what is wrong, got what` message.
    Exit status 2, like a bad trace."""


class UsageError(SimError):
    """A command-line flag or option value is invalid."""


class InvariantError(SimError):
    """An internal accounting invariant failed: a bug in the simulator or a policy.

    The message always spells out the equation with its numbers, e.g.
    ``reserved(3) + draining(2) <= num_blocks(4) is false``.
    """

    def __init__(self, message: str, tick: int | None = None, when: str | None = None) -> None:
        self.tick = tick
        self.detail = message
        if when is None and tick is not None:
            when = f"tick {tick}"
        self.when = when
        super().__init__((f"at {when}: " if when else "") + message)

    def __reduce__(self):  # from a worker process: the same message, tick and time
        return (type(self), (self.detail, self.tick, self.when))


class PolicyError(InvariantError):
    """A policy from outside the package (a plugin) broke a rule the engine checks, or
    raised an exception of its own; the message names the policy, the time and the rule.
    Exit status 3, like every failed invariant."""


class WorkerDied(SimError):
    """A worker process (cli/workers.py) ended without returning its task's result; the
    message names the task and how the worker ended (exit status 3). Defined here so
    that the command line can catch it without loading the worker pool."""
