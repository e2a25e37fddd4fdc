"""Loads the Lua scripts of ``scripts/`` once; each runs by EVALSHA under its SHA-1.

``lib.lua`` is prepended to every script, so shared helpers stay in one file while each
transition remains one atomic script. SHAs are computed here, not asked of the server: after a
server restart (empty script cache) the first NOSCRIPT reply makes the backend load them all.
"""

from __future__ import annotations

import hashlib
from importlib.resources import files

NAMES = (
    "enqueue",
    "claim",
    "heartbeat",
    "settle",
    "wait_check",
    "recover",
    "page",
    "cancel_jobs",
    "retry_jobs",
    "remove_jobs",
    "purge",
    "claim_delivered",
    "promote_due",
    "prune_keys",
    "meta_get",
    "meta_put",
    "meta_swap",
    "meta_list",
    "meta_delete",
)


class Scripts:
    """The text and SHA-1 of every script, by name."""

    def __init__(self) -> None:
        folder = files(__package__) / "scripts"
        lib = (folder / "lib.lua").read_text(encoding="utf-8")
        self.text: dict[str, str] = {}
        self.sha: dict[str, str] = {}
        for name in NAMES:
            text = lib + "\n" + (folder / f"{name}.lua").read_text(encoding="utf-8")
            self.text[name] = text
            self.sha[name] = hashlib.sha1(text.encode(), usedforsecurity=False).hexdigest()
