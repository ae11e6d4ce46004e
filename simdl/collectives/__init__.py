"""Collective algorithms and their latency-bandwidth costs."""

from .cost import COLLECTIVES, collective_time, bus_bytes_factor

__all__ = ["COLLECTIVES", "collective_time", "bus_bytes_factor"]
