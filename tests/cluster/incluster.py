"""In-cluster API access: what a pod needs to call the API server as its ServiceAccount.

A real cluster gives every pod (unless `automountServiceAccountToken: false`) a token for its
ServiceAccount, the cluster's CA bundle and its namespace under
/var/run/secrets/kubernetes.io/serviceaccount, and KUBERNETES_SERVICE_HOST/PORT naming the API
server, which serves https only. Here:

- `tls_material(dir)` makes a CA and a server certificate for 127.0.0.1 (openssl; ECDSA P-256,
  valid two days), so the API server can serve https on a second port to pods, whose clients
  verify it with the CA exactly as on a real cluster (Python's default context, strict X.509
  checks included). Tests and kubectl keep the plain-http port.
- `TokenIssuer` gives a pod a bearer token that authenticates as
  `system:serviceaccount:<ns>:<name>` (groups system:serviceaccounts and
  system:serviceaccounts:<ns>) and is bound to that ServiceAccount object: it stops
  authenticating (401) once the ServiceAccount is deleted or replaced, as a bound token does.
  RBAC then authorizes the pod's requests as any user's (rbac.Authorizer).

The kubelet mounts the three files and sets the variables (kubelet.py, `InCluster`).
Approximation: the ServiceAccount admission plugin's `kube-api-access-*` projected volume is not
added to the pod spec; the kubelet mounts the same files itself, so the pod's view is the same
but `kubectl get pod -o yaml` does not list that volume. Likewise the root CA publisher's
`kube-root-ca.crt` ConfigMap is not stored; a configMap volume or projected source naming it
gets the CA bundle from the kubelet. The `default` ServiceAccount is not
stored: every namespace is taken to have one.
"""

from __future__ import annotations

import subprocess
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.cluster import rbac
from tests.cluster.errors import ApiError

_SERVER_EXT = (
    "subjectAltName=IP:127.0.0.1,DNS:kubernetes,DNS:kubernetes.default,"
    "DNS:kubernetes.default.svc\n"
    "basicConstraints=critical,CA:FALSE\n"
    "keyUsage=critical,digitalSignature\n"
    "extendedKeyUsage=serverAuth\n"
    "subjectKeyIdentifier=hash\n"
    "authorityKeyIdentifier=keyid\n"
)


@dataclass(frozen=True)
class TLS:
    ca: Path
    cert: Path
    key: Path


def tls_material(directory: Path) -> TLS:
    """A CA and a server certificate (127.0.0.1, kubernetes.default.svc) signed by it."""
    directory.mkdir(parents=True, exist_ok=True)
    ca, ca_key = directory / "ca.crt", directory / "ca.key"
    csr, cert, key = (
        directory / "apiserver.csr",
        directory / "apiserver.crt",
        directory / "apiserver.key",
    )
    ext = directory / "apiserver.ext"
    ext.write_text(_SERVER_EXT)
    ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]
    _openssl(
        "req", "-x509", *ec, "-keyout", ca_key, "-out", ca, "-days", "2",
        "-subj", "/CN=test-cluster-ca",
        "-addext", "basicConstraints=critical,CA:TRUE",
        "-addext", "keyUsage=critical,keyCertSign,cRLSign",
        "-addext", "subjectKeyIdentifier=hash",
    )  # fmt: skip
    _openssl("req", "-new", *ec, "-keyout", key, "-out", csr, "-subj", "/CN=kube-apiserver")
    _openssl(
        "x509", "-req", "-in", csr, "-CA", ca, "-CAkey", ca_key, "-CAcreateserial",
        "-out", cert, "-days", "2", "-extfile", ext,
    )  # fmt: skip
    return TLS(ca, cert, key)


def _openssl(*args: Any) -> None:
    subprocess.run(
        ["openssl", *(str(a) for a in args)], check=True, capture_output=True, timeout=60
    )


class TokenIssuer:
    """Tokens for ServiceAccounts, valid while that ServiceAccount exists (same uid)."""

    def __init__(self, store: Any, authenticator: rbac.Authenticator) -> None:
        self._store = store
        self._authenticator = authenticator

    def issue(self, namespace: str, name: str) -> str:
        """A token for ServiceAccount namespace/name; ApiError(404) when it does not exist
        (the `default` one always does)."""
        check: Callable[[], bool] | None = None
        if name != "default":
            uid = self._store.get("serviceaccounts", namespace, name)["metadata"]["uid"]

            def check() -> bool:
                try:
                    sa = self._store.get("serviceaccounts", namespace, name)
                except ApiError:
                    return False
                return bool(sa["metadata"]["uid"] == uid)

        _user, token = self._authenticator.add(*rbac.service_account(namespace, name), valid=check)
        return token


@dataclass(frozen=True)
class InCluster:
    """What the kubelet gives pods: the API server's https address, its CA, and tokens."""

    host: str
    port: int
    ca_pem: bytes
    issue: Callable[[str, str], str]
