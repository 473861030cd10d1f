"""The README documents every option, event, summary field and policy the code has."""
from __future__ import annotations

from pathlib import Path

from scheduler_sim.records.events import EVENT_TYPES
from scheduler_sim.records.option_table import OPTIONS
from scheduler_sim.policies import POLICIES
from scheduler_sim.engine.summary import REQUEST_FIELDS, RUN_FIELDS

ROOT = Path(__file__).resolve().parent.parent
README = (ROOT / "README.md").read_text()


def test_first_screen_has_the_two_commands():
    """The install-and-replay command and the install-and-test command open the README."""
    first_screen = "\n".join(README.splitlines()[:15])
    assert "pip install . && scheduler-sim replay traces/quickstart.jsonl" in first_screen
    assert "pip install '.[test]' && python -m pytest -q" in first_screen
    assert (ROOT / "traces" / "quickstart.jsonl").is_file()


def test_ci_runs_the_readme_test_command():
    """.ci/run installs the test extra (which brings dask, so that the sweep's Dask test
    runs) and runs exactly the README's test command."""
    assert ("pip install --quiet '.[test]' && python -m pytest -q"
            in (ROOT / ".ci" / "run").read_text())


def test_every_option_is_documented():
    """Each option of the option table has a row in the README's option table."""
    missing = [name for name in OPTIONS if f"| `{name}` |" not in README]
    assert missing == []


def test_every_event_is_documented():
    """Each event kind has a row in the README's event table and in the spec's (§11):
    a new kind documented in one place only is caught here."""
    spec = (ROOT / "docs" / "spec.md").read_text()
    missing = [(kind, where) for kind in EVENT_TYPES for where, text in
               (("README.md", README), ("docs/spec.md", spec)) if f"| `{kind}` |" not in text]
    assert missing == []


def test_every_policy_is_documented():
    """Each registered policy has a row in the README's policy table."""
    missing = [name for name in POLICIES if f"| `{name}` |" not in README]
    assert missing == []


def test_every_summary_field_is_documented():
    """Each per-run and per-request summary field is named in the README."""
    prefixes = ("queue_delay_", "client_wait_", "ttft_", "tpot_", "itl_", "e2el_")
    missing = [f for f in RUN_FIELDS
               if f"`{f}`" not in README and not f.startswith(prefixes)]
    missing += [p for p in prefixes if f"`{p}*`" not in README]
    missing += [f for f in REQUEST_FIELDS if f != "id" and f"`{f}`" not in README]
    assert missing == []


def _citations(text: str) -> set[str]:
    """The anchors `text` cites: sections as s4 for §4, rule codes as themselves."""
    import re
    found = {f"s{n}" for n in re.findall(r"§(\d+)", text)}
    found |= set(re.findall(r"\b([EALTFD][0-9]b?)\b", text))
    return found


def test_every_cited_rule_and_section_has_an_anchor_in_the_spec():
    """Every §N and rule code (E1, A3, L5, T2, E6b, ...) cited in the package's source,
    the README, the docs, the labs' handouts or any command's --help resolves to an
    anchor of docs/spec.md (`<a id="E1"></a>`, `<a id="s4"></a>`)."""
    import io
    import re
    from scheduler_sim.cli.main import main
    spec = (ROOT / "docs" / "spec.md").read_text(encoding="utf-8")
    anchors = set(re.findall(r'<a id="([^"]+)"></a>', spec))
    sources = {"README.md": README}
    for path in sorted((ROOT / "scheduler_sim").rglob("*.py")):
        sources[str(path.relative_to(ROOT))] = path.read_text(encoding="utf-8")
    for path in sorted((ROOT / "labs").glob("*/README.md")) + sorted(
            (ROOT / "docs").glob("*.md")):
        sources[str(path.relative_to(ROOT))] = path.read_text(encoding="utf-8")
    for command in ("replay", "validate", "check", "convert", "generate", "cost"):
        out = io.StringIO()
        main([command, "--help"], out=out, err=io.StringIO())
        sources[f"{command} --help"] = out.getvalue()
    missing = sorted(f"{name}: {cite}" for name, text in sources.items()
                     for cite in _citations(text) - anchors)
    assert missing == []
    cited = set().union(*(_citations(t) for t in sources.values()))
    assert {"s4", "E1", "A3", "L2", "T1"} <= cited  # the scan sees citations at all


def _readme_option_rows() -> dict[str, tuple[str, str]]:
    """The README's option table: name -> (default cell, meaning cell)."""
    start, end = README.index("\n## Options\n"), README.index("\n## Policies\n")
    rows = {}
    for line in README[start:end].splitlines():
        cells = [cell.strip() for cell in line.strip("|").split(" | ")]
        if len(cells) == 3 and cells[0].startswith("`") and cells[0].endswith("`"):
            rows[cells[0].strip("`")] = (cells[1], cells[2])
    return rows


def _agrees(cell: str, value) -> bool:
    """Whether the README's default cell writes `value` (numbers compared as numbers)."""
    cell = cell.strip("`")
    if isinstance(value, bool):
        return cell == str(value).lower()
    if isinstance(value, (int, float)):
        try:
            return float(cell) == value
        except ValueError:
            return False
    if isinstance(value, list):
        return cell == ", ".join(value)
    return cell == str(value)


def test_the_readme_option_table_agrees_with_the_code():
    """Every option has one row and no row names an option that is not there; a default
    that is a value is the README's default (`--help` prints the code's); an option
    only some policies read says which, in the README's meaning and in its help."""
    rows = _readme_option_rows()
    assert sorted(rows) == sorted(OPTIONS)
    wrong = []
    for name, spec in OPTIONS.items():
        default, meaning = rows[name]
        if spec.default is not None and not _agrees(default, spec.default):
            wrong.append(f"{name}: README default {default}, code {spec.default!r}")
        for policy in spec.policies:
            if f"`{policy}`" not in meaning.split(":")[0] or policy not in spec.help:
                wrong.append(f"{name}: read only by {policy}, not said in both")
    assert wrong == []


def test_a_quoted_policy_error_names_the_plugins_file_as_the_tool_does():
    """A plugin's file in a `policy error` line is the absolute path it was loaded from
    (tests/test_plugins.py), so every such line quoted in the README and
    docs/policies.md shows one, whatever the policy's own spelling."""
    import re
    quoted = [line for text in (README, (ROOT / "docs" / "policies.md").read_text())
              for line in text.splitlines() if "policy error: policy '" in line]
    places = [m.group(1) for line in quoted
              for m in re.finditer(r"\(([^ ()]+\.py):\d+(?: in \w+)?\)", line)]
    assert len(places) >= 3
    assert [p for p in places if not p.startswith("/")] == []


def test_the_layout_table_names_every_module():
    """"How the code is laid out" names each module of every layer's folder (`fast/`'s
    with the engine's), but for the policies, which it names as one module per policy."""
    import re
    rows = re.findall(r"^\| \d \| `(\w+)/` \| (.*?) \| ", README, re.M)
    assert [folder for folder, _ in rows] == ["records", "requests", "kv", "gpu", "policies",
                                              "engine", "fleet", "io", "cli"]
    policies = {"serial", "continuous", "static", "dynamic", "vllm", "sglang"}
    unnamed = {}
    for folder, modules in rows:
        named = set(re.findall(r"`(\w+)`", modules))
        files = {p.stem for p in (ROOT / "scheduler_sim" / folder).rglob("*.py")
                 if p.stem != "__init__"}
        missing = sorted(files - named - (policies if folder == "policies" else set()))
        if missing:
            unnamed[folder] = missing
    assert unnamed == {}
