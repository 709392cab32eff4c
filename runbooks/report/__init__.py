"""gpuctl report: the outcome measured on a real cluster, a window against a baseline (docs/report.md)."""
