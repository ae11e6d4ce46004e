"""Collective algorithms and their latency-bandwidth costs."""

from .cost import COLLECTIVES, bus_bytes_factor, collective_time

__all__ = ["COLLECTIVES", "collective_time", "bus_bytes_factor"]
