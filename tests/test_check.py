"""`check` with bounds and tolerances, `check --junit`, the pytest plugin and
`replay --requests-csv` (§10), driven in-process through `cli.main`.

The traces are tiny, with block_size 4 and no cost model (one dispatch = one tick):

LONE: num_blocks 4, policy continuous (the default); request a arrives at 0
with P=4, N=3 and a credit of ceil((4+3-1)/4) = 2 blocks.
- tick 0 prefills the 4 prompt tokens and emits output 1 at tick 1; ticks 1
  and 2 decode outputs 2 and 3; a finishes at 3. So first_token 1, ttft 1,
  e2el 3, tpot (e2el - ttft) / (N - 1) = (3 - 1) / 2 = 1, makespan 3,
  3 iterations. max_tokens defaults to N, so a ends finished_length_capped.
- block counts at tick t (the state after admission at t):
  tick 0: running 1, reserved 2 (the credit), allocated 0, free 4;
  tick 1: the 4 prompt tokens fill 1 block: allocated 1, free 3;
  tick 2: the tick-1 decode wrote token 5 (output 1), opening block 2:
          allocated 2, free 2;
  tick 3: a has finished and released everything: running 0, reserved 0,
          allocated 0, free 4.

TINY: num_blocks 8, policies serial and continuous; a and b arrive at 0 with
P=4, N=3 (2 blocks of credit each).
- continuous: both are admitted at 0 (4 <= 8 blocks) and run side by side as
  a does in LONE: both finish at 3, makespan 3, ttft 1, e2el 3.
- serial: a runs at ticks 0..2 and finishes at 3; b is admitted at 3 (so at
  tick 3 running is 1), runs at 3..5: first_token 4, finished 6, ttft 4,
  e2el 6, queue_delay 3, makespan 6.
"""
from __future__ import annotations

import csv
import io
import json
import xml.etree.ElementTree as ET

import pytest

from conftest import ROOT, req, run_cli as run, write_trace as write
from scheduler_sim.engine.summary import REQUEST_FIELDS

pytest_plugins = ["pytester"]

LONE = [{"type": "config", "block_size": 4, "num_blocks": 4}, req("a", 0, 4, 3)]
TINY_CONFIG = {"type": "config", "block_size": 4, "num_blocks": 8,
               "policy": ["serial", "continuous"]}
TINY = [TINY_CONFIG, req("a", 0, 4, 3), req("b", 0, 4, 3)]






def expect(**fields) -> dict:
    """An expect record."""
    return {"type": "expect", **fields}


# --- 1. bounds and tolerances ------------------------------------------------------

# (expect record fields, failure text or None when it holds). LONE's values:
# makespan 3; request a: ttft 1, e2el 3, tpot 1, finished 3, deadline null;
# free at ticks 0/1/2/3 = 4/3/2/4, allocated at tick 2 = 2 (module docstring).
BOUND_CASES = [
    # run expectations (makespan 3)
    ({"makespan": {"max": 3}}, None),                                   # 3 <= 3, inclusive
    ({"makespan": {"max": 2}}, "run makespan: expected <= 2, got 3"),  # 3 > 2
    ({"makespan": {"min": 3}}, None),                                   # 3 >= 3, inclusive
    ({"makespan": {"min": 4}}, "run makespan: expected >= 4, got 3"),  # 3 < 4
    ({"makespan": {"min": 1, "max": 3}}, None),                         # 1 <= 3 <= 3
    ({"makespan": {"min": 1, "max": 2}}, "run makespan: expected between 1 and 2, got 3"),
    # |3 - 3.5| = 0.5 <= 0.15 x 3.5 = 0.525
    ({"makespan": {"approx": 3.5, "rel": 0.15}}, None),
    # 0.5 > 0.01 x 3.5 = 0.035
    ({"makespan": {"approx": 3.5, "rel": 0.01}}, "run makespan: expected 3.5 (rel 0.01), got 3"),
    # |3 - 3.5| = 0.5 <= abs 0.5, the edge is inclusive
    ({"makespan": {"approx": 3.5, "abs": 0.5}}, None),
    # |3 - 4| = 1 > abs 0.5
    ({"makespan": {"approx": 4, "abs": 0.5}}, "run makespan: expected 4 (abs 0.5), got 3"),
    # |3 - 4| = 1 <= max(0.25 x 4, 0.1) = 1: rel is the larger tolerance
    ({"makespan": {"approx": 4, "rel": 0.25, "abs": 0.1}}, None),
    # 1 <= max(0.1 x 4, 1) = 1: abs is the larger tolerance
    ({"makespan": {"approx": 4, "rel": 0.1, "abs": 1}}, None),
    # 1 > max(0.1 x 4, 0.5) = 0.5
    ({"makespan": {"approx": 4, "rel": 0.1, "abs": 0.5}},
     "run makespan: expected 4 (rel 0.1, abs 0.5), got 3"),
    # approx alone: rel 1e-6, |3 - 3.000001| = 1e-6 <= 3.000001e-6
    ({"makespan": {"approx": 3.000001}}, None),
    # |3 - 3.01| = 0.01 > 3.01e-6
    ({"makespan": {"approx": 3.01}}, "run makespan: expected 3.01 (rel 1e-06), got 3"),
    # min holds (3 >= 3) but approx does not (|3 - 10| > 1e-5): both parts are named
    ({"makespan": {"min": 3, "approx": 10}},
     "run makespan: expected >= 3 and 10 (rel 1e-06), got 3"),
    ({"makespan": 3}, None),                                            # equality
    ({"makespan": 2}, "run makespan: expected 2, got 3"),
    ({"makespan": None}, "run makespan: expected null, got 3"),
    # per-request expectations (request a)
    ({"id": "a", "ttft": {"min": 1, "max": 1}}, None),                  # ttft 1
    ({"id": "a", "ttft": {"min": 2}}, "request 'a' ttft: expected >= 2, got 1"),
    ({"id": "a", "e2el": {"min": 1, "max": 2}}, "request 'a' e2el: expected between 1 and 2, got 3"),
    ({"id": "a", "tpot": {"approx": 1.5, "abs": 0.5}}, None),          # |1 - 1.5| = 0.5 <= 0.5
    ({"id": "a", "tpot": {"approx": 3.5, "rel": 0.01}},
     "request 'a' tpot: expected 3.5 (rel 0.01), got 1"),              # 2.5 > 0.035
    ({"id": "a", "finished": {"max": 3}}, None),                        # finished 3
    ({"id": "a", "finished": 4}, "request 'a' finished: expected 4, got 3"),
    # a has no deadline: null is within no bound
    ({"id": "a", "deadline": {"max": 5}}, "request 'a' deadline: expected <= 5, got null"),
    ({"id": "a", "deadline": None}, None),
    # snapshot expectations
    ({"at": 1, "free": {"min": 0}}, None),                              # free 3 at tick 1
    ({"at": 1, "free": {"approx": 3}}, None),                           # exactly 3
    ({"at": 0, "free": {"approx": 3, "abs": 0.5}},
     "tick 0 free: expected 3 (abs 0.5), got 4"),                      # |4 - 3| = 1 > 0.5
    ({"at": 0, "free": {"approx": 3}}, "tick 0 free: expected 3 (rel 1e-06), got 4"),
    ({"at": 2, "allocated": {"max": 1}}, "tick 2 allocated: expected <= 1, got 2"),
    ({"at": 3, "free": {"min": 4, "max": 4}}, None),                    # all released at 3
    ({"at": 0, "reserved": 2, "allocated": 0}, None),
]


@pytest.mark.parametrize("fields,failure", BOUND_CASES,
                         ids=[json.dumps(f) for f, _ in BOUND_CASES])
def test_check_one_bound(tmp_path, fields, failure):
    """LONE plus one expect record on line 3 (values in the comments of BOUND_CASES,
    derived in the module docstring). A holding one prints only
    `PATH: ok: 1 expectation(s) hold (continuous)` and exits 0; a failing one
    prints `PATH:3: [continuous] <subject> <field>: expected ..., got ...` and
    `PATH: FAILED: 1 of 1 expectation(s) failed, 1 field(s) differ (continuous)`,
    exit 1."""
    path = write(tmp_path, LONE + [expect(**fields)])
    status, out, err = run(["check", path])
    if failure is None:
        assert (status, out, err) == (0, f"{path}: ok: 1 expectation(s) hold (continuous)\n", "")
    else:
        assert (status, out, err) == (1, (
            f"{path}:3: [continuous] {failure}\n"
            f"{path}: FAILED: 1 of 1 expectation(s) failed, 1 field(s) differ (continuous)\n"), "")


def test_check_counts_expectations_and_fields(tmp_path):
    """LONE with five expect records (lines 3-7):
    line 3 run makespan {"max": 3} and iterations 3: hold (makespan 3, 3 iterations);
    line 4 request a ttft {"min": 2} and e2el {"max": 2}: both fail (ttft 1, e2el 3);
    line 5 tick 1 free {"min": 3}: holds (free 3);
    line 6 tick 2 free {"max": 1}: fails (free 2);
    line 7 request a first_token 1: holds.
    The failure lines come in line order, one per field; the summary counts 2
    of 5 expectations failed and 3 fields differing; exit 1."""
    path = write(tmp_path, LONE + [
        expect(makespan={"max": 3}, iterations=3),
        expect(id="a", ttft={"min": 2}, e2el={"max": 2}),
        expect(at=1, free={"min": 3}),
        expect(at=2, free={"max": 1}),
        expect(id="a", first_token=1),
    ])
    status, out, err = run(["check", path])
    assert (status, err) == (1, "")
    assert out.splitlines() == [
        f"{path}:4: [continuous] request 'a' ttft: expected >= 2, got 1",
        f"{path}:4: [continuous] request 'a' e2el: expected <= 2, got 3",
        f"{path}:6: [continuous] tick 2 free: expected <= 1, got 2",
        f"{path}: FAILED: 2 of 5 expectation(s) failed, 3 field(s) differ (continuous)",
    ]


def test_check_all_hold_counts_expectations_per_policy(tmp_path):
    """TINY with three holding expect records: makespan {"min": 3, "max": 6}
    (serial 6, continuous 3), request a ttft 1 (1 under both) and, for serial
    only, running 1 at tick 3 (b admitted at 3). 2 + 2 + 1 = 5 checks; the
    summary names both policies in order: `ok: 5 expectation(s) hold (serial, continuous)`."""
    path = write(tmp_path, TINY + [
        expect(makespan={"min": 3, "max": 6}),
        expect(id="a", ttft=1),
        expect(at=3, running=1, policy="serial"),
    ])
    assert run(["check", path]) == (
        0, f"{path}: ok: 5 expectation(s) hold (serial, continuous)\n", "")


def test_check_notes_expectations_for_policies_not_replayed(tmp_path):
    """TINY replayed with `--policy continuous` only: the makespan {"max": 3}
    expectation holds (3); the serial-only one (makespan 6) is not checked
    and the summary says so: `ok: 1 expectation(s) hold (continuous); 1 for
    policies not replayed`."""
    path = write(tmp_path, TINY + [expect(makespan={"max": 3}),
                                   expect(makespan=6, policy="serial")])
    assert run(["check", path, "--policy", "continuous"]) == (
        0, f"{path}: ok: 1 expectation(s) hold (continuous); 1 for policies not replayed\n", "")


def test_check_boolean_request_fields(tmp_path):
    """Two requests under continuous, num_blocks 4, slo e2el=2:
    a (P=4, N=3, deadline 2) finishes at 3 as in LONE: 3 > 2 so deadline_missed
    is true; e2el 3 > 2 so slo_met is false.
    b (P=4, N=2, deadline 3; credit ceil(5/4) = 2, so 2 + 2 <= 4 and both are
    admitted at 0) emits output 1 at 1 and output 2 at 2: finished 2 <= 3 so
    deadline_missed is false; e2el 2 <= 2 so slo_met is true.
    Lines 4 and 5 state exactly that and hold; line 6 expects false for a's
    true, line 7 false for b's true, line 8 null for a's true: 3 of 5 fail."""
    path = write(tmp_path, [
        {"type": "config", "block_size": 4, "num_blocks": 4, "slo": "e2el=2"},
        req("a", 0, 4, 3, deadline=2),
        req("b", 0, 4, 2, deadline=3),
        expect(id="a", deadline_missed=True, slo_met=False),
        expect(id="b", deadline_missed=False, slo_met=True),
        expect(id="a", deadline_missed=False),
        expect(id="b", slo_met=False),
        expect(id="a", deadline_missed=None),
    ])
    status, out, err = run(["check", path])
    assert (status, err) == (1, "")
    assert out.splitlines() == [
        f"{path}:6: [continuous] request 'a' deadline_missed: expected false, got true",
        f"{path}:7: [continuous] request 'b' slo_met: expected false, got true",
        f"{path}:8: [continuous] request 'a' deadline_missed: expected null, got true",
        f"{path}: FAILED: 3 of 5 expectation(s) failed, 3 field(s) differ (continuous)",
    ]


def test_check_run_slo_met_is_a_count(tmp_path):
    """LONE with slo ttft=1: a completes with ttft 1 <= 1, so the run's slo_met
    (the number of requests that met the SLO, as replay's `SLO met` row shows)
    is 1. A run expectation of slo_met 1 is a plain number compared for
    equality, so it holds: `ok: 1 expectation(s) hold`, exit 0."""
    path = write(tmp_path, [{**LONE[0], "slo": "ttft=1"}, LONE[1], expect(slo_met=1)])
    assert run(["check", path]) == (0, f"{path}: ok: 1 expectation(s) hold (continuous)\n", "")


def test_check_run_slo_met_bound(tmp_path):
    """As above, with slo_met {"min": 1, "max": 1} (1 is between 1 and 1) and
    slo_attainment (the fraction 1 / 1 = 1.0) {"approx": 1}: both hold."""
    path = write(tmp_path, [{**LONE[0], "slo": "ttft=1"}, LONE[1],
                            expect(slo_met={"min": 1, "max": 1}),
                            expect(slo_attainment={"approx": 1})])
    assert run(["check", path]) == (0, f"{path}: ok: 2 expectation(s) hold (continuous)\n", "")


# --- 2. invalid bounds are trace errors --------------------------------------------

KNOWN = "(known: min, max, approx, rel, abs)"
BAD_BOUNDS = [
    ('{"type":"expect","makespan":{"maxx":3}}',
     f"expect: makespan: unknown bound 'maxx' (did you mean 'max'?) {KNOWN}"),
    ('{"type":"expect","makespan":{"below":3}}',                     # nothing close
     f"expect: makespan: unknown bound 'below' {KNOWN}"),
    ('{"type":"expect","id":"a","ttft":{"approx":1,"rell":0.1}}',
     f"expect 'a': ttft: unknown bound 'rell' (did you mean 'rel'?) {KNOWN}"),
    ('{"type":"expect","makespan":{"rel":0.1}}',
     "expect: makespan: rel and abs are tolerances of approx, which is missing"),
    ('{"type":"expect","makespan":{"max":5,"abs":1}}',
     "expect: makespan: rel and abs are tolerances of approx, which is missing"),
    ('{"type":"expect","makespan":{"approx":3,"rel":-0.1}}',
     'expect: makespan: rel and abs must be >= 0, got {"approx": 3, "rel": -0.1}'),
    ('{"type":"expect","makespan":{"approx":3,"abs":-1}}',
     'expect: makespan: rel and abs must be >= 0, got {"approx": 3, "abs": -1}'),
    ('{"type":"expect","at":1,"free":{"min":3,"max":2}}',
     'expect: free: min must be <= max, got {"min": 3, "max": 2}'),
    ('{"type":"expect","makespan":{}}',
     "expect: makespan: a bound needs min, max or approx, got {}"),
    ('{"type":"expect","makespan":{"max":"3"}}',
     "expect: makespan: max must be a finite number of at most 1e300 in size, got '3'"),
    ('{"type":"expect","makespan":{"max":true}}',
     "expect: makespan: max must be a finite number of at most 1e300 in size, got true"),
    ('{"type":"expect","makespan":{"min":null}}',
     "expect: makespan: min must be a finite number of at most 1e300 in size, got null"),
    ('{"type":"expect","makespan":{"approx":[3]}}',
     "expect: makespan: approx must be a finite number of at most 1e300 in size, got [3]"),
    ('{"type":"expect","makespan":{"max":NaN}}',
     "expect: makespan: max must be a finite number of at most 1e300 in size, got NaN"),
    ('{"type":"expect","makespan":{"approx":Infinity}}',
     "expect: makespan: approx must be a finite number of at most 1e300 in size, got Infinity"),
    ('{"type":"expect","makespan":NaN}',
     'expect: makespan must be a number, string, null or a bound like {"max": 5}, got NaN'),
    ('{"type":"expect","makespan":true}',
     'expect: makespan must be a number, string, null or a bound like {"max": 5}, got true'),
    ('{"type":"expect","id":"a","deadline_missed":1}',
     "expect 'a': deadline_missed must be true, false or null, got 1"),
]


@pytest.mark.parametrize("line,message", BAD_BOUNDS, ids=[m for _, m in BAD_BOUNDS])
def test_check_rejects_bad_bound(tmp_path, line, message):
    """LONE plus one malformed expect on line 3: `check` prints nothing on stdout,
    exactly `PATH:3: <message>` on stderr (no traceback) and exits 2."""
    path = write(tmp_path, LONE + [line])
    assert run(["check", path]) == (2, "", f"{path}:3: {message}\n")


def test_check_reports_every_bad_bound_in_line_order(tmp_path):
    """LONE plus expects on lines 3-6: line 3 (min > max), line 5 (abs without
    approx) and line 6 (unknown bound 'mni') are bad, line 4 is good. Every
    problem is listed, in line order, one line each, and nothing is replayed
    (stdout stays empty); exit 2."""
    path = write(tmp_path, LONE + [
        '{"type":"expect","makespan":{"min":3,"max":2}}',
        '{"type":"expect","makespan":{"max":3}}',
        '{"type":"expect","id":"a","ttft":{"abs":1}}',
        '{"type":"expect","at":1,"free":{"mni":1}}',
    ])
    assert run(["check", path]) == (2, "", (
        f'{path}:3: expect: makespan: min must be <= max, got {{"min": 3, "max": 2}}\n'
        f"{path}:5: expect 'a': ttft: rel and abs are tolerances of approx, which is missing\n"
        f"{path}:6: expect: free: unknown bound 'mni' (did you mean 'min'?) {KNOWN}\n"))


# --- 3. a check that checks nothing fails -----------------------------------------

def test_check_without_expect_records_fails(tmp_path):
    """LONE has no expect record: nothing is checked, which is a failure (exit 1)."""
    path = write(tmp_path, LONE)
    assert run(["check", path]) == (
        1, f"{path}: FAILED: nothing was checked: it has no expect records\n", "")


def test_check_with_expects_only_for_other_policies_fails(tmp_path):
    """LONE (continuous) with two expect records, both for serial, which is not
    replayed: nothing is checked, exit 1, and the message counts the 2 records."""
    path = write(tmp_path, LONE + [expect(makespan=3, policy="serial"),
                                   expect(id="a", ttft=1, policy="serial")])
    assert run(["check", path]) == (1, (
        f"{path}: FAILED: nothing was checked: none of its 2 expect record(s) applies "
        f"to the policies replayed (continuous)\n"), "")


def test_check_policy_flag_can_leave_nothing_checked(tmp_path):
    """TINY with one expect record for serial (makespan 6, which would hold),
    replayed with `--policy continuous`: nothing is checked, exit 1."""
    path = write(tmp_path, TINY + [expect(makespan=6, policy="serial")])
    assert run(["check", path, "--policy", "continuous"]) == (1, (
        f"{path}: FAILED: nothing was checked: none of its 1 expect record(s) applies "
        f"to the policies replayed (continuous)\n"), "")


# --- 4. check --junit --------------------------------------------------------------

# TINY plus: line 4 makespan <= 3 (serial 6 fails, continuous 3 holds); line 5
# request b ttft 1 and e2el <= 3 (serial 4 and 6 both fail; continuous 1 and 3
# hold); line 6, serial only, running 1 at tick 3 (b admitted at 3: holds).
JUNIT_TRACE = TINY + [
    expect(makespan={"max": 3}),
    expect(id="b", ttft=1, e2el={"max": 3}),
    expect(at=3, running=1, policy="serial"),
]


def junit_cases(xml_text: str) -> tuple[ET.Element, list[ET.Element]]:
    """The single testsuite of a JUnit document and its testcases."""
    root = ET.fromstring(xml_text)
    assert root.tag == "testsuites"
    suites = root.findall("testsuite")
    assert len(suites) == 1
    return suites[0], suites[0].findall("testcase")


def test_junit_has_a_testcase_per_expectation_and_policy(tmp_path):
    """JUNIT_TRACE: serial replays lines 4, 5, 6 and continuous lines 4, 5: 5
    testcases, named `line N: <subject> [<policy>]`, in that order; serial's
    lines 4 and 5 fail (2 failures). A failure's message joins its fields with
    `; ` and its text has one `PATH:LINE: [policy] subject field: ...` line per
    field. stdout still carries check's usual lines; exit 1."""
    path = write(tmp_path, JUNIT_TRACE)
    xml_path = tmp_path / "report.xml"
    status, out, err = run(["check", path, "--junit", str(xml_path)])
    assert (status, err) == (1, "")
    assert out.splitlines() == [
        f"{path}:4: [serial] run makespan: expected <= 3, got 6",
        f"{path}:5: [serial] request 'b' ttft: expected 1, got 4",
        f"{path}:5: [serial] request 'b' e2el: expected <= 3, got 6",
        f"{path}: FAILED: 2 of 5 expectation(s) failed, 3 field(s) differ (serial, continuous)",
    ]
    root = ET.fromstring(xml_path.read_text(encoding="utf-8"))
    assert (root.get("tests"), root.get("failures"), root.get("errors")) == ("5", "2", "0")
    suite, cases = junit_cases(xml_path.read_text(encoding="utf-8"))
    assert suite.get("name") == path
    assert (suite.get("tests"), suite.get("failures"), suite.get("errors")) == ("5", "2", "0")
    assert [c.get("name") for c in cases] == [
        "line 4: run [serial]",
        "line 5: request 'b' [serial]",
        "line 6: tick 3 [serial]",
        "line 4: run [continuous]",
        "line 5: request 'b' [continuous]",
    ]
    assert {c.get("classname") for c in cases} == {path}
    failures = [c.find("failure") for c in cases]
    assert [f is not None for f in failures] == [True, True, False, False, False]
    assert failures[0].get("message") == "makespan: expected <= 3, got 6"
    assert failures[0].text == f"{path}:4: [serial] run makespan: expected <= 3, got 6"
    assert failures[1].get("message") == "ttft: expected 1, got 4; e2el: expected <= 3, got 6"
    assert failures[1].text.splitlines() == [
        f"{path}:5: [serial] request 'b' ttft: expected 1, got 4",
        f"{path}:5: [serial] request 'b' e2el: expected <= 3, got 6",
    ]


def test_junit_all_passing(tmp_path):
    """LONE with two holding expectations (makespan <= 3; tick 1 free 3): 2
    testcases, failures 0, no failure element; exit 0."""
    path = write(tmp_path, LONE + [expect(makespan={"max": 3}), expect(at=1, free=3)])
    xml_path = tmp_path / "report.xml"
    assert run(["check", path, "--junit", str(xml_path)]) == (
        0, f"{path}: ok: 2 expectation(s) hold (continuous)\n", "")
    suite, cases = junit_cases(xml_path.read_text(encoding="utf-8"))
    assert (suite.get("tests"), suite.get("failures")) == ("2", "0")
    assert [c.get("name") for c in cases] == ["line 3: run [continuous]",
                                              "line 4: tick 1 [continuous]"]
    assert [c.find("failure") for c in cases] == [None, None]


def test_junit_is_byte_identical_across_runs(tmp_path):
    """The same check of JUNIT_TRACE written twice gives the same bytes (no
    timestamps or durations), and both runs exit 1 (serial fails)."""
    path = write(tmp_path, JUNIT_TRACE)
    first, second = tmp_path / "one.xml", tmp_path / "two.xml"
    assert run(["check", path, "--junit", str(first)])[0] == 1
    assert run(["check", path, "--junit", str(second)])[0] == 1
    assert first.read_bytes() == second.read_bytes()
    assert b"line 5: request 'b' [serial]" in first.read_bytes()


def test_junit_to_stdout(tmp_path):
    """`--junit -` writes only the XML document to stdout (so it can be piped to a
    file and parsed) and check's own lines to stderr; for JUNIT_TRACE it holds 5
    testcases and 2 failures (see above)."""
    path = write(tmp_path, JUNIT_TRACE)
    status, out, err = run(["check", path, "--junit", "-"])
    assert status == 1
    assert out.startswith('<?xml version="1.0" encoding="UTF-8"?>\n')
    assert out.endswith("</testsuites>\n")
    suite, cases = junit_cases(out)
    assert (suite.get("tests"), suite.get("failures")) == ("5", "2")
    assert len(cases) == 5
    assert err.splitlines()[-1] == (
        f"{path}: FAILED: 2 of 5 expectation(s) failed, 3 field(s) differ (serial, continuous)")


def test_junit_control_character_in_request_id(tmp_path):
    """A request id "a\\u0001" (P=4, N=3, alone on num_blocks 4, so ttft 1):
    an expect of ttft 2 fails. XML 1.0 cannot carry U+0001, yet the document
    parses, and the testcase and failure name the request by its escaped repr."""
    path = write(tmp_path, [LONE[0], req("a\u0001", 0, 4, 3), expect(id="a\u0001", ttft=2)])
    xml_path = tmp_path / "report.xml"
    assert run(["check", path, "--junit", str(xml_path)])[0] == 1
    suite, cases = junit_cases(xml_path.read_text(encoding="utf-8"))
    assert [c.get("name") for c in cases] == ["line 3: request 'a\\x01' [continuous]"]
    failure = cases[0].find("failure")
    assert failure.get("message") == "ttft: expected 2, got 1"
    assert failure.text == f"{path}:3: [continuous] request 'a\\x01' ttft: expected 2, got 1"


def test_junit_control_character_in_trace_path(tmp_path):
    """A trace file named "t\\x01.jsonl" (LONE, makespan 2 expected, 3 actual):
    the path is the suite's name, and its U+0001 is written as the six
    characters `\\u0001` so the document stays well-formed."""
    path = write(tmp_path, LONE + [expect(makespan=2)], name="t\x01.jsonl")
    xml_path = tmp_path / "report.xml"
    assert run(["check", path, "--junit", str(xml_path)])[0] == 1
    suite, cases = junit_cases(xml_path.read_text(encoding="utf-8"))
    shown = path.replace("\x01", "\\u0001")
    assert suite.get("name") == shown
    assert cases[0].get("classname") == shown
    assert cases[0].find("failure").text == (
        f"{shown}:3: [continuous] run makespan: expected 2, got 3")


# --- 5. the pytest plugin ----------------------------------------------------------

PLUGIN = ("-p", "scheduler_sim.cli.pytest_plugin", "-p", "no:cacheprovider")


@pytest.fixture
def plugin_run(pytester, monkeypatch):
    """runpytest with only the scheduler-sim plugin (no installed plugins), in-process."""
    monkeypatch.setenv("PYTEST_DISABLE_PLUGIN_AUTOLOAD", "1")
    pytester.syspathinsert(ROOT)

    def go(*args):
        return pytester.runpytest(*PLUGIN, *args)
    return go


def jsonl_text(records: list) -> str:
    """JSONL text of records (dicts, or raw str lines)."""
    return "".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in records)


def test_plugin_collects_an_item_per_expectation_and_policy(pytester, plugin_run):
    """JUNIT_TRACE as trace.jsonl: the same 5 (expectation, policy) pairs as
    `check --junit` become items with the same names."""
    pytester.makefile(".jsonl", trace=jsonl_text(JUNIT_TRACE))
    result = plugin_run("--collect-only", "-q")
    assert result.ret == 0
    assert [line for line in result.outlines if line.startswith("trace.jsonl::")] == [
        "trace.jsonl::line 4: run [serial]",
        "trace.jsonl::line 5: request 'b' [serial]",
        "trace.jsonl::line 6: tick 3 [serial]",
        "trace.jsonl::line 4: run [continuous]",
        "trace.jsonl::line 5: request 'b' [continuous]",
    ]


def test_plugin_runs_the_items(pytester, plugin_run):
    """JUNIT_TRACE: serial's lines 4 and 5 fail, the other 3 items pass. Each
    failure report shows check's `PATH:LINE: [policy] subject field: expected
    ..., got ...` lines."""
    pytester.makefile(".jsonl", trace=jsonl_text(JUNIT_TRACE))
    result = plugin_run()
    result.assert_outcomes(passed=3, failed=2)
    path = pytester.path / "trace.jsonl"
    for line in (f"{path}:4: [serial] run makespan: expected <= 3, got 6",
                 f"{path}:5: [serial] request 'b' ttft: expected 1, got 4",
                 f"{path}:5: [serial] request 'b' e2el: expected <= 3, got 6"):
        assert line in result.outlines


def test_plugin_all_pass(pytester, plugin_run):
    """LONE with makespan 3 and request a ttft {"min": 1, "max": 1}: 2 items,
    both pass (makespan 3, ttft 1)."""
    pytester.makefile(".jsonl", lone=jsonl_text(LONE + [expect(makespan=3),
                                                        expect(id="a", ttft={"min": 1, "max": 1})]))
    plugin_run().assert_outcomes(passed=2)


def test_plugin_ignores_jsonl_without_expects_and_other_files(pytester, plugin_run):
    """A .jsonl trace without expect records (LONE), a .jsonl log that is no
    trace at all (it would fail to parse were it collected) and a .json and a
    .txt file holding JUNIT_TRACE's expect records: nothing is collected (exit 5)."""
    pytester.makefile(".jsonl", data=jsonl_text(LONE))
    pytester.makefile(".jsonl", log=jsonl_text([{"event": "start"}, "not json"]))
    pytester.makefile(".json", other=jsonl_text(JUNIT_TRACE))
    pytester.makefile(".txt", notes=jsonl_text(JUNIT_TRACE))
    result = plugin_run()
    assert result.ret == pytest.ExitCode.NO_TESTS_COLLECTED
    result.assert_outcomes()


def test_plugin_trace_that_does_not_parse_fails_one_item(pytester, plugin_run):
    """LONE plus a good expect (line 3) and a bad one (line 4, min > max): one
    item, `trace`, fails and shows the parser's `PATH:4: ...` message; the good
    expectation yields no item of its own."""
    pytester.makefile(".jsonl", bad=jsonl_text(LONE + [
        expect(makespan=3), expect(makespan={"min": 3, "max": 2})]))
    result = plugin_run("-rf")
    result.assert_outcomes(failed=1)
    path = pytester.path / "bad.jsonl"
    assert f'{path}:4: expect: makespan: min must be <= max, got {{"min": 3, "max": 2}}' \
        in result.outlines
    collected = plugin_run("--collect-only", "-q")
    assert [line for line in collected.outlines if "::" in line] == ["bad.jsonl::trace"]


def test_plugin_options_that_cannot_work_fail_one_item(pytester, plugin_run):
    """A config with order 'lpm' but no prefix caching cannot run, and the trace
    says so at its config line: one item, `trace`, fails with that problem."""
    pytester.makefile(".jsonl", lpm=jsonl_text([
        {"type": "config", "block_size": 4, "num_blocks": 4, "order": "lpm"},
        req("a", 0, 4, 3), expect(makespan=3)]))
    result = plugin_run()
    result.assert_outcomes(failed=1)
    path = pytester.path / "lpm.jsonl"
    assert (f"{path}:1: config: order 'lpm' needs prefix_caching: true (it sorts by cached "
            "prefix)") in result.outlines


# --- 6. replay --requests-csv ------------------------------------------------------

HEADER = ["policy", "id", "arrival", "sent", "admitted", "first_token", "finished", "status",
          "client_wait", "queue_delay", "ttft", "tpot", "e2el", "preemptions", "replay_rows",
          "useful_rows", "outputs", "prompt_tokens", "output_tokens", "max_tokens",
          "cached_tokens", "priority", "deadline", "deadline_missed", "slo_met"]
CAPPED = "finished_length_capped"


def test_requests_csv_lone_request(tmp_path):
    """LONE (module docstring) with `--requests-csv FILE`: the header is `policy`
    then REQUEST_FIELDS; one row: sent = admitted = arrival 0, first_token 1,
    finished 3, client_wait 0, queue_delay 0, ttft 1, tpot 1, e2el 3, useful_rows
    4 prompt + 2 decodes = 6, outputs 3, max_tokens 3; no deadline and no slo,
    so deadline, deadline_missed and slo_met (None) are empty. The table still
    goes to stdout."""
    path = write(tmp_path, LONE)
    csv_path = tmp_path / "requests.csv"
    status, out, err = run(["replay", path, "--requests-csv", str(csv_path)])
    assert (status, err) == (0, "")
    assert out == run(["replay", path])[1]
    rows = list(csv.reader(io.StringIO(csv_path.read_text(encoding="utf-8"))))
    assert rows[0] == HEADER == ["policy", *REQUEST_FIELDS]
    assert rows[1:] == [["continuous", "a", "0", "0", "0", "1", "3", CAPPED, "0", "0", "1", "1",
                         "3", "0", "0", "6", "3", "4", "3", "3", "0", "0", "", "", ""]]


def test_requests_csv_two_policies_to_stdout(tmp_path):
    """TINY with deadline 5 on both requests and slo ttft=2, `--requests-csv -`:
    the CSV goes to stdout and the table to stderr. Rows are grouped by policy
    (serial, then continuous), requests by arrival then trace order.
    serial a: finished 3 <= 5 (not missed), ttft 1 <= 2 (slo met);
    serial b: admitted 3, first_token 4, finished 6 > 5 (missed), queue_delay 3,
      ttft 4 > 2 (not met), tpot (6 - 4) / 2 = 1, e2el 6;
    continuous a and b: both like serial a. Booleans are written true/false."""
    path = write(tmp_path, [
        {**TINY_CONFIG, "slo": "ttft=2"},
        req("a", 0, 4, 3, deadline=5),
        req("b", 0, 4, 3, deadline=5),
    ])
    status, out, err = run(["replay", path, "--requests-csv", "-"])
    assert status == 0
    assert err == run(["replay", path])[1]
    early = ["0", "0", "0", "1", "3", CAPPED, "0", "0", "1", "1", "3",
             "0", "0", "6", "3", "4", "3", "3", "0", "0", "5", "false", "true"]
    late = ["0", "0", "3", "4", "6", CAPPED, "0", "3", "4", "1", "6",
            "0", "0", "6", "3", "4", "3", "3", "0", "0", "5", "true", "false"]
    assert list(csv.reader(io.StringIO(out))) == [
        HEADER,
        ["serial", "a", *early],
        ["serial", "b", *late],
        ["continuous", "a", *early],
        ["continuous", "b", *early],
    ]
