"""The kubelet PodResources v1 API: vendored api.proto and its generated stubs."""
