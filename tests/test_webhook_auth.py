"""Who may learn more than allow/deny from the webhook port (issue #26 point 8): a review's
message and warnings name a queue's topology and its levels, so they go only to a client with a
certificate the client CA signed (the API server, through its admission configuration); with
the requirement on, other clients are refused at the TLS handshake; authenticated clients keep
room under the connection cap. Loopback only."""

from __future__ import annotations

import asyncio
import contextlib
import json
import ssl
from collections.abc import AsyncIterator, Mapping
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from tests.kit import review_for
from topogate.admission.podsets import Catalog, build_catalog
from topogate.api.errors import InputError
from topogate.cli import main
from topogate.webhooks.certs import issue, make_ca
from topogate.webhooks.options import ClientAuth, Limits
from topogate.webhooks.server import Running, ServingCertificate, running

# A job whose level is not one of its queue's topology: the refusal names topology and levels.
JOB: dict[str, Any] = {
    "apiVersion": "batch/v1",
    "kind": "Job",
    "metadata": {"name": "j", "namespace": "ml", "labels": {"kueue.x-k8s.io/queue-name": "q"}},
    "spec": {
        "template": {
            "metadata": {
                "annotations": {
                    "kueue.x-k8s.io/podset-required-topology": "example.com/zone",
                    "kueue.x-k8s.io/podset-required-topolgy": "typo",  # a warning
                }
            },
            "spec": {"containers": [{"name": "c", "image": "x"}], "restartPolicy": "Never"},
        }
    },
}
REVIEW = json.dumps(review_for(JOB, "Job", "batch", namespace="ml")).encode()


class View:
    """The queue ml/q -> ClusterQueue cq -> flavor tas -> topology secret-dc."""

    def __init__(self) -> None:
        quota = {"name": "cpu", "nominalQuota": 8}
        cluster_queue = {
            "metadata": {"name": "cq"},
            "spec": {
                "resourceGroups": [
                    {
                        "coveredResources": ["cpu"],
                        "flavors": [{"name": "tas", "resources": [quota]}],
                    }
                ]
            },
        }
        local = {"metadata": {"name": "q", "namespace": "ml"}, "spec": {"clusterQueue": "cq"}}
        flavor = {
            "metadata": {"name": "tas"},
            "spec": {"nodeLabels": {"pool": "gpu"}, "topologyName": "secret-dc"},
        }
        topology = {
            "metadata": {"name": "secret-dc"},
            "spec": {"levels": [{"nodeLabel": "secret.example.com/rack"}]},
        }
        self.catalog, _ = build_catalog([cluster_queue], [local], [flavor], [topology], None)

    def catalog_for(self, namespace: str, queue: str) -> Catalog | None:
        return self.catalog

    def hypernodes(self) -> list[Mapping[str, Any]] | None:
        return None


@contextlib.asynccontextmanager
async def _server(
    directory: Path, client_auth: ClientAuth, limits: Limits | None = None
) -> AsyncIterator[Running]:
    certificate = ServingCertificate.prepare(directory, ["localhost"], ["127.0.0.1"], client_auth)
    async with running("127.0.0.1", 0, certificate, View(), limits=limits) as served:
        yield served


@pytest.fixture
def pki(tmp_path: Path) -> dict[str, Path]:
    """The client CA, a client certificate it signed, and one from another CA."""
    ca, other = make_ca("webhook-clients"), make_ca("someone-else")
    ca.write(tmp_path / "client-ca.crt", tmp_path / "client-ca.key")
    issue(ca, "kube-apiserver", client=True).write(tmp_path / "api.crt", tmp_path / "api.key")
    issue(other, "kube-apiserver", client=True).write(tmp_path / "x.crt", tmp_path / "x.key")
    (tmp_path / "serving").mkdir()
    return {
        "ca": tmp_path / "client-ca.crt",
        "serving": tmp_path / "serving",
        "api": tmp_path / "api",
        "other": tmp_path / "x",
    }


def _context(pki: dict[str, Path], client: str | None) -> ssl.SSLContext:
    context = ssl.create_default_context(cafile=str(pki["serving"] / "ca.crt"))
    if client is not None:
        context.load_cert_chain(f"{pki[client]}.crt", f"{pki[client]}.key")
    return context


async def _validate(port: int, context: ssl.SSLContext) -> dict[str, Any]:
    connector = aiohttp.TCPConnector(ssl=context, force_close=True)
    async with (
        aiohttp.ClientSession(connector=connector) as session,
        session.post(f"https://127.0.0.1:{port}/validate", data=REVIEW) as response,
    ):
        assert response.status == 200
        answer: dict[str, Any] = (await response.json())["response"]
        return answer


async def test_only_an_authenticated_client_learns_the_queue_s_topology(
    pki: dict[str, Path],
) -> None:
    async with _server(pki["serving"], ClientAuth(ca=str(pki["ca"]))) as served:
        known = await _validate(served.site.port, _context(pki, "api"))
        anonymous = await _validate(served.site.port, _context(pki, None))
        # A certificate is verified when presented, required or not: another CA's is refused.
        with pytest.raises((aiohttp.ClientError, ssl.SSLError, ConnectionError)):
            await _validate(served.site.port, _context(pki, "other"))
    assert known["allowed"] is False
    assert "topology 'secret-dc'" in known["status"]["message"]
    assert "secret.example.com/rack" in known["status"]["message"]
    assert known["warnings"]
    assert anonymous == {"uid": known["uid"], "allowed": False}  # the verdict, nothing else


async def test_without_a_client_ca_every_client_gets_the_whole_answer(
    pki: dict[str, Path],
) -> None:
    # Without a CA nobody can be told apart; hiding every reason would leave the people who
    # submit jobs with "denied without explanation" on every install that has set none up.
    async with _server(pki["serving"], ClientAuth()) as served:
        answer = await _validate(served.site.port, _context(pki, None))
    assert answer["allowed"] is False
    assert "topology 'secret-dc'" in answer["status"]["message"]


async def test_anonymous_details_is_the_explicit_choice_to_tell_everyone(
    pki: dict[str, Path],
) -> None:
    auth = ClientAuth(ca=str(pki["ca"]), anonymous_details=True)
    async with _server(pki["serving"], auth) as served:
        answer = await _validate(served.site.port, _context(pki, None))
    assert "topology 'secret-dc'" in answer["status"]["message"]


async def test_with_the_requirement_on_other_clients_are_refused_at_the_handshake(
    pki: dict[str, Path],
) -> None:
    auth = ClientAuth(ca=str(pki["ca"]), required=True)
    async with _server(pki["serving"], auth) as served:
        port = served.site.port
        assert "secret-dc" in (await _validate(port, _context(pki, "api")))["status"]["message"]
        for client in (None, "other"):  # no certificate; one from another CA
            with pytest.raises((aiohttp.ClientError, ssl.SSLError, ConnectionError)):
                await _validate(port, _context(pki, client))


async def test_unauthenticated_clients_leave_room_for_the_api_server_under_the_cap(
    pki: dict[str, Path],
) -> None:
    """Cap 4: unauthenticated clients hold at most 3 connections once their handshake is
    done; newcomers take the place of the oldest of theirs, never the API server's."""
    limits = Limits(header_timeout=30.0, max_connections=4)
    async with _server(pki["serving"], ClientAuth(ca=str(pki["ca"])), limits) as served:
        port = served.site.port
        connector = aiohttp.TCPConnector(ssl=_context(pki, "api"), limit=1)
        async with aiohttp.ClientSession(connector=connector) as api:
            url = f"https://127.0.0.1:{port}/validate"

            async def review() -> dict[str, Any]:
                async with api.post(url, data=REVIEW) as response:
                    answer: dict[str, Any] = (await response.json())["response"]
                    return answer

            assert "secret-dc" in (await review())["status"]["message"]
            held = []
            for _ in range(10):
                held.append(
                    await asyncio.open_connection(
                        "127.0.0.1", port, ssl=_context(pki, None), server_hostname="127.0.0.1"
                    )
                )
                await asyncio.sleep(0.02)
            assert served.site.open_connections() <= limits.max_connections
            # The API server's keep-alive connection is still there, and still answered.
            assert "secret-dc" in (await review())["status"]["message"]
            assert connector._conns  # reused, not re-opened
            for _, writer in held:
                writer.transport.abort()
            await asyncio.sleep(0.05)


async def test_unauthenticated_requests_in_flight_cannot_take_the_last_quarter_of_the_cap(
    pki: dict[str, Path],
) -> None:
    """Connections handling a request are never closed to make room, so without a reserve
    four slow anonymous requests would lock the API server out of a cap of 4."""
    limits = Limits(header_timeout=30.0, body_timeout=30.0, max_connections=4)
    async with _server(pki["serving"], ClientAuth(ca=str(pki["ca"])), limits) as served:
        port = served.site.port
        head = (
            f"POST /validate HTTP/1.1\r\nHost: x\r\nContent-Length: {len(REVIEW)}\r\n\r\n"
        ).encode()
        slow = []
        for _ in range(limits.max_connections):  # headers and part of the body: in a handler
            _, writer = await asyncio.open_connection(
                "127.0.0.1", port, ssl=_context(pki, None), server_hostname="127.0.0.1"
            )
            writer.write(head + REVIEW[:10])
            await writer.drain()
            slow.append(writer)
            await asyncio.sleep(0.05)
        answer = await asyncio.wait_for(_validate(port, _context(pki, "api")), 5)
        assert "secret-dc" in answer["status"]["message"]
        for writer in slow:
            writer.transport.abort()
        await asyncio.sleep(0.05)


def test_requiring_a_client_certificate_without_its_ca_is_a_usage_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["webhook", "--cert-dir", str(tmp_path), "--port", "0", "--require-client-cert"]
    assert main(argv) == 2
    assert "client certificate can only be required with its CA" in capsys.readouterr().err


def test_an_unreadable_client_ca_names_the_file(tmp_path: Path) -> None:
    with pytest.raises(InputError, match=r"cannot read the client CA .*missing\.crt"):
        ServingCertificate.prepare(
            tmp_path, ["localhost"], [], ClientAuth(ca=str(tmp_path / "missing.crt"))
        )
