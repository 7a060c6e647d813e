"""nccl-k8s: NCCL collective benchmarks on one machine or across a Kubernetes cluster."""

__version__ = "0.1.0"

__all__ = ["__version__"]
