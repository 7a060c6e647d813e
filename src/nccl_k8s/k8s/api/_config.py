"""Where the API server is and how to talk to it: client settings, and the kubeconfig by
kubectl's precedence (`--kubeconfig`, else `$KUBECONFIG` (the first file of the list that
exists), else `~/.kube/config`, else the in-cluster service account; `--context` picks the
context; the context's namespace is the default namespace). A file that is not a kubeconfig
(binary, broken YAML, a list) is one line naming the file and what is wrong (exit 2)."""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path

import msgspec
import yaml
from lightkube import ConfigError
from lightkube.config.kubeconfig import KubeConfig, SingleConfig

from nccl_k8s.errors import UsageError

_SERVICE_ACCOUNT = Path("/var/run/secrets/kubernetes.io/serviceaccount")


@dataclasses.dataclass(frozen=True, kw_only=True)
class RetrySettings:
    """How a request rides out a busy or briefly failing API server."""

    attempts: int = 5
    """Tries per request, the first included. Five spans about 4 s of back-off: an API server
    restarting behind its load balancer, or etcd's leader election, is over by then."""
    backoff_s: float = 0.25
    """First pause; doubles per attempt (0.25, 0.5, 1, 2 s)."""
    max_wait_s: float = 10.0
    """Longest single pause, Retry-After included (a server asking for more is not waited for:
    the request fails and says so)."""


@dataclasses.dataclass(frozen=True, kw_only=True)
class ClientSettings:
    """Where the API server is and how long to wait for it."""

    kubeconfig: str | None = None
    """--kubeconfig: a kubeconfig file; None follows kubectl ($KUBECONFIG, ~/.kube/config,
    in-cluster)."""
    context: str | None = None
    """--context: the kubeconfig context; None uses the file's current-context."""
    timeout_s: float = 10.0
    """Seconds a single request (not a watch or a followed log) may take: long enough for a
    loaded API server listing a thousand pods, short enough that a dead one is named quickly."""
    retry: RetrySettings = dataclasses.field(default_factory=RetrySettings)
    """How transient failures are retried."""


def _first_existing(paths: str) -> str | None:
    for p in paths.split(os.pathsep):
        if p and Path(p).expanduser().is_file():
            return p
    return None


def load_config(settings: ClientSettings) -> SingleConfig:
    """The kubeconfig context to use, by kubectl's precedence; UsageError when there is none or
    the file is not a kubeconfig."""
    if settings.kubeconfig is not None:
        given = Path(settings.kubeconfig).expanduser()
        if not given.is_file():
            what = (
                "is a directory: expected a kubeconfig file" if given.is_dir() else "no such file"
            )
            raise UsageError(f'--kubeconfig "{settings.kubeconfig}": {what}', key="--kubeconfig")
        return _get_context(_read_kubeconfig(settings.kubeconfig), settings.context)
    env = os.environ.get("KUBECONFIG")
    path = _first_existing(env) if env else None
    if path is None and Path("~/.kube/config").expanduser().is_file():
        path = "~/.kube/config"
    if path is not None:
        return _get_context(_read_kubeconfig(path), settings.context)
    if (_SERVICE_ACCOUNT / "token").is_file() and "KUBERNETES_SERVICE_HOST" in os.environ:
        if settings.context is not None:
            raise UsageError(
                f'--context "{settings.context}": there is no kubeconfig, only the '
                "in-cluster service account",
                key="--context",
            )
        try:
            config = KubeConfig.from_service_account().get()
        except (ConfigError, OSError, ValueError) as e:
            raise UsageError(f"in-cluster service account: {e}", key="--kubeconfig") from e
        assert config is not None  # from_one always sets the current context
        return config
    raise UsageError(
        "no cluster configured: expected --kubeconfig FILE, $KUBECONFIG, ~/.kube/config or an "
        "in-cluster service account",
        key="--kubeconfig",
    )


def _read_kubeconfig(path: str) -> KubeConfig:
    """The file as a KubeConfig, or a UsageError naming the file and what is wrong with it."""
    where = f"kubeconfig {path}"
    file = Path(path).expanduser()
    try:
        raw = file.read_bytes()
    except OSError as e:
        raise UsageError(f"{where}: cannot read it: {e.strerror or e}", key="--kubeconfig") from e
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise UsageError(
            f"{where}: not a kubeconfig (not UTF-8 text: a binary file?)", key="--kubeconfig"
        ) from e
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        at = f"line {mark.line + 1}, column {mark.column + 1}: " if mark is not None else ""
        problem = getattr(e, "problem", None) or str(e).splitlines()[0]
        raise UsageError(f"{where}: not valid YAML ({at}{problem})", key="--kubeconfig") from e
    if not isinstance(data, dict) or not isinstance(data.get("clusters"), list):
        got = "an empty file" if data is None else f"a {type(data).__name__}"
        if isinstance(data, dict):
            got = "a mapping without a `clusters` list"
        raise UsageError(
            f"{where}: expected a kubeconfig (a mapping with clusters, contexts and users "
            f"lists), got {got}",
            key="--kubeconfig",
        )
    try:
        return KubeConfig.from_dict(data, fname=file)
    except (ConfigError, KeyError, TypeError, ValueError, AttributeError) as e:
        raise UsageError(f"{where}: not a valid kubeconfig: {_config_problem(e)}") from e
    except msgspec.ValidationError as e:
        raise UsageError(f"{where}: not a valid kubeconfig: {e}", key="--kubeconfig") from e


def _config_problem(e: BaseException) -> str:
    if isinstance(e, KeyError):
        return f"missing {e.args[0]!r}"
    return str(e) or type(e).__name__


def _get_context(kc: KubeConfig, context: str | None) -> SingleConfig:
    try:
        config = kc.get(context)
    except ConfigError as e:
        names = ", ".join(sorted(kc.contexts)) or "none"
        raise UsageError(f"--context: {e} (contexts: {names})", key="--context") from e
    except (msgspec.ValidationError, KeyError, TypeError, ValueError, AttributeError) as e:
        raise UsageError(
            f"kubeconfig: context {context or kc.current_context!r} is not valid: "
            f"{_config_problem(e)}",
            key="--kubeconfig",
        ) from e
    if config is None:  # only when no default was given and no context set, which raises above
        raise UsageError("kubeconfig has no current-context: pass --context", key="--context")
    server = config.cluster.server or ""
    if not server.startswith(("http://", "https://")):
        raise UsageError(
            f"kubeconfig context {config.context_name!r}: server {server!r} is not an http:// "
            "or https:// URL",
            key="--kubeconfig",
        )
    return config


__all__ = ["ClientSettings", "RetrySettings", "load_config"]
