"""The secure port against a real apiserver: kscheduler, run as a user runs it,
serves HTTPS and has the apiserver review every request's token (TokenReview) and
permission (SubjectAccessReview, through RBAC on deploy/'s reader ClusterRoles).

Identities are ServiceAccounts with tokens from the TokenRequest API, as Prometheus
has; a client certificate signed by the cluster's client CA stands for certificate
users: kscheduler reads that CA from kube-system/extension-apiserver-authentication,
where the apiserver publishes it, as kube-scheduler does. The last test stops the
session's apiserver and starts it again.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import datetime
import ssl
import sys
import time
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import pytest_asyncio
import yaml
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID
from prometheus_client.parser import text_string_to_metric_families

from kscheduler.controlplane.builders import create_namespace, delete_namespace
from kscheduler.controlplane.harness import ControlPlane, ManagedProcess, free_ports
from kscheduler.controlplane.rest import ApiError, RestClient
from tests.integration.runner import wait_for

REPO = Path(__file__).resolve().parents[2]
READERS = REPO / "deploy" / "metrics-reader.yaml"
CONFIG = """\
apiVersion: kubescheduler.config.k8s.io/v1
kind: KubeSchedulerConfiguration
leaderElection:
  leaderElect: false
profiles:
- schedulerName: secure-serving
"""
CERT_GROUP = "secure-serving:scrapers"


@dataclass
class Served:
    port: int
    proc: ManagedProcess
    ns: str
    tokens: dict[str, str]
    client_ssl: dict[str, ssl.SSLContext]
    cluster_objects: list[str] = field(default_factory=list)

    @property
    def base(self) -> str:
        return f"https://127.0.0.1:{self.port}"

    async def get(
        self, path: str, *, token: str | None = None, cert: str | None = None
    ) -> tuple[int, str]:
        assert self.proc.alive(), self.proc.log_tail()
        headers = {"Authorization": f"Bearer {token}"} if token is not None else {}
        ctx: ssl.SSLContext | bool = self.client_ssl[cert] if cert else False
        async with (
            aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=15)) as s,
            s.get(self.base + path, headers=headers, ssl=ctx) as r,
        ):
            return r.status, await r.text()

    async def own_metric(self, name: str) -> float:
        """Sum of a counter's samples on kscheduler's /metrics (read with the scraper)."""
        status, text = await self.get("/metrics", token=self.tokens["scraper"])
        assert status == 200, text
        return sum(
            s.value
            for fam in text_string_to_metric_families(text)
            for s in fam.samples
            if s.name == name
        )


def _client_cert(tmp: Path, ca: tuple[Any, x509.Certificate], cn: str, org: str) -> ssl.SSLContext:
    ca_key, ca_cert = ca
    key = ec.generate_private_key(ec.SECP256R1())
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(
            x509.Name(
                [
                    x509.NameAttribute(NameOID.COMMON_NAME, cn),
                    x509.NameAttribute(NameOID.ORGANIZATION_NAME, org),
                ]
            )
        )
        .issuer_name(ca_cert.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(hours=1))
        .sign(ca_key, hashes.SHA256())
    )
    (tmp / f"{cn}.crt").write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    (tmp / f"{cn}.key").write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    ctx = ssl.create_default_context()
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    ctx.load_cert_chain(tmp / f"{cn}.crt", tmp / f"{cn}.key")
    return ctx


def _ca(cp: ControlPlane) -> tuple[Any, x509.Certificate]:
    """The harness apiserver's client CA (it publishes it in the ConfigMap)."""
    key = serialization.load_pem_private_key(cp.client_ca_key.read_bytes(), password=None)
    cert = x509.load_pem_x509_certificate(cp.client_ca_file.read_bytes())
    return key, cert


async def _token(rest: RestClient, ns: str, sa: str) -> str:
    await rest.post(f"/api/v1/namespaces/{ns}/serviceaccounts", {"metadata": {"name": sa}})
    minted = await rest.post(
        f"/api/v1/namespaces/{ns}/serviceaccounts/{sa}/token",
        {
            "apiVersion": "authentication.k8s.io/v1",
            "kind": "TokenRequest",
            "spec": {"expirationSeconds": 3600},
        },
    )
    return str(minted["status"]["token"])


@pytest_asyncio.fixture(scope="module")
async def served(
    control_plane: ControlPlane, rest: RestClient, tmp_path_factory: pytest.TempPathFactory
) -> AsyncIterator[Served]:
    tmp = tmp_path_factory.mktemp("secure-serving")
    ns = f"secure-{uuid.uuid4().hex[:8]}"
    await create_namespace(rest, ns)
    cluster_objects: list[str] = []
    proc: ManagedProcess | None = None
    try:
        # deploy/'s reader ClusterRoles, under names of this test's own
        roles = {}
        for doc in yaml.safe_load_all(READERS.read_text()):
            role = copy.deepcopy(doc)
            role["metadata"]["name"] = f"{doc['metadata']['name']}:{ns}"
            await rest.post("/apis/rbac.authorization.k8s.io/v1/clusterroles", role)
            cluster_objects.append(
                f"/apis/rbac.authorization.k8s.io/v1/clusterroles/{role['metadata']['name']}"
            )
            roles[doc["metadata"]["name"]] = role["metadata"]["name"]
        tokens = {
            sa: await _token(rest, ns, sa)
            for sa in ("scraper", "nobody", "operator", "late-scraper")
        }
        subjects = {
            "scraper": ("kscheduler:metrics-reader", "ServiceAccount", "scraper"),
            "late-scraper": ("kscheduler:metrics-reader", "ServiceAccount", "late-scraper"),
            "operator": ("kscheduler:debug-reader", "ServiceAccount", "operator"),
            "certs": ("kscheduler:metrics-reader", "Group", CERT_GROUP),
        }
        for key, (role, kind, name) in subjects.items():
            subject: dict[str, str] = {"kind": kind, "name": name}
            if kind == "ServiceAccount":
                subject["namespace"] = ns
            else:
                subject["apiGroup"] = "rbac.authorization.k8s.io"
            binding = {
                "metadata": {"name": f"secure-serving:{ns}:{key}"},
                "roleRef": {
                    "apiGroup": "rbac.authorization.k8s.io",
                    "kind": "ClusterRole",
                    "name": roles[role],
                },
                "subjects": [subject],
            }
            await rest.post("/apis/rbac.authorization.k8s.io/v1/clusterrolebindings", binding)
            cluster_objects.append(
                "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings/"
                + binding["metadata"]["name"]
            )

        ca = _ca(control_plane)
        client_ssl = {
            "member": _client_cert(tmp, ca, "cert-scraper", CERT_GROUP),
            "outsider": _client_cert(tmp, ca, "cert-outsider", "nobody-group"),
        }
        config = tmp / "config.yaml"
        config.write_text(CONFIG)
        (port,) = free_ports(1)
        proc = ManagedProcess(
            "kscheduler-secure",
            [
                sys.executable, "-m", "kscheduler",
                "--config", str(config),
                "--kubeconfig", str(control_plane.scheduler_kubeconfig),
                "--bind-address", "127.0.0.1",
                "--secure-port", str(port),
                "--log-format", "json",
            ],
            tmp / "kscheduler.log",
            cwd=REPO,
        )  # fmt: skip
        proc.start()
        served = Served(port, proc, ns, tokens, client_ssl, cluster_objects)

        async def ready() -> bool:
            with contextlib.suppress(aiohttp.ClientError, OSError):
                return (await served.get("/readyz"))[0] == 200
            return False

        await wait_for(ready, timeout=60, what="kscheduler's /readyz over HTTPS")

        # RBAC sees new bindings through its informers: wait for them to apply
        async def bound() -> bool:
            return (await served.get("/metrics", token=tokens["scraper"]))[0] == 200

        await wait_for(bound, timeout=30, what="the scraper's binding to take effect")
        yield served
    finally:
        if proc is not None:
            proc.stop()
        for path in reversed(cluster_objects):
            with contextlib.suppress(ApiError):
                await rest.delete(path)
        await delete_namespace(rest, ns)


async def test_health_paths_are_open(served: Served) -> None:
    for path in ("/healthz", "/livez", "/readyz"):
        assert await served.get(path) == (200, "ok"), path
        # a token nobody knows changes nothing there
        assert (await served.get(path, token="not-a-token"))[0] == 200


async def test_metrics_need_an_identity_allowed_to_get_them(served: Served) -> None:
    status, body = await served.get("/metrics")
    assert status == 401, body
    assert (await served.get("/metrics", token="not-a-token"))[0] == 401
    status, body = await served.get("/metrics", token=served.tokens["nobody"])
    assert status == 403, body
    assert f"system:serviceaccount:{served.ns}:nobody" in body
    status, body = await served.get("/metrics", token=served.tokens["scraper"])
    assert status == 200
    assert "scheduler_pending_pods" in body


async def test_debug_paths_are_refused_to_the_unauthorized(served: Served) -> None:
    for who in ("nobody", "scraper"):  # the scraper may read /metrics only
        for path in ("/debug/cache", "/debug/queue", "/debug/explain?pod=a/b"):
            status, body = await served.get(path, token=served.tokens[who])
            assert status == 403, (who, path, body)
            assert '"nodes"' not in body
    assert (await served.get("/debug/cache"))[0] == 401
    status, body = await served.get("/debug/cache", token=served.tokens["operator"])
    assert status == 200 and '"nodes"' in body, body
    # debug-reader is for /debug/* only
    assert (await served.get("/metrics", token=served.tokens["operator"]))[0] == 403


async def test_client_certificates_from_the_client_ca(served: Served) -> None:
    status, body = await served.get("/metrics", cert="member")
    assert status == 200, body
    status, body = await served.get("/metrics", cert="outsider")
    assert status == 403 and "cert-outsider" in body, body


async def test_review_load_stays_bounded_under_a_scrape_every_second(
    served: Served, rest: RestClient
) -> None:
    async def apiserver_reviews() -> float:
        text = await rest.get_text("/metrics")
        return sum(
            s.value
            for fam in text_string_to_metric_families(text)
            for s in fam.samples
            if s.name == "apiserver_request_total"
            and s.labels.get("resource") in ("tokenreviews", "subjectaccessreviews")
        )

    authn = "apiserver_delegated_authn_request_total"
    authz = "apiserver_delegated_authz_request_total"
    before = (await apiserver_reviews(), await served.own_metric(authn))
    before_authz = await served.own_metric(authz)
    began = time.monotonic()
    scrapes = 0
    while time.monotonic() - began < 12.0:
        status, _ = await served.get("/metrics", token=served.tokens["scraper"])
        assert status == 200
        scrapes += 1
        await asyncio.sleep(1.0)
    token_reviews = await served.own_metric(authn) - before[1]
    access_reviews = await served.own_metric(authz) - before_authz
    on_apiserver = await apiserver_reviews() - before[0]
    print(
        f"{scrapes} scrapes in 12s: {token_reviews:g} TokenReviews, "
        f"{access_reviews:g} SubjectAccessReviews ({on_apiserver:g} reviews on the apiserver)"
    )
    assert scrapes >= 10
    # answers live 10s: at most two rounds of reviews in 12s (plus the reads of
    # own_metric itself, which share the same token and path)
    assert 1 <= token_reviews <= 3, token_reviews
    assert 1 <= access_reviews <= 3, access_reviews
    assert on_apiserver <= token_reviews + access_reviews + 1


async def test_a_review_outage_fails_closed(served: Served, control_plane: ControlPlane) -> None:
    late = served.tokens["late-scraper"]  # never used yet: nothing cached for it
    await asyncio.to_thread(control_plane.stop_apiserver)
    try:
        status, body = await served.get("/metrics", token=late)
        assert status == 503, body
        assert "TokenReview failed" in body
        # certificates skip the TokenReview, not the SubjectAccessReview of a new path
        status, body = await served.get("/debug/queue", cert="member")
        assert status == 503 and "SubjectAccessReview failed" in body, body
        for path in ("/healthz", "/livez"):
            assert (await served.get(path))[0] == 200
    finally:
        await asyncio.to_thread(control_plane.start_apiserver)

    async def back() -> bool:
        return (await served.get("/metrics", token=late))[0] == 200

    await wait_for(back, timeout=30, what="reviews to work again after the apiserver returns")
