"""The GPU: what a dispatch costs in seconds (roofline) and how many KV blocks fit
in its memory. Pure arithmetic."""
__all__: list[str] = []
