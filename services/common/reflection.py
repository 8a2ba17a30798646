"""gRPC server reflection under both names: `grpc.reflection.v1` and the older `grpc.reflection.v1alpha`.

Current tools (grpcurl >= 1.9, grpcui, Postman) ask for `grpc.reflection.v1` first; grpcio-reflection
(1.85) ships only v1alpha. The v1 protocol is v1alpha under another package name -- same messages,
same field numbers, so the same bytes on the wire. So v1 is served here by grpcio-reflection's own
v1alpha servicer behind the v1 method path, and the v1 descriptor (v1alpha's, renamed) is added to
the descriptor pool so that reflection describes itself under both names.

    enable_server_reflection([MY_SERVICE, HEALTH_SERVICE], server)   # both reflection services added
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import grpc
from google.protobuf import descriptor_pb2, descriptor_pool
from grpc_reflection.v1alpha import reflection as v1alpha
from grpc_reflection.v1alpha import reflection_pb2 as v1alpha_pb2
from grpc_reflection.v1alpha._async import ReflectionServicer  # what `reflection.aio` re-exports

V1ALPHA_PACKAGE = "grpc.reflection.v1alpha"
V1_PACKAGE = "grpc.reflection.v1"
V1_FILE = "grpc/reflection/v1/reflection.proto"
V1ALPHA_SERVICE_NAME: str = v1alpha.SERVICE_NAME
V1_SERVICE_NAME = f"{V1_PACKAGE}.ServerReflection"
METHOD = "ServerReflectionInfo"


def v1_file_descriptor() -> descriptor_pb2.FileDescriptorProto:
    """`grpc/reflection/v1/reflection.proto`: v1alpha's descriptor with the v1 package and options."""
    fd = descriptor_pb2.FileDescriptorProto()
    v1alpha_pb2.DESCRIPTOR.CopyToProto(fd)
    fd.name = V1_FILE
    fd.package = V1_PACKAGE
    fd.options.Clear()
    fd.options.java_multiple_files = True
    fd.options.java_package = "io.grpc.reflection.v1"
    fd.options.java_outer_classname = "ServerReflectionProto"
    fd.options.go_package = "google.golang.org/grpc/reflection/grpc_reflection_v1"
    old, new = f".{V1ALPHA_PACKAGE}.", f".{V1_PACKAGE}."
    for message in fd.message_type:
        for f in message.field:
            if f.type_name.startswith(old):
                f.type_name = new + f.type_name[len(old) :]
    for service in fd.service:
        for m in service.method:
            m.input_type = new + m.input_type[len(old) :]
            m.output_type = new + m.output_type[len(old) :]
    return fd


def register_v1_descriptor(pool: Any = None) -> None:
    """Add the v1 file to the pool (the default one) unless something already did."""
    pool = pool if pool is not None else descriptor_pool.Default()
    try:
        pool.FindFileByName(V1_FILE)
    except KeyError:
        pool.AddSerializedFile(v1_file_descriptor().SerializeToString())


def enable_server_reflection(service_names: Iterable[str], server: grpc.aio.Server) -> None:
    """Serve reflection for `service_names` (plus both reflection services) on an asyncio server."""
    register_v1_descriptor()
    names = (*service_names, V1_SERVICE_NAME, V1ALPHA_SERVICE_NAME)
    servicer = ReflectionServicer(names)
    # v1alpha as grpcio-reflection registers it...
    v1alpha.enable_server_reflection(names, server)
    # ...and v1: the same implementation, the same message bytes, the v1 method path.
    handler = grpc.stream_stream_rpc_method_handler(
        servicer.ServerReflectionInfo,
        request_deserializer=v1alpha_pb2.ServerReflectionRequest.FromString,
        response_serializer=v1alpha_pb2.ServerReflectionResponse.SerializeToString,
    )
    server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(V1_SERVICE_NAME, {METHOD: handler}),))
