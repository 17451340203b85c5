"""kscheduler.serving: delegated authentication/authorization (caches, failing
closed) against an in-memory review API, and the TLS listener with real
handshakes on loopback."""

from __future__ import annotations

import asyncio
import datetime
import ssl
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID
from prometheus_client import CollectorRegistry

from kscheduler.server import HealthServer
from kscheduler.serving.auth import (
    ACCESS_REVIEW_PATH,
    TOKEN_REVIEW_PATH,
    AuthSettings,
    DelegatedAuth,
    TTLCache,
    bearer_token,
    user_from_certificate,
)
from kscheduler.serving.tls import ServingTLS, split_pem_certificates


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


class ReviewAPI:
    """The two review endpoints, in memory: ``tokens`` maps token -> (user, groups),
    ``grants`` holds (user or group, verb, path) triples."""

    def __init__(self) -> None:
        self.tokens: dict[str, tuple[str, list[str]]] = {}
        self.grants: set[tuple[str, str, str]] = set()
        self.calls: list[tuple[str, Any]] = []
        self.down: BaseException | None = None
        self.delay = 0.0

    def count(self, path: str) -> int:
        return sum(1 for p, _ in self.calls if p == path)

    async def post(self, path: str, body: Any) -> Any:
        self.calls.append((path, body))
        if self.delay:
            await asyncio.sleep(self.delay)
        if self.down is not None:
            raise self.down
        if path == TOKEN_REVIEW_PATH:
            who = self.tokens.get(body["spec"]["token"])
            if who is None:
                return {"status": {"authenticated": False, "error": "invalid bearer token"}}
            name, groups = who
            user = {"username": name, "uid": f"{name}-uid", "groups": groups}
            return {"status": {"authenticated": True, "user": user}}
        assert path == ACCESS_REVIEW_PATH
        spec = body["spec"]
        attrs = spec["nonResourceAttributes"]
        subjects = [spec["user"], *spec.get("groups", [])]
        allowed = any((s, attrs["verb"], attrs["path"]) in self.grants for s in subjects)
        return {"status": {"allowed": allowed, "reason": "" if allowed else "no rule"}}


def make_auth(api: ReviewAPI, clock: Clock, **settings: Any) -> DelegatedAuth:
    return DelegatedAuth(api.post, AuthSettings(**settings), clock=clock)


async def ask(
    auth: DelegatedAuth, path: str = "/metrics", token: str | None = None, method: str = "GET"
) -> int:
    header = f"Bearer {token}" if token is not None else None
    outcome = await auth.check(method=method, path=path, authorization=header, peercert=None)
    return outcome.status


# ---- caches ---------------------------------------------------------------------------------
def test_ttl_cache_expires_and_stays_bounded() -> None:
    clock = Clock()
    cache: TTLCache[str, int] = TTLCache(max_entries=3, clock=clock)
    cache.put("a", 1, 10)
    clock.now += 9.9
    assert cache.get("a") == 1
    clock.now += 0.1
    assert cache.get("a") is None
    for i, k in enumerate("bcdef"):
        cache.put(k, i, 10)
    assert len(cache) == 3
    assert [cache.get(k) for k in "bcdef"] == [None, None, 2, 3, 4]  # the oldest went first
    cache.put("z", 0, 0)  # a zero TTL caches nothing
    assert cache.get("z") is None


def test_bearer_header_parsing() -> None:
    assert bearer_token("Bearer abc") == "abc"
    assert bearer_token("bearer  abc ") == "abc"
    for bad in (None, "", "Bearer", "Bearer ", "Basic abc", "Bearer a b", "abc"):
        assert bearer_token(bad) is None, bad


def test_certificate_subject_gives_user_and_groups() -> None:
    cert = {
        "subject": (
            (("organizationName", "system:monitoring"),),
            (("organizationName", "ops"),),
            (("commonName", "prometheus"),),
        )
    }
    user = user_from_certificate(cert)
    assert user is not None and user.name == "prometheus"
    assert user.groups == ("system:monitoring", "ops")
    assert user_from_certificate({"subject": ((("organizationName", "x"),),)}) is None
    assert user_from_certificate(None) is None


# ---- decisions ------------------------------------------------------------------------------
async def test_no_credentials_is_401_without_a_review() -> None:
    api = ReviewAPI()
    auth = make_auth(api, Clock())
    assert await ask(auth) == 401
    bad = await auth.check(method="GET", path="/metrics", authorization="Basic x", peercert=None)
    assert bad.status == 401
    assert api.calls == []


async def test_health_paths_are_open_even_when_the_apiserver_is_down() -> None:
    api = ReviewAPI()
    api.down = ConnectionRefusedError("connection refused")
    auth = make_auth(api, Clock())
    for path in ("/healthz", "/livez", "/readyz"):
        assert await ask(auth, path) == 200
        assert await ask(auth, path, token="whatever") == 200
    assert api.calls == []
    # but nothing else is, not even an unknown path
    assert await ask(auth, "/healthz/extra") == 401


async def test_review_bodies_ask_for_the_non_resource_path_and_verb() -> None:
    api = ReviewAPI()
    api.tokens["t1"] = ("alice", ["team"])
    api.grants.add(("team", "get", "/debug/cache"))
    auth = make_auth(api, Clock())
    assert await ask(auth, "/debug/cache", token="t1") == 200
    (tr_path, tr), (sar_path, sar) = api.calls
    assert tr_path == TOKEN_REVIEW_PATH and tr["kind"] == "TokenReview"
    assert tr["spec"] == {"token": "t1"}
    assert sar_path == ACCESS_REVIEW_PATH and sar["kind"] == "SubjectAccessReview"
    assert sar["spec"] == {
        "user": "alice",
        "uid": "alice-uid",
        "groups": ["team"],
        "nonResourceAttributes": {"path": "/debug/cache", "verb": "get"},
    }
    # another path is another question
    assert await ask(auth, "/metrics", token="t1") == 403
    assert api.count(TOKEN_REVIEW_PATH) == 1 and api.count(ACCESS_REVIEW_PATH) == 2


async def test_answers_are_cached_for_their_ttl() -> None:
    api = ReviewAPI()
    api.tokens.update(ok=("prom", []), no=("nobody", []))
    api.grants.add(("prom", "get", "/metrics"))
    clock = Clock()
    auth = make_auth(api, clock, token_ttl=10, allow_ttl=10, deny_ttl=5)
    for _ in range(5):
        assert await ask(auth, token="ok") == 200
        assert await ask(auth, token="no") == 403
        assert await ask(auth, token="unknown") == 401
    # three tokens reviewed once each; two users' decisions asked once each
    assert api.count(TOKEN_REVIEW_PATH) == 3
    assert api.count(ACCESS_REVIEW_PATH) == 2

    clock.now += 5  # the denial expires first
    assert await ask(auth, token="no") == 403
    assert api.count(TOKEN_REVIEW_PATH) == 3 and api.count(ACCESS_REVIEW_PATH) == 3
    clock.now += 5  # now everything
    api.grants.add(("nobody", "get", "/metrics"))
    assert await ask(auth, token="no") == 200
    assert await ask(auth, token="ok") == 200
    assert api.count(TOKEN_REVIEW_PATH) == 5 and api.count(ACCESS_REVIEW_PATH) == 5
    # a revoked token is refused once its cached answer expires
    del api.tokens["ok"]
    assert await ask(auth, token="ok") == 200
    clock.now += 10
    assert await ask(auth, token="ok") == 401


async def test_a_scrape_a_second_costs_two_reviews_per_ttl() -> None:
    api = ReviewAPI()
    api.tokens["sa"] = ("system:serviceaccount:monitoring:prometheus", [])
    api.grants.add(("system:serviceaccount:monitoring:prometheus", "get", "/metrics"))
    clock = Clock()
    auth = make_auth(api, clock)
    for _ in range(60):
        assert await ask(auth, token="sa") == 200
        clock.now += 1.0
    assert api.count(TOKEN_REVIEW_PATH) == 6
    assert api.count(ACCESS_REVIEW_PATH) == 6


async def test_concurrent_requests_share_one_review() -> None:
    api = ReviewAPI()
    api.delay = 0.05
    api.tokens["t"] = ("u", [])
    api.grants.add(("u", "get", "/metrics"))
    auth = make_auth(api, Clock())
    codes = await asyncio.gather(*(ask(auth, token="t") for _ in range(20)))
    assert codes == [200] * 20
    assert api.count(TOKEN_REVIEW_PATH) == 1 and api.count(ACCESS_REVIEW_PATH) == 1


@pytest.mark.parametrize(
    "failure",
    [
        ConnectionRefusedError("connection refused"),
        RuntimeError("500 Internal Server Error"),
        TimeoutError(),
    ],
    ids=["refused", "error", "timeout"],
)
async def test_failed_reviews_fail_closed_and_are_not_cached(failure: BaseException) -> None:
    api = ReviewAPI()
    api.tokens["t"] = ("u", [])
    api.grants.add(("u", "get", "/metrics"))
    auth = make_auth(api, Clock())
    api.down = failure
    out = await auth.check(method="GET", path="/metrics", authorization="Bearer t", peercert=None)
    assert out.status == 503 and "TokenReview failed" in out.message
    api.down = None
    assert await ask(auth, token="t") == 200  # the failure was not remembered
    # the token's answer is cached now; an authorization outage still refuses
    auth2 = make_auth(api, Clock())
    assert await ask(auth2, token="t") == 200
    api.down = failure
    assert await ask(auth2, "/debug/queue", token="t") == 503


async def test_a_review_that_hangs_is_cut_at_the_timeout() -> None:
    api = ReviewAPI()
    api.tokens["t"] = ("u", [])
    api.delay = 5.0
    auth = make_auth(api, Clock(), timeout=0.05)
    out = await auth.check(method="GET", path="/metrics", authorization="Bearer t", peercert=None)
    assert out.status == 503 and "no answer within 0.05s" in out.message


async def test_a_client_certificate_needs_no_token_review() -> None:
    api = ReviewAPI()
    api.grants.add(("system:monitoring", "get", "/metrics"))
    auth = make_auth(api, Clock())
    cert = {"subject": ((("commonName", "scraper"),), (("organizationName", "system:monitoring"),))}
    out = await auth.check(method="GET", path="/metrics", authorization=None, peercert=cert)
    assert out.status == 200 and out.user is not None and out.user.name == "scraper"
    assert api.count(TOKEN_REVIEW_PATH) == 0 and api.count(ACCESS_REVIEW_PATH) == 1


async def test_review_counters_by_code() -> None:
    api = ReviewAPI()
    api.tokens["t"] = ("u", [])
    registry = CollectorRegistry()
    auth = DelegatedAuth(api.post, registry=registry)
    await ask(auth, token="t")
    api.down = ConnectionRefusedError()
    await ask(auth, token="other")

    def value(name: str, code: str) -> float | None:
        return registry.get_sample_value(name, {"code": code})

    assert value("apiserver_delegated_authn_request_total", "201") == 1
    assert value("apiserver_delegated_authn_request_total", "<error>") == 1
    assert value("apiserver_delegated_authz_request_total", "201") == 1


# ---- TLS ------------------------------------------------------------------------------------
def _cert(
    cn: str, *, orgs: tuple[str, ...] = (), issuer: tuple[Any, x509.Name] | None = None
) -> tuple[Any, x509.Certificate]:
    key = ec.generate_private_key(ec.SECP256R1())
    attrs = [x509.NameAttribute(NameOID.COMMON_NAME, cn)]
    attrs += [x509.NameAttribute(NameOID.ORGANIZATION_NAME, o) for o in orgs]
    name = x509.Name(attrs)
    signer_key, issuer_name = issuer if issuer is not None else (key, name)
    now = datetime.datetime.now(datetime.UTC)
    builder = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(issuer_name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=issuer is None, path_length=None), critical=True)
    )
    return key, builder.sign(signer_key, hashes.SHA256())


def _pem(cert: x509.Certificate) -> str:
    return cert.public_bytes(serialization.Encoding.PEM).decode()


def _write_client(tmp: Path, name: str, key: Any, cert: x509.Certificate) -> tuple[str, str]:
    cert_path, key_path = tmp / f"{name}.crt", tmp / f"{name}.key"
    cert_path.write_text(_pem(cert))
    key_path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    return str(cert_path), str(key_path)


class _App:
    """What HealthServer's health handlers read of the scheduler."""

    elector = None
    leading = False

    def __init__(self) -> None:
        self.synced = asyncio.Event()
        self.synced.set()


@pytest.fixture
async def secure() -> AsyncIterator[tuple[HealthServer, ServingTLS, ReviewAPI]]:
    api = ReviewAPI()
    api.tokens.update(prom=("prom", []), nobody=("nobody", []))
    api.grants.add(("prom", "get", "/metrics"))
    api.grants.add(("ops", "get", "/metrics"))
    tls = ServingTLS(hosts=["localhost", "127.0.0.1"])
    registry = CollectorRegistry()
    server = HealthServer(
        _App(),  # type: ignore[arg-type]
        host="127.0.0.1",
        port=0,
        registry=registry,
        ssl_context=tls.context,
        auth=DelegatedAuth(api.post, registry=registry),
    )
    await server.start()
    try:
        yield server, tls, api
    finally:
        await server.stop()


def _client_ctx(tls: ServingTLS) -> ssl.SSLContext:
    ctx = ssl.create_default_context(cadata=tls.certificate_pem.decode())
    return ctx


async def _get(
    server: HealthServer, path: str, ctx: ssl.SSLContext, token: str | None = None
) -> tuple[int, str, dict[str, str]]:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    async with (
        aiohttp.ClientSession() as s,
        s.get(f"https://127.0.0.1:{server.port}{path}", ssl=ctx, headers=headers) as r,
    ):
        return r.status, await r.text(), dict(r.headers)


async def test_self_signed_https_serves_health_open_and_metrics_to_the_allowed(
    secure: tuple[HealthServer, ServingTLS, ReviewAPI],
) -> None:
    server, tls, _ = secure
    assert tls.self_signed and server.scheme == "https"
    ctx = _client_ctx(tls)  # verifies the generated certificate, hostname 127.0.0.1 included
    assert (await _get(server, "/readyz", ctx))[:2] == (200, "ok")
    status, body, headers = await _get(server, "/metrics", ctx)
    assert status == 401 and headers["WWW-Authenticate"].startswith("Bearer")
    status, body, _ = await _get(server, "/metrics", ctx, token="nobody")
    assert status == 403 and 'user "nobody" cannot get path "/metrics"' in body
    status, body, _ = await _get(server, "/metrics", ctx, token="prom")
    assert status == 200 and "apiserver_delegated_authn_request_total" in body
    # plain HTTP on the TLS port gets nothing
    with pytest.raises(aiohttp.ClientError):
        async with (
            aiohttp.ClientSession() as s,
            s.get(f"http://127.0.0.1:{server.port}/readyz") as r,
        ):
            await r.read()


async def test_client_certificates_signed_by_the_client_ca(
    secure: tuple[HealthServer, ServingTLS, ReviewAPI], tmp_path: Path
) -> None:
    server, tls, api = secure
    ca_key, ca = _cert("client-ca")
    other_key, other_ca = _cert("other-ca")
    key, cert = _cert("scraper", orgs=("ops",), issuer=(ca_key, ca.subject))
    rogue_key, rogue = _cert("scraper", orgs=("ops",), issuer=(other_key, other_ca.subject))
    assert tls.add_client_cas(_pem(ca) + "\n" + _pem(ca)) == 1  # duplicates counted once
    assert tls.add_client_cas(_pem(ca)) == 0

    ctx = _client_ctx(tls)
    ctx.load_cert_chain(*_write_client(tmp_path, "good", key, cert))
    status, _, _ = await _get(server, "/metrics", ctx)
    assert status == 200
    assert api.count(TOKEN_REVIEW_PATH) == 0
    (sar,) = [b for p, b in api.calls if p == ACCESS_REVIEW_PATH]
    assert sar["spec"]["user"] == "scraper" and sar["spec"]["groups"] == ["ops"]

    # a certificate from another CA does not get through the handshake
    bad = _client_ctx(tls)
    bad.load_cert_chain(*_write_client(tmp_path, "rogue", rogue_key, rogue))
    with pytest.raises(aiohttp.ClientError):
        await _get(server, "/metrics", bad)
    # no certificate at all still works with a token
    assert (await _get(server, "/metrics", _client_ctx(tls), token="prom"))[0] == 200


def test_certificate_files_and_pem_splitting(tmp_path: Path) -> None:
    key, cert = _cert("kscheduler.example")
    cert_file, key_file = _write_client(tmp_path, "serving", key, cert)
    tls = ServingTLS(cert_file=cert_file, key_file=key_file)
    assert not tls.self_signed
    assert tls.certificate_pem.decode() == _pem(cert)
    with pytest.raises(ssl.SSLError):
        ServingTLS(cert_file=cert_file, key_file=cert_file)
    two = _pem(cert) + "junk\n" + _pem(cert).replace("\n", "\r\n")
    assert len(split_pem_certificates(two)) == 2
    assert len(set(split_pem_certificates(two))) == 1


# ---- the cluster's client CA ----------------------------------------------------------------
async def test_client_ca_follows_the_configmap() -> None:
    from kscheduler.serving.tls import AUTH_CONFIGMAP_PATH, follow_client_ca

    _, ca1 = _cert("ca-1")
    _, ca2 = _cert("ca-2")
    answers: list[Any] = [
        ConnectionRefusedError("apiserver away"),  # tolerated, tried again
        {"data": {}},  # no client CA published yet
        {"data": {"client-ca-file": _pem(ca1)}},
        {"data": {"client-ca-file": _pem(ca1) + _pem(ca2)}},
    ]
    asked: list[str] = []
    tls = ServingTLS(hosts=["localhost"])
    assert tls.context.verify_mode == ssl.CERT_NONE  # no CA: certificates not requested

    async def get(path: str) -> Any:
        asked.append(path)
        answer = answers[min(len(asked), len(answers)) - 1]
        if isinstance(answer, BaseException):
            raise answer
        return answer

    task = asyncio.create_task(follow_client_ca(get, tls, interval=0.01))
    try:
        for _ in range(200):
            if len(tls.client_cas) == 2:
                break
            await asyncio.sleep(0.01)
    finally:
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
    assert set(asked) == {AUTH_CONFIGMAP_PATH} and len(asked) >= 4
    assert tls.client_cas == set(split_pem_certificates(_pem(ca1) + _pem(ca2)))
    assert tls.context.verify_mode == ssl.CERT_OPTIONAL


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (
            ["--tls-cert-file", "/nonexistent.crt", "--tls-private-key-file", "/nonexistent.key"],
            "kscheduler: --tls-cert-file/--tls-private-key-file: ",
        ),
        (["--client-ca-file", "/nonexistent-ca.crt"], "kscheduler: --client-ca-file: "),
        (["--client-ca-file", "/dev/null"], "kscheduler: --client-ca-file: no PEM certificate"),
    ],
    ids=["tls files", "missing client CA", "empty client CA"],
)
def test_unusable_tls_files_exit_2(
    flags: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    from kscheduler.cli import run_main

    assert run_main(flags) == 2
    assert capsys.readouterr().err.startswith(message)
