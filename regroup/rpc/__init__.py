"""The coordinator's RPC API: protobuf messages (generated from proto/regroup.proto), their
conversions to and from the protocol core's values (`wire`), and the synchronous client (`client`).

Regenerate the `regroup_pb2*` modules with ``scripts/gen_proto.sh`` after editing the .proto.
"""
