"""What `gdlbench predict` prices: typed requests, what-ifs, scaling to clusters."""
