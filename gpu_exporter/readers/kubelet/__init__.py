"""The kubelet: its PodResources API, and which of its pods still run (their log folders
and cgroups)."""
