"""The API client: the only code of nccl_k8s that imports lightkube or the HTTP client.

`_client` (KubeClient: every request, HTTP failures translated once into the ClusterError tree
by `_translate`), `_lists` (lists in pages; server-side tables and metadata-only lists),
`_kinds` (kind -> lightkube resource class), `_config` (ClientSettings and the
kubeconfig by kubectl's precedence), `_types` (the plain-dict objects and the closed sets of
kinds and phases every layer above shares; importing it loads no client).

This package imports nothing on its own, so `_types` stays importable without the `k8s` extra.
"""
