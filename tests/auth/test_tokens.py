"""Gazette's bearer tokens: the claims' JSON as Go writes it, signing and verification with every
refusal message of Gazette's verifier, key parsing and token reuse."""

from __future__ import annotations

import base64
import json

import pytest

from gazette.auth.tokens import (
    LEEWAY_S,
    AuthError,
    Capability,
    Claims,
    KeyedAuth,
    claims_from_json,
    header_of,
    missing_capability,
    name_selector,
    parse_keys,
)
from gazette.protocol.errors import ValidationError
from gazette.protocol.labels import LabelSet
from gazette.protocol.selector import LabelSelector

KEY = base64.b64encode(b"secret").decode()  # Gazette's consumertest default, c2VjcmV0
NOW = 1_700_000_000


def _payload(token: str) -> dict:
    segment = token.split(".")[1]
    return json.loads(base64.urlsafe_b64decode(segment + "=" * (-len(segment) % 4)))


def test_claims_are_encoded_as_go_encodes_pb_claims() -> None:
    auth = KeyedAuth(KEY)
    token = auth.sign(
        Claims(Capability.READ, name_selector("a/journal;meta"), expires_at=NOW + 60, issued_at=NOW)
    )
    header, payload, _sig = token.split(".")
    assert base64.urlsafe_b64decode(header + "==") == b'{"alg":"HS256","typ":"JWT"}'
    assert base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)) == (
        b'{"cap":8,"sel":{"include":{"labels":[{"name":"name","value":"a/journal"}]},'
        b'"exclude":{"labels":null}},"exp":1700000060,"iat":1700000000}'
    )
    prefix = LabelSelector(include=[("name", "a/", True)], exclude=[("app", "")])
    assert _payload(auth.sign(Claims(Capability.LIST, prefix)))["sel"] == {
        "include": {"labels": [{"name": "name", "value": "a/", "prefix": True}]},
        "exclude": {"labels": [{"name": "app"}]},
    }


def test_the_first_key_signs_and_any_key_verifies() -> None:
    first, second = base64.b64encode(b"one").decode(), base64.b64encode(b"two").decode()
    rotated = KeyedAuth(f"{second}, {first}")
    old = KeyedAuth(first).authorization(Capability.APPEND, name_selector("a/b"))
    claims = rotated.verify(old, Capability.APPEND)
    assert claims.capability == Capability.APPEND and claims.matches(LabelSet([("name", "a/b")]))
    assert not claims.matches(LabelSet([("name", "a/c")]))
    with pytest.raises(AuthError, match="signature is invalid"):
        KeyedAuth(first).verify(KeyedAuth(second).authorization(Capability.APPEND), Capability.APPEND)


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda a: None, "missing or empty Authorization token"),
        (lambda a: "Basic dXNlcg==", "invalid or unsupported Authorization header (expected 'Bearer')"),
        (lambda a: "Bearer abc.def", "verifying Authorization: token is malformed: token contains an invalid number of segments"),
        (lambda a: "Bearer " + a.sign(Claims(Capability.ALL, issued_at=NOW)),
         "verifying Authorization: token has invalid claims: token is missing required claim: exp claim is required"),
        (lambda a: "Bearer " + a.sign(Claims(Capability.ALL, expires_at=NOW - LEEWAY_S, issued_at=NOW - 60)),
         "verifying Authorization: token has invalid claims: token is expired"),
        (lambda a: "Bearer " + a.sign(Claims(Capability.ALL, expires_at=NOW + 600, issued_at=NOW + LEEWAY_S + 1)),
         "verifying Authorization: token has invalid claims: token used before issued"),
        (lambda a: "Bearer " + a.sign(Claims(Capability.READ, expires_at=NOW + 60)),
         "authorization is missing required LIST capability"),
        (lambda a: "Bearer " + a.sign(Claims(1 << 16, expires_at=NOW + 60)),
         "authorization is missing required LIST capability"),
    ],
    ids=["missing", "not-bearer", "malformed", "no-exp", "expired", "future-iat", "narrow-cap", "app-cap"],
)  # fmt: skip
def test_refusals_carry_gazettes_messages(make, message) -> None:
    auth = KeyedAuth(KEY)
    with pytest.raises(AuthError) as refused:
        auth.verify(make(auth), Capability.LIST, now=NOW)
    assert refused.value.message == message


def test_leeway_and_other_algorithms() -> None:
    auth = KeyedAuth(KEY)
    just_expired = "Bearer " + auth.sign(Claims(Capability.LIST, expires_at=NOW - LEEWAY_S + 1))
    assert auth.verify(just_expired, Capability.LIST, now=NOW).capability == Capability.LIST

    def with_header(alg: str) -> str:
        import hashlib
        import hmac

        head = base64.urlsafe_b64encode(json.dumps({"alg": alg, "typ": "JWT"}).encode()).rstrip(b"=").decode()
        body = base64.urlsafe_b64encode(b'{"cap":2,"exp":1700000060}').rstrip(b"=").decode()
        digest = {"HS384": hashlib.sha384, "HS512": hashlib.sha512}[alg]
        sig = hmac.new(b"secret", f"{head}.{body}".encode(), digest).digest()
        return f"Bearer {head}.{body}.{base64.urlsafe_b64encode(sig).rstrip(b'=').decode()}"

    assert auth.verify(with_header("HS384"), Capability.LIST, now=NOW).capability == Capability.LIST
    with pytest.raises(AuthError, match="token signature is invalid: signing method HS512 is invalid"):
        auth.verify(with_header("HS512"), Capability.LIST, now=NOW)


def test_claims_that_go_would_not_decode_are_malformed() -> None:
    with pytest.raises(AuthError, match="cannot unmarshal string into Go struct field Claims.sel of type"):
        claims_from_json({"cap": 2, "sel": "name=a"})
    with pytest.raises(AuthError, match="cannot unmarshal string into Go struct field Claims.cap"):
        claims_from_json({"cap": "2"})
    assert claims_from_json({"cap": 2}).selector == LabelSelector()  # no sel: everything


def test_keys_and_the_allow_missing_key() -> None:
    assert parse_keys(f"{KEY},  {KEY}\nAA==") == ([b"secret", b"secret"], True)
    with pytest.raises(ValidationError, match="at least one auth key"):
        parse_keys("AA==")
    with pytest.raises(ValidationError, match="failed to decode auth key at index 1"):
        parse_keys(f"{KEY} not-base64!")
    rollout = KeyedAuth(f"AA== {KEY}")
    assert rollout.verify(None, Capability.APPEND).capability == Capability.APPEND
    with pytest.raises(AuthError, match="signature is invalid"):  # a token present is still verified
        rollout.verify(
            KeyedAuth(base64.b64encode(b"x").decode()).authorization(Capability.APPEND), Capability.APPEND
        )


def test_tokens_are_reused_and_capabilities_named() -> None:
    auth = KeyedAuth(KEY)
    first = auth.authorization(Capability.READ, name_selector("a/b"))
    assert auth.authorization(Capability.READ, name_selector("a/b")) == first
    assert auth.authorization(Capability.READ, name_selector("a/c")) != first
    assert header_of([("x-other", "1"), ("authorization", first)]) == first
    assert missing_capability(Capability.ALL, Capability.REPLICATE) is None
    assert missing_capability(Capability.APPEND, Capability.REPLICATE) == (
        "authorization is missing required REPLICATE capability"
    )
    assert missing_capability(0, 1 << 17) == (
        "authorization is missing required capability (have 0, but require 100000000000000000)"
    )
