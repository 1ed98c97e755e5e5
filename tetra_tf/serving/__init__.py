"""A local server speaking TensorFlow Serving's REST and gRPC APIs (the `serving` extra).

Laid out as TF Serving is: thin front ends (`rest`, `grpc_api`) decode a request and call
the one predict path (`predictor`: `admission` checks, then a runner from `runners`, direct
or through `batching`), on the versions `manager` loads and switches (`servable`: one
version). `codecs` converts JSON and TensorProtos; `metrics` holds Prometheus metrics and
the access log; `main` is the command line (serving/server.py runs it).
"""
