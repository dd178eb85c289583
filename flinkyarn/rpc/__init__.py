"""The control plane's RPC: typed messages over gRPC (grpc.aio) with mutual TLS.

- `codec`: msgspec encoding and validation of messages (no pickle).
- `security`: the per-cluster certificate authority and credentials.
- `service`: the server hosting endpoints, and gateway proxies for callers.
- `endpoint`: the base of Dispatcher, ResourceManager, JobMaster and TaskExecutor.
- `errors`: what a caller can get back, translated from gRPC in one place.
"""
