"""Typed records, the metric catalogue, labels, flags, feature states and the plumbing every layer
shares.
"""
