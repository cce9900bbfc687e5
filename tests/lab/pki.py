"""The lab API server's TLS identity and the service-account files pods read.

The real scheduler reads pod annotations from ``https://$KUBERNETES_SERVICE_HOST:$KUBERNETES_SERVICE_PORT``
with peer verification against the service account's ``ca.crt`` (host-name verification off) and a bearer
token (docs/sut/annotations.md §api-access). The lab makes one self-signed
certificate (it is its own CA) for the API server's address and one random token, with the ``cryptography``
package that paramiko already needs.
"""

from __future__ import annotations

import datetime
import ipaddress
import secrets
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID


@dataclass(frozen=True)
class LabPki:
    """Paths of the lab's TLS material and the service-account token (a secret: never logged)."""

    cert: Path  # PEM certificate of the API server, also the CA pods trust (ca.crt)
    key: Path  # PEM private key, mode 0600
    token: str


def make_pki(directory: Path, address: str) -> LabPki:
    """Write a self-signed certificate for ``address`` (an IPv4 literal) and a token into ``directory``."""
    directory.mkdir(parents=True, exist_ok=True)
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "lab-kube-apiserver")])
    now = datetime.datetime.now(datetime.timezone.utc)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=30))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address(address)),
                                                    x509.DNSName("kubernetes.default.svc")]), critical=False)
        .sign(key, hashes.SHA256())
    )
    cert_path, key_path = directory / "ca.crt", directory / "apiserver.key"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.touch(mode=0o600)
    key_path.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                           serialization.NoEncryption()))
    token_path = directory / "token"
    token_path.touch(mode=0o600)
    token_path.write_text(secrets.token_urlsafe(32))
    return load_pki(directory)


def load_pki(directory: Path) -> LabPki:
    """The material :func:`make_pki` wrote into ``directory``."""
    return LabPki(directory / "ca.crt", directory / "apiserver.key", (directory / "token").read_text().strip())


def write_serviceaccount(directory: Path, token: str, ca_cert: Path, namespace: str) -> Path:
    """A pod's service-account directory (``token``, ``ca.crt``, ``namespace``), as the kubelet projects it."""
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "token").write_text(token)
    (directory / "ca.crt").write_bytes(ca_cert.read_bytes())
    (directory / "namespace").write_text(namespace)
    return directory
