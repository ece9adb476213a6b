"""Readings from plain files and sockets: sysfs, procfs (DRM fdinfo too), the kubelet, and the one
bounded file reader.
"""
