"""The gateways: what each endpoint can be asked over the network, with its messages.

One module per endpoint. A gateway is a `typing.Protocol`; the endpoint, the network
proxy (`RpcService.connect`) and test fakes all satisfy it. Every call that changes
state carries the fencing token of its sender's current leadership or allocation.
"""

import msgspec


class Ack(msgspec.Struct, frozen=True):
    """The call was accepted (or, for idempotent calls, had already been applied)."""


ACK = Ack()


class HeartbeatRequest(msgspec.Struct, frozen=True):
    sender: str  # ResourceID of the component sending the heartbeat
