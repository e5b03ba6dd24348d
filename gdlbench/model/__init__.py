"""The performance model: phases -> iteration time, strategies, collective costs, fits, clusters, memory, a PyTorch job's trace as phases."""
