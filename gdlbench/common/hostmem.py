"""How much memory a run may allocate, checked before allocating (a size that cannot be allocated
is bad usage, exit 2, not an OOM kill halfway through)."""

from __future__ import annotations

from typing import Protocol

from .errors import UsageError


class DeviceMemory(Protocol):
    """What require_device needs of the CUDA backend (the _cuda module)."""

    def mem_get_info(self) -> tuple[int, int]: ...


def host_available() -> int:
    """MemAvailable from /proc/meminfo in bytes (2**62 when unknown)."""
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 2**62


def require_host(nbytes: int, what: str) -> None:
    avail = host_available()
    if nbytes > avail * 0.9:  # leave the rest of the machine something
        raise UsageError(f"{what}: needs {nbytes / 2**30:.2f} GiB of host memory, "
                         f"{avail / 2**30:.2f} GiB available")


def require_device(cuda: DeviceMemory, nbytes: int, what: str) -> None:
    free, _total = cuda.mem_get_info()
    if nbytes > free * 0.95:
        raise UsageError(f"{what}: needs {nbytes / 2**30:.2f} GiB of device memory, {free / 2**30:.2f} GiB free")
