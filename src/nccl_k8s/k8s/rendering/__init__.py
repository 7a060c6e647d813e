"""Rendering: RunSpec -> the objects of a run, pure and deterministic (no API client).

`_manifests` (render and the objects' shapes), `_gangs` (a --gang's PodGroup and the pods'
binding, from the spec's gang table), `_computedomain` (--compute-domain: the ComputeDomain's
spec, the pods' channel claim, clique affinity and MNNVL environment), `_resources` (the pods'
requests and limits, the one rule doctor and node fit also read), `_names` (names, ports and mounts others read without importing
the renderer), `_presets` (NCCL environment per fabric, pod privilege per security profile),
`_wrapper` (the pod's wrapper script), `_launcher` (--launcher: torchrun or the engine's own
launcher, the words before the engine flags), `_zipapp` (the engine shipped in a ConfigMap), `_dump`
(the objects as the YAML `nccl-k8s render` prints).
"""
