"""`nccl-k8s nodes history`: each node's verdicts and busbw over the recorded checks, and what
changed since its last good check. Registered in the `nodes` group (cli._doctor); one library
function (k8s.node_history) does the work, this module prints it.
"""

from __future__ import annotations

import json
from typing import Annotated

import typer

from nccl_k8s.cli._common import columns, handle_errors, out
from nccl_k8s.cli._options import (
    Context,
    Kubeconfig,
    Namespace,
    Output,
    client_settings,
    output_format,
)
from nccl_k8s.errors import UsageError
from nccl_k8s.spec import is_dns_subdomain

NodeOpt = Annotated[
    str | None,
    typer.Option("--node", metavar="NAME", help="Only this node.", show_default=False),
]


@handle_errors
def nodes_history_command(
    node: NodeOpt = None,
    output: Output = "text",
    namespace: Namespace = None,
    context: Context = None,
    kubeconfig: Kubeconfig = None,
) -> None:
    """Each node's verdicts and busbw over the checks `nodes check --label` recorded in the
    namespace (configmap nccl-k8s-node-history, the newest 120 checks at most), newest first,
    and what changed since its last good check. Reads one ConfigMap; changes nothing."""
    from nccl_k8s import k8s

    fmt = output_format(output)
    if node is not None and not is_dns_subdomain(node):  # a node's name: a DNS subdomain
        raise UsageError(
            f"--node {node!r}: expected a node name (lowercase letters, digits, '-' and '.')",
            key="--node",
        )
    got = k8s.node_history(client=client_settings(kubeconfig, context), namespace=namespace, node=node)  # fmt: skip
    if fmt == "json":
        typer.echo(json.dumps(got.to_dict(), indent=1))
        return
    out.file.write(f"{got.checks} checks recorded in namespace {got.namespace}\n")
    for t in got.nodes:
        out.file.write(f"\n{t.node}: {t.change}\n")
        rows = [("  CHECKED AT", "VERDICT", "BUSBW GB/S", "RUN")]
        for e in t.entries:
            bw = "-" if e.busbw is None else f"{e.busbw:.1f}"
            rows.append((f"  {e.when}", e.verdict, bw, e.run_id))
        out.file.write(columns(rows, right=(2,)))
