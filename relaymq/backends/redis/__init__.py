"""The Redis backend (``redis://``, ``rediss://``, ``redis+cluster://``): ``relaymq[redis]``."""

from relaymq.backends.redis.backend import RedisBackend
from relaymq.errors import DurabilityWarning, EvictionPolicyWarning, RelayWarning

__all__ = ["DurabilityWarning", "EvictionPolicyWarning", "RedisBackend", "RelayWarning"]
