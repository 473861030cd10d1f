"""Seeded synthetic workloads: `generator.generate` and the `generate` command (§10).

Statistical checks use 4000 requests and fixed seeds, so they are
deterministic; the tolerances are several standard errors wide, so they
hold for any correct generator and seed, and fail for a wrong mean, rate or
mix. Standard errors, n = 4000: a Poisson span has relative sd 1/sqrt(n) =
1.6% (gamma with cv 2: 3.2%); uniform:16:512 has sd 496/sqrt(12) = 143, so
the mean's relative se is 0.9%; lognormal:100:0.5 has relative sd
sqrt(e^0.25 - 1) = 0.53, se 0.8%; a fraction p has se sqrt(p(1-p)/n) <= 0.8%.
"""
from __future__ import annotations

import hashlib
import io
import json
import math
import statistics

import pytest

from conftest import ROOT, simulate
from scheduler_sim.cli.main import main
from scheduler_sim.io.generator import (LengthSpec, WorkloadSpec, generate, parse_length,
                                        workload_records)
from scheduler_sim.io.trace import parse_trace


def run(argv: list[str]) -> tuple[int, str, str]:
    """Call the command line in-process; return (status, stdout, stderr)."""
    out, err = io.StringIO(), io.StringIO()
    status = main(argv, out=out, err=err)
    return status, out.getvalue(), err.getvalue()


def gen(*args: str) -> list[dict]:
    """`generate` through the command line; the output must parse as a trace (T1)."""
    status, out, err = run(["generate", *args])
    assert status == 0, err
    parse_trace(out.encode(), "generated.jsonl")
    return [json.loads(line) for line in out.splitlines()]


def requests_of(records: list[dict]) -> list[dict]:
    """The request records, in order."""
    return [r for r in records if r["type"] == "request"]


def cancels_of(records: list[dict]) -> list[dict]:
    """The cancel records, in order."""
    return [r for r in records if r["type"] == "cancel"]


def prompt_length(r: dict) -> int:
    """A request's prompt length, from prompt_tokens or prompt_token_ids."""
    return r["prompt_tokens"] if "prompt_tokens" in r else len(r["prompt_token_ids"])


def arrival_rate(records: list[dict]) -> float:
    """Requests per tick over the span of arrivals."""
    arrivals = [r["arrival"] for r in requests_of(records)]
    return len(arrivals) / (max(arrivals) - min(arrivals))


# --- determinism ------------------------------------------------------------------------

def test_same_seed_same_records():
    """Two calls with the same spec give equal record lists (every random feature on)."""
    spec = WorkloadSpec(seed=7, requests=200, rate=0.3, arrival="gamma", cv=2.0,
                        prompt=parse_length("lognormal:50:1"), output=parse_length("uniform:1:9"),
                        prefix_groups=3, prefix_tokens=8, priorities=((0, 3.0), (1, 1.0)),
                        cancel_rate=0.3, cancel_after=20.0)
    assert generate(spec) == generate(spec)
    assert len(requests_of(generate(spec))) == 200


def test_same_arguments_same_bytes_through_the_command(tmp_path):
    """The command gives byte-identical output for the same arguments, on stdout and -o."""
    args = ["generate", "--seed", "11", "--requests", "300", "--arrival", "gamma", "--cv", "3",
            "--prompt-len", "lognormal:200:1.2", "--output-len", "uniform:1:64", "--prefix-groups", "2",
            "--prefix-tokens", "16", "--priorities", "0:1,2:1", "--cancel-rate", "0.2"]
    first, second = run(args), run(args)
    assert first[0] == 0 and first[1] != ""
    assert first == second
    a, b = tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    assert run(args + ["-o", str(a)])[0] == 0 and run(args + ["-o", str(b)])[0] == 0
    assert a.read_bytes() == b.read_bytes() == first[1].encode()


def test_different_seeds_differ():
    """Seeds 1 and 2 give different arrivals and different lengths."""
    one = requests_of(gen("--seed", "1", "--requests", "100"))
    two = requests_of(gen("--seed", "2", "--requests", "100"))
    assert [r["arrival"] for r in one] != [r["arrival"] for r in two]
    assert [r["prompt_tokens"] for r in one] != [r["prompt_tokens"] for r in two]
    assert [r["output_tokens"] for r in one] != [r["output_tokens"] for r in two]


# --- arrivals ---------------------------------------------------------------------------

def test_poisson_rate_within_10_percent():
    """4000 Poisson arrivals at 0.5 per tick: requests / span is within 10% of 0.5; the
    arrivals are non-decreasing integers starting at 0."""
    records = gen("--seed", "3", "--requests", "4000", "--rate", "0.5")
    arrivals = [r["arrival"] for r in requests_of(records)]
    assert arrivals[0] == 0 and arrivals == sorted(arrivals)
    assert all(isinstance(a, int) for a in arrivals)
    assert abs(arrival_rate(records) - 0.5) <= 0.05


def test_gamma_rate_within_10_percent():
    """4000 gamma arrivals (cv 2) at 0.25 per tick: requests / span within 10% of 0.25."""
    records = gen("--seed", "4", "--requests", "4000", "--rate", "0.25", "--arrival", "gamma",
                  "--cv", "2")
    assert abs(arrival_rate(records) - 0.25) <= 0.025


def test_gamma_gaps_are_burstier_than_poisson():
    """At 0.05 per tick (mean gap 20 ticks, so truncating to whole ticks barely matters)
    the gaps' coefficient of variation is about 1 for Poisson and about 2 for gamma cv 2
    (each within 15%)."""
    def cv_of(*extra: str) -> float:
        arrivals = [r["arrival"] for r in requests_of(
            gen("--seed", "5", "--requests", "4000", "--rate", "0.05", *extra))]
        gaps = [b - a for a, b in zip(arrivals, arrivals[1:])]
        return statistics.pstdev(gaps) / statistics.mean(gaps)
    assert abs(cv_of() - 1.0) <= 0.15
    assert abs(cv_of("--arrival", "gamma", "--cv", "2") - 2.0) <= 0.30


def test_cv_alone_draws_gamma_gaps_and_is_refused_with_poisson():
    """--help says gamma with --cv: `--cv 2` alone is `--arrival gamma --cv 2` byte for
    byte (it was ignored: Poisson gaps, the bytes of no --cv at all); `--arrival poisson
    --cv 2` is refused, as --burstiness is."""
    base = ("--seed", "5", "--requests", "40", "--rate", "0.05")
    alone = gen(*base, "--cv", "2")
    assert alone == gen(*base, "--arrival", "gamma", "--cv", "2")
    assert alone != gen(*base)
    assert run(["generate", *base, "--arrival", "poisson", "--cv", "2"])[::2] == (2, 
        "scheduler-sim: error: --cv is the coefficient of variation of gamma gaps: give it "
        "without --arrival poisson\n")


# --- lengths ----------------------------------------------------------------------------

def test_uniform_lengths_mean_and_range():
    """uniform:16:512 prompts (mean 264) and uniform:16:256 outputs (mean 136): sample means
    within 5%, every value inside its range."""
    reqs = requests_of(gen("--seed", "6", "--requests", "4000", "--prompt-len", "uniform:16:512",
                           "--output-len", "uniform:16:256"))
    prompts = [r["prompt_tokens"] for r in reqs]
    outputs = [r["output_tokens"] for r in reqs]
    assert min(prompts) >= 16 and max(prompts) <= 512
    assert min(outputs) >= 16 and max(outputs) <= 256
    assert abs(statistics.mean(prompts) - 264) <= 0.05 * 264
    assert abs(statistics.mean(outputs) - 136) <= 0.05 * 136


def test_fixed_lengths_are_exact():
    """fixed:37 prompts and fixed:5 outputs: every request has exactly those."""
    reqs = requests_of(gen("--seed", "6", "--requests", "500", "--prompt-len", "fixed:37",
                           "--output-len", "fixed:5"))
    assert {r["prompt_tokens"] for r in reqs} == {37}
    assert {r["output_tokens"] for r in reqs} == {5}


def test_lognormal_mean_within_5_percent():
    """lognormal:100:0.5 has mean 100 e^(0.5^2/2) = 113.31 (LengthSpec.mean); the sample
    means of prompts and outputs are within 5% of it, and all lengths are >= 1."""
    spec = parse_length("lognormal:100:0.5")
    assert spec == LengthSpec("lognormal", 100.0, 0.5)
    assert math.isclose(spec.mean, 100 * math.exp(0.125), rel_tol=1e-12)
    reqs = requests_of(gen("--seed", "8", "--requests", "4000", "--prompt-len", "lognormal:100:0.5",
                           "--output-len", "lognormal:100:0.5"))
    prompts = [r["prompt_tokens"] for r in reqs]
    outputs = [r["output_tokens"] for r in reqs]
    assert min(prompts) >= 1 and min(outputs) >= 1
    assert abs(statistics.mean(prompts) - spec.mean) <= 0.05 * spec.mean
    assert abs(statistics.mean(outputs) - spec.mean) <= 0.05 * spec.mean


def test_length_spec_means():
    """LengthSpec.mean: fixed:9 -> 9, uniform:2:10 -> 6, empirical (3, 17, 100) -> 40."""
    assert parse_length("fixed:9").mean == 9
    assert parse_length("uniform:2:10").mean == 6
    assert parse_length("empirical:x", (3, 17, 100)).mean == 40


def test_empirical_lengths_come_from_the_trace(tmp_path):
    """With prompts 3, 17, 100 and outputs 1, 5, 5 in a source trace, 600 generated requests
    have prompts only in {3, 17, 100} and outputs only in {1, 5}, and each value occurs."""
    source = tmp_path / "src.jsonl"
    source.write_text("".join(json.dumps(r) + "\n" for r in [
        {"type": "request", "id": "a", "arrival": 0, "prompt_tokens": 3, "output_tokens": 1},
        {"type": "request", "id": "b", "arrival": 4, "prompt_tokens": 17, "output_tokens": 5},
        {"type": "request", "id": "c", "arrival": 9, "prompt_tokens": 100, "output_tokens": 5},
    ]), encoding="utf-8")
    reqs = requests_of(gen("--seed", "9", "--requests", "600", "--prompt-len", f"empirical:{source}",
                           "--output-len", f"empirical:{source}"))
    assert {r["prompt_tokens"] for r in reqs} == {3, 17, 100}
    assert {r["output_tokens"] for r in reqs} == {1, 5}


# --- prefix groups, priorities, cancellations ------------------------------------------

def test_prefix_groups_share_a_prefix_per_group():
    """3 groups of 8 shared tokens, prompts fixed:20: every request has 20 prompt ids whose
    first 8 are one of exactly 3 prefixes, pairwise different from their first token on;
    the 12 ids after the prefix are never shared between requests."""
    reqs = requests_of(gen("--seed", "10", "--requests", "300", "--prefix-groups", "3",
                           "--prefix-tokens", "8", "--prompt-len", "fixed:20"))
    assert all(len(r["prompt_token_ids"]) == 20 for r in reqs)
    prefixes = {tuple(r["prompt_token_ids"][:8]) for r in reqs}
    assert len(prefixes) == 3
    assert len({p[0] for p in prefixes}) == 3
    suffix_ids = [t for r in reqs for t in r["prompt_token_ids"][8:]]
    assert len(suffix_ids) == len(set(suffix_ids)) == 300 * 12
    assert not set(suffix_ids) & {t for p in prefixes for t in p}


def test_prefix_groups_members_hit_the_prefix_cache():
    """A replay with prefix caching (block_size 4) of 20 requests in 2 groups with an
    8-token prefix (2 full blocks) finds cached tokens: at most 8 per request and 8 x 18 in
    all (each group's first member computes its prefix), and more than zero."""
    records = gen("--seed", "12", "--requests", "20", "--rate", "0.05", "--prefix-groups", "2",
                  "--prefix-tokens", "8", "--prompt-len", "fixed:12", "--output-len", "fixed:2")
    sim = simulate(records, policy="continuous", block_size=4, num_blocks=64,
                   prefix_caching=True)
    cached = [req.cached_tokens for req in sim.result.requests]
    assert all(0 <= c <= 8 for c in cached)
    assert 0 < sum(cached) <= 8 * 18


def test_priorities_follow_the_weights():
    """Weights 0:3,1:1 give level 0 to about 75% of 4000 requests (within 3 points) and only
    levels 0 and 1; weights 0:1,1:1,5:2 give about 25%, 25%, 50%."""
    reqs = requests_of(gen("--seed", "13", "--requests", "4000", "--priorities", "0:3,1:1"))
    levels = [r["priority"] for r in reqs]
    assert set(levels) == {0, 1}
    assert abs(levels.count(0) / 4000 - 0.75) <= 0.03
    reqs = requests_of(gen("--seed", "14", "--requests", "4000", "--priorities", "0:1,1:1,5:2"))
    levels = [r["priority"] for r in reqs]
    assert set(levels) == {0, 1, 5}
    for level, share in ((0, 0.25), (1, 0.25), (5, 0.5)):
        assert abs(levels.count(level) / 4000 - share) <= 0.03


def test_no_priorities_no_priority_field():
    """Without --priorities no request carries a priority (the default 0 applies)."""
    assert all("priority" not in r for r in requests_of(gen("--seed", "1", "--requests", "50")))


def test_cancel_rate_and_cancels_never_before_arrival():
    """--cancel-rate 0.2 over 4000 requests cancels 20% (within 2.5 points), at most once
    per request, each at or after its request's arrival, with mean patience near 30 ticks
    (whole ticks: within 10%); cancel records follow the requests."""
    records = gen("--seed", "15", "--requests", "4000", "--cancel-rate", "0.2",
                  "--cancel-after", "30")
    reqs = {r["id"]: r for r in requests_of(records)}
    cancels = cancels_of(records)
    assert abs(len(cancels) / 4000 - 0.2) <= 0.025
    assert len({c["id"] for c in cancels}) == len(cancels)
    assert all(c["at"] >= reqs[c["id"]]["arrival"] for c in cancels)
    patience = statistics.mean(c["at"] - reqs[c["id"]]["arrival"] for c in cancels)
    assert abs(patience - 30) <= 3
    kinds = [r["type"] for r in records]
    assert kinds == ["request"] * 4000 + ["cancel"] * len(cancels)


def test_zero_cancel_rate_no_cancels():
    """The default cancel rate 0 writes no cancel records."""
    assert cancels_of(gen("--seed", "1", "--requests", "200")) == []


def test_output_always_parses_as_a_trace():
    """Every combination of features yields a valid trace (gen() parses each)."""
    combos = [
        [],
        ["--arrival", "gamma", "--cv", "0.5"],
        ["--prompt-len", "fixed:1", "--output-len", "fixed:1"],
        ["--prefix-groups", "4", "--prefix-tokens", "30", "--prompt-len", "uniform:1:40"],
        ["--priorities", "3:1", "--cancel-rate", "1", "--cancel-after", "0.5"],
        ["--rate", "100", "--prompt-len", "lognormal:5:3", "--output-len", "lognormal:2:2"],
    ]
    for extra in combos:
        records = gen("--seed", "21", "--requests", "150", *extra)
        assert len(requests_of(records)) == 150, extra


def test_ids_are_unique_and_sort_in_generation_order():
    """Ids of 1000 requests are unique and zero-padded, so sorting them as strings keeps
    generation (and arrival) order."""
    ids = [r["id"] for r in requests_of(gen("--seed", "1", "--requests", "1000"))]
    assert len(set(ids)) == 1000
    assert ids == sorted(ids)


# --- bad arguments ----------------------------------------------------------------------

def bad(*args: str) -> str:
    """Run `generate` with bad arguments: exit 2, no output, no traceback; return stderr."""
    status, out, err = run(["generate", "--seed", "1", "--requests", "5", *args])
    assert status == 2, (args, status, err)
    assert out == "" and "Traceback" not in err and err.strip()
    return err


def test_bad_lengths_exit_2():
    """uniform:5:2 (LOW > HIGH), fixed:0, lognormal:0:1, an unknown kind and an empirical
    length without a trace are usage errors naming the bad text."""
    assert "uniform:5:2" in bad("--prompt-len", "uniform:5:2")
    assert "fixed:0" in bad("--output-len", "fixed:0")
    assert "lognormal:0:1" in bad("--prompt-len", "lognormal:0:1")
    assert "zipf:3" in bad("--prompt-len", "zipf:3")
    assert "empirical" in bad("--prompt-len", "empirical:")


def test_empirical_from_a_missing_trace_exits_2(tmp_path):
    """empirical:TRACE with a missing file is bad input naming the file."""
    missing = tmp_path / "none.jsonl"
    assert str(missing) in bad("--prompt-len", f"empirical:{missing}")


def test_bad_rates_and_counts_exit_2():
    """--rate 0, --rate -1, --cv 0, --requests 0, --cancel-rate 1.5, a negative
    --prefix-groups and a malformed --priorities are usage errors naming the flag."""
    assert "--rate" in bad("--rate", "0")
    assert "--rate" in bad("--rate", "-1")
    assert "--cv" in bad("--arrival", "gamma", "--cv", "0")
    assert "--requests" in run(["generate", "--seed", "1", "--requests", "0"])[2]
    assert run(["generate", "--seed", "1", "--requests", "0"])[0] == 2
    assert "--cancel-rate" in bad("--cancel-rate", "1.5")
    assert "--prefix-groups" in bad("--prefix-groups", "-1")
    assert "--priorities" in bad("--priorities", "a:b")


def test_bad_priority_weights_exit_2():
    """Priority weights that are all zero, negative, NaN or infinite cannot be drawn from:
    a usage error (exit 2), never an uncaught exception."""
    for mix in ("0:0", "0:-1,1:1", "0:nan", "0:inf,1:1"):
        assert "--priorities" in bad("--priorities", mix), mix


def test_bad_cancel_after_exits_2():
    """A negative or NaN mean patience would put cancels before arrival or crash: with a
    non-zero cancel rate it is a usage error naming --cancel-after."""
    for value in ("-5", "nan"):
        assert "--cancel-after" in bad("--cancel-rate", "0.9", "--cancel-after", value), value


def test_zero_cancel_after_is_not_a_crash():
    """--cancel-after 0 (impatient clients) either cancels each chosen request at its
    arrival tick (exit 0, a valid trace) or is refused as a usage error (exit 2)."""
    status, out, err = run(["generate", "--seed", "1", "--requests", "50", "--cancel-rate", "1",
                            "--cancel-after", "0"])
    if status == 0:
        records = [json.loads(line) for line in out.splitlines()]
        parse_trace(out.encode(), "g")
        arrival = {r["id"]: r["arrival"] for r in requests_of(records)}
        assert [c["at"] for c in cancels_of(records)] == [arrival[c["id"]]
                                                          for c in cancels_of(records)]
    else:
        assert status == 2 and "--cancel-after" in err


def test_infinite_cv_exits_2():
    """--arrival gamma --cv inf has no gamma distribution: a usage error, not a crash."""
    assert "--cv" in bad("--arrival", "gamma", "--cv", "inf")


def test_prefix_groups_without_prefix_tokens_is_refused(capsys):
    """`--prefix-groups 2` with no shared prompt length would share nothing: exit 2."""
    import io
    from scheduler_sim.cli.main import main
    err = io.StringIO()
    assert main(["generate", "--seed", "1", "--requests", "3", "--prefix-groups", "2"],
                out=io.StringIO(), err=err) == 2
    assert err.getvalue() == ("scheduler-sim: error: --prefix-groups 2 shares nothing without "
                              "--prefix-tokens L > 0 (the length of each group's shared "
                              "prompt)\n")


# --- streaming ---------------------------------------------------------------------------

# The SHA-256 of `generate` output written by the code that built the whole trace in
# memory before writing it (commit 4fe15e2): the streamed records are the same bytes.
BEFORE_STREAMING = [
    (["--seed", "1", "--requests", "300"],
     "3caeac0c5ca50d9436e37e614bb643330ecafeb4abae4bfbe8475d4521a91374", 300),
    (["--seed", "2", "--requests", "2000", "--rate", "0.3", "--cancel-rate", "0.2",
      "--priorities", "0:3,1:1"],
     "fc9e34fbc8f2b6488a882e00064ea665bbfc765c85b985aef957ce595b4952ac", 2402),
    (["--seed", "3", "--requests", "500", "--prefix-groups", "7", "--prefix-tokens", "40",
      "--arrival", "gamma", "--cv", "3", "--cancel-rate", "0.5", "--cancel-after", "9"],
     "877194b2f35ea166832888c41b5a49f2bfe420e1ed1707b2943cc2a6d7e68bf1", 759),
    (["--seed", "4", "--requests", "1000", "--prompt-len", "lognormal:200:1.5",
      "--output-len", "empirical:traces/quickstart.jsonl", "--cancel-rate", "1",
      "--cancel-after", "5"],
     "9ba3a3e3a8852c9578dd76770ffe11af5a4d97d7cc8ef3589bb03e4ae152a936", 2000),
]


@pytest.mark.parametrize("args,digest,lines", BEFORE_STREAMING)
def test_streamed_output_is_the_same_bytes_as_before(args, digest, lines, tmp_path,
                                                     monkeypatch):
    """Four specs (cancels, priorities, prefix groups, gamma, lognormal and empirical
    lengths) give the bytes the whole-list code gave, on stdout and through -o."""
    monkeypatch.chdir(ROOT)
    status, out, err = run(["generate", *args])
    assert status == 0, err
    assert hashlib.sha256(out.encode()).hexdigest() == digest
    assert out.count("\n") == lines
    target = tmp_path / "g.jsonl"
    assert run(["generate", *args, "-o", str(target)])[0] == 0
    assert hashlib.sha256(target.read_bytes()).hexdigest() == digest


def test_records_come_one_at_a_time():
    """`workload_records` is lazy: the first record of a million-request workload comes
    before any other is drawn (the one the whole-list code put first), and the cancels
    come after every request."""
    records = workload_records(WorkloadSpec(seed=1, requests=1_000_000, cancel_rate=0.5))
    assert next(records) == {"type": "request", "id": "g0000000", "arrival": 0,
                             "prompt_tokens": 84, "output_tokens": 161}
    small = list(workload_records(WorkloadSpec(seed=1, requests=6, cancel_rate=0.5)))
    assert [r["type"] for r in small] == ["request"] * 6 + ["cancel"] * 2
    assert small == generate(WorkloadSpec(seed=1, requests=6, cancel_rate=0.5))


@pytest.mark.slow  # draws 6,663 requests of 1,501 token ids twice: 2.5 s of CPU
def test_a_limit_passed_part_way_writes_nothing(tmp_path):
    """Prefix groups of 1,500 shared tokens (prompts of at most 512: one own token each)
    write 1,501 token ids a request, past 10,000,000 at request 6,663 (g06662), after
    more records than one write holds: on stdout nothing is written before the error
    (the workload is drawn once first), and -o leaves neither the file nor a
    temporary file."""
    args = ["generate", "--seed", "1", "--requests", "10000", "--prefix-groups", "3",
            "--prefix-tokens", "1500"]
    message = ("scheduler-sim: error: --prefix-groups writes every prompt's token ids, and "
               "request g06662 takes them past 10,000,000: lower --requests, --prompt-len or "
               "--prefix-tokens\n")
    assert run(args) == (2, "", message)
    assert run(args + ["-o", str(tmp_path / "g.jsonl")]) == (2, "", message)
    assert list(tmp_path.iterdir()) == []
