"""`nccl-k8s rbac`: print the Role (and, when asked, the ClusterRoles) a user of the tool needs,
with their bindings. The rules come from the library's permissions table; nothing is sent to a
cluster."""

from __future__ import annotations

import json
from typing import Annotated

import typer

from nccl_k8s.cli._common import Command, handle_errors, out
from nccl_k8s.errors import UsageError

ClusterReadsFlag = Annotated[
    bool,
    typer.Option(
        "--cluster-reads",
        help="Also a ClusterRole to read nodes (doctor, nodes check, doctor --run, bundle) "
        "and, for doctor --scheduler/--gang, pods and Leases of every namespace.",
    ),
]
CreateNamespaceFlag = Annotated[
    bool,
    typer.Option(
        "--create-namespace",
        help="Also a ClusterRole to create namespaces (deploy --create-namespace); nothing else "
        "cluster-wide: apply the Role and RoleBinding in the new namespace once it exists.",
    ),
]
RenderApplyFlag = Annotated[
    bool,
    typer.Option(
        "--render-apply",
        help="Also, in the Role, what `render | kubectl apply -f -` sends beyond deploy: get on "
        "every kind, and create/patch of a rendered run's ServiceAccount, Role and RoleBinding.",
    ),
]
LabelNodesFlag = Annotated[
    bool,
    typer.Option(
        "--label-nodes",
        help="Also a ClusterRole for nodes check --label/--taint, and a ValidatingAdmissionPolicy "
        "(Kubernetes 1.30+) that limits the user's node patches to its label and taint.",
    ),
]
RemoveScheduleFlag = Annotated[
    bool,
    typer.Option(
        "--remove-schedule",
        help="Also what cleanup --schedule NAME sends: CronJobs list and delete in the Role, "
        "and a ClusterRole to list and delete a schedule's ClusterRole, ClusterRoleBinding and "
        "node admission policy (cluster-scoped objects).",
    ),
]
UserFlag = Annotated[
    str | None,
    typer.Option(
        "--user",
        metavar="NAME",
        help="Grant a user (as the API server names it).",
        show_default=False,
    ),
]
ServiceAccountFlag = Annotated[
    str | None,
    typer.Option(
        "--service-account",
        metavar="[NS/]NAME",
        help="Grant a ServiceAccount (in -n's namespace unless NS/ is given).",
        show_default=False,
    ),
]


@handle_errors
def rbac_command(
    namespace: Annotated[
        str | None,
        typer.Option(
            "--namespace",
            "-n",
            metavar="NAME",
            help="The namespace the runs go to: the Role and its binding are made there.",
            show_default=False,
        ),
    ] = None,
    user: UserFlag = None,
    group: Annotated[
        str | None,
        typer.Option("--group", metavar="NAME", help="Grant a group.", show_default=False),
    ] = None,
    service_account: ServiceAccountFlag = None,
    render_apply: RenderApplyFlag = False,
    cluster_reads: ClusterReadsFlag = False,
    create_namespace: CreateNamespaceFlag = False,
    label_nodes: LabelNodesFlag = False,
    remove_schedule: RemoveScheduleFlag = False,
    output: Annotated[
        str, typer.Option("--output", "-o", metavar="yaml|json", help="Output format.")
    ] = "yaml",
) -> None:
    """Print what a cluster admin grants a user of nccl-k8s: a Role with exactly the verbs
    deploy, wait, status, list, logs, results, cleanup, bundle and doctor send in one namespace,
    and its RoleBinding; what `kubectl apply` of render's output needs and the cluster-scoped
    parts only when asked. Apply it with `kubectl apply
    -f -`; `doctor` then checks it (SelfSubjectAccessReview)."""
    from nccl_k8s import k8s

    if output not in ("yaml", "json"):
        raise UsageError(f'--output "{output}": expected yaml or json', key="--output")
    if namespace is None:
        raise UsageError(
            "rbac: -n NAMESPACE is required: the Role is granted in one namespace",
            key="--namespace",
        )
    subject = k8s.subject_of(namespace, user=user, group=group, service_account=service_account)
    features = ["run"]
    for asked, feature in (
        (render_apply, "render-apply"),
        (cluster_reads, "cluster-reads"),
        (create_namespace, "create-namespace"),
        (label_nodes, "label-nodes"),
        (remove_schedule, "remove-schedule"),
    ):
        if asked:
            features.append(feature)
    objs = k8s.rbac_objects(namespace, subject, features=tuple(features))  # type: ignore[arg-type]
    if output == "json":
        out.file.write(
            json.dumps({"apiVersion": "v1", "kind": "List", "items": objs}, indent=2) + "\n"
        )
    else:
        out.file.write(k8s.rbac_text(objs))


def register(app: typer.Typer) -> None:
    app.command("rbac", cls=Command)(rbac_command)
