"""The run's NetworkPolicy (`--network-policy`): into the run's pods only the run's own pods
(every port: the rendezvous store and NCCL's ephemeral ports) and, on the metrics port, the
peers of `--metrics-from`. Refused with host networking, where policies do not apply. Pure."""

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


def network_policy(spec: RunSpec) -> Obj:
    """The run's NetworkPolicy (--network-policy): ingress to its pods from its own pods on
    every port (the rendezvous store, NCCL's bootstrap and data connections on ephemeral ports)
    and, on the metrics port, from the --metrics-from peers; egress is left alone (the pods pull
    nothing through it, but DNS and the API server for --adopt must stay reachable). A policy
    selects no pod on the node's network, so host networking is refused rather than rendered
    as a protection it is not."""
    if uses_host_network(spec):
        raise UsageError(
            "--network-policy with host networking (--security host, or a platform on the "
            "node's network such as oke-roce): a NetworkPolicy does not apply to pods on the "
            "node's network; expected a pod-network run, or no --network-policy",
            key="--network-policy",
        )
    pods = {"podSelector": {"matchLabels": selector_labels(spec)}}
    ingress: list[Obj] = [{"from": [pods]}]
    if spec.metrics_port and spec.metrics_from:
        ingress.append(
            {
                "from": [_peer(k, v) for k, v in spec.metrics_from],
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


__all__ = ["network_policy"]
