"""The GPU: what a dispatch costs in seconds (a sum of physical terms with fitted
coefficients), how the coefficients are fitted and calibrated, and how many KV
blocks fit in its memory. Arithmetic on data: no file is opened here."""
__all__: list[str] = []
