"""What a user runs: the CLI (serve, dump, doctor, check, version) and the container health check.
"""
