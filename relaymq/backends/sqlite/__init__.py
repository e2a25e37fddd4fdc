"""The SQLite backend: ``sqlite:///path/to/file.db``."""

from relaymq.backends.sqlite.backend import SQLiteBackend

__all__ = ["SQLiteBackend"]
