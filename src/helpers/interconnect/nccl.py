"""NCCL's C API through ctypes: ncclAllReduce and grouped ncclSend/ncclRecv, called directly.

This is how sglang's decode step issues its all-reduce when the custom all-reduce is off (the
investigation's case: more than two PCIe GPUs, or no P2P): its PyNcclCommunicator binds libnccl with
ctypes and calls ncclAllReduce on the current stream inside the CUDA graph, not through
torch.distributed. nccl-tests calls the same function. Timing it here separates what NCCL and the link
cost from what torch.distributed's ProcessGroupNCCL adds around each call.

The library is the libnccl that torch loaded (found in /proc/self/maps), so the NCCL version is
torch's. torch.cuda.nccl.init_rank, which would give a per-process communicator, fails on torch 2.11
with Python 3.12 ("PY_SSIZE_T_CLEAN macro must be defined"), hence this binding.

    lib = ncclbind.library()                    # NcclUnavailable if there is none
    uid = lib.unique_id()                       # 128 bytes, rank 0 makes it, every rank gets a copy
    comm = lib.init_rank(world, uid, rank)      # on the current CUDA device
    comm.all_reduce(x, y, stream)               # tensors; y may be x (in place)
    comm.all_to_all(x, y, stream)               # grouped send/recv, nccl-tests' alltoall
"""
from __future__ import annotations

import ctypes as c

UNIQUE_ID_BYTES = 128            # sizeof(ncclUniqueId), NCCL_UNIQUE_ID_BYTES in nccl.h
SUM = 0                          # ncclSum
#: ncclDataType_t for the torch dtypes the sweeps use (nccl.h)
DTYPES = {"int8": 0, "uint8": 1, "int32": 2, "uint32": 3, "int64": 4, "uint64": 5, "float16": 6,
          "float32": 7, "float64": 8, "bfloat16": 9}


class NcclUnavailable(RuntimeError):
    """No libnccl can be loaded in this process (a CPU build of torch, or no NVIDIA NCCL library)."""


class NcclError(RuntimeError):
    """An NCCL call returned an error; the message has NCCL's own text for it."""


class _UniqueId(c.Structure):
    _fields_ = [("internal", c.c_byte * UNIQUE_ID_BYTES)]


_LIB = None


def _find() -> c.CDLL:
    import torch

    if torch.cuda.is_available():
        torch.cuda.init()
    from helpers.machine.cudalibs import load

    lib = load("libnccl", ["libnccl.so.2", "libnccl.so"])
    if lib is not None:
        return lib
    raise NcclUnavailable("no libnccl could be loaded in this process (torch has not loaded one and "
                          "libnccl.so.2 is not on the library path): install a CUDA build of torch, which "
                          "brings NCCL, or use the torch.distributed path (api='torch')")


def library() -> "Library":
    """The process's one binding of libnccl (loaded on first use)."""
    global _LIB
    if _LIB is None:
        _LIB = Library(_find())
    return _LIB


class Library:
    def __init__(self, lib: c.CDLL):
        self.lib = lib
        p, i, sz = c.c_void_p, c.c_int, c.c_size_t
        sig = {
            "ncclGetVersion": [c.POINTER(i)],
            "ncclGetUniqueId": [c.POINTER(_UniqueId)],
            "ncclCommInitRank": [c.POINTER(p), i, _UniqueId, i],
            "ncclAllReduce": [p, p, sz, i, i, p, p],
            "ncclSend": [p, sz, i, i, p, p],
            "ncclRecv": [p, sz, i, i, p, p],
            "ncclGroupStart": [],
            "ncclGroupEnd": [],
            "ncclCommDestroy": [p],
            "ncclCommAbort": [p],
        }
        for name, args in sig.items():
            f = getattr(lib, name)
            f.restype, f.argtypes = c.c_int, args
        lib.ncclGetErrorString.restype, lib.ncclGetErrorString.argtypes = c.c_char_p, [c.c_int]
        lib.ncclGetLastError.restype, lib.ncclGetLastError.argtypes = c.c_char_p, [p]

    def check(self, rc: int, what: str) -> None:
        if rc != 0:
            text = (self.lib.ncclGetErrorString(rc) or b"").decode(errors="replace")
            last = (self.lib.ncclGetLastError(None) or b"").decode(errors="replace")
            raise NcclError(f"{what} returned NCCL error {rc} ({text})" + (f": {last}" if last else ""))

    def version(self) -> str:
        """'2.28.9' from ncclGetVersion (major*10000 + minor*100 + patch since 2.9)."""
        v = c.c_int()
        self.check(self.lib.ncclGetVersion(c.byref(v)), "ncclGetVersion")
        return f"{v.value // 10000}.{v.value % 10000 // 100}.{v.value % 100}"

    def unique_id(self) -> bytes:
        uid = _UniqueId()
        self.check(self.lib.ncclGetUniqueId(c.byref(uid)), "ncclGetUniqueId")
        return bytes(bytearray(uid.internal))

    def init_rank(self, world: int, uid: bytes, rank: int) -> "Comm":
        """A communicator for `rank` of `world` on the current CUDA device (torch.cuda.set_device first)."""
        if len(uid) != UNIQUE_ID_BYTES:
            raise ValueError(f"uid has {len(uid)} bytes; an ncclUniqueId has {UNIQUE_ID_BYTES}")
        u = _UniqueId()
        c.memmove(u.internal, uid, UNIQUE_ID_BYTES)
        comm = c.c_void_p()
        self.check(self.lib.ncclCommInitRank(c.byref(comm), world, u, rank),
                   f"ncclCommInitRank(rank {rank} of {world})")
        return Comm(self, comm, world, rank)


def _dtype(t) -> int:
    name = str(t.dtype).replace("torch.", "")
    if name not in DTYPES:
        raise ValueError(f"dtype {t.dtype} has no NCCL data type here; use one of {sorted(DTYPES)}")
    return DTYPES[name]


class Comm:
    def __init__(self, lib: Library, handle: c.c_void_p, world: int, rank: int):
        self.l, self.h, self.world, self.rank = lib, handle, world, rank

    def all_reduce(self, x, y, stream: int) -> None:
        """ncclAllReduce(x -> y, sum) on `stream` (an int cudaStream_t, e.g. torch's .cuda_stream); y is x
        for the in-place call. Both are contiguous CUDA tensors of one size and dtype."""
        self.l.check(self.l.lib.ncclAllReduce(x.data_ptr(), y.data_ptr(), x.numel(), _dtype(x), SUM, self.h,
                                              stream), "ncclAllReduce")

    def all_to_all(self, x, y, stream: int) -> None:
        """Block j of x goes to rank j, block j of y comes from rank j: one ncclSend and one ncclRecv per
        peer inside ncclGroupStart/End, as nccl-tests' alltoall issues it."""
        n = x.numel() // self.world
        es, dt, lib = x.element_size(), _dtype(x), self.l.lib
        self.l.check(lib.ncclGroupStart(), "ncclGroupStart")
        try:
            for r in range(self.world):
                self.l.check(lib.ncclSend(x.data_ptr() + r * n * es, n, dt, r, self.h, stream), f"ncclSend to {r}")
                self.l.check(lib.ncclRecv(y.data_ptr() + r * n * es, n, dt, r, self.h, stream), f"ncclRecv from {r}")
        finally:
            self.l.check(lib.ncclGroupEnd(), "ncclGroupEnd")

    def abort(self) -> None:
        """Free the communicator without waiting for peers (ncclCommAbort)."""
        if self.h:
            self.l.lib.ncclCommAbort(self.h)
            self.h = None
