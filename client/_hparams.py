"""Hyperparameters made fit for a run's config or an event: bounded, the token redacted.

A trainer's whole config (Levanter logs every field of it) can outgrow what the server
takes, and a run the server refuses to create stores none of its data; it can also hold
the ingest token, which must not be stored where every reader of the run sees it.
"""

from __future__ import annotations

import json
from typing import Any, cast

from ._reporting import logger

MAX_CONFIG_BYTES = 60_000
"""The most a run's config may weigh as JSON here: the server refuses a run whose config
is over 64 KiB, and a run it refuses to create stores none of its data."""

MAX_EVENT_TEXT = 4096
"""The longest text the server takes for an event."""


def fit_config(document: object, max_bytes: int = MAX_CONFIG_BYTES) -> dict[str, object]:
    """``document`` (a JSON object) cut to at most ``max_bytes`` of compact JSON.

    While it is too large: from the top, follow the largest member as long as one of its
    own members alone is larger than the excess; there, replace members, largest first,
    by ``"<N bytes omitted>"`` (dropping those no larger than that) until it fits. What is
    small and beside a large value (a learning rate next to a list of shard URLs) stays.

    >>> fit_config({"lr": 0.001, "urls": ["gs://bucket/shard-%04d" % i for i in range(9)]}, 60)
    {'lr': 0.001, 'urls': '<226 bytes omitted>'}
    """
    if not isinstance(document, dict):
        return {}
    cut = cast(dict[str, object], json.loads(json.dumps(document)))
    size = _size(cut)
    if size > max_bytes:
        logger.warning(
            "the run's config is %d bytes as JSON, over %d; its largest "
            "values are replaced by placeholders",
            size,
            max_bytes,
        )
    while (excess := _size(cut) - max_bytes) > 0:
        parent: dict[str, object] | list[object] = cut
        while True:
            members = [(key, value, _size(value)) for key, value in _members(parent)]
            if not members:
                return {}
            members.sort(key=lambda member: member[2], reverse=True)
            _, child, _ = members[0]
            if isinstance(child, dict | list) and child:
                if max(_size(value) for _, value in _members(child)) > excess + 32:
                    parent = child
                    continue
            _cut_members(parent, members, excess)
            break
    return cut


def _cut_members(
    parent: dict[str, object] | list[object],
    members: list[tuple[Any, object, int]],
    excess: int,
) -> None:
    """Replace the members of ``parent``, largest first, by placeholders (or drop those
    no larger than one) until about ``excess`` bytes are gone."""
    dropped = []
    for key, _, size in members:
        if excess <= 0:
            break
        placeholder = f"<{size} bytes omitted>"
        if _size(placeholder) < size:
            parent[key] = placeholder
            excess -= size - _size(placeholder)
        else:
            dropped.append(key)
            excess -= size + 1
    for key in sorted(dropped, reverse=True):  # from the end, so list indices hold
        del parent[key]


def _members(container: dict[str, object] | list[object]) -> list[tuple[Any, object]]:
    return list(container.items()) if isinstance(container, dict) else list(enumerate(container))


def _size(value: object) -> int:
    return len(json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode())


def redact(document: object, secret: str | None) -> object:
    """``document`` with every string equal to ``secret`` replaced by ``<redacted>``."""
    if not secret:
        return document
    if isinstance(document, str):
        return "<redacted>" if document == secret else document
    if isinstance(document, dict):
        return {key: redact(value, secret) for key, value in document.items()}
    if isinstance(document, list):
        return [redact(value, secret) for value in document]
    return document


def clip(text: str, limit: int) -> str:
    """``text``, shortened with an ellipsis to at most ``limit`` characters."""
    return text if len(text) <= limit else text[: limit - 1] + "…"
