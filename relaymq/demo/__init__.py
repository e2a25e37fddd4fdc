"""``relaymq demo``: at-least-once delivery shown on the embedded SQLite backend."""
