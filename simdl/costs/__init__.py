"""Shared cost library: what a kernel, a copy or a collective costs on a device."""
