"""Delegated authentication and authorization for the secure port, the way
kube-scheduler's secure port (k8s.io/apiserver's delegating options) does them.

Who is asking:
  - a client certificate, verified during the TLS handshake against the cluster's
    client CA (tls.py): the subject's CN is the user name, its O entries the groups;
  - otherwise ``Authorization: Bearer TOKEN``: a TokenReview asks the apiserver.
    Its answer, yes or no, is cached for ``token_ttl`` seconds (10 s, as
    kube-scheduler's --authentication-token-webhook-cache-ttl), keyed by the token's
    SHA-256, never the token itself.
  - neither: 401. There is no anonymous identity.

May they: a SubjectAccessReview for the request's path and verb (the HTTP method in
lower case) as ``nonResourceAttributes``. Allowed answers are cached ``allow_ttl``,
denied ones ``deny_ttl`` seconds (10 s each, as kube-scheduler's
--authorization-webhook-cache-{authorized,unauthorized}-ttl). Denied: 403.

Always open: the ``always_allow`` paths (/healthz, /livez, /readyz, as
kube-scheduler's --authorization-always-allow-paths), with no review at all, so that
probes work while the apiserver is away.

Failing closed: a review that cannot be had (apiserver unreachable, an error status,
no answer within ``timeout``) is not cached and the request is refused with 503 and
a body that says which review failed; it is never let through. Concurrent requests
that ask the same question wait on one review, so a burst costs one round trip.
"""

from __future__ import annotations

import asyncio
import hashlib
import time
from collections.abc import Awaitable, Callable, Hashable, Mapping
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

import structlog
from prometheus_client import CollectorRegistry, Counter

log = structlog.get_logger("kscheduler.serving")

TOKEN_REVIEW_PATH = "/apis/authentication.k8s.io/v1/tokenreviews"
ACCESS_REVIEW_PATH = "/apis/authorization.k8s.io/v1/subjectaccessreviews"
ALWAYS_ALLOW_PATHS = ("/healthz", "/livez", "/readyz")

#: POST ``body`` to an API path and return the decoded answer (KubeClient.post_json).
Poster = Callable[[str, Any], Awaitable[Any]]

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")


class ReviewError(Exception):
    """A TokenReview or SubjectAccessReview could not be obtained."""


@dataclass(frozen=True)
class User:
    """An authenticated identity (the fields of a TokenReview's status.user)."""

    name: str
    uid: str = ""
    groups: tuple[str, ...] = ()
    extra: tuple[tuple[str, tuple[str, ...]], ...] = ()

    @classmethod
    def from_review(cls, user: Mapping[str, Any]) -> User:
        extra = user.get("extra") or {}
        return cls(
            name=str(user.get("username") or ""),
            uid=str(user.get("uid") or ""),
            groups=tuple(str(g) for g in user.get("groups") or ()),
            extra=tuple(sorted((str(k), tuple(str(x) for x in v or ())) for k, v in extra.items())),
        )


@dataclass(frozen=True)
class Decision:
    allowed: bool
    reason: str = ""


@dataclass(frozen=True)
class Outcome:
    """What the middleware answers: ``status`` 200 lets the request through."""

    status: int
    message: str = ""
    user: User | None = None

    @property
    def allowed(self) -> bool:
        return self.status == 200


class TTLCache(Generic[K, V]):
    """Answers kept until their own expiry; at most ``max_entries`` (expired ones
    are dropped first, then the oldest)."""

    def __init__(self, *, max_entries: int, clock: Callable[[], float]) -> None:
        self.max_entries = max_entries
        self._clock = clock
        self._entries: dict[K, tuple[float, V]] = {}

    def __len__(self) -> int:
        return len(self._entries)

    def get(self, key: K) -> V | None:
        hit = self._entries.get(key)
        if hit is None:
            return None
        expires, value = hit
        if self._clock() >= expires:
            del self._entries[key]
            return None
        return value

    def put(self, key: K, value: V, ttl: float) -> None:
        if ttl <= 0:
            return
        self._entries.pop(key, None)
        if len(self._entries) >= self.max_entries:
            now = self._clock()
            for k in [k for k, (exp, _) in self._entries.items() if exp <= now]:
                del self._entries[k]
            while len(self._entries) >= self.max_entries:
                del self._entries[next(iter(self._entries))]
        self._entries[key] = (self._clock() + ttl, value)


class CachedReviews(Generic[K, V]):
    """A TTL cache in front of a review, with one review in flight per key."""

    def __init__(self, *, max_entries: int, clock: Callable[[], float]) -> None:
        self.cache: TTLCache[K, V] = TTLCache(max_entries=max_entries, clock=clock)
        self._inflight: dict[K, asyncio.Future[V]] = {}

    async def get(self, key: K, review: Callable[[], Awaitable[tuple[V, float]]]) -> V:
        """The cached answer for ``key``, else ``review()``'s (value, ttl), shared
        with every caller that asks meanwhile. Exceptions are not cached."""
        while True:
            hit = self.cache.get(key)
            if hit is not None:
                return hit
            pending = self._inflight.get(key)
            if pending is None:
                break
            try:
                return await asyncio.shield(pending)
            except asyncio.CancelledError:
                task = asyncio.current_task()
                if pending.cancelled() and task is not None and not task.cancelling():
                    continue  # the caller that asked was cancelled, not this one: ask again
                raise
        fut: asyncio.Future[V] = asyncio.get_running_loop().create_future()
        self._inflight[key] = fut
        try:
            value, ttl = await review()
        except Exception as exc:
            fut.set_exception(exc)
            fut.exception()  # retrieved here; waiters, if any, get it as well
            raise
        except BaseException:
            fut.cancel()
            raise
        else:
            self.cache.put(key, value, ttl)
            fut.set_result(value)
            return value
        finally:
            del self._inflight[key]


class _Reviewer:
    """POSTs one review with a deadline; counts it by result code like
    apiserver_delegated_{authn,authz}_request_total."""

    def __init__(self, post: Poster, path: str, what: str, timeout: float, counter: Any) -> None:
        self._post = post
        self._path = path
        self._what = what
        self._timeout = timeout
        self._counter = counter
        self.count = 0

    async def __call__(self, body: Mapping[str, Any]) -> Mapping[str, Any]:
        self.count += 1
        try:
            async with asyncio.timeout(self._timeout):
                answer = await self._post(self._path, body)
        except Exception as exc:
            status = getattr(exc, "status", None)
            self._observe(str(status) if isinstance(status, int) else "<error>")
            detail = str(exc) or type(exc).__name__
            if isinstance(exc, TimeoutError):
                detail = f"no answer within {self._timeout:g}s"
            raise ReviewError(f"{self._what} failed: {detail}") from exc
        self._observe("201")
        if not isinstance(answer, Mapping):
            raise ReviewError(f"{self._what} failed: unexpected answer {answer!r:.200}")
        status = answer.get("status")
        return status if isinstance(status, Mapping) else {}

    def _observe(self, code: str) -> None:
        if self._counter is not None:
            self._counter.labels(code=code).inc()


def _token_key(token: str) -> bytes:
    return hashlib.sha256(token.encode()).digest()


def user_from_certificate(peercert: Mapping[str, Any] | None) -> User | None:
    """The identity in a verified client certificate (ssl's getpeercert() dict):
    CN is the user, each O a group. None without a certificate or a CN."""
    if not peercert:
        return None
    name = ""
    groups: list[str] = []
    for rdn in peercert.get("subject") or ():
        for key, value in rdn:
            if key == "commonName" and not name:
                name = str(value)
            elif key == "organizationName":
                groups.append(str(value))
    return User(name=name, groups=tuple(groups)) if name else None


def bearer_token(header: str | None) -> str | None:
    if not header:
        return None
    scheme, _, token = header.strip().partition(" ")
    token = token.strip()
    if scheme.lower() != "bearer" or not token or " " in token:
        return None
    return token


@dataclass
class AuthSettings:
    token_ttl: float = 10.0
    """Cache of TokenReview answers; kube-scheduler's default."""
    allow_ttl: float = 10.0
    """Cache of allowed SubjectAccessReview answers; kube-scheduler's default."""
    deny_ttl: float = 10.0
    """Cache of denied SubjectAccessReview answers; kube-scheduler's default."""
    timeout: float = 10.0
    """Longest wait for one review, as upstream's webhook timeout."""
    max_entries: int = 4096
    """Per cache; bounds memory under many distinct tokens."""
    always_allow: tuple[str, ...] = ALWAYS_ALLOW_PATHS
    """Paths served to anyone, with no review."""
    audiences: tuple[str, ...] = field(default_factory=tuple)
    """TokenReview spec.audiences; empty: the apiserver's own."""


class DelegatedAuth:
    """Authenticates and authorizes requests to the secure port through the apiserver."""

    def __init__(
        self,
        post: Poster,
        settings: AuthSettings | None = None,
        *,
        registry: CollectorRegistry | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.settings = s = settings or AuthSettings()
        authn_total = authz_total = None
        if registry is not None:
            authn_total = Counter(
                "apiserver_delegated_authn_request",
                "Number of HTTP requests partitioned by status code.",
                ["code"],
                registry=registry,
            )
            authz_total = Counter(
                "apiserver_delegated_authz_request",
                "Number of HTTP requests partitioned by status code.",
                ["code"],
                registry=registry,
            )
        self.token_reviews = _Reviewer(
            post, TOKEN_REVIEW_PATH, "TokenReview", s.timeout, authn_total
        )
        self.access_reviews = _Reviewer(
            post, ACCESS_REVIEW_PATH, "SubjectAccessReview", s.timeout, authz_total
        )
        self._tokens: CachedReviews[bytes, tuple[User | None]] = CachedReviews(
            max_entries=s.max_entries, clock=clock
        )
        self._decisions: CachedReviews[tuple[User, str, str], Decision] = CachedReviews(
            max_entries=s.max_entries, clock=clock
        )

    # ------------------------------------------------------------------ authentication
    async def authenticate_token(self, token: str) -> User | None:
        """The token's user, or None when the apiserver does not know it.
        Raises ReviewError when it cannot be asked."""

        async def review() -> tuple[tuple[User | None], float]:
            spec: dict[str, Any] = {"token": token}
            if self.settings.audiences:
                spec["audiences"] = list(self.settings.audiences)
            status = await self.token_reviews(
                {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview", "spec": spec}
            )
            user: User | None = None
            if status.get("authenticated"):
                user = User.from_review(status.get("user") or {})
                if not user.name:
                    user = None
            return (user,), self.settings.token_ttl

        # a one-tuple, so that "not authenticated" (None) is a cacheable answer
        return (await self._tokens.get(_token_key(token), review))[0]

    # ------------------------------------------------------------------- authorization
    async def authorize(self, user: User, verb: str, path: str) -> Decision:
        """Whether ``user`` may ``verb`` the non-resource ``path``. Raises ReviewError
        when the apiserver cannot be asked."""

        async def review() -> tuple[Decision, float]:
            spec: dict[str, Any] = {
                "user": user.name,
                "groups": list(user.groups),
                "nonResourceAttributes": {"path": path, "verb": verb},
            }
            if user.uid:
                spec["uid"] = user.uid
            if user.extra:
                spec["extra"] = {k: list(v) for k, v in user.extra}
            status = await self.access_reviews(
                {
                    "apiVersion": "authorization.k8s.io/v1",
                    "kind": "SubjectAccessReview",
                    "spec": spec,
                }
            )
            if status.get("allowed") and not status.get("denied"):
                return Decision(True, str(status.get("reason") or "")), self.settings.allow_ttl
            reason = str(status.get("reason") or status.get("evaluationError") or "")
            return Decision(False, reason), self.settings.deny_ttl

        return await self._decisions.get((user, verb, path), review)

    # --------------------------------------------------------------------------- both
    def is_open(self, path: str) -> bool:
        return path in self.settings.always_allow

    async def check(
        self,
        *,
        method: str,
        path: str,
        authorization: str | None,
        peercert: Mapping[str, Any] | None,
    ) -> Outcome:
        """The answer for one request: 200 (go on), 401, 403 or 503 (a review failed)."""
        if self.is_open(path):
            return Outcome(200)
        user = user_from_certificate(peercert)
        if user is None:
            token = bearer_token(authorization)
            if token is None:
                return Outcome(
                    401, "Unauthorized: a bearer token or a client certificate is needed"
                )
            try:
                user = await self.authenticate_token(token)
            except ReviewError as exc:
                log.warning("authentication unavailable", path=path, error=str(exc))
                return Outcome(503, f"authentication unavailable: {exc}")
            if user is None:
                return Outcome(401, "Unauthorized: the token was not accepted")
        verb = method.lower()
        try:
            decision = await self.authorize(user, verb, path)
        except ReviewError as exc:
            log.warning("authorization unavailable", path=path, user=user.name, error=str(exc))
            return Outcome(503, f"authorization unavailable: {exc}", user)
        if not decision.allowed:
            why = f": {decision.reason}" if decision.reason else ""
            return Outcome(
                403, f'Forbidden: user "{user.name}" cannot {verb} path "{path}"{why}', user
            )
        return Outcome(200, user=user)
