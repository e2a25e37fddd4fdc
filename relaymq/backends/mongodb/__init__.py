"""MongoDB backend (``mongodb://host:port/database``); needs ``pip install 'relaymq[mongodb]'``."""

from relaymq.backends.mongodb.backend import MongoDBBackend

__all__ = ["MongoDBBackend"]
