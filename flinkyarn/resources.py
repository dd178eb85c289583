"""Resource profiles of slots and slot requests."""

from __future__ import annotations

import msgspec


class ResourceProfile(msgspec.Struct, frozen=True):
    """CPU cores and memory (MiB) a slot offers or a request needs.

    UNKNOWN (all zero) on a request means "any slot will do", as in Flink; a slot's own
    profile is always known.
    """

    cpu_cores: float = 0.0
    memory_mb: int = 0

    def is_unknown(self) -> bool:
        return self.cpu_cores == 0.0 and self.memory_mb == 0

    def fits_in(self, offered: "ResourceProfile") -> bool:
        """True if a request with this profile can be served by a slot offering `offered`."""
        if self.is_unknown():
            return True
        return self.cpu_cores <= offered.cpu_cores and self.memory_mb <= offered.memory_mb

    def __str__(self) -> str:
        if self.is_unknown():
            return "UNKNOWN"
        return f"{self.cpu_cores:g} cpu, {self.memory_mb} MiB"


UNKNOWN = ResourceProfile()
