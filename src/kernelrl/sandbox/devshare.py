"""Device memory the evaluator lends a worker for its gigabyte replies, through CUDA's virtual memory management.

The evaluator allocates a buffer on its GPU (`cuMemCreate`, exportable as a POSIX file descriptor), maps it into
its own address space, and passes the descriptor to the worker over their socket (SCM_RIGHTS); the worker maps the
same memory into its own CUDA context (`Shared.attach`). A reply's outputs then cross with one device-to-device
copy on each side (worker: outputs into the buffer; evaluator: buffer into tensors it owns) instead of through
page-locked host memory, whose locking costs seconds per 8 GB (`benchmarks/results/spill_lock_probe_h100/`).

What the worker can reach: this one allocation, no other memory of the evaluator (each worker gets its own, and
the reference's is never given to the candidate). It may write there at any time; the evaluator copies a reply
out as soon as it arrives, so a worker writing later changes only what it itself sent. Where the driver, the
device or the sandbox refuses any step, `create`/`attach` raise `ShareError` and replies go through the spill file
as before (`wire.Mapped`).
"""
from __future__ import annotations

import ctypes
import os
import threading

# Off (KERNELRL_LEND_DEVICE_MEMORY=0 in the evaluator's environment) moves every large reply through page-locked
# host memory (`wire.Mapped`) instead, e.g. to compare the two on one machine.
ENABLED = os.environ.get("KERNELRL_LEND_DEVICE_MEMORY", "1") != "0"


class ShareError(RuntimeError):
    """A step of lending device memory failed (driver, device, or sandbox)."""


_CU_MEM_ALLOCATION_TYPE_PINNED = 1
_CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR = 1
_CU_MEM_LOCATION_TYPE_DEVICE = 1
_CU_MEM_ACCESS_FLAGS_PROT_READWRITE = 3
_CU_DEVICE_ATTRIBUTE_VMM_SUPPORTED = 102
_CU_DEVICE_ATTRIBUTE_POSIX_FD_SUPPORTED = 103


class _Location(ctypes.Structure):
    _fields_ = [("type", ctypes.c_int), ("id", ctypes.c_int)]


class _AllocFlags(ctypes.Structure):
    _fields_ = [("compressionType", ctypes.c_ubyte), ("gpuDirectRDMACapable", ctypes.c_ubyte),
                ("usage", ctypes.c_ushort), ("reserved", ctypes.c_ubyte * 4)]


class _Prop(ctypes.Structure):  # CUmemAllocationProp
    _fields_ = [("type", ctypes.c_int), ("requestedHandleTypes", ctypes.c_int), ("location", _Location),
                ("win32HandleMetaData", ctypes.c_void_p), ("allocFlags", _AllocFlags)]


class _Access(ctypes.Structure):  # CUmemAccessDesc
    _fields_ = [("location", _Location), ("flags", ctypes.c_int)]


_lib = None
_lib_lock = threading.Lock()
_contexts: dict[int, ctypes.c_void_p] = {}


def _cuda():
    """The CUDA driver library (loaded once); ShareError where there is none."""
    global _lib
    with _lib_lock:
        if _lib is None:
            try:
                _lib = ctypes.CDLL("libcuda.so.1")
            except OSError as e:
                raise ShareError(f"no CUDA driver library: {e}") from e
        return _lib


def _check(name: str, *args) -> None:
    err = getattr(_cuda(), name)(*args)
    if err != 0:
        raise ShareError(f"{name} failed with CUDA error {err}")


def _ordinal(device) -> int:
    """The CUDA ordinal of `device` (None: the current one); ShareError where it is no CUDA device here."""
    import torch

    if not torch.cuda.is_available():
        raise ShareError("no CUDA device in this process")
    dev = torch.device(device) if device is not None else torch.device("cuda", torch.cuda.current_device())
    if dev.type != "cuda":
        raise ShareError(f"{dev} is not a CUDA device")
    return dev.index if dev.index is not None else torch.cuda.current_device()


class _Current:
    """The device's primary context made current on this thread for driver calls (any thread may call)."""

    def __init__(self, ordinal: int):
        self.ordinal = ordinal

    def __enter__(self):
        ctx = _contexts.get(self.ordinal)
        if ctx is None:
            dev = ctypes.c_int()
            _check("cuDeviceGet", ctypes.byref(dev), self.ordinal)
            for attr in (_CU_DEVICE_ATTRIBUTE_VMM_SUPPORTED, _CU_DEVICE_ATTRIBUTE_POSIX_FD_SUPPORTED):
                ok = ctypes.c_int()
                _check("cuDeviceGetAttribute", ctypes.byref(ok), attr, dev)
                if not ok.value:
                    raise ShareError(f"device {self.ordinal} cannot share memory by file descriptor")
            ctx = ctypes.c_void_p()
            _check("cuDevicePrimaryCtxRetain", ctypes.byref(ctx), dev)
            _contexts[self.ordinal] = ctx
        _check("cuCtxPushCurrent_v2", ctx)
        return self

    def __exit__(self, *exc):
        _cuda().cuCtxPopCurrent_v2(ctypes.byref(ctypes.c_void_p()))


def _access(ordinal: int) -> _Access:
    return _Access(_Location(_CU_MEM_LOCATION_TYPE_DEVICE, ordinal), _CU_MEM_ACCESS_FLAGS_PROT_READWRITE)


class _Array:
    """A device pointer in the CUDA array interface, for `torch.as_tensor` to view without copying."""

    def __init__(self, ptr: int, size: int):
        self.__cuda_array_interface__ = {"shape": (size,), "typestr": "|u1", "data": (ptr, False), "version": 3,
                                         "strides": None}


class Shared:
    """A device buffer of `size` bytes mapped into this process, lent by the evaluator (`create`) or received by
    a worker (`attach`). `view` and `drop` match `wire.Mapped`'s, so replies are encoded and decoded through
    either; `view` gives a uint8 tensor on the device."""

    on_device = True  # replies are read from it whatever device they are read onto (`wire.decode`)

    def __init__(self, handle: int, ptr: int, size: int, ordinal: int):
        import torch

        self._handle, self._ptr, self.size, self.ordinal = handle, ptr, size, ordinal
        self._tensor = torch.as_tensor(_Array(ptr, size), device=torch.device("cuda", ordinal))

    @classmethod
    def create(cls, nbytes: int, device=None) -> tuple[Shared, int]:
        """Allocate at least `nbytes` on `device` and map them here: (the buffer, a file descriptor to pass to
        the worker, which the caller closes once passed)."""
        ordinal = _ordinal(device)
        lib = _cuda()
        with _Current(ordinal):
            prop = _Prop(_CU_MEM_ALLOCATION_TYPE_PINNED, _CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR,
                         _Location(_CU_MEM_LOCATION_TYPE_DEVICE, ordinal))
            grain = ctypes.c_size_t()
            _check("cuMemGetAllocationGranularity", ctypes.byref(grain), ctypes.byref(prop), 0)
            size = -(-nbytes // grain.value) * grain.value
            handle = ctypes.c_ulonglong()
            _check("cuMemCreate", ctypes.byref(handle), ctypes.c_size_t(size), ctypes.byref(prop),
                   ctypes.c_ulonglong(0))
            fd = ctypes.c_int(-1)
            try:
                _check("cuMemExportToShareableHandle", ctypes.byref(fd), handle,
                       _CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, ctypes.c_ulonglong(0))
                ptr = _map(handle, size, ordinal)
            except BaseException:
                if fd.value >= 0:
                    os.close(fd.value)
                lib.cuMemRelease(handle)
                raise
        try:
            return cls._wrap(handle.value, ptr, size, ordinal, clear=True), fd.value
        except ShareError:
            os.close(fd.value)
            raise

    @classmethod
    def attach(cls, fd: int, size: int, device=None) -> Shared:
        """Map the buffer behind `fd` (from `create`, `size` bytes) into this process's context; closes `fd`."""
        try:
            ordinal = _ordinal(device)
            with _Current(ordinal):
                handle = ctypes.c_ulonglong()
                _check("cuMemImportFromShareableHandle", ctypes.byref(handle), ctypes.c_void_p(fd),
                       _CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR)
                try:
                    ptr = _map(handle, size, ordinal)
                except BaseException:
                    _cuda().cuMemRelease(handle)
                    raise
        finally:
            os.close(fd)
        return cls._wrap(handle.value, ptr, size, ordinal)

    @classmethod
    def _wrap(cls, handle: int, ptr: int, size: int, ordinal: int, clear: bool = False) -> Shared:
        """The mapped allocation as a Shared (zeroed with `clear`: nothing of earlier allocations is readable or
        passes for a reply); unmapped again and ShareError where torch cannot view it."""
        try:
            shared = cls(handle, ptr, size, ordinal)
            if clear:
                shared._tensor.zero_()
                _sync(ordinal)
            return shared
        except RuntimeError as e:
            _unmap(ptr, size, handle, ordinal)
            raise ShareError(f"cannot use the lent memory here: {e}") from e

    def view(self, size: int):
        """The buffer's first `size` bytes as a uint8 device tensor, or None if it is smaller."""
        return self._tensor[:size] if self._tensor is not None and size <= self.size else None

    def drop(self) -> None:
        """Wait for the device's work on the buffer, unmap it and give up this process's handle (the memory is
        freed once the other process has given up its own, or died)."""
        if self._tensor is None:
            return
        _sync(self.ordinal)
        self._tensor = None
        _unmap(self._ptr, self.size, self._handle, self.ordinal)
        self.size = 0


def _unmap(ptr: int, size: int, handle: int, ordinal: int) -> None:
    lib = _cuda()
    with _Current(ordinal):
        lib.cuMemUnmap(ctypes.c_ulonglong(ptr), ctypes.c_size_t(size))
        lib.cuMemAddressFree(ctypes.c_ulonglong(ptr), ctypes.c_size_t(size))
        lib.cuMemRelease(ctypes.c_ulonglong(handle))


def _sync(ordinal: int) -> None:
    import torch

    torch.cuda.synchronize(ordinal)


def _map(handle: ctypes.c_ulonglong, size: int, ordinal: int) -> int:
    """Reserve address space for `size` bytes, map the allocation there and make it readable and writable by
    this process's context on the device: the address."""
    lib = _cuda()
    ptr = ctypes.c_ulonglong()
    _check("cuMemAddressReserve", ctypes.byref(ptr), ctypes.c_size_t(size), ctypes.c_size_t(0),
           ctypes.c_ulonglong(0), ctypes.c_ulonglong(0))
    try:
        _check("cuMemMap", ptr, ctypes.c_size_t(size), ctypes.c_size_t(0), handle, ctypes.c_ulonglong(0))
        try:
            access = _access(ordinal)
            _check("cuMemSetAccess", ptr, ctypes.c_size_t(size), ctypes.byref(access), ctypes.c_size_t(1))
        except BaseException:
            lib.cuMemUnmap(ptr, ctypes.c_size_t(size))
            raise
    except BaseException:
        lib.cuMemAddressFree(ptr, ctypes.c_size_t(size))
        raise
    return ptr.value
