"""Notification channels as rules hold them, checked on the way in (:func:`validate_channel`)
and masked on the way out (:func:`mask_channel`):

- ``{"type": "webhook", "url", "secret"?}``: normwatch's JSON, signed with the secret;
- ``{"type": "slack", "url"}``: a Slack incoming webhook;
- ``{"type": "alertmanager", "url"}``: an Alertmanager's ``/api/v2/alerts``, so that it
  routes, groups, silences and inhibits normwatch's alerts with its own;
- ``{"type": "pagerduty", "routing_key", "severity"?, "url"?}``: PagerDuty's Events API v2
  (``https://events.pagerduty.com/v2/enqueue`` unless another URL is given).
"""

from __future__ import annotations

import socket
from collections.abc import Collection, Mapping
from typing import Any
from urllib.parse import urlsplit

import httpx

from .targets import Resolver, TargetRefused, TargetUnresolved, as_allow_list, resolve_target

__all__ = [
    "CHANNEL_TYPES",
    "MASK",
    "mask_channel",
    "validate_channel",
]


CHANNEL_TYPES = ("webhook", "slack", "alertmanager", "pagerduty")


SLACK_HOST = "hooks.slack.com"
PAGERDUTY_URL = "https://events.pagerduty.com/v2/enqueue"
_FIELDS = {
    "webhook": ("type", "url", "secret"),
    "slack": ("type", "url"),
    "alertmanager": ("type", "url"),
    "pagerduty": ("type", "url", "routing_key", "severity"),
}
_SEVERITIES = ("critical", "error", "warning", "info")


MASK = "••••"


MAX_URL_LENGTH = 2048


MAX_SECRET_LENGTH = 512


def mask_channel(channel: Mapping[str, Any], *, show_path: bool = True) -> dict[str, Any]:
    """``channel`` as API responses show it: no secret, no Slack token, no query values.

    With ``show_path`` false (what callers without the admin scope see), a webhook URL's
    path is masked too: many receivers put their credential there.

    >>> mask_channel({"type": "slack", "url": "https://hooks.slack.com/services/T/B/X"})
    {'type': 'slack', 'url': 'https://hooks.slack.com/services/••••'}
    >>> mask_channel({"type": "webhook", "url": "https://x.example/hook/T0k3n"}, show_path=False)
    {'type': 'webhook', 'url': 'https://x.example/••••'}
    """
    masked = dict(channel)
    for credential in ("secret", "routing_key"):
        if masked.get(credential) is not None:
            masked[credential] = MASK
    url = masked.get("url")
    if isinstance(url, str):
        masked["url"] = _mask_url(url, slack=masked.get("type") == "slack", show_path=show_path)
    return masked


def _mask_url(url: str, *, slack: bool, show_path: bool = True) -> str:
    try:
        parts = urlsplit(url)
        host = parts.hostname or ""
        port = parts.port
    except ValueError:
        return MASK
    if not parts.scheme or not host:
        return MASK
    if ":" in host:
        host = f"[{host}]"
    origin = f"{parts.scheme}://{host}" + (f":{port}" if port is not None else "")
    if slack:
        # The path of a Slack incoming webhook is its credential.
        prefix = "/services/" if parts.path.startswith("/services/") else "/"
        return f"{origin}{prefix}{MASK}"
    if parts.username is not None:
        userinfo = parts.username + (f":{MASK}" if parts.password is not None else "")
        origin = f"{parts.scheme}://{userinfo}@{origin.split('://', 1)[1]}"
    if not show_path:
        hidden = parts.path.strip("/") or parts.query or parts.fragment
        return origin + (f"/{MASK}" if hidden else parts.path)
    query = "&".join(f"{item.split('=', 1)[0]}={MASK}" for item in parts.query.split("&") if item)
    fragment = f"#{MASK}" if parts.fragment else ""
    return origin + parts.path + (f"?{query}" if query else "") + fragment


def validate_channel(
    channel: Mapping[str, Any],
    allow: Collection[str],
    *,
    field: str = "channel",
    resolve: Resolver = socket.getaddrinfo,
) -> dict[str, Any]:
    """Check a channel given to a rule and return it cleaned; ``ValueError`` names the field.

    ``field`` prefixes the messages (``"channels[1]"`` → ``"channels[1].url: ..."``). A host
    that does not resolve from here is accepted: it can reach nothing now, and every
    delivery checks it again.
    """
    if not isinstance(channel, Mapping):
        raise ValueError(f"{field}: must be an object with type and url")
    kind = channel.get("type")
    if kind not in CHANNEL_TYPES:
        names = ", ".join(repr(t) for t in CHANNEL_TYPES)
        raise ValueError(f"{field}.type: must be one of {names}, got {kind!r}")
    unknown = sorted(set(channel) - set(_FIELDS[kind]))
    if unknown:
        raise ValueError(
            f"{field}: unknown field(s) {', '.join(unknown)}; a {kind} channel takes "
            + ", ".join(_FIELDS[kind])
        )
    url = channel.get("url")
    if kind == "pagerduty" and url is None:
        url = PAGERDUTY_URL
    if not isinstance(url, str) or not url.strip():
        raise ValueError(f"{field}.url: required, an http(s) URL")
    url = url.strip()
    if len(url) > MAX_URL_LENGTH:
        raise ValueError(f"{field}.url: longer than {MAX_URL_LENGTH} characters")
    allow_list = as_allow_list(allow)
    try:
        target = httpx.URL(url)
    except httpx.InvalidURL as exc:
        raise ValueError(f"{field}.url: not a valid URL ({exc})") from None
    if kind == "slack":
        port = target.port or (443 if target.scheme == "https" else 80)
        official = target.host == SLACK_HOST and target.scheme == "https"
        if not official and not allow_list.permits_host(target.host, port):
            raise ValueError(
                f"{field}.url: Slack incoming webhooks are "
                f"https://{SLACK_HOST}/services/..., got {_mask_url(url, slack=True)}"
            )
    try:
        resolve_target(url, allow_list, resolve=resolve)
    except TargetUnresolved:
        pass
    except TargetRefused as exc:
        raise ValueError(f"{field}.url: {exc}") from None
    cleaned: dict[str, Any] = {"type": kind, "url": url}
    if kind == "pagerduty":
        key = channel.get("routing_key")
        if not isinstance(key, str) or not key.strip() or len(key) > MAX_SECRET_LENGTH:
            raise ValueError(
                f"{field}.routing_key: required, the integration key of a PagerDuty service "
                "(Events API v2)"
            )
        cleaned["routing_key"] = key.strip()
        severity = channel.get("severity", "error")
        if severity not in _SEVERITIES:
            raise ValueError(f"{field}.severity: one of {', '.join(_SEVERITIES)}, got {severity!r}")
        cleaned["severity"] = severity
    secret = channel.get("secret")
    if secret is not None:
        if kind != "webhook":
            raise ValueError(f"{field}.secret: only webhook channels are signed; remove it")
        if not isinstance(secret, str) or not secret or len(secret) > MAX_SECRET_LENGTH:
            raise ValueError(f"{field}.secret: must be a string of 1 to {MAX_SECRET_LENGTH} chars")
        cleaned["secret"] = secret
    return cleaned
