"""`nccl-k8s nodes history`: each node's verdicts and busbw over the recorded checks, and what
changed since its last good check; `nccl-k8s nodes schedule`: the CronJob, ServiceAccount and RBAC
of a scheduled `nodes check`, printed. Registered in the `nodes` group (cli._doctor) beside
`nodes check`; library functions (k8s.node_history, k8s.schedule_objects) do the work, this module
prints it.
"""

from __future__ import annotations

import json
from typing import Annotated, Any

import typer

from nccl_k8s.cli._common import columns, handle_errors, out
from nccl_k8s.cli._options import (
    Context,
    Kubeconfig,
    Namespace,
    Output,
    client_settings,
    output_format,
    spec_of_params,
)
from nccl_k8s.errors import UsageError
from nccl_k8s.spec import is_dns_subdomain

#: The deploy options `nodes check` decides itself: every test is a 2-node Job.
NODES_CHECK_FIXED = {"nodes": "2", "workload": "job"}

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


@handle_errors
def nodes_schedule_command(
    ctx: typer.Context,
    check_args: Annotated[
        list[str] | None,
        typer.Argument(
            metavar="-- [NODES CHECK OPTIONS] [-- ENGINE FLAGS]",
            help="What the scheduled `nodes check` runs with (after `--`).",
            show_default=False,
        ),
    ] = None,
    namespace: Annotated[
        str | None,
        typer.Option(
            "--namespace",
            "-n",
            metavar="NAME",
            help="The namespace of the CronJob, its ServiceAccount and the check's test runs.",
            show_default=False,
        ),
    ] = None,
    cron: Annotated[
        str,
        typer.Option("--cron", metavar="SCHEDULE", help="When: five cron fields, or @daily."),
    ] = "0 */6 * * *",
    image: Annotated[
        str | None,
        typer.Option(
            "--image",
            metavar="IMAGE",
            help="The checker pod's image: one with nccl-k8s installed (the repository's "
            "Dockerfile builds it). The pair tests use the check's own --image.",
            show_default=False,
        ),
    ] = None,
    name: Annotated[
        str,
        typer.Option("--name", metavar="NAME", help="The CronJob's (and ServiceAccount's) name."),
    ] = "nccl-k8s-node-check",
    output: Annotated[
        str, typer.Option("--output", "-o", metavar="yaml|json", help="Output format.")
    ] = "yaml",
) -> None:
    """Print a CronJob that runs `nodes check` in the cluster on a schedule, with its
    ServiceAccount and exactly the Role and ClusterRole one check uses (and, with --label or
    --taint, the admission policy that limits its node updates to our keys). Nothing is
    applied: `kubectl apply -f -`; `cleanup --schedule NAME` removes it. See docs/fleet.md."""
    from nccl_k8s import k8s
    from nccl_k8s.spec import OPTION_BY_NAME

    if output not in ("yaml", "json"):
        raise UsageError(f'--output "{output}": expected yaml or json', key="--output")
    if namespace is None:
        raise UsageError("nodes schedule: -n NAMESPACE is required", key="--namespace")
    if image is None:
        raise UsageError(
            "nodes schedule: --image IMAGE is required: an image with nccl-k8s installed "
            "(docker build -t REGISTRY/nccl-k8s:TAG . from the repository)",
            key="--image",
        )
    image = OPTION_BY_NAME["image"].parse("--image", image)  # type: ignore[misc]
    cron = k8s.cron_arg(cron)
    args = tuple(check_args or ())
    s = k8s.scheduled_check(
        name, namespace, cron, image, args, _parse_as_check(ctx, args, namespace)
    )
    objs = k8s.schedule_objects(s)
    if output == "json":
        out.file.write(json.dumps({"apiVersion": "v1", "kind": "List", "items": objs}, indent=2))
        out.file.write("\n")
    else:
        out.file.write(k8s.schedule_text(s, objs))


def _parse_as_check(ctx: typer.Context, args: tuple[str, ...], namespace: str) -> Any:
    """The scheduled check's own options parsed as `nodes check` would, and its RunSpec: an
    unknown option or a bad value (a --push-to that is no URL, deploy options build_run_spec
    refuses) is exit 2 now, not a failed Job at 3 a.m."""
    from nccl_k8s import k8s

    group = ctx.parent.command if ctx.parent is not None else None
    check = group.get_command(ctx, "check") if group is not None else None  # type: ignore[attr-defined]
    if check is None:
        return None
    cut = args.index("--") if "--" in args else len(args)
    # ctx's help names: click keeps the first help option it makes on the command.
    parsed = check.make_context(
        "nccl-k8s nodes check",
        [*args[:cut], "-n", namespace],
        help_option_names=ctx.help_option_names,
    )
    if parsed.params.get("push_to") is not None:  # a value checked before the command runs
        k8s.push_url("--push-to", parsed.params["push_to"])
    engine = args[cut + 1 :] or k8s.NODES_CHECK_ENGINE_ARGS
    return spec_of_params(parsed.params, engine, fixed=NODES_CHECK_FIXED)
