"""Worker processes for `replay -j N` and `sweep -j N` that can neither hang the
command nor outlive it.

`Workers` runs `work(shared, task)` for each task of a list in at most N child
processes (never more than there are tasks) and hands the results back in the
tasks' order, whatever order they finish in. This module owns everything
about those processes:

- Starting them: with fork where the platform has it, so that `shared` (a
  replay's plan, a sweep's trace) is inherited rather than pickled; with the
  platform's default method otherwise. SIGINT and SIGTERM are held back in
  the parent while a worker starts, so a signal that arrives then is handled
  once the worker is known (and stopped with the others), never lost.
- What a worker is: it ignores SIGINT (Ctrl-C is the parent's to handle),
  takes SIGTERM's default action (the parent stops it so), reads nothing
  from and writes nothing to the caller's standard streams (its descriptors
  0, 1 and 2 are /dev/null: `scheduler-sim ... | cat` ends when the command
  does), and dies with the parent even if the parent is killed with
  SIGKILL: on Linux the kernel sends it SIGKILL then (PR_SET_PDEATHSIG),
  and everywhere a thread of its own waits on a pipe only the parent holds
  open and ends the process when the pipe closes.
- Tasks go to a worker one at a time, the next one when it returns a result.
  An exception a task raises is sent back and raised in the parent when its
  turn comes, so that the error reported is the one a run in one process
  reports (the first in the tasks' order).
- A worker that ends without returning its task's result (killed by a
  signal, the OOM killer's SIGKILL, `os._exit`, a SystemExit that escaped)
  raises `WorkerDied` in the parent at once, naming the task and how the
  worker ended; the command reports it as one line and exit status 3.
- Stopping them (leaving the `with` block, normally or not): every worker
  still running is sent SIGTERM, given a short grace, then SIGKILL; every
  wait on a worker is bounded, and signals are held back meanwhile so that
  a second Ctrl-C cannot leave a worker behind.
"""
from __future__ import annotations

import multiprocessing
import os
import pickle
import signal
import sys
import threading
import time
from multiprocessing.connection import wait
from typing import Any, Callable, Iterator

from ..records import interrupts
from ..records.errors import WorkerDied

__all__ = ["Workers", "WorkerDied"]

GRACE = 0.5  # seconds a worker sent SIGTERM has before SIGKILL
REAP = 2.0  # seconds to wait for a worker to end after SIGKILL (or a stop request)

_HELD = (signal.SIGINT, signal.SIGTERM)
_PR_SET_PDEATHSIG = 1  # from <linux/prctl.h>


def _context() -> Any:
    """fork where there is one (`shared` is inherited, not pickled), else the default."""
    methods = multiprocessing.get_all_start_methods()
    return multiprocessing.get_context("fork" if "fork" in methods else None)


class _Worker:
    """One child process, its end of the pipe to it, and the task it runs (None: idle)."""

    def __init__(self, process: Any, conn: Any) -> None:
        self.process, self.conn = process, conn
        self.task: int | None = None


class Workers:
    """Run `work(shared, task)` for every task of `tasks` in at most `jobs` child
    processes; a context manager (leaving it stops every worker).

    `work` must be a module-level function (so the default start method can send
    it), `shared` is what every task needs (inherited under fork), and each task
    is sent to its worker by pipe (keep it small). `describe(i)` says what task i
    does, for messages: "replaying policy 'vllm'"."""

    def __init__(self, work: Callable[[Any, Any], Any], shared: Any, tasks: list[Any],
                 jobs: int, describe: Callable[[int], str]) -> None:
        self.work, self.shared, self.tasks = work, shared, list(tasks)
        self.jobs = max(0, min(jobs, len(self.tasks)))  # no idle worker
        self.describe = describe
        self.workers: list[_Worker] = []  # every worker started, in order
        self._next = 0  # the next task to hand out
        self._done: dict[int, tuple[bool, Any]] = {}  # received, not yet yielded
        self._failed = False  # a task raised: no further task is handed out
        # Told of each result as it arrives (task index, result), before `results`
        # hands it out in the tasks' order: a sweep's progress, say.
        self.on_result: Callable[[int, Any], None] | None = None
        self._lifeline: Any = None

    def __enter__(self) -> Workers:
        try:
            self._start()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, *exc_info: Any) -> None:
        self.stop()

    # --- the parent's side ---------------------------------------------------------

    def _start(self) -> None:
        context = _context()
        forked = context.get_start_method() == "fork"
        reader, self._lifeline = context.Pipe(duplex=False)
        for _ in range(self.jobs):
            ours, theirs = context.Pipe()
            # Under fork a worker inherits the parent's descriptors: it closes the
            # parent's ends (the lifeline's too, or the pipe would never close).
            inherited = ([self._lifeline, ours] + [w.conn for w in self.workers]
                         if forked else [])
            process = context.Process(
                target=_worker_main, daemon=True,
                args=(self.work, self.shared, theirs, reader, inherited, os.getpid()))
            with interrupts.held():
                self._start_worker(process, ours)
            theirs.close()
        reader.close()
        for worker in self.workers:
            self._assign(worker)

    def _start_worker(self, process: Any, conn: Any) -> None:
        """Start one worker process and keep it (signals are held meanwhile)."""
        worker = _Worker(process, conn)
        self.workers.append(worker)  # kept first: stopped even if start() fails half way
        process.start()

    def _assign(self, worker: _Worker) -> None:
        """Give an idle worker the next task, or tell it to end when none is left."""
        index = self._next
        if index < len(self.tasks) and not self._failed:
            self._next += 1
            worker.task = index
            try:
                worker.conn.send((index, self.tasks[index]))
            except OSError:  # it is gone: say how
                self._died(worker)
            return
        worker.task = None
        try:
            worker.conn.send(None)
        except OSError:
            pass  # already gone, and it owes us nothing

    def results(self) -> Iterator[tuple[int, Any]]:
        """(task index, result) for every task, in the tasks' order. A task's exception
        is raised when its turn comes; a worker that dies raises WorkerDied at once."""
        for index in range(len(self.tasks)):
            while index not in self._done:
                self._wait()
            ok, value = self._done.pop(index)
            if not ok:
                raise value
            yield index, value

    def received(self) -> list[Any]:
        """The results received but not handed out by `results` yet, in task order
        (what an interrupted caller may still report)."""
        return [value for index, (ok, value) in sorted(self._done.items()) if ok]

    def _wait(self) -> None:
        """Wait until a busy worker returns a result or ends; take what it sent."""
        busy = [w for w in self.workers if w.task is not None]
        if not busy:  # cannot be: a task not received yet is always some worker's
            raise RuntimeError("no worker runs the task waited for")
        ready = set(wait([w.conn for w in busy] + [w.process.sentinel for w in busy]))
        for worker in busy:
            if worker.conn in ready or worker.process.sentinel in ready:
                self._receive(worker)

    def _receive(self, worker: _Worker) -> None:
        try:
            if not worker.conn.poll():  # the process ended, and sent nothing
                self._died(worker)
            index, ok, value = worker.conn.recv()
        except (EOFError, OSError):
            self._died(worker)
        self._done[index] = (ok, value)
        self._failed = self._failed or not ok
        if ok and self.on_result is not None:
            self.on_result(index, value)
        self._assign(worker)

    def _died(self, worker: _Worker) -> None:
        """Raise WorkerDied for a worker that ended (or closed its pipe) in a task."""
        process = worker.process
        process.join(REAP)
        code = process.exitcode
        if code is None:
            process.kill()
            how = "closed its pipe to the parent before returning its result"
        elif code < 0:
            try:
                name = f" ({signal.Signals(-code).name})"
            except ValueError:
                name = ""
            how = f"was killed by signal {-code}{name}"
        else:
            how = f"exited with status {code} before returning its result"
        raise WorkerDied(f"the worker {self.describe(worker.task)} {how}")

    def stop(self) -> None:
        """End every worker: after a complete run each was told to and gets GRACE to
        do so; any still running is sent SIGTERM, then SIGKILL after GRACE. Never
        waits longer than that on any of them."""
        with interrupts.held():
            complete = self._next == len(self.tasks) and not any(
                w.task is not None for w in self.workers)
            if self._lifeline is not None:
                self._lifeline.close()  # every worker's watcher ends its process
            alive = [w.process for w in self.workers if w.process.pid is not None]
            if complete:
                _join_all(alive, GRACE)
            for process in alive:
                if process.exitcode is None:
                    process.terminate()
            _join_all(alive, GRACE)
            for process in alive:
                if process.exitcode is None:
                    process.kill()
            _join_all(alive, REAP)
            for worker in self.workers:
                worker.conn.close()


def _join_all(processes: list[Any], seconds: float) -> None:
    """Wait until every process has ended, or `seconds` have passed."""
    deadline = time.monotonic() + seconds
    for process in processes:
        process.join(max(0.0, deadline - time.monotonic()))


# --- the worker's side -------------------------------------------------------------

def _worker_main(work: Callable[[Any, Any], Any], shared: Any, conn: Any, lifeline: Any,
                 inherited: list[Any], parent: int) -> None:
    """A worker's life: set the process up, then run the tasks it is sent until it is
    told to end (None) or the parent goes away."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    interrupts.watch()  # no signal reaches this code: any interrupt was raised by code
    for other in inherited:
        other.close()
    _die_with(parent, lifeline)
    if hasattr(signal, "pthread_sigmask"):
        signal.pthread_sigmask(signal.SIG_UNBLOCK, _HELD)
    _detach_standard_streams()
    while True:
        try:
            task = conn.recv()
        except (EOFError, OSError):
            return  # the parent went away
        if task is None:
            return
        index, item = task
        try:
            reply = (index, True, work(shared, item))
        except Exception as exc:  # the parent raises it as a run in one process would
            reply = (index, False, _portable(exc))
        try:
            data = pickle.dumps(reply, pickle.HIGHEST_PROTOCOL)
        except Exception as exc:  # a result that cannot be sent is this task's error
            data = pickle.dumps((index, False, _portable(exc)), pickle.HIGHEST_PROTOCOL)
        conn.send_bytes(data)


def _die_with(parent: int, lifeline: Any) -> None:
    """End this process when the parent ends, however it ends."""
    if sys.platform.startswith("linux"):
        try:
            import ctypes

            libc = ctypes.CDLL(None, use_errno=True)
            libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        except (OSError, AttributeError):
            pass  # the pipe below still does it
    if os.getppid() != parent:  # the parent died before we could ask
        os._exit(1)

    def watch() -> None:
        try:
            lifeline.recv_bytes()  # the parent never writes: this returns at its end
        except (EOFError, OSError):
            pass
        os._exit(1)

    threading.Thread(target=watch, name="parent-watcher", daemon=True).start()


def _detach_standard_streams() -> None:
    """Point descriptors 0, 1 and 2 at /dev/null: a worker writes only to files of its
    own, and must not keep the caller's pipes open."""
    null = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        if fd != null:
            os.dup2(null, fd)
    if null > 2:
        os.close(null)


def _portable(exc: BaseException) -> BaseException:
    """`exc` if it survives pickling, else the nearest class of it that does, with the
    same message (the parent's error handler maps classes to exit statuses)."""
    for cls in type(exc).__mro__:
        if not (isinstance(cls, type) and issubclass(cls, BaseException)):
            continue
        try:
            candidate = exc if cls is type(exc) else cls(str(exc))
            pickle.loads(pickle.dumps(candidate, pickle.HIGHEST_PROTOCOL))
            return candidate
        except Exception:
            continue
    return RuntimeError(str(exc))
