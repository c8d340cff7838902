"""fs3client: fs3's native client from Python, without a FUSE mount.

    import fs3client
    fs = fs3client.FileSystem.from_env()          # FS3_META, FS3_MGMTD (or pass them)
    f = fs.open("/datasets/tokens.bin")
    a = numpy.empty(4096, numpy.uint8); t = torch.empty(1024, dtype=torch.int32)
    batch = fs.read_batch_async([(f, 0, a), (f, 1 << 20, t)])    # lands in a and t, no copy
    lengths = batch.wait()                                        # bytes read per range

Reads go straight from the storage targets into the caller's buffers (numpy arrays, torch CPU
tensors, bytearrays: anything writable and C-contiguous), batched and concurrent; ctypes releases
the GIL while the client works. Errors raise OSError with the errno and fs3's one-line message.
A FileSystem must not be carried across fork(): each DataLoader worker opens its own (the dataset
in fs3client.data does so by itself).
"""

from __future__ import annotations

import ctypes
import errno
import os
import stat as stat_module
from dataclasses import dataclass
from typing import Sequence

__all__ = ["FileSystem", "File", "Batch", "library_path"]

_ERR_LEN = 1024


def library_path() -> str:
    """Where libfs3c.so is: inside this package, installed (pip install fs3/python) or in the
    build (build/python/fs3client, whose .py files are links to the sources, so the path is not
    resolved)."""
    return os.path.join(os.path.dirname(os.path.abspath(__file__)), "libfs3c.so")


_lib = None
# gRPC (under the native client) does not survive fork(): a child of a process that had connected
# hangs or dies when it connects itself. Such a child is told so instead.
_connected = False
_forked_after_connect = False


def _after_fork_in_child():
    global _forked_after_connect
    _forked_after_connect = _forked_after_connect or _connected


os.register_at_fork(after_in_child=_after_fork_in_child)


def _load():
    global _lib
    if _lib is not None:
        return _lib
    path = library_path()
    try:
        lib = ctypes.CDLL(path)
    except OSError as e:
        raise ImportError(f"fs3client: cannot load {path} (build the fs3c target): {e}") from e
    c = ctypes
    P = c.c_void_p
    sigs = {
        "fs3_connect": [c.c_char_p, c.c_char_p, c.c_uint32, c.c_uint32, c.POINTER(P)],
        "fs3_stat": [P, c.c_char_p, c.POINTER(c.c_uint64), c.POINTER(c.c_uint64),
                     c.POINTER(c.c_uint32), c.POINTER(c.c_int64)],
        "fs3_mkdir": [P, c.c_char_p, c.c_uint32],
        "fs3_unlink": [P, c.c_char_p],
        "fs3_rename": [P, c.c_char_p, c.c_char_p],
        "fs3_rmdir": [P, c.c_char_p],
        "fs3_create": [P, c.c_char_p, c.c_uint32, c.c_int, c.POINTER(c.c_uint64)],
        "fs3_write": [P, c.c_char_p, c.c_uint64, P, c.c_size_t],
        "fs3_list": [P, c.c_char_p, c.c_char_p, c.c_size_t, c.POINTER(c.c_size_t)],
        "fs3_read_batch_submit": [P, c.c_size_t, c.POINTER(c.c_uint64), c.POINTER(c.c_uint64),
                                  c.POINTER(c.c_uint32), c.POINTER(P), c.POINTER(P)],
        "fs3_batch_wait": [P, c.POINTER(c.c_uint32)],
        "fs3_read_clock": [c.c_char_p, c.c_size_t, c.POINTER(c.c_size_t)],
    }
    for name, args in sigs.items():
        fn = getattr(lib, name)
        fn.argtypes = args + [c.c_char_p, c.c_size_t]
        fn.restype = c.c_int
    lib.fs3_fs_free.argtypes = [P]
    lib.fs3_fs_free.restype = None
    lib.fs3_batch_ready.argtypes = [P]
    lib.fs3_batch_ready.restype = c.c_int
    _lib = lib
    return lib


def read_clock() -> dict:
    """{"t<target>": (reads, bytes, 0.0, seconds)}: the reads this process issued to each storage
    target so far, their bytes and their time from issue to answer (hai_job's "read" peer clock:
    step telemetry names the target a job waits on)."""
    size = 4096
    while True:
        buf = ctypes.create_string_buffer(size)
        needed = ctypes.c_size_t()
        try:
            _call(_load().fs3_read_clock, buf, size, ctypes.byref(needed), what="fs3 read clock")
        except OSError as e:
            if e.errno == errno.ERANGE:
                size = needed.value + 1
                continue
            raise
        out = {}
        for line in buf.value.decode().splitlines():
            target, reads, nbytes, seconds = line.split()
            out[f"t{target}"] = (int(reads), int(nbytes), 0.0, float(seconds))
        return out


def _record_reads():
    """Under HAI-Platform's step telemetry ($HAI_STEPS_FILE), each step records the reads of this
    process by target (once a process; hai_job keeps the clock for when recording starts)."""
    global _reads_recorded
    if _reads_recorded or not os.environ.get("HAI_STEPS_FILE"):
        return
    _reads_recorded = True
    try:
        import hai_job
    except ImportError:
        return
    hai_job.add_peer_clock("read", read_clock)


_reads_recorded = False


def _call(fn, *args, what: str):
    err = ctypes.create_string_buffer(_ERR_LEN)
    rc = fn(*args, err, _ERR_LEN)
    if rc != 0:
        msg = err.value.decode(errors="replace") or os.strerror(rc)
        raise OSError(rc, f"{what}: {msg}")


def _buffer(buf) -> tuple[int, int, object]:
    """(address, usable bytes, keep-alive) of a writable C-contiguous buffer."""
    # torch tensors: the storage behind data_ptr(), no copy.
    if hasattr(buf, "data_ptr") and hasattr(buf, "is_contiguous"):
        if buf.device.type != "cpu":
            raise ValueError("fs3client reads into CPU tensors (copy to the GPU afterwards)")
        if not buf.is_contiguous():
            raise ValueError("the tensor must be contiguous")
        return buf.data_ptr(), buf.numel() * buf.element_size(), buf
    mv = memoryview(buf)
    if mv.readonly:
        raise ValueError("the buffer is read-only")
    if not mv.c_contiguous:
        raise ValueError("the buffer must be C-contiguous")
    mv = mv.cast("B")
    if mv.nbytes == 0:
        return 0, 0, mv
    c_arr = (ctypes.c_char * mv.nbytes).from_buffer(mv)
    return ctypes.addressof(c_arr), mv.nbytes, (mv, c_arr)


@dataclass(frozen=True)
class File:
    """An open file: its inode and its size when opened."""

    path: str
    ino: int
    size: int


class Batch:
    """Reads in flight; wait() returns the bytes read per range (short at a file's end)."""

    def __init__(self, handle, n: int, keep):
        self._handle = handle
        self._n = n
        self._keep = keep  # the buffers stay alive until the reads are done

    def done(self) -> bool:
        return self._handle is None or bool(_load().fs3_batch_ready(self._handle))

    def wait(self) -> list[int]:
        if self._handle is None:
            raise RuntimeError("this batch was already waited for")
        lengths = (ctypes.c_uint32 * max(self._n, 1))()
        handle, self._handle = self._handle, None
        try:
            _call(_load().fs3_batch_wait, handle, lengths, what="fs3 read batch")
        finally:
            self._keep = None
        return list(lengths[: self._n])

    def __del__(self):
        # Never leave the native reads writing into freed buffers.
        if getattr(self, "_handle", None) is not None:
            try:
                self.wait()
            except OSError:
                pass


class FileSystem:
    """A connection to one fs3 (fs3-meta and fs3-mgmtd), acting as uid/gid (default: ours)."""

    def __init__(self, meta: str, mgmtd: str, uid: int | None = None, gid: int | None = None):
        global _connected
        if _forked_after_connect:
            raise RuntimeError(
                "fs3client: this process was forked from one that had connected to fs3, and gRPC "
                "does not survive fork(); connect only in the children (fs3client.data does), or "
                "start them with multiprocessing_context='spawn' or 'forkserver'")
        lib = _load()
        _connected = True
        self.meta, self.mgmtd = meta, mgmtd
        self.uid = os.getuid() if uid is None else uid
        self.gid = os.getgid() if gid is None else gid
        handle = ctypes.c_void_p()
        _call(lib.fs3_connect, meta.encode(), mgmtd.encode(), self.uid, self.gid,
              ctypes.byref(handle), what=f"fs3 connect to meta {meta}, mgmtd {mgmtd}")
        self._h = handle
        _record_reads()
        self._pid = os.getpid()

    @classmethod
    def from_env(cls, env=os.environ) -> "FileSystem":
        """From FS3_META and FS3_MGMTD (what the local cluster's env file and jobs get)."""
        try:
            return cls(env["FS3_META"], env["FS3_MGMTD"])
        except KeyError as e:
            raise OSError(errno.EINVAL, f"fs3client: {e.args[0]} is not set") from None

    def close(self):
        if getattr(self, "_h", None) is not None and self._pid == os.getpid():
            _load().fs3_fs_free(self._h)
        self._h = None

    def __del__(self):
        self.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def _handle(self):
        if self._h is None:
            raise ValueError("the FileSystem is closed")
        if self._pid != os.getpid():
            raise RuntimeError("a FileSystem cannot be used across fork(); open one per process")
        return self._h

    # ---- names ------------------------------------------------------------------------------

    def stat(self, path: str) -> os.stat_result:
        c = ctypes
        ino, size, mode, mtime = c.c_uint64(), c.c_uint64(), c.c_uint32(), c.c_int64()
        _call(_load().fs3_stat, self._handle(), path.encode(), c.byref(ino), c.byref(size),
              c.byref(mode), c.byref(mtime), what=f"fs3 stat {path}")
        t = mtime.value / 1e9
        return os.stat_result((mode.value, ino.value, 0, 1, self.uid, self.gid, size.value,
                               t, t, t))

    def exists(self, path: str) -> bool:
        try:
            self.stat(path)
            return True
        except FileNotFoundError:
            return False

    def open(self, path: str) -> File:
        st = self.stat(path)
        if (st.st_mode & 0o170000) == 0o040000:
            raise IsADirectoryError(errno.EISDIR, f"fs3 open {path}: is a directory")
        return File(path, st.st_ino, st.st_size)

    def mkdir(self, path: str, mode: int = 0o755, exist_ok: bool = False):
        try:
            _call(_load().fs3_mkdir, self._handle(), path.encode(), mode, what=f"fs3 mkdir {path}")
        except FileExistsError:
            if not exist_ok:
                raise

    def makedirs(self, path: str, mode: int = 0o755):
        parts = [p for p in path.split("/") if p]
        for i in range(1, len(parts) + 1):
            self.mkdir("/" + "/".join(parts[:i]), mode, exist_ok=True)

    def listdir(self, path: str) -> list[str]:
        size = 1 << 16
        while True:
            buf = ctypes.create_string_buffer(size)
            needed = ctypes.c_size_t()
            try:
                _call(_load().fs3_list, self._handle(), path.encode(), buf, size,
                      ctypes.byref(needed), what=f"fs3 list {path}")
            except OSError as e:
                if e.errno == errno.ERANGE:
                    size = needed.value + 1
                    continue
                raise
            names = buf.raw[: needed.value].split(b"\0")[:-1]
            return [n.decode(errors="surrogateescape") for n in names]

    def unlink(self, path: str):
        _call(_load().fs3_unlink, self._handle(), path.encode(), what=f"fs3 unlink {path}")

    def rmdir(self, path: str):
        """Removes the empty directory `path`."""
        _call(_load().fs3_rmdir, self._handle(), path.encode(), what=f"fs3 rmdir {path}")

    def rmtree(self, path: str):
        """Removes `path` and everything under it (as shutil.rmtree)."""
        if not stat_module.S_ISDIR(self.stat(path).st_mode):
            self.unlink(path)
            return
        for name in self.listdir(path):
            self.rmtree(path.rstrip("/") + "/" + name)
        self.rmdir(path)

    def rename(self, src: str, dst: str):
        """Renames `src` to `dst` at once, replacing a file `dst` (as os.replace does)."""
        _call(_load().fs3_rename, self._handle(), src.encode(), dst.encode(),
              what=f"fs3 rename {src} to {dst}")

    # ---- data -------------------------------------------------------------------------------

    def create(self, path: str, mode: int = 0o644, exclusive: bool = False) -> File:
        ino = ctypes.c_uint64()
        _call(_load().fs3_create, self._handle(), path.encode(), mode, int(exclusive),
              ctypes.byref(ino), what=f"fs3 create {path}")
        return File(path, ino.value, 0)

    def write(self, path: str, offset: int, data) -> int:
        """Writes `data` (bytes-like, numpy array, CPU tensor) at `offset`; durable on return."""
        if hasattr(data, "data_ptr"):
            data = data.contiguous().numpy()
        mv = memoryview(data).cast("B")
        if not mv.c_contiguous:
            raise ValueError("the data must be C-contiguous")
        n = mv.nbytes
        # ctypes gives the address of a writable buffer (bytearray, numpy, tensor) as is; numpy,
        # where installed, gives a read-only one's (bytes, a tensor's storage as torch.save writes
        # it) without a copy (else it is copied). The buffer is not changed, and kept alive until
        # the call returns.
        if n == 0:
            address, keep = None, None
        elif mv.readonly:
            try:
                import numpy
            except ImportError:
                keep = (ctypes.c_char * n).from_buffer_copy(mv)
                address = ctypes.addressof(keep)
            else:
                keep = numpy.frombuffer(mv, dtype=numpy.uint8)
                address = keep.ctypes.data
        else:
            keep = (ctypes.c_char * n).from_buffer(mv)
            address = ctypes.addressof(keep)
        _call(_load().fs3_write, self._handle(), path.encode(), offset, address, n,
              what=f"fs3 write {path}")
        del keep
        return n

    def write_file(self, path: str, data, chunk: int = 16 << 20) -> File:
        """Creates (or truncates) `path` and writes `data` to it in pieces of `chunk` bytes."""
        f = self.create(path)
        mv = memoryview(data.contiguous().numpy() if hasattr(data, "data_ptr") else data).cast("B")
        for off in range(0, mv.nbytes, chunk):
            self.write(path, off, mv[off:off + chunk])
        return File(path, f.ino, mv.nbytes)

    def read_batch_async(self, ranges: Sequence[tuple]) -> Batch:
        """Starts reading every (file, offset, buffer[, length]) range into its buffer.

        `file` is a File (or an inode number); `length` defaults to the buffer's size."""
        n = len(ranges)
        inos = (ctypes.c_uint64 * max(n, 1))()
        offsets = (ctypes.c_uint64 * max(n, 1))()
        lengths = (ctypes.c_uint32 * max(n, 1))()
        bufs = (ctypes.c_void_p * max(n, 1))()
        keep = []
        for i, r in enumerate(ranges):
            f, off, buf = r[0], r[1], r[2]
            addr, nbytes, k = _buffer(buf)
            length = nbytes if len(r) < 4 else int(r[3])
            if length > nbytes:
                raise ValueError(f"range {i}: {length} bytes do not fit its {nbytes}-byte buffer")
            if length >= 1 << 32 or off < 0:
                raise ValueError(f"range {i}: bad offset or length")
            inos[i] = f.ino if isinstance(f, File) else int(f)
            offsets[i], lengths[i], bufs[i] = off, length, addr
            keep.append(k)
        handle = ctypes.c_void_p()
        _call(_load().fs3_read_batch_submit, self._handle(), n, inos, offsets, lengths, bufs,
              ctypes.byref(handle), what="fs3 read batch")
        return Batch(handle, n, keep)

    def read_batch(self, ranges: Sequence[tuple]) -> list[int]:
        return self.read_batch_async(ranges).wait()

    def read(self, file: File, offset: int = 0, length: int | None = None) -> bytes:
        if length is None:
            length = max(file.size - offset, 0)
        buf = bytearray(length)
        got = self.read_batch([(file, offset, buf)])[0]
        return bytes(buf[:got])

