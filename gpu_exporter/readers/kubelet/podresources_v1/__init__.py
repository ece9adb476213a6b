"""The kubelet PodResources v1 API: vendored api.proto, its generated messages and the
types of what the exporter reads of them (`messages`)."""
