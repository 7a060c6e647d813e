"""The kubeconfig a test cluster hands to kubectl and the product's client: plain http, no
credentials (the admin), or a user's bearer token (`Cluster.add_user`), over http or, with the
cluster's CA (`ca_pem`), over the https listener pods use (kubectl sends a token only there).

Written atomically (temp file + rename) because a test may start kubectl the moment the cluster
says it is ready, and a half-written file would read as "no configuration".
"""

from __future__ import annotations

import base64
import os
from pathlib import Path

import yaml


def kubeconfig_dict(
    url: str,
    *,
    name: str,
    namespace: str = "default",
    token: str | None = None,
    ca_pem: bytes | None = None,
) -> dict[str, object]:
    cluster: dict[str, str] = {"server": url}
    if ca_pem is not None:
        cluster["certificate-authority-data"] = base64.b64encode(ca_pem).decode()
    return {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": name, "cluster": cluster}],
        "users": [{"name": name, "user": {"token": token} if token else {}}],
        "contexts": [
            {"name": name, "context": {"cluster": name, "user": name, "namespace": namespace}}
        ],
        "current-context": name,
        "preferences": {},
    }


def write_kubeconfig(
    path: Path,
    url: str,
    *,
    name: str,
    namespace: str = "default",
    token: str | None = None,
    ca_pem: bytes | None = None,
) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    tmp.write_text(
        yaml.safe_dump(
            kubeconfig_dict(url, name=name, namespace=namespace, token=token, ca_pem=ca_pem),
            sort_keys=False,
        )
    )
    os.chmod(tmp, 0o600)
    os.replace(tmp, path)
    return path
