"""Kubernetes: bootstrap configuration (kubeadm) and the GPU platform on top (versions, manifests)."""
