"""The Kubernetes layer: pure manifests and presets, the one HTTP client, and the run lifecycle.

Import the submodule you need; this package imports nothing itself, so rendering manifests never
pulls in the API client.
"""
