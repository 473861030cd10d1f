"""The engine's fast paths: counting steady decoders (cohort.py, counted.py),
folding steady stretches (folding.py; fold_records.py, their records) and
carrying them on through finishes (through.py; finishes.py, the boundaries of
a stretch of counted decodes in one loop) and arrivals (arrivals.py), and a
plain engine's arrivals registered inline (plain_arrival.py). Each changes no
output (the tests replay random workloads both ways) and writes through the
dispatch ledger; each speed trick in them is labelled with what it stands for
and the measurement behind it."""

__all__: list[str] = []
