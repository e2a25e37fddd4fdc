"""The in-memory reference backend (``memory://``)."""

from relaymq.backends.memory.backend import InMemoryBackend

__all__ = ["InMemoryBackend"]
