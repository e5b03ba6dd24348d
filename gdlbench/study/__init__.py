"""The study: cells measured, predicted and written as one report."""
