"""The Examples section of every command's help, one home for all of them.

Each entry is a command line a user can paste, with a comment saying what it does; `Command`
and `Group` (cli._common) append them to the help as its last section. Lines are kept as
written (rich does not re-flow them); the prose above them is wrapped by the terminal.
"""

from __future__ import annotations

#: command name (as typed after `nccl-k8s`, sub-commands with a space) -> (comment, command line)
EXAMPLES: dict[str, tuple[tuple[str, str], ...]] = {
    "nccl-k8s": (
        ("benchmark this machine (CPU ranks without a GPU)", "nccl-k8s run -b 8 -e 1M -f 4"),
        ("what a deploy would create", "nccl-k8s render --world-size 16 --gpus-per-node 8"),
        ("every command's own help", "nccl-k8s deploy -h"),
    ),
    "run": (
        ("all_reduce from 8 B to 1 MiB, x4 per step", "nccl-k8s run -b 8 -e 1M -f 4"),
        ("every collective on 4 ranks", "nccl-k8s run --nproc 4 --ops all -b 8 -e 64K -f 4"),
        ("soak: 20 s at 1 MiB, a report every 5 s", "nccl-k8s run -b 1M -e 1M --duration 20 --report-interval 5"),
        ("GPU: every local GPU through NCCL", "nccl-k8s run --backend nccl -b 8 -e 8G -f 2"),
    ),
    "render": (
        ("16 ranks on 2 nodes, engine flags after --", "nccl-k8s render --world-size 16 --gpus-per-node 8 -- -b 8 -e 1G -f 2"),
        ("for GitOps", "nccl-k8s render --world-size 16 --gpus-per-node 8 | kubectl apply -f -"),
        ("owned by its Job: deleting the Job deletes it all (rbac --render-apply)", "nccl-k8s render --world-size 16 --gpus-per-node 8 --adopt | kubectl apply -f -"),
    ),
    "rbac": (
        ("what a cluster admin grants alice in namespace bench", "nccl-k8s rbac -n bench --user alice | kubectl apply -f -"),
        ("a ServiceAccount, with the node reads doctor and nodes check use", "nccl-k8s rbac -n bench --service-account ci/runner --cluster-reads"),
    ),
    "deploy": (
        ("deploy and follow until it ends", "nccl-k8s deploy -n bench --world-size 16 --gpus-per-node 8 -- -b 8 -e 1G -f 2"),
        ("return at once; follow later with wait", "nccl-k8s deploy -n bench --world-size 2 --gpus-per-node 1 --no-wait"),
    ),
    "wait": (
        ("follow the latest run", "nccl-k8s wait -n bench"),
        ("give up after 30 minutes (the run goes on)", "nccl-k8s wait -n bench --run ID --timeout 30m"),
    ),
    "status": (
        ("the latest run's pods", "nccl-k8s status -n bench"),
        ("as JSON", "nccl-k8s status -n bench --run ID -o json"),
    ),
    "logs": (
        ("follow rank 0", "nccl-k8s logs -n bench -f --rank 0"),
        ("the last 20 lines of every pod", "nccl-k8s logs -n bench --run ID --tail 20"),
    ),
    "results": (
        ("collect into runs/<run-id>/", "nccl-k8s results -n bench"),
        ("every sweep of a statefulset run", "nccl-k8s results -n bench --run ID --all-sweeps"),
    ),
    "cleanup": (
        ("one run", "nccl-k8s cleanup -n bench --run ID"),
        ("every run in the namespace", "nccl-k8s cleanup -n bench --all"),
        ("a fleet-health schedule (nodes schedule's)", "nccl-k8s cleanup -n bench --schedule nccl-k8s-node-check"),
    ),
    "list": (("the runs in a namespace", "nccl-k8s list -n bench"),),
    "import": (
        ("into runs/<new-id>/results.json", "nccl-k8s import all_reduce_perf.txt"),
        ("to a file of your choice", "nccl-k8s import sendrecv.log alltoall.json -o nccl-tests.json"),
    ),
    "diagnose": (
        ("one log per pod", "nccl-k8s diagnose pod-0.log pod-1.log"),
        ("fail unless every rank used InfiniBand", "nccl-k8s diagnose pod-*.log --expect-fabric ib"),
    ),
    "compare": (
        ("a run against a baseline", "nccl-k8s compare runs/new/results.json --baseline runs/old/results.json"),
        ("by run id, time instead of busbw, 10 % slack", "nccl-k8s compare RUN --baseline BASELINE --metric time --tolerance 10%"),
        ("a bandwidth floor, no baseline", "nccl-k8s compare RUN --min-busbw 300"),
    ),
    "report": (
        ("one run to report.html", "nccl-k8s report RUN"),
        ("two runs overlaid, and PNG files", "nccl-k8s report RUN BASELINE -o cmp.html --png plots"),
        ("a nodes check's domain matrix as a heatmap", "nccl-k8s report --nodes-check check.json -o domains.html"),
    ),
    "doctor": (
        ("will this run deploy?", "nccl-k8s doctor -n bench --world-size 16 --gpus-per-node 8"),
        ("does one block have the free GPUs?", "nccl-k8s doctor -n bench --world-size 32 --gpus-per-node 8 --topology cloud.google.com/gce-topology-block --placement required"),
        ("why is each pod of a run where it is", "nccl-k8s doctor -n bench --run ID"),
    ),
    "bundle": (("a run's debug bundle", "nccl-k8s bundle -n bench --run ID -o run.tar.gz"),),
    "nodes": (("find the bad nodes", "nccl-k8s nodes check -n bench --gpus-per-node 8"),),
    "nodes check": (
        ("every node with 8 GPUs", "nccl-k8s nodes check -n bench --gpus-per-node 8"),
        ("only H200 nodes, label the verdicts", "nccl-k8s nodes check -n bench --gpus-per-node 8 -l gpu=h200 --label"),
    ),
    "nodes schedule": (
        ("check and label the nodes every 6 hours", "nccl-k8s nodes schedule -n bench --image registry.example.com/nccl-k8s:0.1.0 -- --gpus-per-node 8 --label | kubectl apply -f -"),
    ),
    "nodes history": (
        ("every node's recorded verdicts and busbw, and what changed", "nccl-k8s nodes history -n bench"),
        ("one node, as JSON", "nccl-k8s nodes history -n bench --node gpu-node-7 -o json"),
    ),
}  # fmt: skip


def examples_text(command: str) -> str:
    """The Examples section of `command`'s help, plain text (empty when it has none)."""
    items = EXAMPLES.get(command, ())
    if not items:
        return ""
    lines = ["Examples:"]
    for comment, line in items:
        lines += [f"  # {comment}", f"  {line}"]
    return "\n".join(lines)
