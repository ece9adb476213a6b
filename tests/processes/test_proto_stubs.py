"""The committed PodResources stubs are generated from the vendored kubelet proto."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from google.protobuf import descriptor_pb2

from gpu_exporter.readers.kubelet.podresources_v1 import api_pb2, messages
from tests.helpers import REPO

PROTO = "gpu_exporter/readers/kubelet/podresources_v1/api.proto"


def test_committed_stubs_match_the_proto(tmp_path: Path) -> None:
    out = tmp_path / "api.desc"
    res = subprocess.run(
        [sys.executable, "-m", "grpc_tools.protoc", "-I.", f"--descriptor_set_out={out}",
         PROTO], cwd=REPO, capture_output=True, text=True, timeout=60,
    )
    assert res.returncode == 0, res.stderr
    fresh = descriptor_pb2.FileDescriptorSet.FromString(out.read_bytes()).file[0]
    for message in fresh.message_type:  # gencode leaves out the derived JSON names
        for f in message.field:
            f.ClearField("json_name")
    committed = descriptor_pb2.FileDescriptorProto.FromString(
        api_pb2.DESCRIPTOR.serialized_pb)
    assert committed == fresh, "stale stubs: run `make podresources-stubs`"


def test_the_proto_is_the_kubelets_v1_api() -> None:
    fd = api_pb2.DESCRIPTOR
    assert fd.package == "v1"
    service = fd.services_by_name["PodResourcesLister"]
    assert [m.name for m in service.methods] == ["List", "GetAllocatableResources", "Get"]
    devices = fd.message_types_by_name["ContainerDevices"]
    assert [(f.name, f.number) for f in devices.fields] == [
        ("resource_name", 1), ("device_ids", 2), ("topology", 3)]


def test_the_typed_messages_are_the_protos() -> None:
    """podresources.messages types what the reader reads of the generated messages (which
    mypy cannot see): each field it names is one of the message's, of the same type,
    a Sequence exactly where the proto's is repeated."""
    typed = (messages.ListPodResourcesResponse, messages.PodResources,
             messages.ContainerResources, messages.ContainerDevices)
    for cls in typed:
        fields = api_pb2.DESCRIPTOR.message_types_by_name[cls.__name__].fields_by_name
        for name, annotation in cls.__annotations__.items():
            f = fields[name]
            inner = annotation.removeprefix("Sequence[").removesuffix("]")
            assert f.is_repeated == (inner != annotation), (cls.__name__, name)
            if f.message_type is not None:
                assert inner == f.message_type.name, (cls.__name__, name)
            else:
                assert (inner, f.type) == ("str", f.TYPE_STRING), (cls.__name__, name)
