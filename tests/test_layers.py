"""Architecture: imports go downward only, I/O lives in the top layer, `__all__` is honest."""
from __future__ import annotations

import ast
import functools
import importlib
from pathlib import Path

import pytest

PACKAGE = "scheduler_sim"
ROOT = Path(__file__).resolve().parent.parent / PACKAGE

# One layer per folder: a module's layer is its folder's. Only the package's front
# door (`__init__`, `__main__`, `api`) lives outside a folder, in the top layer.
LAYERS = {
    "records": 0,   # errors, option table, option values, options, states, events, workload, clock
    "requests": 1,  # a request's progress, waiting queues, rotation, client slots
    "kv": 1,        # the block allocator, block keys, the prefix caches behind one protocol
    "gpu": 1,       # the roofline cost model and the KV pool from GPU memory
    "policies": 2,  # one module per policy behind policies/base.py
    "engine": 3,    # the loop, the step protocol, transitions, fast paths, the statistics
    "fleet": 4,     # several engines behind a router, lockstep, disaggregation
    "io": 5,        # traces in and out, expectations, tables, JSON, CSV, files
    "cli": 6,       # argv, the commands, exit codes; the pytest plugin
    "__init__": 6, "__main__": 6, "api": 6,
}
FRONT_DOOR = {"__init__", "__main__", "api"}
TOP = 5  # layers from here on may do input and output


def module_names() -> list[str]:
    """Every module of the package as a dotted name relative to it (policies.base, ...)."""
    names = []
    for path in sorted(ROOT.rglob("*.py")):
        parts = list(path.relative_to(ROOT).with_suffix("").parts)
        if len(parts) > 1 and parts[-1] == "__init__":
            parts.pop()  # a subpackage is named by its folder
        names.append(".".join(parts))
    return names


def path_of(name: str) -> Path:
    """The source file of a module name from `module_names`."""
    parts = name.split(".")
    candidate = ROOT.joinpath(*parts).with_suffix(".py")
    return candidate if candidate.exists() else ROOT.joinpath(*parts, "__init__.py")


def layer_of(name: str) -> int | None:
    """The layer of a module: its folder's (or, for the front door, its own)."""
    return LAYERS.get(name.split(".")[0])


@functools.lru_cache(maxsize=None)  # parsed once for the several scans below (read only)
def tree_of(name: str) -> ast.Module:
    """The parsed source of a module."""
    path = path_of(name)
    return ast.parse(path.read_text(encoding="utf-8"), filename=str(path))


def _resolve(dotted: str) -> str:
    """Map a dotted package-relative target to a module: its longest known prefix."""
    parts = dotted.split(".") if dotted else []
    while parts:
        cand = ".".join(parts)
        if cand in ALL or cand in LAYERS:
            return cand
        parts.pop()
    return "__init__"


def _is_package(dotted: str) -> bool:
    """True for the root package ('') and for subpackages (a folder with __init__.py)."""
    return dotted == "" or ROOT.joinpath(*dotted.split("."), "__init__.py").exists()


def imports_in(tree: ast.Module, base: list[str]) -> list[tuple[int, str]]:
    """(line, target module) for every import of this package's modules in `tree`;
    `base` is the folder (package-relative parts) the module's file lives in."""
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name == PACKAGE or alias.name.startswith(PACKAGE + "."):
                    out.append((node.lineno, _resolve(alias.name[len(PACKAGE) + 1:])))
        elif isinstance(node, ast.ImportFrom):
            if node.level == 0:
                mod = node.module or ""
                if mod != PACKAGE and not mod.startswith(PACKAGE + "."):
                    continue
                pkg = mod[len(PACKAGE) + 1:].split(".") if mod != PACKAGE else []
            else:
                up = node.level - 1
                assert up <= len(base), f"line {node.lineno}: relative import above the package"
                pkg = base[:len(base) - up] + (node.module.split(".") if node.module else [])
            dotted = ".".join(pkg)
            if _is_package(dotted):
                # `from <package> import x`: x is a submodule or a name defined there.
                for alias in node.names:
                    sub = ".".join(pkg + [alias.name])
                    out.append((node.lineno, sub if sub in ALL else _resolve(dotted)))
            else:
                out.append((node.lineno, _resolve(dotted)))
    return out


def internal_imports(name: str) -> list[tuple[int, str]]:
    """(line, target module) for every import of this package's modules in `name`."""
    base = list(path_of(name).parent.relative_to(ROOT).parts)
    return imports_in(tree_of(name), base)


ALL = module_names()


def test_the_scan_finds_the_package():
    """Sanity: the scan sees the core modules and the policies package and its modules."""
    for expected in ("engine.core", "kv.allocator", "policies", "policies.base", "cli.main",
                     "__init__", "__main__"):
        assert expected in ALL
    assert internal_imports("engine.core")  # the engine imports from its own package


def test_every_module_is_assigned_a_layer():
    """A new module must be placed in LAYERS; the failure lists the unplaced ones."""
    unknown = [n for n in ALL if layer_of(n) is None]
    assert unknown == [], f"modules without a layer (add them to LAYERS): {unknown}"


def test_every_module_lives_in_a_folder_of_its_layer():
    """Apart from the front door, every module is in a folder (a subpackage with an
    `__init__.py`), and every folder of the package is a layer of its own entry."""
    loose = [n for n in ALL if "." not in n and n not in FRONT_DOOR
             and not ROOT.joinpath(n, "__init__.py").exists()]
    assert loose == []
    folders = sorted(p.parent.name for p in ROOT.glob("*/__init__.py"))
    assert folders == sorted(set(LAYERS) - FRONT_DOOR)


def test_imports_go_downward_only():
    """A module imports only from its own layer or lower ones (within a layer is allowed)."""
    bad = []
    for name in ALL:
        mine = layer_of(name)
        if mine is None:
            continue
        for line, target in internal_imports(name):
            theirs = layer_of(target)
            if theirs is None or theirs > mine:
                bad.append(f"{name} (layer {mine}) line {line} imports {target} "
                           f"(layer {theirs})")
    assert bad == []


def test_import_resolution_on_known_cases():
    """The resolver maps relative imports right: the engine reaches the allocator and the
    policies package, policies.base reaches the queues (two dots), policies.continuous
    its sibling base (one dot), cli reaches __init__."""
    engine = {t for _, t in internal_imports("engine.core")}
    assert {"kv.block_counts", "policies", "requests.request", "records.events",
            "engine.fast.cohort"} <= engine
    counted = {t for _, t in internal_imports("engine.fast.counted")}  # three dots, two
    assert {"policies", "records.errors", "engine.dispatching", "engine.fast.cohort"} <= counted
    base = {t for _, t in internal_imports("policies.base")}
    assert {"kv.allocator", "requests.queues", "requests.request"} <= base
    cont = {t for _, t in internal_imports("policies.continuous")}
    assert {"requests.rotation", "policies.base"} <= cont
    cli = {t for _, t in internal_imports("cli.main")}
    assert "__init__" in cli  # `from .. import __version__`


def test_checker_flags_an_upward_import():
    """Synthetic source: a policy module importing the engine resolves to layer 3 > 2,
    and `from ...x` above the package is refused."""
    found = imports_in(ast.parse("from ..engine.core import Engine\nimport json\n"),
                       ["policies"])
    assert found == [(1, "engine.core")]
    assert layer_of("policies.greedy") == 2 < layer_of(found[0][1])
    with pytest.raises(AssertionError):
        imports_in(ast.parse("from ...x import y\n"), ["policies"])


IO_CALLS = {"open", "print", "input", "exit", "quit"}
SYS_NAMES = {"argv", "stdout", "stderr", "stdin", "exit"}


def io_uses(name: str) -> list[str]:
    """Calls to open/print/exit, uses of sys.argv/stdout/stderr/stdin/exit and SystemExit."""
    return io_uses_in(tree_of(name))


def io_uses_in(tree: ast.Module) -> list[str]:
    """The I/O uses `io_uses` looks for, in a parsed module."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            f = node.func
            if isinstance(f, ast.Name) and f.id in IO_CALLS:
                found.append(f"line {node.lineno}: {f.id}(")
            elif isinstance(f, ast.Attribute) and f.attr in {"open", "fdopen"}:
                found.append(f"line {node.lineno}: .{f.attr}(")
        elif isinstance(node, ast.Attribute):
            if isinstance(node.value, ast.Name) and node.value.id == "sys" \
                    and node.attr in SYS_NAMES:
                found.append(f"line {node.lineno}: sys.{node.attr}")
        elif isinstance(node, ast.ImportFrom) and node.module == "sys":
            for alias in node.names:
                if alias.name in SYS_NAMES:
                    found.append(f"line {node.lineno}: from sys import {alias.name}")
        elif isinstance(node, ast.Name) and node.id == "SystemExit":
            found.append(f"line {node.lineno}: SystemExit")
    return found


def test_io_only_in_the_top_layer():
    """Below layer 4 no module calls open( or print( or touches sys.argv, sys.stdout,
    sys.stderr, sys.stdin or exit codes (sys.exit, SystemExit)."""
    bad = []
    for name in ALL:
        if layer_of(name) is None or layer_of(name) >= TOP:
            continue
        bad.extend(f"{name}: {use}" for use in io_uses(name))
    assert bad == []


def test_io_scan_detects_what_it_looks_for():
    """The scanner is not blind: it finds the top layer's own uses (cli touches sys.stdout,
    __main__ raises SystemExit)."""
    assert any("sys.stdout" in u for u in io_uses("cli.main"))
    assert any("SystemExit" in u for u in io_uses("__main__"))
    src = ("import sys\nfrom sys import argv\nprint(1)\nopen('f')\nsys.exit(2)\n"
           "x = sys.argv\nos.fdopen(3)\nlen([])\n")
    assert sorted(io_uses_in(ast.parse(src))) == [
        "line 2: from sys import argv", "line 3: print(", "line 4: open(",
        "line 5: sys.exit", "line 6: sys.argv", "line 7: .fdopen("]


def declared_all(name: str) -> list[str] | None:
    """The literal `__all__` of a module (None if it declares none)."""
    for node in tree_of(name).body:
        targets = []
        if isinstance(node, ast.Assign):
            targets = node.targets
        elif isinstance(node, ast.AnnAssign) and node.value is not None:
            targets = [node.target]
        if any(isinstance(t, ast.Name) and t.id == "__all__" for t in targets):
            return list(ast.literal_eval(node.value))
    return None


@pytest.mark.parametrize("name", [n for n in ALL if n != "__main__"])
def test_all_is_declared_and_every_name_exists(name):
    """Each module but __main__ declares `__all__` of unique strings, each an attribute."""
    names = declared_all(name)
    assert names is not None, f"{name} declares no __all__"
    assert all(isinstance(n, str) for n in names)
    assert len(names) == len(set(names)), f"{name}: duplicates in __all__"
    module = importlib.import_module(PACKAGE if name == "__init__" else f"{PACKAGE}.{name}")
    missing = [n for n in names if not hasattr(module, n)]
    assert missing == [], f"{name}.__all__ names missing attributes: {missing}"
    assert list(module.__all__) == names


# --- the engine's step protocol: drivers use public names only --------------------

ENGINE_PARTS = {"core.py": "Engine", "stepping.py": "Stepping", "lifecycle.py": "Lifecycle",
                "dispatching.py": "Dispatching", "fast/counted.py": "Counting"}


def engine_private_names() -> set[str]:
    """Every `_name` the Engine class defines (with the classes it is written in):
    their methods and the attributes they use on `self`."""
    parts = []
    for module, name in ENGINE_PARTS.items():
        tree = ast.parse((ROOT / "engine" / module).read_text())
        parts.append(next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == name))
    names = set()
    for node in (n for part in parts for n in ast.walk(part)):
        if isinstance(node, ast.FunctionDef) and node.name.startswith("_") \
                and not node.name.startswith("__"):
            names.add(node.name)
        elif (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name)
              and node.value.id == "self" and node.attr.startswith("_")
              and not node.attr.startswith("__")):
            names.add(node.attr)
    return names


def private_engine_uses(source: str | ast.AST, names: set[str]) -> list[tuple[int, str]]:
    """(line, name) of every `x._name` in `source` (text or its parsed tree) with
    `_name` in `names` and `x` not `self` or `cls`."""
    out = []
    for node in ast.walk(ast.parse(source) if isinstance(source, str) else source):
        if (isinstance(node, ast.Attribute) and node.attr in names
                and not (isinstance(node.value, ast.Name) and node.value.id in ("self", "cls"))):
            out.append((node.lineno, node.attr))
    return out


def test_nothing_outside_the_engine_uses_its_private_names():
    names = engine_private_names()
    assert {"_plugin", "_complete", "_start", "_register", "_cohort"} <= names
    found = []
    for module in ALL:
        if module.split(".")[0] == "engine":
            continue
        for line, name in private_engine_uses(tree_of(module), names):
            found.append(f"{path_of(module).relative_to(ROOT)}:{line}: {name}")
    assert found == []


def test_the_private_name_scan_finds_a_use():
    names = {"_changes", "_cursor"}
    source = "def f(engine):\n    engine._changes += 1\n    self._cursor = 0\n"
    assert private_engine_uses(source, names) == [(2, "_changes")]


# --- option choices and the registries they name --------------------------------

def test_option_choices_are_the_registries_names():
    """records/ sits below policies/ and fleet/, so the option specs spell the names
    out; this ties them to the registries (a new victim rule or router must be
    offered, and nothing offered may be missing)."""
    from scheduler_sim.fleet.routers import ROUTERS
    from scheduler_sim.policies import POLICIES
    from scheduler_sim.policies.vllm import VICTIM_RULES
    from scheduler_sim.records.option_table import DEFAULT_POLICIES, OPTIONS
    assert OPTIONS["victim"].choices == tuple(VICTIM_RULES)
    assert OPTIONS["router"].choices == tuple(ROUTERS)
    assert set(DEFAULT_POLICIES) <= set(POLICIES)


# --- the engine's state: a newcomer can hold it (module sizes: test_module_sizes.py) --

ENGINE_ATTRIBUTES = 20


@pytest.mark.parametrize("policy", ["continuous", "vllm", "sglang"])
def test_an_engine_holds_at_most_20_attributes_before_and_after_a_run(policy):
    """The Engine's state is about twenty names (its parts are objects of their own):
    counted on a real engine with events, prefix caching and a waiting timeout, before
    and after it replays the shipped quickstart trace; a run adds none."""
    from scheduler_sim.engine.core import Engine
    from scheduler_sim.io.trace import read_trace
    from scheduler_sim.records.options import Options

    trace = read_trace(str(ROOT.parent / "traces" / "quickstart.jsonl"))
    options = Options.resolve(trace.config, {"prefix_caching": True, "waiting_timeout": 50})
    engine = Engine(trace.workload, options, policy, on_event=lambda event: None)
    before = set(vars(engine))
    engine.run()
    assert len(before) <= ENGINE_ATTRIBUTES
    assert set(vars(engine)) == before
