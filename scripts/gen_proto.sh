#!/usr/bin/env bash
# Regenerate the protobuf/gRPC Python modules in regroup/rpc/ from proto/regroup.proto.
# The generated files are committed; run this after editing the .proto and commit the result.
# The proto is mapped to the virtual path regroup/rpc/ so that the generated gRPC module imports
# `from regroup.rpc import regroup_pb2` (a package import, not a top-level one).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-.venv/bin/python}
"$PY" -m grpc_tools.protoc \
    --proto_path=regroup/rpc=proto \
    --python_out=. --pyi_out=. --grpc_python_out=. \
    regroup/rpc/regroup.proto
echo "generated: regroup/rpc/regroup_pb2.py regroup/rpc/regroup_pb2.pyi regroup/rpc/regroup_pb2_grpc.py"
