"""A raw public trace given where a trace goes (issue 27): its problems as before, then
one line naming the `convert` command that makes it a trace."""
from __future__ import annotations

import io

import pytest

from scheduler_sim.cli.main import main

MOONCAKE = ('{"timestamp": 0, "input_length": 6758, "output_length": 500, '
            '"hash_ids": [0, 1, 2]}\n'
            '{"timestamp": 27, "input_length": 7322, "output_length": 490, '
            '"hash_ids": [0, 3]}\n')
AZURE = ("TIMESTAMP,ContextTokens,GeneratedTokens\n"
         "2023-11-16 18:15:46.6805900,374,44\n"
         "2023-11-16 18:15:50.9951690,396,109\n")


def run(argv: list[str]) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    status = main(argv, out=out, err=err)
    return status, out.getvalue(), err.getvalue()


@pytest.mark.parametrize("command", ["validate", "replay"])
def test_a_raw_mooncake_file_names_the_convert_command(tmp_path, command):
    path = tmp_path / "conversation_trace.jsonl"
    path.write_text(MOONCAKE)
    status, out, err = run([command, str(path)])
    assert (status, out) == (2, "")
    assert err.splitlines() == [
        f"{path}:1: missing field 'type'",
        f"{path}:2: missing field 'type'",
        f"{path}: this looks like a raw mooncake file, not a trace: convert it first, "
        f"e.g. scheduler-sim convert --from mooncake {path} -o conversation_trace-v1.jsonl"]


def test_a_raw_azure_csv_names_the_convert_command(tmp_path):
    path = tmp_path / "conv.csv"
    path.write_text(AZURE)
    status, _, err = run(["validate", str(path)])
    assert status == 2
    assert err.splitlines()[-1] == (
        f"{path}: this looks like a raw azure file, not a trace: convert it first, "
        f"e.g. scheduler-sim convert --from azure {path} -o conv-v1.jsonl")
    assert len(err.splitlines()) == 4  # three lines that are no JSON, then the hint


def test_the_converted_file_replays(tmp_path):
    """The hint's command works as written."""
    path = tmp_path / "conversation_trace.jsonl"
    path.write_text(MOONCAKE)
    out = tmp_path / "conversation_trace-v1.jsonl"
    assert run(["convert", "--from", "mooncake", str(path), "-o", str(out)])[0] == 0
    assert run(["validate", str(out)])[0] == 0


def test_no_records_of_no_known_format_get_no_hint(tmp_path):
    path = tmp_path / "t.jsonl"
    path.write_text('{"a": 1}\n')
    status, _, err = run(["validate", str(path)])
    assert status == 2
    assert err.splitlines() == [f"{path}:1: missing field 'type'"]


def test_a_trace_with_records_and_a_broken_line_gets_no_hint(tmp_path):
    """One record of a known type is enough to call the file a trace: its problems
    only, as before."""
    path = tmp_path / "t.jsonl"
    path.write_text('{"type": "request", "id": "a", "arrival": 0, "prompt_tokens": 4, '
                    '"output_tokens": 2}\n' + MOONCAKE.splitlines()[0] + "\n")
    status, _, err = run(["validate", str(path)])
    assert status == 2
    assert err.splitlines() == [f"{path}:2: missing field 'type'"]


def test_standard_input_is_converted_from_standard_input(monkeypatch):
    class Stdin:
        buffer = io.BytesIO(MOONCAKE.encode())
    monkeypatch.setattr("sys.stdin", Stdin)
    status, _, err = run(["validate", "-"])
    assert status == 2
    assert err.splitlines()[-1] == (
        "<stdin>: this looks like a raw mooncake file, not a trace: convert it first, "
        "e.g. scheduler-sim convert --from mooncake - -o trace-v1.jsonl")
