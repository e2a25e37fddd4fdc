"""The Redis backend (``redis://``, ``rediss://``, ``redis+cluster://``): ``relaymq[redis]``."""

from relaymq.backends.redis.backend import RedisBackend
from relaymq.errors import EvictionPolicyWarning, RelayWarning

__all__ = ["EvictionPolicyWarning", "RedisBackend", "RelayWarning"]
