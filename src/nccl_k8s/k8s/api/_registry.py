"""An image tag's digest, asked of its registry (the OCI Distribution API), for `deploy` to pin
the images its pods run (issue 36: a tag can be moved; a digest names one content).

    HEAD /v2/<repository>/manifests/<tag>   ->   Docker-Content-Digest: sha256:<64 hex>

with the Accept types of an image index (multi-platform: the digest every node's runtime
resolves from) and of a single manifest. A registry that asks for a token (`401` with
`WWW-Authenticate: Bearer realm=...,service=...,scope=...`: Docker Hub, nvcr.io, public.ecr.aws,
Artifact Registry) gets an anonymous one from its realm: only what anyone may pull is pinned,
and no credential of the user's is sent anywhere. A registry that answers a HEAD without the
digest header is asked with GET, and the digest is the SHA-256 of the manifest's bytes (the
Distribution spec's definition). References are read as Docker reads them: no registry part
means Docker Hub (`registry-1.docker.io`, `library/` for one-word names); `localhost`, 127.0.0.0/8
and `::1` are spoken to over plain HTTP, as Docker treats them, every other host over HTTPS.
Sources: the OCI Distribution Specification v1.1 ("Pulling manifests", "Checking if content
exists"), and the Docker Registry token authentication spec (distribution/distribution,
docs/spec/auth/token.md).
"""

from __future__ import annotations

import dataclasses
import hashlib
import ipaddress
import re

import httpx2

MANIFEST_TYPES = (
    "application/vnd.oci.image.index.v1+json",
    "application/vnd.docker.distribution.manifest.list.v2+json",
    "application/vnd.oci.image.manifest.v1+json",
    "application/vnd.docker.distribution.manifest.v2+json",
)
#: The most of a manifest read when the registry's HEAD carried no digest (an index of every
#: platform is a few KB).
_MAX_MANIFEST = 4 << 20
_DIGEST = re.compile(r"sha256:[0-9a-f]{64}")
_CHALLENGE = re.compile(r'(\w+)="([^"]*)"')


class RegistryError(Exception):
    """The registry did not give the digest: one line saying why."""


@dataclasses.dataclass(frozen=True)
class ImageRef:
    """A tag reference split as Docker splits it."""

    host: str
    """The registry's host[:port] as spoken to (Docker Hub: registry-1.docker.io)."""
    repository: str
    tag: str

    @property
    def base_url(self) -> str:
        if self.host.startswith("["):  # [v6]:port
            name = self.host[1:].partition("]")[0]
        else:
            name = self.host.rsplit(":", 1)[0]
        return f"{'http' if _loopback(name) else 'https'}://{self.host}"


def _loopback(host: str) -> bool:
    host = host.strip("[]")
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def parse_ref(ref: str) -> ImageRef | None:
    """`ref` split into registry, repository and tag; None when it already names a digest."""
    if "@" in ref:
        return None
    first, _, rest = ref.partition("/")
    if rest and ("." in first or ":" in first or first == "localhost"):
        host, path = first, rest
    else:
        host, path = "docker.io", ref
    name, sep, tag = path.rpartition(":")
    if not sep or "/" in tag:
        name, tag = path, "latest"
    if host in ("docker.io", "index.docker.io"):
        host = "registry-1.docker.io"
        if "/" not in name:  # an official image: ubuntu is library/ubuntu
            name = f"library/{name}"
    return ImageRef(host=host, repository=name, tag=tag)


async def _token(http: httpx2.AsyncClient, challenge: str, ref: ImageRef) -> str:
    """An anonymous pull token from the realm a Bearer challenge names."""
    scheme, _, params = challenge.partition(" ")
    if scheme.lower() != "bearer":
        raise RegistryError(f"the registry asks for {scheme or 'credentials'} authentication")
    fields = dict(_CHALLENGE.findall(params))
    realm = fields.get("realm")
    if not realm:
        raise RegistryError("the registry's token challenge names no realm")
    query = {"scope": fields.get("scope") or f"repository:{ref.repository}:pull"}
    if fields.get("service"):
        query["service"] = fields["service"]
    resp = await http.get(realm, params=query)
    if resp.status_code != 200:
        raise RegistryError(f"no anonymous pull token ({resp.status_code} from {realm})")
    body = resp.json()
    token = body.get("token") or body.get("access_token") if isinstance(body, dict) else None
    if not isinstance(token, str) or not token:
        raise RegistryError(f"no token in the answer of {realm}")
    return token


async def digest_of(http: httpx2.AsyncClient, ref: ImageRef) -> str:
    """`sha256:<hex>` of the manifest (or index) `ref`'s tag names now; RegistryError says why
    not (the registry asks for credentials, has no such tag, cannot be reached)."""
    url = f"{ref.base_url}/v2/{ref.repository}/manifests/{ref.tag}"
    headers = {"Accept": ", ".join(MANIFEST_TYPES)}
    try:
        resp = await http.head(url, headers=headers)
        if resp.status_code == 401:
            token = await _token(http, resp.headers.get("www-authenticate", ""), ref)
            headers["Authorization"] = f"Bearer {token}"
            resp = await http.head(url, headers=headers)
        if resp.status_code == 401:
            raise RegistryError("the registry asks for credentials")
        if resp.status_code == 404:
            raise RegistryError(f"the registry has no tag {ref.tag} of {ref.repository}")
        if resp.status_code != 200:
            raise RegistryError(f"the registry answered {resp.status_code}")
        digest = resp.headers.get("docker-content-digest", "")
        if not digest:  # the header is optional: the digest is the manifest's own hash
            got = await http.get(url, headers=headers)
            if got.status_code != 200 or len(got.content) > _MAX_MANIFEST:
                raise RegistryError(f"the registry answered {got.status_code} to GET")
            digest = "sha256:" + hashlib.sha256(got.content).hexdigest()
    except httpx2.HTTPError as e:
        raise RegistryError(f"{type(e).__name__}: {e}" if str(e) else type(e).__name__) from e
    if not _DIGEST.fullmatch(digest):
        raise RegistryError(f"the registry's digest {digest[:80]!r} is not sha256:<64 hex>")
    return digest


async def digests(refs: list[str], *, timeout_s: float = 10.0) -> dict[str, str]:
    """For each tag reference, `sha256:<hex>` or, when its registry did not give it, the reason
    (RegistryError's line, prefixed `!`). Asked at once, each within `timeout_s`; proxies as
    the environment says (HTTPS_PROXY, NO_PROXY), as docker and kubectl follow them."""
    import asyncio

    async def one(http: httpx2.AsyncClient, ref: str) -> str:
        parsed = parse_ref(ref)
        if parsed is None:
            return "!it names a digest already"
        try:
            return await asyncio.wait_for(digest_of(http, parsed), timeout_s)
        except RegistryError as e:
            return f"!{e}"
        except TimeoutError:
            return f"!{parsed.host} did not answer within {timeout_s:g} s"

    async with httpx2.AsyncClient(timeout=timeout_s, follow_redirects=True) as http:
        got = await asyncio.gather(*(one(http, r) for r in refs))
    return dict(zip(refs, got, strict=True))


__all__ = ["MANIFEST_TYPES", "ImageRef", "RegistryError", "digest_of", "digests", "parse_ref"]
