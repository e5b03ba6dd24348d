"""The composed SGD iteration (every phase alone, then composed per strategy, against the model) and its traces."""
