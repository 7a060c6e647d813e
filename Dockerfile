# An image with nccl-k8s installed, for `nccl-k8s deploy --engine image --image <this image>`.
#
# Not needed for the default deploy: the engine travels in a ConfigMap as a zipapp and runs on
# any stock PyTorch image. Build this one when your cluster may not mount ConfigMaps into
# benchmark pods, or when you want the CLI (status/logs/results) inside the cluster too.
#
#   docker build -t registry.example.com/nccl-k8s:0.1.0 .
#   docker build --build-arg BASE_IMAGE=nvcr.io/nvidia/pytorch:25.01-py3 -t ... .
#
# The base is NVIDIA's NGC PyTorch image: its torch is built against the NCCL, CUDA and
# driver-compat libraries NVIDIA tests together, which is what a NCCL benchmark should measure,
# and it carries rdma-core (libibverbs), without which NCCL cannot use IB or RoCE HCAs. Any base
# works that has Python >= 3.10, a CUDA torch and, for --network ib|roce, libibverbs.
# Pin a tag: a floating one would change torch and NCCL between runs that are meant to compare.
# For an image without torch (the direct NCCL path only, a few hundred MB): images/slim/Dockerfile.
ARG BASE_IMAGE=nvcr.io/nvidia/pytorch:25.01-py3
FROM ${BASE_IMAGE}

WORKDIR /opt/nccl-k8s-src
COPY pyproject.toml README.md ./
COPY src ./src

# The base image's torch (and its NCCL) must stay: install nccl-k8s with its small CLI
# dependencies and the API client, but not the `engine` extra, which would pull another torch
# from PyPI over NVIDIA's build. --no-cache-dir keeps the layer small.
RUN python -m pip install --no-cache-dir ".[k8s]" \
    && python -c "import torch, nccl_k8s.bench; print('nccl-k8s on torch', torch.__version__)" \
    && rm -rf /opt/nccl-k8s-src

WORKDIR /workspace
# The deployer sets the pod's command (torchrun ... -m nccl_k8s.bench); this default only shows
# what the image holds when run by hand.
CMD ["nccl-k8s", "--help"]
