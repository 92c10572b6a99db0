"""A real TLS gateway on 127.0.0.1 for the verify tests, with a CA made for the test.

The CA and the server certificate are generated with `cryptography`, as cert-manager's CA issuer
would sign the stack's Gateway certificate; the server is Python's own HTTPS stack, which checks
nothing about the client and records the Authorization header of every request it forwards.
"""

from __future__ import annotations

import datetime
import http.server
import ipaddress
import ssl
import threading
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID


def _name(common_name: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])


class CertificateAuthority:
    """A self-signed CA (as the stack's bootstrap issuer makes) and a certificate it signs for 127.0.0.1."""

    def __init__(self, directory: Path, name: str = "test CA"):
        now = datetime.datetime.now(datetime.timezone.utc)
        self.key = ec.generate_private_key(ec.SECP256R1())
        self.certificate = (
            x509.CertificateBuilder().subject_name(_name(name)).issuer_name(_name(name))
            .public_key(self.key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5)).not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True,
                                         content_commitment=False, key_encipherment=False, data_encipherment=False,
                                         key_agreement=False, encipher_only=False, decipher_only=False), critical=True)
            .sign(self.key, hashes.SHA256()))
        self.directory = directory
        self.ca_file = directory / f"{name.replace(' ', '-')}.pem"
        self.ca_file.write_bytes(self.certificate.public_bytes(serialization.Encoding.PEM))

    def server_files(self) -> tuple[Path, Path]:
        """A server certificate for 127.0.0.1 and localhost, and its key, as PEM files."""
        now = datetime.datetime.now(datetime.timezone.utc)
        key = ec.generate_private_key(ec.SECP256R1())
        certificate = (
            x509.CertificateBuilder().subject_name(_name("gateway")).issuer_name(self.certificate.subject)
            .public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5)).not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(x509.SubjectAlternativeName([x509.DNSName("localhost"),
                                                        x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
                           critical=False)
            .add_extension(x509.ExtendedKeyUsage([x509.oid.ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
            .sign(self.key, hashes.SHA256()))
        cert_file, key_file = self.directory / "gateway.pem", self.directory / "gateway-key.pem"
        cert_file.write_bytes(certificate.public_bytes(serialization.Encoding.PEM))
        key_file.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                               serialization.NoEncryption()))
        return cert_file, key_file


class TlsGateway:
    """HTTPS on 127.0.0.1 with a certificate from `authority`: every POST whose Authorization is
    `Bearer <token>` goes on to the pod `choose(n)` names; any other is refused 401, as a gateway
    with gateway.jwt refuses it. `authorizations` lists what each request carried."""

    def __init__(self, authority: CertificateAuthority, pods: dict, choose: Callable[[int], str], token: str):
        self.authorizations: list[str | None] = []
        gateway = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                gateway.authorizations.append(self.headers.get("Authorization"))
                if self.headers.get("Authorization") != f"Bearer {token}":
                    self._answer(401, b'{"error": "Jwt is missing"}')
                    return
                pod = pods[choose(len(gateway.authorizations))]
                upstream = urllib.request.Request(pod.url + self.path, data=body, method="POST",
                                                  headers={"Content-Type": "application/json"})
                try:
                    with urllib.request.urlopen(upstream, timeout=30) as response:
                        self._answer(response.status, response.read())
                except urllib.error.HTTPError as error:
                    self._answer(error.code, error.read())

            def _answer(self, status: int, data: bytes) -> None:
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args) -> None:
                pass

        cert_file, key_file = authority.server_files()
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(cert_file, key_file)
        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.socket = context.wrap_socket(self.server.socket, server_side=True)
        # A short poll: shutdown() waits for the serving loop to notice it.
        self.thread = threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)

    @property
    def url(self) -> str:
        return f"https://127.0.0.1:{self.server.server_address[1]}"

    def start(self) -> TlsGateway:
        self.thread.start()
        return self

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()
