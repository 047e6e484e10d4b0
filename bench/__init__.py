"""Benchmarks: each prints the figure it measures, beside the peer tool where there is one."""
