"""Gazette's authorization tokens: capabilities, claims, and pre-shared-key bearer JWTs (auth/auth.go).

A caller presents `authorization: Bearer <JWT>` on each RPC. The JWT is HS256 (HS384 verifies too),
signed with the first of the `--auth-keys` keys (base64, separated by whitespace or commas; any key
verifies; the key `AA==` lets requests without a token through, for rolling auth out). Its claims:
`cap` (a Capability bitmask), `sel` (a LabelSelector the resource must match, as Go's encoding/json
writes Gazette's protocol.LabelSelector), `iat` and `exp` (required). The JWT is encoded here with the
standard library (HMAC-SHA256 over base64url segments), checked byte for byte against Go's by the
interop tests. Every verification failure is an `AuthError` whose message is Gazette's.
"""

from __future__ import annotations

import base64
import binascii
import dataclasses
import enum
import hashlib
import hmac
import json
import threading
import time
from collections.abc import Iterable, Sequence
from typing import Any

from gazette.protocol.errors import GazetteError, ValidationError
from gazette.protocol.labels import LabelSet
from gazette.protocol.selector import LabelSelector, SelectorLabel
from gazette.protocol.status import Status

AUTHORIZATION_HEADER = "authorization"  # gRPC metadata keys are lower case
BEARER_PREFIX = "Bearer "
ALLOW_MISSING_KEY = "AA=="  # base64 of one zero byte: requests without a token pass (rollout only)
LEEWAY_S = 5  # clock skew tolerated on exp, iat and nbf, as Gazette's verifier
SIGNING_ALGORITHM = "HS256"
_HASHES = {"HS256": hashlib.sha256, "HS384": hashlib.sha384}  # what Gazette accepts
# How long a signed token is reused: at most half its lifetime, so what is sent has at least half left.
_REUSE_FRACTION = 0.5
_CACHE_ENTRIES_MAX = 4096


class Capability(enum.IntFlag):
    """Gazette's protocol.Capability bits; applications may use bits from 1 << 16."""

    NONE = 0
    LIST = 1 << 1
    APPLY = 1 << 2
    READ = 1 << 3
    APPEND = 1 << 4
    REPLICATE = 1 << 5
    ALL = 0xFFFFFFFF


# Token lifetimes of Gazette's AuthJournalClient / AuthShardClient (streams get an hour).
STREAM_TOKEN_TTL_S = 3600.0
UNARY_TOKEN_TTL_S = 60.0


class AuthError(GazetteError):
    """A request's authorization was refused; brokers and consumers answer it as UNAUTHENTICATED."""

    def __init__(self, message: str) -> None:
        super().__init__(Status.OK, message)


def missing_capability(actual: int, require: int) -> str | None:
    """None if `actual` has every bit of `require`, else Gazette's message naming what is missing."""
    if actual & require == require:
        return None
    for cap in (Capability.LIST, Capability.APPLY, Capability.READ, Capability.APPEND, Capability.REPLICATE):
        if require & cap and not actual & cap:
            return f"authorization is missing required {cap.name} capability"
    return f"authorization is missing required capability (have {actual:b}, but require {require:b})"


@dataclasses.dataclass(frozen=True)
class Claims:
    """What a token grants: `capability` against resources whose labels (with their meta-labels:
    `name` of journals, `id` of shards) match `selector`. `expires_at`/`issued_at` are unix seconds;
    `registered` keeps a token's other registered claims (iss, sub, aud, nbf, jti) as sent."""

    capability: int
    selector: LabelSelector = LabelSelector()
    expires_at: float | None = None
    issued_at: float | None = None
    registered: tuple[tuple[str, Any], ...] = ()

    def matches(self, labels: LabelSet) -> bool:
        return self.selector.matches(labels)

    def to_json(self) -> dict[str, Any]:
        """The claims as Go's encoding/json writes Gazette's pb.Claims (field order kept)."""
        out: dict[str, Any] = {"cap": int(self.capability), "sel": selector_to_json(self.selector)}
        registered = dict(self.registered)
        for name in ("iss", "sub", "aud"):
            if name in registered:
                out[name] = registered[name]
        if self.expires_at is not None:
            out["exp"] = _numeric_date(self.expires_at)
        if "nbf" in registered:
            out["nbf"] = registered["nbf"]
        if self.issued_at is not None:
            out["iat"] = _numeric_date(self.issued_at)
        if "jti" in registered:
            out["jti"] = registered["jti"]
        return out


def _numeric_date(t: float) -> int | float:
    return int(t) if float(t).is_integer() else t


def selector_to_json(selector: LabelSelector) -> dict[str, Any]:
    """A LabelSelector as Go's encoding/json writes protocol.LabelSelector: an empty set's labels are null."""

    def labels(entries: tuple[SelectorLabel, ...]) -> dict[str, Any]:
        out = []
        for e in entries:
            label: dict[str, Any] = {}
            if e.name:
                label["name"] = e.name
            if e.value:
                label["value"] = e.value
            if e.prefix:
                label["prefix"] = True
            out.append(label)
        return {"labels": out or None}

    return {"include": labels(selector.include), "exclude": labels(selector.exclude)}


def _go_kind(value: Any) -> str:
    """The JSON kind encoding/json names in an unmarshal error."""
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, str):
        return "string"
    if isinstance(value, int | float):
        return "number"
    if isinstance(value, list):
        return "array"
    if isinstance(value, dict):
        return "object"
    return "null"


def _malformed(detail: str) -> AuthError:
    return AuthError(f"verifying Authorization: token is malformed: {detail}")


def _unmarshal_error(value: Any, field: str, go_type: str) -> AuthError:
    return _malformed(
        f"could not JSON decode claim: json: cannot unmarshal {_go_kind(value)} into Go struct field "
        f"{field} of type {go_type}"
    )


def selector_from_json(value: Any) -> LabelSelector:
    """`sel` of a token, read as Go's encoding/json reads protocol.LabelSelector (absent or null: all)."""
    if value is None:
        return LabelSelector()
    if not isinstance(value, dict):
        raise _unmarshal_error(value, "Claims.sel", "protocol.LabelSelector")
    sides: list[list[tuple[str, str, bool]]] = []
    for side in ("include", "exclude"):
        entries: list[tuple[str, str, bool]] = []
        raw = value.get(side)
        if raw is not None:
            if not isinstance(raw, dict):
                raise _unmarshal_error(raw, f"Claims.sel.{side}", "protocol.LabelSet")
            labels = raw.get("labels")
            if labels is not None and not isinstance(labels, list):
                raise _unmarshal_error(labels, f"Claims.sel.{side}.labels", "[]protocol.Label")
            for label in labels or ():
                if not isinstance(label, dict):
                    raise _unmarshal_error(label, f"Claims.sel.{side}.labels", "protocol.Label")
                name, val, prefix = label.get("name", ""), label.get("value", ""), label.get("prefix", False)
                for field, got, want, go_type in (
                    ("name", name, str, "string"), ("value", val, str, "string"), ("prefix", prefix, bool, "bool"),
                ):  # fmt: skip
                    if got is not None and not isinstance(got, want):
                        raise _unmarshal_error(got, f"Claims.sel.{side}.labels.{field}", go_type)
                entries.append((name or "", val or "", bool(prefix)))
        sides.append(entries)
    try:
        return LabelSelector(sides[0], sides[1])
    except ValidationError as exc:
        # Gazette would match such a selector as given; gazette-py reads only valid selectors.
        raise _malformed(f"the sel claim is not a valid label selector: {exc.message}") from None


def claims_from_json(payload: Any) -> Claims:
    """Decodes a token's claims object, refusing values Go's encoding/json would not decode."""
    if not isinstance(payload, dict):
        raise _malformed(f"could not JSON decode claim: json: cannot unmarshal {_go_kind(payload)} into Go value "
                         "of type protocol.Claims")  # fmt: skip
    cap = payload.get("cap", 0)
    if cap is None:
        cap = 0
    if (
        isinstance(cap, bool)
        or not isinstance(cap, int | float)
        or cap != int(cap)
        or not 0 <= cap <= 0xFFFFFFFF
    ):
        raise _unmarshal_error(cap, "Claims.cap", "protocol.Capability")
    dates: dict[str, float | None] = {}
    for name in ("exp", "iat", "nbf"):
        value = payload.get(name)
        if value is not None and (isinstance(value, bool) or not isinstance(value, int | float)):
            raise _malformed(f"could not JSON decode claim: {name} is not a numeric date")
        dates[name] = value
    registered = tuple((k, payload[k]) for k in ("iss", "sub", "aud", "nbf", "jti") if k in payload)
    return Claims(
        capability=int(cap),
        selector=selector_from_json(payload.get("sel")),
        expires_at=dates["exp"],
        issued_at=dates["iat"],
        registered=registered,
    )


def _b64url_encode(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def _b64url_decode(segment: str) -> bytes:
    """base64url without padding, strictly (Go's RawURLEncoding)."""
    if "=" in segment or len(segment) % 4 == 1:
        raise ValueError("illegal base64 data")
    standard = segment.replace("-", "+").replace("_", "/")
    return base64.b64decode(standard + "=" * (-len(standard) % 4), validate=True)


def parse_keys(base64_keys: str) -> tuple[list[bytes], bool]:
    """`--auth-keys`: base64 keys separated by whitespace and/or commas -> (keys, allow_missing)."""
    keys: list[bytes] = []
    allow_missing = False
    for i, key in enumerate(base64_keys.replace(",", " ").split()):
        if key == ALLOW_MISSING_KEY:
            allow_missing = True
            continue
        try:
            keys.append(base64.b64decode(key, validate=True))
        except (binascii.Error, ValueError) as exc:
            raise ValidationError(f"failed to decode auth key at index {i}: {exc}") from None
    if not keys:
        raise ValidationError("at least one auth key must be provided (--auth-keys: base64 keys)")
    return keys, allow_missing


class KeyedAuth:
    """Signs (with the first key) and verifies (with any key) authorization tokens: Gazette's KeyedAuth.

    `authorization(capability, selector, ttl_s)` is the metadata value to send; tokens are reused
    while they have at least half their lifetime left, so a busy client signs rarely.
    """

    def __init__(self, base64_keys: str) -> None:
        self.keys, self.allow_missing = parse_keys(base64_keys)
        self._cache: dict[tuple[int, str, float], tuple[str, float]] = {}
        self._lock = threading.Lock()  # the sync facades and brokers may sign from several threads

    @classmethod
    def coerce(cls, value: KeyedAuth | str | None) -> KeyedAuth | None:
        """None or "" (no auth), base64 keys as `--auth-keys` takes them, or a KeyedAuth."""
        if value is None or isinstance(value, KeyedAuth):
            return value
        if isinstance(value, str):
            return cls(value) if value.strip() else None
        raise ValidationError(f"auth_keys {value!r} is not a string of base64 keys")

    # ---- signing

    def sign(self, claims: Claims) -> str:
        """The JWT of `claims` (HS256 with the first key)."""
        header = _b64url_encode(b'{"alg":"HS256","typ":"JWT"}')
        payload = _b64url_encode(json.dumps(claims.to_json(), separators=(",", ":")).encode())
        signing_input = f"{header}.{payload}"
        signature = hmac.new(self.keys[0], signing_input.encode("ascii"), hashlib.sha256).digest()
        return f"{signing_input}.{_b64url_encode(signature)}"

    def authorization(
        self, capability: int, selector: LabelSelector | None = None, ttl_s: float = STREAM_TOKEN_TTL_S
    ) -> str:
        """`Bearer <token>` granting `capability` over `selector` (None: everything) for `ttl_s`."""
        selector = selector or LabelSelector()
        key = (int(capability), str(selector), ttl_s)
        now = time.time()
        with self._lock:
            cached = self._cache.get(key)
            if cached is not None and now < cached[1]:
                return cached[0]
        issued = int(now)
        value = BEARER_PREFIX + self.sign(
            Claims(
                capability=int(capability),
                selector=selector,
                expires_at=issued + int(ttl_s),
                issued_at=issued,
            )
        )
        with self._lock:
            if len(self._cache) >= _CACHE_ENTRIES_MAX:
                self._cache.clear()
            self._cache[key] = (value, issued + ttl_s * _REUSE_FRACTION)
        return value

    def metadata(
        self, capability: int, selector: LabelSelector | None = None, ttl_s: float = STREAM_TOKEN_TTL_S
    ) -> tuple[tuple[str, str], ...]:
        """gRPC call metadata carrying `authorization(...)`."""
        return ((AUTHORIZATION_HEADER, self.authorization(capability, selector, ttl_s)),)

    # ---- verification

    def verify(self, header: str | None, require: int, now: float | None = None) -> Claims:
        """The claims of a request's `authorization` header value, verified as Gazette does (signature
        by any key, HS256 or HS384, `exp` required, 5 s leeway) and holding every bit of `require`;
        otherwise AuthError with Gazette's message."""
        now = time.time() if now is None else now
        if not header:
            if self.allow_missing:
                return Claims(capability=int(require), expires_at=now + 3600)
            raise AuthError("missing or empty Authorization token")
        if not header.startswith(BEARER_PREFIX):
            raise AuthError("invalid or unsupported Authorization header (expected 'Bearer')")
        claims = self._verify_token(header[len(BEARER_PREFIX) :], now)
        problem = missing_capability(claims.capability, int(require))
        if problem is not None:
            raise AuthError(problem)
        return claims

    def _verify_token(self, token: str, now: float) -> Claims:
        parts = token.split(".")
        if len(parts) != 3:
            raise _malformed("token contains an invalid number of segments")
        try:
            header = json.loads(_b64url_decode(parts[0]))
        except (ValueError, UnicodeDecodeError):
            raise _malformed("could not base64 decode header") from None
        try:
            payload = json.loads(_b64url_decode(parts[1]))
        except (ValueError, UnicodeDecodeError):
            raise _malformed("could not base64 decode claim") from None
        claims = claims_from_json(payload)
        alg = header.get("alg") if isinstance(header, dict) else None
        digest = _HASHES.get(alg) if isinstance(alg, str) else None
        if digest is None:
            raise AuthError(
                f"verifying Authorization: token signature is invalid: signing method {alg} is invalid"
            )
        try:
            signature = _b64url_decode(parts[2])
        except ValueError:
            raise AuthError("verifying Authorization: token signature is invalid: could not base64 decode "
                            "signature") from None  # fmt: skip
        signing_input = f"{parts[0]}.{parts[1]}".encode("ascii", errors="replace")
        if not any(
            hmac.compare_digest(hmac.new(key, signing_input, digest).digest(), signature) for key in self.keys
        ):
            raise AuthError("verifying Authorization: token signature is invalid: signature is invalid")
        if claims.expires_at is None:
            raise AuthError(
                "verifying Authorization: token has invalid claims: token is missing required claim: "
                "exp claim is required"
            )
        if now - LEEWAY_S >= claims.expires_at:
            raise AuthError("verifying Authorization: token has invalid claims: token is expired")
        nbf = dict(claims.registered).get("nbf")
        if isinstance(nbf, int | float) and not isinstance(nbf, bool) and now + LEEWAY_S < nbf:
            raise AuthError("verifying Authorization: token has invalid claims: token is not valid yet")
        if claims.issued_at is not None and now + LEEWAY_S < claims.issued_at:
            raise AuthError("verifying Authorization: token has invalid claims: token used before issued")
        return claims


def header_of(metadata: Iterable[tuple[str, Any]] | None) -> str | None:
    """The first `authorization` value among a call's metadata (None if it has none)."""
    for key, value in metadata or ():
        if key == AUTHORIZATION_HEADER:
            return value if isinstance(value, str) else bytes(value).decode("latin-1")
    return None


def name_selector(name: str, label: str = "name") -> LabelSelector:
    """Claims over the one journal (or, with label="id", shard) `name`; a journal's `;meta` is dropped."""
    return LabelSelector(include=[(label, name.partition(";")[0] if label == "name" else name)])


def names_selector(names: Sequence[str], label: str) -> LabelSelector:
    """Claims over each of `names` (Gazette's Unassign claims: one `id` value per shard)."""
    return LabelSelector(include=[(label, n) for n in names])
