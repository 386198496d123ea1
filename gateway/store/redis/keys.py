"""Key names in the shared store: everything one script touches shares one Redis Cluster hash tag.

A Redis Cluster runs a script only when all its keys hash to one slot; only the part of a key
between the first `{` and the next `}` is hashed. So a session's header and token log, a
rollout's five keys and its tombstone, a tenant's counters are all named `…{ID}…` with the
same ID, while different sessions, rollouts and tenants spread over every master. An ID's
own braces (and `%`) are percent-escaped, so the tag is always the whole ID and two IDs never
share a name; an empty ID is `%`, which no escaped ID can be.
"""

from __future__ import annotations

__all__ = ["check_prefix", "tag", "tag_start"]


def tag(ident: str) -> str:
    """`{ident}`, escaped so that it is one whole hash tag."""
    return "{" + (_escape(ident) or "%") + "}"


def tag_start(ident_prefix: str) -> str:
    """How the tags of every ID starting with `ident_prefix` start (for a SCAN pattern)."""
    return "{" + _escape(ident_prefix)


def _escape(ident: str) -> str:
    return ident.replace("%", "%25").replace("{", "%7B").replace("}", "%7D")


def check_prefix(prefix: str) -> None:
    """A key prefix with braces would make every key's tag the prefix's: one slot for everything."""
    if "{" in prefix or "}" in prefix:
        raise ValueError(f"the state key prefix {prefix!r} cannot be used: it must not contain braces (Redis "
                         f"Cluster hash tags are the gateway's to set)")
