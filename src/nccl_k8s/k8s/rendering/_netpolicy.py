"""The run's NetworkPolicy (`--network-policy auto|on|off`, auto by default): into the run's pods
only the run's own pods (every port: the rendezvous store and NCCL's ephemeral ports) and, on
the metrics port, the peers of `--metrics-from` (every namespace's pods when none is given).
Not rendered with host networking, where policies do not apply (`on` refuses it). Pure."""

from __future__ import annotations

from nccl_k8s.errors import UsageError
from nccl_k8s.k8s.api._types import Obj
from nccl_k8s.k8s.rendering._meta import object_metadata, selector_labels
from nccl_k8s.k8s.rendering._presets import uses_host_network
from nccl_k8s.spec import LABEL_COMPONENT, NETWORK_POLICY, RunSpec


def _peer(key: str, value: str) -> Obj:
    """A --metrics-from value as a NetworkPolicy peer: `namespace=NAME` is every pod of that
    namespace (by the label the API server sets on every namespace, Kubernetes 1.22+), any
    other KEY=VALUE the pods of the run's namespace with that label."""
    if key == "namespace":
        return {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": value}}}
    return {"podSelector": {"matchLabels": {key: value}}}


def renders_network_policy(spec: RunSpec) -> bool:
    """Whether the run has a NetworkPolicy: `on`, or `auto` (the default) with the pods on the
    pod network. `on` with host networking is refused (by network_policy)."""
    if spec.network_policy == "on":
        return True
    return spec.network_policy == "auto" and not uses_host_network(spec)


#: --metrics-from not given: the metrics port is open to every namespace's pods, as without a
#: policy (an empty namespaceSelector selects every namespace): who scrapes is the cluster's
#: choice, and the metrics carry no secret; the rendezvous store and NCCL's ports stay closed.
_ANY_NAMESPACE: Obj = {"namespaceSelector": {}}


def network_policy(spec: RunSpec) -> Obj:
    """The run's NetworkPolicy: ingress to its pods from its own pods on every port (the
    rendezvous store, NCCL's bootstrap and data connections on ephemeral ports) and, on the
    metrics port, from the --metrics-from peers (every namespace when none); egress is left
    alone (the pods pull nothing through it, but DNS and the API server for --adopt must stay
    reachable). A policy selects no pod on the node's network, so `on` with host networking is
    refused rather than rendered as a protection it is not."""
    if uses_host_network(spec):
        raise UsageError(
            "--network-policy on with host networking (--security host, or a platform on the "
            "node's network such as oke-roce): a NetworkPolicy does not apply to pods on the "
            "node's network; expected a pod-network run, or --network-policy auto or off",
            key="--network-policy",
        )
    pods = {"podSelector": {"matchLabels": selector_labels(spec)}}
    ingress: list[Obj] = [{"from": [pods]}]
    if spec.metrics_port:
        ingress.append(
            {
                "from": [_peer(k, v) for k, v in spec.metrics_from] or [_ANY_NAMESPACE],
                "ports": [{"protocol": "TCP", "port": spec.metrics_port}],
            }
        )
    return {
        "apiVersion": NETWORK_POLICY.api_version,
        "kind": NETWORK_POLICY.kind,
        "metadata": object_metadata(spec, spec.run_id, **{LABEL_COMPONENT: "network-policy"}),
        "spec": {
            "podSelector": {"matchLabels": selector_labels(spec)},
            "policyTypes": ["Ingress"],
            "ingress": ingress,
        },
    }


__all__ = ["network_policy", "renders_network_policy"]
