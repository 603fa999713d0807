"""ServiceAccount tokens: the TokenRequest subresource and their authentication.

``POST /api/v1/namespaces/{ns}/serviceaccounts/{name}/token`` (what
``kubectl create token`` sends) answers an ``authentication.k8s.io/v1``
TokenRequest whose ``status.token`` is a JWT with the claims of a real bound
token (``iss``, ``sub: system:serviceaccount:<ns>:<name>``, ``aud``, ``exp``,
``iat``, ``nbf``, ``jti``, ``kubernetes.io`` with the namespace, the
ServiceAccount's name and uid and the bound object) and whose
``expirationTimestamp`` is ``expirationSeconds`` (default 3600, at least
600, at most 2^32) after now on the twin's clock, as upstream's
``pkg/registry/core/serviceaccount`` token REST does.

The twin signs with a per-run HMAC key (HS256) where a real server signs
with its service-account key (RS256): clients do not verify these tokens,
the API server does.  A token authenticates while it has not expired and
its ServiceAccount (same uid) still exists, and while the object it is bound
to (a Pod or Secret) still exists.
"""

from __future__ import annotations

import base64
import csv
import hashlib
import hmac
import io
import json
import secrets
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ..machinery import errors
from ..machinery.clock import SimClock
from ..machinery.registry import Registry
from ..machinery.store import Store

Obj = dict[str, Any]

ISSUER = "https://kubernetes.default.svc.cluster.local"
DEFAULT_EXPIRATION_SECONDS = 3600
MIN_EXPIRATION_SECONDS = 600
MAX_EXPIRATION_SECONDS = 1 << 32
_BOUND_KINDS = {"Pod": "pods", "Secret": "secrets", "Node": "nodes"}


@dataclass(frozen=True)
class UserInfo:
    """Who a request authenticated as (authentication.k8s.io/v1 UserInfo)."""

    username: str
    uid: str = ""
    groups: tuple[str, ...] = ()
    extra: tuple[tuple[str, tuple[str, ...]], ...] = ()

    def to_json(self) -> Obj:
        info: Obj = {"username": self.username, "groups": list(self.groups)}
        if self.uid:
            info["uid"] = self.uid
        if self.extra:
            info["extra"] = {key: list(values) for key, values in self.extra}
        return info


ADMIN = UserInfo(username="gpufleet-twin-admin", groups=("system:masters", "system:authenticated"))
AUTHENTICATED = "system:authenticated"
# Who a request without credentials is, with kube-apiserver's default --anonymous-auth=true.
ANONYMOUS = UserInfo(username="system:anonymous", groups=("system:unauthenticated",))


class StaticTokens:
    """Bearer tokens of users, as kube-apiserver's ``--token-auth-file`` declares them.

    Each line of such a file is ``token,user,uid[,"group1,group2"]`` (CSV; blank lines and lines
    starting with ``#`` are skipped).  Every authenticated user is also in ``system:authenticated``,
    which kube-apiserver adds to whatever the authenticator found.
    """

    def __init__(self) -> None:
        self._users: dict[str, UserInfo] = {}

    def add(self, token: str, *, username: str, uid: str = "", groups: Sequence[str] = ()) -> UserInfo:
        if not token or not username:
            raise ValueError("a static token needs a token and a user name")
        unique = tuple(dict.fromkeys([*groups, AUTHENTICATED]))
        user = UserInfo(username=username, uid=uid, groups=unique)
        self._users[token] = user
        return user

    def load_csv(self, text: str, *, source: str) -> int:
        """Add every token of a token file's text; a bad line raises ValueError naming ``source`` and the line."""
        count = 0
        for number, row in enumerate(csv.reader(io.StringIO(text)), start=1):
            if not row or not "".join(row).strip() or row[0].lstrip().startswith("#"):
                continue
            if len(row) < 3:
                raise ValueError(f"{source}:{number}: a line needs at least token,user,uid (got {len(row)} fields)")
            groups = [group.strip() for group in row[3].split(",") if group.strip()] if len(row) > 3 else []
            try:
                self.add(row[0].strip(), username=row[1].strip(), uid=row[2].strip(), groups=groups)
            except ValueError as problem:
                raise ValueError(f"{source}:{number}: {problem}") from None
            count += 1
        return count

    def authenticate(self, token: str) -> UserInfo | None:
        for known, user in self._users.items():
            if hmac.compare_digest(known.encode(), token.encode()):
                return user
        return None


class TokenIssuer:
    def __init__(self, *, store: Store, registry: Registry, clock: SimClock) -> None:
        self._store = store
        self._registry = registry
        self._clock = clock
        self._key = secrets.token_bytes(32)

    # -- TokenRequest ------------------------------------------------------------------------------
    def token_request(self, *, namespace: str, name: str, body: Obj) -> Obj:
        """Answer a TokenRequest for ServiceAccount ``namespace/name`` (404 if it does not exist, 422 if invalid)."""
        accounts = self._registry.get("", "serviceaccounts")
        assert accounts is not None
        account = self._store.get(accounts, namespace, name)
        spec = dict(body.get("spec") or {})
        seconds = spec.get("expirationSeconds")
        seconds = DEFAULT_EXPIRATION_SECONDS if seconds in (None, 0) else seconds
        if not isinstance(seconds, int) or seconds < MIN_EXPIRATION_SECONDS or seconds > MAX_EXPIRATION_SECONDS:
            limit = (
                "may not specify a duration less than 10 minutes"
                if not isinstance(seconds, int) or seconds < MIN_EXPIRATION_SECONDS
                else "may not specify a duration larger than 2^32 seconds"
            )
            raise errors.invalid(
                "TokenRequest",
                name,
                [
                    {
                        "reason": "FieldValueInvalid",
                        "field": "spec.expirationSeconds",
                        "message": f"Invalid value: {seconds}: {limit}",
                    }
                ],
                "authentication.k8s.io",
            )
        audiences = list(spec.get("audiences") or [ISSUER])
        bound = spec.get("boundObjectRef")
        claims_bound: Obj = {}
        if bound:
            claims_bound = self._bound_claims(namespace, bound)
        now = int(self._clock.now())
        expires = now + seconds
        claims: Obj = {
            "aud": audiences,
            "exp": expires,
            "iat": now,
            "iss": ISSUER,
            "jti": str(uuid.uuid4()),
            "kubernetes.io": {
                "namespace": namespace,
                "serviceaccount": {"name": name, "uid": account["metadata"]["uid"]},
                **claims_bound,
            },
            "nbf": now,
            "sub": f"system:serviceaccount:{namespace}:{name}",
        }
        spec.update({"audiences": audiences, "expirationSeconds": seconds, "boundObjectRef": bound or None})
        return {
            "kind": "TokenRequest",
            "apiVersion": "authentication.k8s.io/v1",
            "metadata": {"name": name, "namespace": namespace, "creationTimestamp": self._clock.iso(now)},
            "spec": spec,
            "status": {"token": self._sign(claims), "expirationTimestamp": self._clock.iso(expires)},
        }

    def _bound_claims(self, namespace: str, bound: Obj) -> Obj:
        kind = str(bound.get("kind") or "")
        plural = _BOUND_KINDS.get(kind)
        if plural is None:
            raise errors.bad_request(f"cannot bind token to object of type {kind}")
        rtype = self._registry.get("", plural)
        assert rtype is not None
        target = self._store.get(rtype, namespace if rtype.namespaced else None, str(bound.get("name", "")))
        if bound.get("uid") and bound["uid"] != target["metadata"]["uid"]:
            raise errors.conflict(plural, str(bound.get("name", "")))
        return {kind.lower(): {"name": target["metadata"]["name"], "uid": target["metadata"]["uid"]}}

    # -- authentication --------------------------------------------------------------------------
    def authenticate(self, token: str) -> UserInfo | None:
        """The ServiceAccount a token issued here stands for, or None (forged, expired, account gone)."""
        claims = self._verify(token)
        if claims is None or float(claims.get("exp", 0)) <= self._clock.now():
            return None
        facts = claims.get("kubernetes.io") or {}
        namespace = facts.get("namespace", "")
        account = facts.get("serviceaccount") or {}
        accounts = self._registry.get("", "serviceaccounts")
        assert accounts is not None
        found = self._store.try_get(accounts, namespace, account.get("name", ""))
        if found is None or found["metadata"]["uid"] != account.get("uid"):
            return None
        extra: list[tuple[str, tuple[str, ...]]] = []
        for kind, plural in _BOUND_KINDS.items():
            bound = facts.get(kind.lower())
            if not bound:
                continue
            rtype = self._registry.get("", plural)
            assert rtype is not None
            target = self._store.try_get(rtype, namespace if rtype.namespaced else None, bound.get("name", ""))
            if target is None or target["metadata"]["uid"] != bound.get("uid"):
                return None
            extra.append((f"authentication.kubernetes.io/{kind.lower()}-name", (bound["name"],)))
            extra.append((f"authentication.kubernetes.io/{kind.lower()}-uid", (bound["uid"],)))
        extra.append(("authentication.kubernetes.io/credential-id", (f"JTI={claims.get('jti', '')}",)))
        return UserInfo(
            username=f"system:serviceaccount:{namespace}:{account.get('name', '')}",
            uid=str(account.get("uid", "")),
            groups=("system:serviceaccounts", f"system:serviceaccounts:{namespace}", "system:authenticated"),
            extra=tuple(extra),
        )

    # -- JWT -----------------------------------------------------------------------------------------
    def _sign(self, claims: Obj) -> str:
        header = {"alg": "HS256", "kid": hashlib.sha256(self._key).hexdigest()[:16], "typ": "JWT"}
        signing_input = f"{_b64(json.dumps(header, separators=(',', ':')).encode())}.{_b64(_json(claims))}"
        signature = hmac.new(self._key, signing_input.encode(), hashlib.sha256).digest()
        return f"{signing_input}.{_b64(signature)}"

    def _verify(self, token: str) -> Obj | None:
        parts = token.split(".")
        if len(parts) != 3:
            return None
        expected = hmac.new(self._key, f"{parts[0]}.{parts[1]}".encode(), hashlib.sha256).digest()
        try:
            if not hmac.compare_digest(expected, _unb64(parts[2])):
                return None
            claims = json.loads(_unb64(parts[1]))
        except (ValueError, UnicodeDecodeError):
            return None
        return claims if isinstance(claims, dict) else None


def _json(value: Any) -> bytes:
    return json.dumps(value, separators=(",", ":"), sort_keys=True).encode()


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
