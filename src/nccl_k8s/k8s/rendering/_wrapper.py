"""What runs first in every pod: a standard-library wrapper around torchrun that replays the
run's result lines and a digest of its NCCL lines as blocks at the end of the log, so that
kubelet log rotation cannot take them (k8s.run._collect reads the last complete block).

In a run rendered with `--adopt` (rendering._adopt), ADOPTER, in an init container of its own
and the only container with an API token, makes the run's other objects dependents of its
workload in the pod of index 0: it reads the workload's uid and patches an ownerReference onto
each object named in ADOPT_ENV, through the in-cluster API. The wrapper itself needs no token."""

from __future__ import annotations

#: Markers of the blocks the wrapper prints last: `NCCL_K8S_BEGIN <name> <n>`, n lines,
#: `NCCL_K8S_END <name> <n>`; names "results" (rank 0's result lines) and "nccl" (the digest).
#: The engine frames each of several sweeps the same way (bench.report); the wrapper keeps no
#: copy of lines the engine framed, so a StatefulSet's endless sweeps cost it no memory.
from nccl_k8s.bench.report import BLOCK_BEGIN, BLOCK_END

WRAPPER_ENV = "NCCL_K8S_WRAPPER"

#: `<sha256 hex>  <path>` (sha256sum's line) of the engine zipapp a run was rendered with: the
#: wrapper hashes the mounted file first and runs nothing when it differs (one stderr line, exit
#: 1), so whoever may replace ConfigMaps in the namespace cannot swap the code the pods run.
ENGINE_DIGEST_ENV = "NCCL_K8S_ENGINE_SHA256"

#: JSON naming the workload (`owner`) and the objects it adopts (`objects`), each as
#: {"apiVersion", "kind", "plural", "name"}, and the run's `mark` ({"labels": {...},
#: "annotations": {...}}): an object of that name that lacks any of them is not adopted (it is
#: not the run's); set on the adopter of a run rendered with --adopt.
ADOPT_ENV = "NCCL_K8S_ADOPT"

#: Where Kubernetes mounts a pod's service account token, CA bundle and namespace.
SERVICE_ACCOUNT_DIR = "/var/run/secrets/kubernetes.io/serviceaccount"

#: The container's wrapper: `python3 -c POD_WRAPPER COMMAND...`. It must run on any image with
#: Python >= 3.8, so it uses the standard library only. Blocks are printed only when the command
#: succeeded: a failed pod's last log lines (what `deploy` shows) stay its own error. The NCCL
#: digest keeps every WARN and the first 400 INFO lines of each process and device
#: (initialization prints what diagnose reads: version, network, HCAs, transports), 8,000 lines
#: at most: bounded however long the run.
POD_WRAPPER = """\
# nccl-k8s: run the command and stream its output; then print the result lines (rank 0 prints
# them) and a digest of the NCCL lines again, as blocks, last: log rotation keeps the newest.
import hashlib, os, re, signal, subprocess, sys
want, _, engine = os.environ.get("NCCL_K8S_ENGINE_SHA256", "").partition("  ")
if want:  # the engine zipapp must be the one the run was rendered with, before anything runs
    try:
        with open(engine, "rb") as f:
            got = hashlib.sha256(f.read()).hexdigest()
    except OSError as e:
        got = "unreadable (%s)" % e.strerror
    if got != want:
        sys.stderr.write("nccl-k8s: the engine zipapp %s has sha256 %s, not the %s this run was "
                         "rendered with: refusing to run it (was its ConfigMap replaced?)\\n"
                         % (engine, got, want))
        sys.exit(1)
out = sys.stdout.buffer
child = subprocess.Popen(sys.argv[1:], stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
for s in (signal.SIGTERM, signal.SIGINT):
    signal.signal(s, lambda n, _: child.send_signal(n))
results, nccl, count, last, framed = [], [], {}, b"\\n", False
who = re.compile(rb"(\\S+:\\d+):\\d+ (\\[\\d+\\])")
for line in iter(child.stdout.readline, b""):
    out.write(line)
    out.flush()
    last = line
    if b"NCCL_K8S_BEGIN results " in line:
        framed = True  # the engine frames each of several sweeps itself: nothing to keep
    elif b"NCCL_K8S_END results " in line:
        framed = False
    elif b"NCCL_K8S_RESULT " in line and not framed:
        results.append(line)
    elif b"NCCL INFO" in line or b"NCCL WARN" in line:
        m = who.search(line)
        k = m.group(1) + m.group(2) if m else b""
        count[k] = count.get(k, 0) + 1
        if len(nccl) < 8000 and (b"NCCL WARN" in line or count[k] <= 400):
            nccl.append(line)
code = child.wait()
if not last.endswith(b"\\n"):
    out.write(b"\\n")
for name, lines in ((b"nccl", nccl), (b"results", results)):
    if lines and code == 0:  # a failed rank must end its log with its own error
        out.write(b"NCCL_K8S_BEGIN %s %d\\n" % (name, len(lines)))
        out.writelines(x if x.endswith(b"\\n") else x + b"\\n" for x in lines)
        out.write(b"NCCL_K8S_END %s %d\\n" % (name, len(lines)))
out.flush()
sys.exit(code if code >= 0 else 128 - code)
"""

#: Where the adopter (rendering._adopt's init container, the only container of a run with an API
#: token) finds the projected token, the cluster's CA bundle and its namespace.
ADOPT_TOKEN_DIR = "/var/run/secrets/nccl-k8s/adopt"

#: The adopter: `python3 -c ADOPTER` in an init container of the pods of a run rendered with
#: --adopt. Only the pod of index 0 (JOB_COMPLETION_INDEX, else the StatefulSet ordinal ending
#: POD_NAME) adopts; every other exits at once. It is idempotent (an object that already names
#: the workload's uid is left alone; a 409 from a concurrent write is retried), adopts only an
#: object carrying the run's render mark and run label, prints exactly one line and always
#: exits 0: a 403 or an unreachable API server is said on that line, and `nccl-k8s cleanup
#: --run` still removes what was not adopted. Standard library only (any image's python3).
ADOPTER = """\
# nccl-k8s: the pod of index 0 makes the run's objects dependents of its workload.
import json, os, ssl, sys, urllib.error, urllib.request


def adopt(plan):
    # The pod of index 0 makes the run's objects dependents of its workload (ownerReferences),
    # so that deleting the workload deletes them: render | kubectl apply leaves no orphans.
    d = "__SA_DIR__/"

    def read(name):
        with open(d + name) as f:
            return f.read().strip()

    ns = read("namespace")
    auth = {"Authorization": "Bearer " + read("token")}
    ctx = ssl.create_default_context(cafile=d + "ca.crt")
    host, port = os.environ["KUBERNETES_SERVICE_HOST"], os.environ["KUBERNETES_SERVICE_PORT"]
    base = "https://%s:%s" % ("[%s]" % host if ":" in host else host, port)

    def call(o, patch=None):
        v = o["apiVersion"]
        url = "%s/%s/%s/namespaces/%s/%s/%s" % (
            base, "apis" if "/" in v else "api", v, ns, o["plural"], o["name"])
        data = None if patch is None else json.dumps(patch).encode()
        req = urllib.request.Request(url, data, dict(auth), method="PATCH" if data else "GET")
        if data:
            req.add_header("Content-Type", "application/merge-patch+json")
        with urllib.request.urlopen(req, timeout=15, context=ctx) as r:
            return json.loads(r.read().decode())

    w = plan["owner"]
    who = "%s/%s" % (w["kind"], w["name"])
    try:
        uid = call(w)["metadata"]["uid"]
    except Exception as e:
        return "cannot read %s (%s), so nothing was adopted" % (who, why(e))
    ref = {"apiVersion": w["apiVersion"], "kind": w["kind"], "name": w["name"], "uid": uid,
           "controller": False, "blockOwnerDeletion": False}
    done, failed = [], []
    for o in plan["objects"]:
        what = "%s/%s" % (o["kind"], o["name"])
        try:
            for attempt in range(3):
                meta = call(o)["metadata"]
                if any((meta.get(f) or {}).get(k) != v
                       for f, kv in plan["mark"].items() for k, v in kv.items()):
                    raise NotOurs("not this run's: its render mark or run label differ; "
                                  "left alone")
                refs = meta.get("ownerReferences") or []
                if any(r.get("uid") == uid for r in refs):
                    break
                try:
                    call(o, {"metadata": {"resourceVersion": meta["resourceVersion"],
                                          "ownerReferences": refs + [ref]}})
                    break
                except urllib.error.HTTPError as e:
                    if e.code != 409 or attempt == 2:
                        raise
            done.append(what)
        except Exception as e:
            failed.append("%s: %s" % (what, why(e)))
    if not failed:
        return "%s owns %s (deleting it deletes them)" % (who, ", ".join(done))
    return "%s could not adopt %s; deleting %s leaves them: nccl-k8s cleanup --run %s " \\
        "removes them" % (who, "; ".join(failed), who, w["name"])


class NotOurs(Exception):
    pass


def why(e):
    if isinstance(e, NotOurs):
        return str(e)
    if isinstance(e, urllib.error.HTTPError):
        try:
            return "%d %s" % (e.code, json.loads(e.read().decode())["message"])
        except Exception:
            return "%d %s" % (e.code, e.reason)
    return "%s: %s" % (type(e).__name__, e)


index = os.environ.get("JOB_COMPLETION_INDEX", os.environ.get("POD_NAME", "").rpartition("-")[2])
if index == "0":
    try:
        line = adopt(json.loads(os.environ["__ADOPT_ENV__"]))
    except Exception as e:  # never the run's failure
        line = "adoption failed (%s)" % why(e)
    print("nccl-k8s: %s" % line, flush=True)
sys.exit(0)
""".replace("__SA_DIR__", ADOPT_TOKEN_DIR).replace("__ADOPT_ENV__", ADOPT_ENV)


__all__ = [
    "ADOPTER",
    "ADOPT_ENV",
    "ADOPT_TOKEN_DIR",
    "BLOCK_BEGIN",
    "BLOCK_END",
    "ENGINE_DIGEST_ENV",
    "POD_WRAPPER",
    "SERVICE_ACCOUNT_DIR",
    "WRAPPER_ENV",
]
