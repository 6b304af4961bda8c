"""A token issuer for OAUTHBEARER tests: it mints signed, short-lived bearer tokens and checks them.

Called by the tests' SASL front (`tests/security/conftest.py`), which checks each token a
client presents, and by the clients themselves through `mint_token`, the module-level
`oauth_cb` the tests configure: a client's actors unpickle it and call it in their own
processes, so the issuer's key travels in `sasl.oauthbearer.config` as a real provider's
client secret would. Calls nothing else; no Ray, no sockets.

A token is `<expiry ms>.<nonce>.<HMAC-SHA256 of both, hex>`, all RFC 6750 b64token characters.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import time

NONCE_BYTES = 8
MS_PER_S = 1000


class TokenRefused(Exception):
    """The token is forged, malformed or expired (the text says which, never the token)."""


def _sign(key: str, claims: str) -> str:
    return hmac.new(key.encode(), claims.encode(), hashlib.sha256).hexdigest()


def parse_issuer_config(config: str | None) -> tuple[str, float]:
    """`key=<secret> lifetime.s=<seconds>` (space separated, as librdkafka's sasl.oauthbearer.config)."""
    fields = dict(item.split("=", 1) for item in (config or "").split())
    return fields["key"], float(fields["lifetime.s"])


def mint_token(config: str | None) -> tuple[str, float]:
    """`oauth_cb` for tests: a new token signed with the key of `config`, and its expiry (epoch s)."""
    key, lifetime = parse_issuer_config(config)
    expiry = time.time() + lifetime
    claims = f"{int(expiry * MS_PER_S)}.{os.urandom(NONCE_BYTES).hex()}"
    return f"{claims}.{_sign(key, claims)}", expiry


def check_token(key: str, token: str, now: float | None = None) -> float:
    """The token's expiry (epoch s) if `key` signed it and it has not expired; else `TokenRefused`."""
    expiry_ms, _, rest = token.partition(".")
    nonce, _, signature = rest.partition(".")
    if not (expiry_ms.isdigit() and nonce and signature):
        raise TokenRefused("malformed token")
    if not hmac.compare_digest(signature, _sign(key, f"{expiry_ms}.{nonce}")):
        raise TokenRefused("bad signature")
    expiry = int(expiry_ms) / MS_PER_S
    if expiry <= (time.time() if now is None else now):
        raise TokenRefused("token expired")
    return expiry
