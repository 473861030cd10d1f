"""Worker processes of `replay -j N` and `sweep -j N`: a worker that dies, a signal to the
command, a command killed outright, and how many workers start.

The commands run as subprocesses (`python -m scheduler_sim`) where signals and
processes are involved; a plugin policy written into the test's folder kills its
own worker, exits it, or sleeps in it (writing its pid into `pids/` first). Every
subprocess has a generous timeout, so that a hang fails the test instead of
hanging it.
"""
from __future__ import annotations

import multiprocessing.process
import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest

from conftest import ROOT, req, run_cli, write_trace
from scheduler_sim.cli.workers import WorkerDied, Workers

PLUGIN = textwrap.dedent('''
    import os
    import signal
    import time

    from scheduler_sim import QueueAndListPolicy


    class Base(QueueAndListPolicy):
        def schedule(self, now):
            self.misbehave()
            while self.waiting:
                head = self.waiting.pop()
                self.view.admit(head, self.blocks_to_finish(head))
                self.running.append(head)
            return [(r, r.phase_remaining) for r in self.running]

        def misbehave(self):
            pass


    class Killed(Base):
        def misbehave(self):
            os.kill(os.getpid(), signal.SIGKILL)


    class Exits(Base):
        def misbehave(self):
            os._exit(0)


    class Slow(Base):
        def misbehave(self):
            folder = os.path.join(os.path.dirname(__file__), "pids")
            open(os.path.join(folder, str(os.getpid())), "w").close()
            time.sleep(60)


    class Slower(Slow):
        pass
''')

TIMEOUT = 30  # seconds: far more than any of these runs takes, less than forever


@pytest.fixture
def setup(tmp_path):
    """(plugin file, trace, folder for outputs, folder where Slow writes its pid)."""
    plugin = tmp_path / "misbehaves.py"
    plugin.write_text(PLUGIN)
    trace = write_trace(tmp_path, [{"type": "config", "block_size": 4, "num_blocks": 8},
                                   req("a", 0, 4, 2)])
    (tmp_path / "out").mkdir()
    (tmp_path / "pids").mkdir()
    return str(plugin), trace, tmp_path / "out", tmp_path / "pids"


def _argv(command: str, plugin: str, cls: str, trace: str, out) -> list[str]:
    """Two tasks in two workers: the plugin's and a built-in policy's."""
    spec = f"{plugin}:{cls}"
    if command == "replay":
        return ["replay", trace, "--policy", "vllm", "--policy", spec, "-j", "2",
                "--events", str(out / "events.jsonl")]
    return ["sweep", trace, "--policy", "vllm", "--policy", spec, "-j", "2",
            "--csv", str(out / "rows.csv")]


@pytest.fixture
def start(tmp_path):
    """Start the command line as a subprocess in a session of its own, its temporary
    files in the test's folder (a command killed with SIGKILL leaves them); whatever of
    that session still runs when the test ends (a hang, before the fix) is killed."""
    started = []
    env = dict(os.environ, TMPDIR=str(tmp_path))

    def start(argv: list[str]) -> subprocess.Popen:
        process = subprocess.Popen([sys.executable, "-m", "scheduler_sim", *argv], cwd=ROOT,
                                   stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                   start_new_session=True, env=env)
        started.append(process)
        return process

    yield start
    for process in started:
        for pid in _session(process.pid):
            os.kill(pid, signal.SIGKILL)
        process.communicate()


def _session(sid: int) -> list[int]:
    """The processes still running in session `sid`."""
    found = []
    for name in os.listdir("/proc") if os.path.isdir("/proc") else ():
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat") as stat:
                fields = stat.read().rsplit(")", 1)[1].split()
        except OSError:  # ended meanwhile
            continue
        if fields[0] != "Z" and int(fields[3]) == sid:  # state, ppid, pgrp, session
            found.append(int(name))
    return found


def _alive(pid: int) -> bool:
    """Whether the process runs (a zombie waiting to be reaped does not)."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def _gone(pids: list[int], seconds: float = 5.0) -> bool:
    """Whether every process of `pids` has ended within `seconds`."""
    deadline = time.monotonic() + seconds
    while any(_alive(pid) for pid in pids):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


def _slow_workers(pids_folder, process: subprocess.Popen) -> list[int]:
    """The pids of the workers in which Slow sleeps, once one has written its pid."""
    deadline = time.monotonic() + TIMEOUT
    while not os.listdir(pids_folder):
        assert process.poll() is None and time.monotonic() < deadline, "Slow never ran"
        time.sleep(0.05)
    return [int(name) for name in os.listdir(pids_folder)]


KILLED = ("Killed", "was killed by signal 9 (SIGKILL)")
EXITS = ("Exits", "exited with status 0 before returning its result")


def _death(cls_how: tuple[str, str], command: str, slow: bool = False):
    """One case of a worker's death; the two crossings of a death and a command that
    the default cases do not make run in the slow tier (a process each)."""
    return pytest.param(*cls_how, command, id="-".join([*cls_how, command]),
                        marks=[pytest.mark.slow] if slow else [])


@pytest.mark.parametrize("cls, how, command", [
    _death(KILLED, "replay"), _death(EXITS, "sweep"),
    _death(KILLED, "sweep", slow=True), _death(EXITS, "replay", slow=True)])
def test_a_worker_that_dies_ends_the_run_with_one_line(setup, start, command, cls, how):
    """A plugin that SIGKILLs its worker, or ends it with os._exit(0): the command ends
    (no hang) with exit 3 and one line naming the task and how its worker ended; no
    output file is left."""
    plugin, trace, out, _ = setup
    process = start(_argv(command, plugin, cls, trace, out))
    stdout, stderr = process.communicate(timeout=TIMEOUT)
    task = (f"replaying policy '{plugin}:{cls}'" if command == "replay" else
            f"running configuration 1 (policy={plugin}:{cls})")
    assert (process.returncode, stdout) == (3, "")
    assert stderr == f"scheduler-sim: error: the worker {task} {how}\n"
    assert os.listdir(out) == []


@pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="needs /proc")
@pytest.mark.parametrize("command", ["replay", pytest.param("sweep", marks=pytest.mark.slow)])
def test_sigterm_stops_the_workers_and_leaves_no_file(setup, start, command):
    """SIGTERM to the command while the plugin sleeps in its worker: exit 143 with one
    line, no output file, the worker ended; meanwhile the worker held none of the
    caller's pipes (its descriptors 0, 1 and 2 were /dev/null). (A sweep sleeps in both
    its configurations: one that finished would have its row kept.)"""
    plugin, trace, out, pids = setup
    argv = _argv(command, plugin, "Slow", trace, out)
    if command == "sweep":
        argv[argv.index("vllm")] = f"{plugin}:Slower"
    process = start(argv)
    workers = _slow_workers(pids, process)
    assert [os.readlink(f"/proc/{workers[0]}/fd/{fd}") for fd in (0, 1, 2)] == \
        ["/dev/null"] * 3
    process.send_signal(signal.SIGTERM)
    stdout, stderr = process.communicate(timeout=TIMEOUT)
    assert (process.returncode, stderr) == (143, "scheduler-sim: terminated\n")
    assert os.listdir(out) == []
    assert _gone(workers)


@pytest.mark.skipif(not os.path.isdir("/proc/self"), reason="needs /proc")
def test_no_worker_outlives_a_command_killed_with_sigkill(setup, start):
    """SIGKILL to `replay -j 2` while the plugin sleeps in its worker: the caller's pipes
    close at once (the worker does not hold them) and the worker ends within seconds."""
    plugin, trace, out, pids = setup
    process = start(_argv("replay", plugin, "Slow", trace, out))
    workers = _slow_workers(pids, process)
    process.kill()
    process.communicate(timeout=TIMEOUT)  # returns only once no process holds the pipes
    assert process.returncode == -signal.SIGKILL
    assert _gone(workers)


@pytest.mark.parametrize("argv, started", [
    (["sweep", "--policy", "vllm", "--policy", "sglang", "-j", "8"], 2),
    (["replay", "--policy", "vllm", "--policy", "sglang", "--policy", "continuous",
      "-j", "8"], 3),
    (["sweep", "--policy", "vllm", "-j", "8"], 0),  # one configuration: in process
])
def test_no_more_workers_than_tasks(tmp_path, monkeypatch, argv, started):
    """-j 8 starts one worker per configuration or policy, none idle; with one task
    the command runs it in its own process."""
    starts = []
    real = multiprocessing.process.BaseProcess.start

    def counted(self):
        starts.append(self)
        real(self)

    monkeypatch.setattr(multiprocessing.process.BaseProcess, "start", counted)
    trace = write_trace(tmp_path, [req("a", 0, 4, 2)])
    status, _, err = run_cli([argv[0], trace, *argv[1:]])
    assert status == 0, err
    assert len(starts) == started


def _sleep_then(shared, task):
    """A task for Workers: sleep `task[0]` seconds, then fail with `task[1]` if given,
    else return the task and `shared`."""
    seconds, error = task
    time.sleep(seconds)
    if error:
        raise ValueError(error)
    return shared, seconds


def test_results_come_in_task_order_and_the_first_error_in_that_order_wins():
    """Tasks that finish in reverse order are handed out in task order; of two failed
    tasks, the error raised is the earlier task's, though the later failed first."""
    tasks = [(0.3, None), (0.0, None)]
    with Workers(_sleep_then, "shared", tasks, 2, str) as workers:
        assert list(workers.results()) == [(0, ("shared", 0.3)), (1, ("shared", 0.0))]
    with Workers(_sleep_then, None, [(0.3, "first"), (0.0, "second")], 2, str) as workers:
        with pytest.raises(ValueError, match="^first$"):
            list(workers.results())


def _die(shared, task):
    os._exit(7)


def test_workers_describe_the_task_whose_worker_died():
    """WorkerDied names the task through `describe` and the status the worker ended with."""
    with Workers(_die, None, ["x", "y"], 1, lambda i: f"doing task {i}") as workers:
        with pytest.raises(WorkerDied, match="^the worker doing task 0 exited with status 7 "
                                             "before returning its result$"):
            list(workers.results())
        assert not any(_alive(w.process.pid) for w in workers.workers)


def test_the_simulators_errors_cross_a_process_boundary_intact():
    """A TraceError keeps its problems, an InvariantError its tick and time, through
    pickle (how a worker hands an error to the parent)."""
    import pickle
    from scheduler_sim.records.errors import InvariantError, PolicyError, TraceError
    trace = pickle.loads(pickle.dumps(TraceError(["t:1: a", "t:2: b"])))
    assert (trace.problems, str(trace)) == (["t:1: a", "t:2: b"], "t:1: a\nt:2: b")
    rule = pickle.loads(pickle.dumps(InvariantError("x(1) <= y(0) is false", 3, "0.5 s")))
    assert (type(rule), rule.tick, rule.detail, str(rule)) == (
        InvariantError, 3, "x(1) <= y(0) is false", "at 0.5 s: x(1) <= y(0) is false")
    policy = pickle.loads(pickle.dumps(PolicyError("policy 'p' raised ValueError")))
    assert (type(policy), str(policy)) == (PolicyError, "policy 'p' raised ValueError")
