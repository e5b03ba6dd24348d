"""Shared pieces every layer uses: errors, units, paths, measurements (samples and statistics), output tables and files, Compare, the environment."""
