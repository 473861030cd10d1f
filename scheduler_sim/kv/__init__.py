"""The KV cache: blocks, credits, drains and pins (the allocator), and block keys
with the LRU of cached blocks (the prefix cache)."""
__all__: list[str] = []
