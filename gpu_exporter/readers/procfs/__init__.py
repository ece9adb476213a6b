"""Files under /proc: the host, processes, DRM fdinfo and the NVIDIA driver's own files."""
