"""Module sizes (issue 24): no module of the package over 450 lines, none of engine/ over 300,
so that each stays one concept a newcomer can read whole."""
from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent / "scheduler_sim"
LIMIT = 450
ENGINE_LIMIT = 300

def line_count(path: Path) -> int:
    """The lines of a file, as `wc -l` counts them for a file that ends in a newline."""
    return len(path.read_text(encoding="utf-8").splitlines())


def module_sizes(root: Path = ROOT) -> dict[str, int]:
    """Every module under `root` (a path relative to it, `io/trace.py`) and its lines."""
    return {path.relative_to(root).as_posix(): line_count(path)
            for path in sorted(root.rglob("*.py"))}


def over(sizes: dict[str, int], limit: int, folder: str = "") -> dict[str, int]:
    """The modules of `sizes` in `folder` (all when empty) longer than `limit` lines."""
    return {name: n for name, n in sizes.items() if n > limit and name.startswith(folder)}


def test_no_module_is_over_450_lines():
    """Every module of the package is at most 450 lines; the failure lists the others
    with their lengths."""
    assert over(module_sizes(), LIMIT) == {}


def test_no_engine_module_is_over_300_lines():
    """Every module under engine/ (fast/ included) is at most 300 lines."""
    assert over(module_sizes(), ENGINE_LIMIT, folder="engine/") == {}


def test_the_check_finds_a_long_module(tmp_path):
    """On a made-up package: a.py of 451 lines is over 450, b.py of 450 is not, and
    engine/d.py of 301 lines is over 300 there (engine/e.py of 300 is not)."""
    (tmp_path / "engine").mkdir()
    for name, lines in (("a.py", 451), ("b.py", 450), ("engine/d.py", 301), ("engine/e.py", 300)):
        (tmp_path / name).write_text("x = 1\n" * lines, encoding="utf-8")
    sizes = module_sizes(tmp_path)
    assert sizes == {"a.py": 451, "b.py": 450, "engine/d.py": 301, "engine/e.py": 300}
    assert over(sizes, 450) == {"a.py": 451}
    assert over(sizes, 300, folder="engine/") == {"engine/d.py": 301}
