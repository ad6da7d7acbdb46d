"""Simulated nodes: kubelet, NVIDIA device plugin and the pieces they share."""
