"""Rendering: RunSpec -> the objects of a run, pure and deterministic (no API client).

`_manifests` (render, attach_owner), `_presets` (NCCL environment per fabric, pod privilege per
security profile), `_wrapper` (the pod's wrapper script), `_zipapp` (the engine shipped in a
ConfigMap), `_dump` (the objects as the YAML `nccl-k8s render` prints).
"""
