"""Write this lab's two small kernel profiles from the one the project ships.

Usage (from this folder): python derive_profiles.py

Both are rows of ../../data/calibration/vidur/a100_llama3_8b_mlp.csv (Vidur's
measured A100 kernels of Llama-3-8B, microsoft/vidur, MIT: LICENSE.vidur),
copied byte for byte with its header: for each token count in TOKENS and
each tensor-parallel size asked for, the first row of that shape in the
file (the profile repeats a few shapes; the first is kept).

- linear_tp1.csv: tp 1 only (27 rows);
- linear_tp1_tp8.csv: tp 1 and tp 8 (54 rows).

Every other row (tp 2 and 4 entirely, and the token counts not listed) is
held out: the lab predicts some of them and compares.
"""
from __future__ import annotations

import csv
import io
from pathlib import Path

HERE = Path(__file__).resolve().parent
SOURCE = HERE.parent.parent / "data" / "calibration" / "vidur" / "a100_llama3_8b_mlp.csv"

# Powers of two and their halfway points from 1 to 16,384 tokens, and the first
# count the profile has above 128, 256, 512, 1,024 and 2,048 (where a GEMM needs
# one more tile of rows).
TOKENS = (1, 2, 4, 8, 16, 32, 64, 128, 136, 192, 256, 264, 384, 512, 520, 768, 1024,
          1040, 1536, 2048, 2080, 3072, 4096, 6144, 8192, 12288, 16384)


def derive(tps: set[int]) -> str:
    """The header and the first row of each (token count, tp) wanted, in file order."""
    lines = SOURCE.read_text(encoding="utf-8").splitlines(keepends=True)
    rows = csv.DictReader(io.StringIO("".join(lines)))
    kept, seen = [lines[0]], set()
    for line, row in zip(lines[1:], rows):
        shape = (int(row["num_tokens"]), int(row["num_tensor_parallel_workers"]))
        if shape[0] in TOKENS and shape[1] in tps and shape not in seen:
            seen.add(shape)
            kept.append(line)
    assert len(seen) == len(TOKENS) * len(tps), f"{len(seen)} shapes found"
    return "".join(kept)


if __name__ == "__main__":
    (HERE / "linear_tp1.csv").write_text(derive({1}), encoding="utf-8")
    (HERE / "linear_tp1_tp8.csv").write_text(derive({1, 8}), encoding="utf-8")
