"""The KV cache: blocks, credits, drains and pins (the allocator), block keys, and
the prefix caches behind one protocol (`prefix_cache`), one module per kind."""
__all__: list[str] = []
