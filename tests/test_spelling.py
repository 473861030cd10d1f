"""Misspelt names and flags (issue 27): each refusal names what was most likely meant,
and a flag a command does not know is reported with that command's own usage."""
from __future__ import annotations

import io

import pytest

from conftest import ROOT
from scheduler_sim.cli.main import main
from scheduler_sim.records.spelling import closest, did_you_mean


def run(argv: list[str]) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    status = main(argv, out=out, err=err)
    return status, out.getvalue(), err.getvalue()


QUICKSTART = str(ROOT / "traces" / "quickstart.jsonl")
GPUS = ["a100-40gb", "a100-80gb", "h100-sxm", "h100-pcie", "h200"]


@pytest.mark.parametrize("word, choices, expected", [
    ("vLLM", ["vllm", "sglang"], "vllm"),             # case only
    ("H100-SXM", GPUS, "h100-sxm"),                   # case only
    ("h100", GPUS, "h100-sxm"),                       # a beginning: the first such
    ("a100", GPUS, "a100-40gb"),
    ("contnuous", ["serial", "continuous"], "continuous"),  # difflib: 18/19 > 0.6
    ("zzz", ["serial", "continuous"], None),          # nothing near
    ("h1", GPUS, None),  # too short to be a beginning, and difflib's 'h1' ~ 'h200' is 1/3
    ("", ["a"], None),
])
def test_closest(word, choices, expected):
    assert closest(word, choices) == expected


def test_did_you_mean_words_it():
    assert did_you_mean("vLLM", ["vllm"]) == " (did you mean 'vllm'?)"
    assert did_you_mean("zzz", ["vllm"]) == ""


def test_a_policy_name_in_the_wrong_case():
    status, out, err = run(["replay", QUICKSTART, "--policy", "vLLM"])
    assert (status, out) == (2, "")
    assert err.startswith("scheduler-sim: error: unknown policy 'vLLM' "
                          "(did you mean 'vllm'?) (known: serial, continuous, vllm,")


@pytest.mark.parametrize("value, meant", [
    ("llama-3-8b/h100", "llama-3-8b/h100-sxm"),
    ("llama3-8b/h100-sxm", "llama-3-8b/h100-sxm"),
    ("Llama-3-8B/H100", "llama-3-8b/h100-sxm"),
])
def test_a_misspelt_cost_model(value, meant):
    status, _, err = run(["replay", QUICKSTART, "--cost-model", value])
    assert status == 2
    assert err.endswith(f", got {value!r} (did you mean {meant!r}?)\n")


def test_a_cost_model_far_from_any_gets_the_lists_only():
    status, _, err = run(["replay", QUICKSTART, "--cost-model", "foo/bar"])
    assert status == 2 and err.endswith(", got 'foo/bar'\n")


def test_a_misspelt_model_and_gpu():
    status, _, err = run(["cost", "--model", "llama3-8b", "--gpu", "h100-sxm", "--prefill",
                          "10"])
    assert status == 2
    assert err.startswith("scheduler-sim: error: unknown model 'llama3-8b' (did you mean "
                          "'llama-3-8b'?) (known: ")
    status, _, err = run(["cost", "--model", "llama-3-8b", "--gpu", "H100", "--prefill",
                          "10"])
    assert status == 2
    assert err.startswith("scheduler-sim: error: unknown gpu 'H100' (did you mean "
                          "'h100-sxm'?) (known: ")


def test_an_unknown_flag_gets_the_commands_usage_and_the_flag_meant():
    status, out, err = run(["replay", QUICKSTART, "--prefix-cache"])
    assert (status, out) == (2, "")
    lines = err.splitlines()
    assert lines[0].startswith("usage: scheduler-sim replay [-h]")
    assert lines[-1] == ("scheduler-sim replay: error: unrecognized arguments: "
                         "--prefix-cache (did you mean '--prefix-caching'?)")


def test_an_unknown_flag_is_compared_without_its_dashes():
    """`--bogus` shares only the dashes with `--gpu`: no guess; `--polciy` is
    `--policy` misspelt."""
    status, _, err = run(["replay", QUICKSTART, "--bogus"])
    assert (status, err.splitlines()[-1]) == (
        2, "scheduler-sim replay: error: unrecognized arguments: --bogus")
    status, _, err = run(["replay", QUICKSTART, "--polciy"])
    assert err.splitlines()[-1] == ("scheduler-sim replay: error: unrecognized arguments: "
                                    "--polciy (did you mean '--policy'?)")


def test_an_unknown_flag_of_sweep_merge_names_sweep_merge():
    status, _, err = run(["sweep", "merge", "a.jsonl", "--frobnicate"])
    assert status == 2
    assert err.splitlines()[0].startswith("usage: scheduler-sim sweep merge")
    assert err.splitlines()[-1] == ("scheduler-sim sweep merge: error: unrecognized "
                                    "arguments: --frobnicate")


def test_a_stray_word_is_the_commands_error_too():
    status, _, err = run(["validate", QUICKSTART, "extra"])
    assert status == 2
    assert err.splitlines()[-1] == ("scheduler-sim validate: error: unrecognized "
                                    "arguments: extra")


def test_options_only_other_policies_read_are_noted():
    """`--policy continuous --watermark 0.1 --victim most-blocks --batch-window 3`: each
    is accepted, and the header notes that nothing replayed reads it."""
    status, out, _ = run(["replay", QUICKSTART, "--policy", "continuous", "--watermark",
                          "0.1", "--victim", "most-blocks", "--batch-window", "3"])
    assert status == 0
    assert [line for line in out.splitlines() if line.startswith("note:")] == [
        "note: watermark has no effect under continuous: only vllm reads it",
        "note: victim has no effect under continuous: only vllm reads it",
        "note: batch_window has no effect under continuous: only dynamic reads it"]


def test_an_option_one_replayed_policy_reads_is_not_noted():
    status, out, _ = run(["replay", QUICKSTART, "--policy", "vllm", "--policy", "sglang",
                          "--watermark", "0.1", "--schedule-conservativeness", "0.5"])
    assert status == 0 and "note:" not in out
    # Set to its default, it changes nothing either way: no note.
    status, out, _ = run(["replay", QUICKSTART, "--policy", "continuous", "--watermark",
                          "0"])
    assert status == 0 and "note:" not in out
