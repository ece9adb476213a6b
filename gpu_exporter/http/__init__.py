"""The HTTP front: connections, limits, TLS and basic auth, and what /metrics and the pages answer.
"""
