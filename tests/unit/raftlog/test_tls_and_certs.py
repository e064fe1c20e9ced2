"""Generated certificates complete real TLS handshakes (trio SSLStream over memory streams): server auth by SAN, mTLS principals, node certificates as membership proof, and refusal of another CA's certificates."""

import os
import pathlib
import stat
import ssl

import pytest
import trio
import trio.testing
from cryptography import x509

from raftlog.base.certs import issue, new_ca, write_private_file
from raftlog.base.tls import (
    client_context,
    node_id_of_certificate,
    principal_of_certificate,
    server_context,
)


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    root = tmp_path_factory.mktemp("pki")
    ca = new_ca("test cluster")
    other_ca = new_ca("another cluster")
    files = {}

    def save(name, pair):
        write_private_file(root / f"{name}.key", pair.key)
        (root / f"{name}.pem").write_bytes(pair.cert)
        files[name] = (str(root / f"{name}.pem"), str(root / f"{name}.key"))

    save("ca", ca)
    save("other-ca", other_ca)
    save("node1", issue(ca, "node-1", kind="node", hosts=["127.0.0.1", "broker1.test"]))
    save("alice", issue(ca, "alice", kind="user"))
    save("stranger", issue(other_ca, "node-2", kind="node", hosts=["127.0.0.1"]))
    return files


async def handshake(server_ctx, client_ctx, server_hostname="127.0.0.1"):
    """Both sides' handshake results: (server SSLStream or exception, client or exception)."""
    left, right = trio.testing.memory_stream_pair()
    server = trio.SSLStream(left, server_ctx, server_side=True)
    client = trio.SSLStream(right, client_ctx, server_hostname=server_hostname)
    results = {}

    async def run(name, stream):
        try:
            with trio.fail_after(10):
                await stream.do_handshake()
            results[name] = stream
        except (trio.BrokenResourceError, ssl.SSLError) as exc:
            results[name] = exc
            await trio.aclose_forcefully(stream)

    async with trio.open_nursery() as nursery:
        nursery.start_soon(run, "server", server)
        nursery.start_soon(run, "client", client)
    return results["server"], results["client"]


def node_server(pki, client_auth="optional"):
    cert, key = pki["node1"]
    return server_context(cert_file=cert, key_file=key, ca_file=pki["ca"][0], client_auth=client_auth)


async def test_client_verifies_the_node_by_ca_and_san(pki):
    server, client = await handshake(node_server(pki), client_context(ca_file=pki["ca"][0]))
    assert isinstance(client, trio.SSLStream) and isinstance(server, trio.SSLStream)
    assert server.getpeercert() is None  # no client certificate: SASL will name the principal
    for name in ("broker1.test", "localhost"):
        _, ok = await handshake(node_server(pki), client_context(ca_file=pki["ca"][0]), server_hostname=name)
        assert isinstance(ok, trio.SSLStream)


async def test_client_refuses_a_name_not_in_the_sans(pki):
    _, client = await handshake(node_server(pki), client_context(ca_file=pki["ca"][0]), server_hostname="evil.test")
    assert isinstance(client, Exception)
    # ... unless told not to check names (ssl.endpoint.identification.algorithm=none)
    _, client = await handshake(
        node_server(pki), client_context(ca_file=pki["ca"][0], check_hostname=False), server_hostname="evil.test"
    )
    assert isinstance(client, trio.SSLStream)


async def test_client_refuses_a_server_of_another_ca(pki):
    cert, key = pki["stranger"]
    _, client = await handshake(server_context(cert_file=cert, key_file=key), client_context(ca_file=pki["ca"][0]))
    assert isinstance(client, Exception)


async def test_mtls_user_principal(pki):
    cert, key = pki["alice"]
    server, client = await handshake(node_server(pki), client_context(ca_file=pki["ca"][0], cert_file=cert, key_file=key))
    assert isinstance(server, trio.SSLStream)
    peer = server.getpeercert()
    assert principal_of_certificate(peer) == "User:alice"
    assert node_id_of_certificate(peer) is None  # a user certificate opens no peer door


async def test_node_certificate_proves_membership(pki):
    cert, key = pki["node1"]
    server, _ = await handshake(
        node_server(pki, "required"), client_context(ca_file=pki["ca"][0], cert_file=cert, key_file=key)
    )
    assert node_id_of_certificate(server.getpeercert()) == 1


async def test_client_certificate_from_another_ca_is_refused(pki):
    cert, key = pki["stranger"]
    server, _ = await handshake(
        node_server(pki, "optional"), client_context(ca_file=pki["ca"][0], cert_file=cert, key_file=key)
    )
    assert isinstance(server, Exception)


async def test_required_client_certificate(pki):
    server, _ = await handshake(node_server(pki, "required"), client_context(ca_file=pki["ca"][0]))
    assert isinstance(server, Exception)


async def test_plaintext_to_a_tls_port_fails_the_handshake(pki):
    left, right = trio.testing.memory_stream_pair()
    server = trio.SSLStream(left, node_server(pki), server_side=True)

    async def plaintext_client():
        await right.send_all(b"\x00\x00\x00\x10" + b"\xa2" * 16)  # a native frame, not a ClientHello

    async with trio.open_nursery() as nursery:
        nursery.start_soon(plaintext_client)
        with pytest.raises(trio.BrokenResourceError):
            with trio.fail_after(10):
                await server.do_handshake()


def test_certificate_contents(pki):
    cert = x509.load_pem_x509_certificate(pathlib.Path(pki["node1"][0]).read_bytes())
    sans = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert "broker1.test" in sans.get_values_for_type(x509.DNSName)
    assert "localhost" in sans.get_values_for_type(x509.DNSName)
    assert [str(ip) for ip in sans.get_values_for_type(x509.IPAddress)] == ["127.0.0.1"]
    ca = x509.load_pem_x509_certificate(pathlib.Path(pki["ca"][0]).read_bytes())
    assert ca.extensions.get_extension_for_class(x509.BasicConstraints).value.ca
    assert not cert.extensions.get_extension_for_class(x509.BasicConstraints).value.ca


def test_private_files_are_owner_only(tmp_path):
    path = tmp_path / "secret.key"
    path.write_bytes(b"old")
    os.chmod(path, 0o644)
    write_private_file(path, b"new")
    assert path.read_bytes() == b"new"
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    assert list(tmp_path.iterdir()) == [path]  # no temp file left


def test_node_id_of_certificate_needs_the_node_unit():
    fake = {"subject": ((("organizationalUnitName", "raftlog-user"),), (("commonName", "node-3"),))}
    assert node_id_of_certificate(fake) is None
    real = {"subject": ((("organizationalUnitName", "raftlog-node"),), (("commonName", "node-3"),))}
    assert node_id_of_certificate(real) == 3
    assert node_id_of_certificate({"subject": ((("organizationalUnitName", "raftlog-node"),), (("commonName", "node-x"),))}) is None
    assert principal_of_certificate(None) is None
