"""Parsers of the values users type (names, labels, quantities, durations, tolerations), each
raising UsageError with one line that names the value and the expected form."""

from __future__ import annotations

import dataclasses
import json
import re
from collections.abc import Callable, Sequence
from fractions import Fraction
from typing import Literal, TypeVar, cast, get_args

from nccl_k8s.errors import UsageError

TaintEffect = Literal["NoSchedule", "PreferNoSchedule", "NoExecute"]
C = TypeVar("C", bound=str)

#: Environment variables the manifests set themselves; a user value would break the pod's wiring.
#: The pods' environment that the renderer (k8s.rendering: the run id, the node, the index, the
#: wrapper, the adoption plan, the metrics address's POD_IP, the zipapp's PYTHONPATH and digest) and the
#: in-pod launcher set themselves; `--env` may not name them (a second entry of a name would
#: make which one wins the kubelet's business). tests/test_env_names.py checks the renderer's.
RESERVED_ENV = frozenset(
    {
        "NCCL_K8S_RUN_ID",
        "NCCL_K8S_WRAPPER",
        "NCCL_K8S_ENGINE_SHA256",
        "NCCL_K8S_ADOPT",
        "NCCL_K8S_NODE_NAME",
        "NCCL_K8S_LAUNCHER_PID",
        "JOB_COMPLETION_INDEX",
        "POD_NAME",
        "POD_IP",
        "PYTHONPATH",
    }
)

_DNS1123_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_DNS1123_SUBDOMAIN = re.compile(
    r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$"
)
_LABEL_NAME = re.compile(r"^[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$")
LABEL_VALUE = re.compile(r"^([A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?)?$")
#: A shell variable name: the pods' commands run under `sh`, where any other name (Kubernetes
#: allows `-` and `.`) cannot be read and some platforms' scripts make `sh` exit 2.
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
# Kubernetes resource.Quantity, positive only: a decimal number with a binary (Ki..Ei) or
# decimal (m, k, M..E) suffix, or an exponent.
_QUANTITY = re.compile(r"^(\d+(\.\d*)?|\.\d+)([KMGTPE]i|[mkMGTPE]|[eE]\d+)?$")
_DURATION = re.compile(r"^(\d+)([smhd]?)$")
_DURATION_UNITS = {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86400}


@dataclasses.dataclass(frozen=True, kw_only=True)
class Toleration:
    """One pod toleration, parsed from kubectl's taint syntax."""

    key: str
    """Taint key; the toleration matches taints with this key."""
    operator: Literal["Equal", "Exists"]
    """Equal when a value was given (`key=value`), Exists otherwise (`key`, `key:Effect`)."""
    value: str | None = None
    """Taint value for Equal; None for Exists."""
    effect: TaintEffect | None = None
    """Only taints with this effect; None tolerates every effect of the key."""

    def to_dict(self) -> dict[str, str]:
        out: dict[str, str] = {"key": self.key, "operator": self.operator}
        if self.value is not None:
            out["value"] = self.value
        if self.effect is not None:
            out["effect"] = self.effect
        return out


def quote(value: object) -> str:
    """Quote a user value for a one-line message (escapes newlines and quotes)."""
    return json.dumps(str(value))


_LABEL_FORM = (
    "a DNS-1123 label (lowercase letters, digits and '-', starting and ending with a letter "
    "or digit, at most {n} characters)"
)


def dns_label(flag: str, value: str, *, max_len: int = 63) -> str:
    if len(value) > max_len or not _DNS1123_LABEL.match(value):
        raise UsageError(
            f"{flag} {quote(value)}: expected {_LABEL_FORM.format(n=max_len)}", key=flag
        )
    return value


def is_dns_subdomain(value: str) -> bool:
    """A DNS-1123 subdomain (RFC 1123): the form of a node's, namespace's or object's name."""
    return len(value) <= 253 and _DNS1123_SUBDOMAIN.match(value) is not None


def dns_subdomain(flag: str, value: str) -> str:
    if not is_dns_subdomain(value):
        raise UsageError(
            f"{flag} {quote(value)}: expected a DNS-1123 name (lowercase letters, digits, '-' and '.', "
            "at most 253 characters)",
            key=flag,
        )
    return value


def is_qualified_name(key: str) -> bool:
    """Kubernetes' qualified name: an optional DNS subdomain prefix and '/', then a name."""
    prefix, slash, name = key.rpartition("/")
    if slash and (not prefix or len(prefix) > 253 or not _DNS1123_SUBDOMAIN.match(prefix)):
        return False
    return 0 < len(name) <= 63 and bool(_LABEL_NAME.match(name))


def label_pairs(
    flag: str, items: Sequence[str], *, what: str, check_value: bool = True
) -> tuple[tuple[str, str], ...]:
    """Parse `key=value` labels, node-selector terms or (check_value=False) annotations."""
    pairs: dict[str, str] = {}
    for item in items:
        key, eq, value = item.partition("=")
        if not eq:
            raise UsageError(f"{flag} {quote(item)}: expected KEY=VALUE", key=flag)
        if not is_qualified_name(key):
            raise UsageError(
                f"{flag} {quote(item)}: {quote(key)} is not a valid {what} key (expected [prefix/]name, "
                "name of letters, digits, '-', '_', '.', at most 63 characters)",
                key=flag,
            )
        if check_value and (len(value) > 63 or not LABEL_VALUE.match(value)):
            raise UsageError(
                f"{flag} {quote(item)}: {quote(value)} is not a valid {what} value (expected at most 63 "
                "letters, digits, '-', '_', '.', starting and ending with a letter or digit)",
                key=flag,
            )
        pairs[key] = value
    return tuple(pairs.items())


def metrics_peers(flag: str, items: Sequence[str]) -> tuple[tuple[str, str], ...]:
    """--metrics-from: who may reach the metrics port, one peer per value: `namespace=NAME`
    (every pod of that namespace) or `KEY=VALUE` (the pods of the run's namespace with that
    label). Kept in order, each once."""
    peers: list[tuple[str, str]] = []
    for item in items:
        ((key, value),) = label_pairs(flag, [item], what="label")
        if key == "namespace":
            dns_label(flag, value)
        if (key, value) not in peers:
            peers.append((key, value))
    return tuple(peers)


def env_pairs(flag: str, items: Sequence[str]) -> tuple[tuple[str, str], ...]:
    pairs: dict[str, str] = {}
    for item in items:
        key, eq, value = item.partition("=")
        if not eq or not key:
            raise UsageError(f"{flag} {quote(item)}: expected KEY=VALUE", key=flag)
        if not _ENV_NAME.match(key):
            raise UsageError(
                f"{flag} {quote(item)}: {quote(key)} is not a valid variable name (expected a "
                "shell name: letters, digits and '_', not starting with a digit)",
                key=flag,
            )
        if key in RESERVED_ENV:
            raise UsageError(
                f"{flag} {quote(item)}: {key} is set by nccl-k8s to wire the pods together; "
                f"expected another name (reserved: {', '.join(sorted(RESERVED_ENV))})",
                key=flag,
            )
        pairs[key] = value
    return tuple(pairs.items())


def parse_toleration(text: str) -> Toleration:
    """kubectl taint syntax: `key=value:Effect`, `key:Effect`, `key=value`, `key`."""
    form = "expected key=value:Effect, key:Effect, key=value or key (Effect: NoSchedule, PreferNoSchedule, NoExecute)"
    body, colon, effect_text = text.rpartition(":") if ":" in text else (text, "", "")
    effect: TaintEffect | None = None
    if colon:
        if effect_text not in get_args(TaintEffect):
            raise UsageError(f"--toleration {quote(text)}: {form}", key="--toleration")
        effect = cast(TaintEffect, effect_text)
    key, eq, value = body.partition("=")
    if not is_qualified_name(key):
        raise UsageError(f"--toleration {quote(text)}: {form}", key="--toleration")
    if eq:
        if len(value) > 63 or not LABEL_VALUE.match(value):
            raise UsageError(f"--toleration {quote(text)}: {form}", key="--toleration")
        return Toleration(key=key, operator="Equal", value=value, effect=effect)
    return Toleration(key=key, operator="Exists", effect=effect)


def quantity(flag: str, value: str) -> str:
    match = _QUANTITY.match(value)
    if not match or float(match.group(1)) <= 0:
        raise UsageError(
            f"{flag} {quote(value)}: expected a positive Kubernetes quantity such as 500m, 4, 64Gi, 1G",
            key=flag,
        )
    return value


_SUFFIX: dict[str, Fraction] = {
    "": Fraction(1),
    "m": Fraction(1, 1000),
    "k": Fraction(10**3),
    "M": Fraction(10**6),
    "G": Fraction(10**9),
    "T": Fraction(10**12),
    "P": Fraction(10**15),
    "E": Fraction(10**18),
    **{s + "i": Fraction(1024 ** (i + 1)) for i, s in enumerate("KMGTPE")},
}


def quantity_value(value: str) -> Fraction:
    """The number a quantity already checked by `quantity` stands for: bytes for memory, cores
    for CPU (`500m` is 1/2, `8Gi` is 8 * 2**30, `1e3` is 1000)."""
    match = _QUANTITY.match(value)
    if match is None:
        raise ValueError(f"not a quantity: {value!r}")
    number, suffix = Fraction(match.group(1)), match.group(3) or ""
    if suffix[:1] in ("e", "E"):
        return number * Fraction(10) ** int(suffix[1:])
    return number * _SUFFIX[suffix]


def bytes_quantity(n: Fraction | int) -> str:
    """Bytes as the shortest binary quantity, rounded up to whole MiB where it is not exact
    (8Gi + 1G -> 9146Mi): 42949672960 -> 40Gi, 1536Mi stays 1536Mi."""
    mib = -(-Fraction(n) // _SUFFIX["Mi"])  # ceiling
    for suffix in ("Ei", "Pi", "Ti", "Gi"):
        per = _SUFFIX[suffix] / _SUFFIX["Mi"]
        if mib >= per and (mib / per).denominator == 1:
            return f"{int(mib / per)}{suffix}"
    return f"{int(mib)}Mi"


def cpu_quantity(n: Fraction | int) -> str:
    """Cores as Kubernetes writes them: whole cores plain, fractions in millicores."""
    n = Fraction(n)
    if n.denominator == 1:
        return str(int(n))
    return f"{int(n * 1000)}m"


def parse_duration(flag: str, value: str) -> int:
    """Whole seconds from `90`, `90s`, `15m`, `2h`, `1d`."""
    match = _DURATION.match(value.strip())
    if not match:
        raise UsageError(
            f"{flag} {quote(value)}: expected a duration such as 90, 90s, 15m, 2h, 1d", key=flag
        )
    return int(match.group(1)) * _DURATION_UNITS[match.group(2)]


def one_of(choices: tuple[C, ...]) -> Callable[[str, str], C]:
    """A parser of one of a closed set of words (a Literal's `get_args`)."""

    def parse(flag: str, value: str) -> C:
        for c in choices:
            if c == value:
                return c
        raise UsageError(f"{flag} {quote(value)}: expected one of {', '.join(choices)}", key=flag)

    return parse


def rdma_counts(flag: str, items: Sequence[str]) -> tuple[tuple[str, int], ...]:
    out: dict[str, int] = {}
    for item in items:
        name, eq, count_text = item.partition("=")
        if not eq or "/" not in name or not is_qualified_name(name):
            raise UsageError(
                f"{flag} {quote(item)}: expected NAME=COUNT with an extended resource name "
                "such as rdma/ib=1",
                key=flag,
            )
        if not count_text.isdigit() or int(count_text) < 1:
            raise UsageError(
                f"{flag} {quote(item)}: expected a whole count >= 1 after '='", key=flag
            )
        out[name] = int(count_text)
    return tuple(out.items())


def whole(flag: str, value: object, *, minimum: int = 1) -> int:
    """A whole number from the CLI (a string there, so a typo gets our one-line message)."""
    text = str(value).strip()
    try:
        number = int(text)
    except ValueError:
        raise UsageError(
            f"{flag} {quote(text)}: expected a whole number >= {minimum}", key=flag
        ) from None
    if number < minimum:
        raise UsageError(f"{flag} {number}: expected a whole number >= {minimum}", key=flag)
    return number


def toleration_list(flag: str, items: Sequence[str]) -> tuple[Toleration, ...]:
    return tuple(parse_toleration(t) for t in items)


def node_name_list(flag: str, items: Sequence[str]) -> tuple[str, ...]:
    """Node names (DNS-1123 subdomains), each once, in the order given."""
    return tuple(dict.fromkeys(dns_subdomain(flag, n) for n in items))


def attachment_names(flag: str, items: Sequence[str]) -> tuple[str, ...]:
    """Multus' short form, comma-separated: [namespace/]name[@interface], each part a DNS-1123
    label; each once, in the order given."""
    names: list[str] = []
    for item in items:
        for name in (n.strip() for n in item.split(",")):
            ns_name, _, interface = name.partition("@")
            namespace, slash, attachment = ns_name.rpartition("/")
            parts = [
                attachment,
                *([namespace] if slash else []),
                *([interface] if "@" in name else []),
            ]
            if not all(len(p) <= 63 and _DNS1123_LABEL.fullmatch(p) for p in parts):
                raise UsageError(
                    f"{flag} {quote(item)}: expected NetworkAttachmentDefinition names "
                    "[namespace/]name[@interface], comma-separated (DNS-1123 labels)",
                    key=flag,
                )
            names.append(name)
    return tuple(dict.fromkeys(names))


def extended_resource(flag: str, value: str) -> str:
    """An extended resource name such as nvidia.com/gpu (a qualified name with a prefix)."""
    if not is_qualified_name(value) or "/" not in value:
        raise UsageError(
            f"{flag} {quote(value)}: expected an extended resource name such as nvidia.com/gpu",
            key=flag,
        )
    return value


def queue_name(flag: str, value: str) -> str:
    """A Kueue LocalQueue name, which Kueue reads from a label value."""
    if len(value) > 63 or not LABEL_VALUE.match(value) or not value:
        raise UsageError(
            f"{flag} {quote(value)}: expected a Kueue LocalQueue name (a label value)", key=flag
        )
    return value


def duration_or_none(flag: str, value: str) -> int | None:
    """A duration in seconds where 0 means never (None)."""
    return parse_duration(flag, value) or None


def timeout(flag: str, value: str) -> int:
    """A duration in seconds of at least 1s: a timeout of 0 would fail everything at once."""
    s = parse_duration(flag, value)
    if s < 1:
        raise UsageError(f"{flag} {quote(value)}: expected at least 1s", key=flag)
    return s


#: The first port a process not root may bind. The benchmark container runs without
#: NET_BIND_SERVICE under the `socket` preset, and under host networking the node's own
#: `net.ipv4.ip_unprivileged_port_start` (1024 by default) applies and its services hold the low
#: ports: a pod's port below this either fails to bind or takes one the node uses.
UNPRIVILEGED_PORT_MIN = 1024


def pod_port(flag: str, value: str) -> int:
    """A port the pods listen on: 1024 to 65535 (UNPRIVILEGED_PORT_MIN), or 0 for none."""
    port = tcp_port(flag, value)
    if 0 < port < UNPRIVILEGED_PORT_MIN:
        raise UsageError(
            f"{flag} {quote(value)}: a privileged port (below {UNPRIVILEGED_PORT_MIN}); expected "
            f"{UNPRIVILEGED_PORT_MIN} to 65535, or 0 for none",
            key=flag,
        )
    return port


def tcp_port(flag: str, value: str) -> int:
    """A TCP port, or 0 for none."""
    try:
        port = int(value)
    except ValueError:
        port = -1
    if not 0 <= port <= 65535:
        raise UsageError(
            f"{flag} {quote(value)}: expected a TCP port, 1 to 65535, or 0 for none", key=flag
        )
    return port


def instance_type(flag: str, value: str) -> str:
    """A machine type as node.kubernetes.io/instance-type spells it (a label value)."""
    if not value or len(value) > 63 or any(not (c.isalnum() or c in "-_.") for c in value):
        raise UsageError(
            f"{flag} {quote(value)}: expected a machine type such as p5.48xlarge", key=flag
        )
    return value


def topology_keys(flag: str, value: str) -> str:
    """auto, none, or node label keys coarse to fine, comma-separated (kept as given)."""
    if value in ("auto", "none"):
        return value
    keys = value.split(",")
    bad = next((k for k in keys if not is_qualified_name(k)), None)
    if bad is not None:
        raise UsageError(
            f"{flag} {quote(value)}: {quote(bad)} is not a node label key; expected auto, none "
            "or label keys coarse to fine, e.g. cloud.google.com/gce-topology-block",
            key=flag,
        )
    return ",".join(dict.fromkeys(keys))
