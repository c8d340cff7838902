"""torch.distributed.checkpoint (DCP) on fs3, through its native client: no FUSE mount in the
data path.

    import torch.distributed.checkpoint as dcp
    from haiscale.dcp import Fs3StorageWriter, Fs3StorageReader

    dcp.save(state_dict, storage_writer=Fs3StorageWriter("/ckpt/run1/step-100"))
    future = dcp.async_save(state_dict, storage_writer=Fs3StorageWriter("fs3:///ckpt/run1/step-200"))
    dcp.load(state_dict, storage_reader=Fs3StorageReader("/ckpt/run1/step-200"))

A checkpoint is a directory of fs3 (a path in its namespace, or ``fs3://`` and that path) laid out
as DCP's FileSystemWriter lays it out (one file per rank and writer thread, and the `.metadata`
the coordinator writes last), so DCP's planners reshard it on load: saved at one world size,
loaded at another. Each rank writes its files with `thread_count` threads in parallel, in pieces
of `chunk_bytes` that are durable when written (acknowledged by every replica of their chain), so
no fsync is needed; the `.metadata` is written under another name and renamed into place, so a
checkpoint without its `.metadata` is one that did not complete. A rank reads everything its plan
needs from a file in batches of up to `batch_bytes`, every range of a batch at once
(fs3client's read_batch).

The client connects with FS3_META and FS3_MGMTD (what jobs on the platform get), or pass an
fs3client.FileSystem as `fs`. A failed write raises from dcp.save (or the async save's future),
on every thread it happened in, never ignored.
"""

import io
import os
import posixpath
import threading
import time
from contextlib import contextmanager

import torch
from torch.distributed._shard._utils import narrow_tensor_by_index
from torch.distributed.checkpoint import filesystem as _dcp_fs
from torch.distributed.checkpoint.filesystem import FileSystemBase, FileSystemReader
from torch.distributed.checkpoint.planner import LoadItemType
from torch.distributed.checkpoint.staging import BlockingAsyncStager
from torch.futures import Future

_SCHEME = "fs3://"
_MAX_RANGE = 256 << 20  # one range of a batched read (fs3 takes up to 4 GiB)


def _fs3_path(path):
    path = os.fspath(path)
    if path.startswith(_SCHEME):
        path = path[len(_SCHEME):]
    if not path.startswith("/"):
        raise ValueError(f"haiscale.dcp: {path!r} is not an absolute fs3 path (or fs3://...)")
    return posixpath.normpath(path)


def _connect(fs):
    if fs is not None:
        return fs
    import fs3client

    return fs3client.FileSystem.from_env()


class _WriteStream(io.RawIOBase):
    """A new fs3 file written front to back in pieces of `chunk` bytes, each durable once written."""

    def __init__(self, fs, path, chunk):
        super().__init__()
        self._fs, self._path, self._chunk = fs, path, chunk
        fs.create(path)  # (an existing one is truncated)
        self._buf = bytearray()
        self._written = 0  # bytes on fs3

    def writable(self):
        return True

    def write(self, b):
        view = memoryview(b).cast("B")
        if not self._buf and view.nbytes >= self._chunk:
            # A big piece (a tensor's bytes, as torch.save writes them) goes out as it is.
            self._fs.write(self._path, self._written, view)
            self._written += view.nbytes
            return view.nbytes
        self._buf += view
        if len(self._buf) >= self._chunk:
            self._flush_buffer()
        return view.nbytes

    def tell(self):
        return self._written + len(self._buf)

    def _flush_buffer(self):
        if self._buf:
            self._fs.write(self._path, self._written, self._buf)
            self._written += len(self._buf)
            self._buf = bytearray()

    def flush(self):
        self._flush_buffer()

    def close(self):
        if not self.closed:
            try:
                self._flush_buffer()
            finally:
                super().close()


class _ReadStream(io.RawIOBase):
    """A seekable view of an fs3 file, read on demand (small reads: the metadata)."""

    def __init__(self, fs, path):
        super().__init__()
        self._fs = fs
        self._file = fs.open(path)
        self._pos = 0

    def readable(self):
        return True

    def seekable(self):
        return True

    def seek(self, offset, whence=io.SEEK_SET):
        base = {io.SEEK_SET: 0, io.SEEK_CUR: self._pos, io.SEEK_END: self._file.size}[whence]
        self._pos = max(0, base + offset)
        return self._pos

    def tell(self):
        return self._pos

    def readinto(self, b):
        view = memoryview(b).cast("B")
        n = min(view.nbytes, max(0, self._file.size - self._pos), _MAX_RANGE)
        if n == 0:
            return 0
        got = self._fs.read_batch([(self._file, self._pos, view[:n])])[0]
        self._pos += got
        return got


class Fs3FileSystem(FileSystemBase):
    """DCP's file-system interface over fs3's native client."""

    def __init__(self, fs=None, chunk_bytes=16 << 20):
        self.fs = _connect(fs)
        self.chunk_bytes = chunk_bytes

    @contextmanager
    def create_stream(self, path, mode):
        if mode == "wb":
            stream = _WriteStream(self.fs, _fs3_path(path), self.chunk_bytes)
        elif mode == "rb":
            stream = _ReadStream(self.fs, _fs3_path(path))
        else:
            raise ValueError(f"haiscale.dcp: mode {mode!r} (only 'wb' and 'rb')")
        try:
            yield stream
        finally:
            stream.close()

    def concat_path(self, path, suffix):
        return posixpath.join(_fs3_path(path), suffix)

    def init_path(self, path):
        return _fs3_path(path)

    def rename(self, path, new_path):
        self.fs.rename(_fs3_path(path), _fs3_path(new_path))

    def mkdir(self, path):
        self.fs.makedirs(_fs3_path(path))

    @classmethod
    def validate_checkpoint_id(cls, checkpoint_id):
        return os.fspath(checkpoint_id).startswith(_SCHEME)

    def exists(self, path):
        return self.fs.exists(_fs3_path(path))

    def rm_file(self, path):
        self.fs.unlink(_fs3_path(path))

    def ls(self, path):
        base = _fs3_path(path)
        return [posixpath.join(base, name) for name in self.fs.listdir(base)]


class Fs3StorageWriter(_dcp_fs._FileSystemWriter, BlockingAsyncStager):
    """DCP's StorageWriter onto fs3 (dcp.save and dcp.async_save); see the module's docstring."""

    def __init__(self, path, fs=None, thread_count=4, chunk_bytes=16 << 20,
                 single_file_per_rank=True, overwrite=True, cache_staged_state_dict=False,
                 step=None):
        """`step`: the training step this checkpoint holds; given, each rank reports what it wrote
        (bytes, seconds) to HAI-Platform as that step's checkpoint (hai_job.report_checkpoint:
        what a suspension of the job costs, and its deadline). haiscale.checkpoint.save_dcp
        reports by itself and leaves it None."""
        _dcp_fs._FileSystemWriter.__init__(
            self, path=_fs3_path(path), single_file_per_rank=single_file_per_rank,
            sync_files=False,  # each piece is durable when written
            thread_count=thread_count, overwrite=overwrite)
        BlockingAsyncStager.__init__(self, cache_staged_state_dict=cache_staged_state_dict)
        self.fs = Fs3FileSystem(fs, chunk_bytes)
        self.path = self.fs.init_path(path)
        self.step = step

    def stage(self, state_dict):
        self.per_thread_copy_ahead = 0  # (as FileSystemWriter: the staged copy is on the CPU)
        return super().stage(state_dict)

    def _write_data(self, planner, file_queue):
        # DCP's own threads drop what a thread raises (the checkpoint would then miss that
        # thread's files); here every writer's failure reaches the caller.
        import queue

        results, errors = queue.Queue(), []

        def writer():
            try:
                _dcp_fs._write_files_from_queue(
                    create_stream=self.fs.create_stream, file_queue=file_queue,
                    result_queue=results, planner=planner, transforms=self.transforms,
                    inflight_threshhold=self.per_thread_copy_ahead, use_fsync=False,
                    thread_count=self.thread_count,
                    serialization_format=self.serialization_format)
            except BaseException as e:  # noqa: BLE001 -- raised below, on the caller's thread
                errors.append(e)

        began = time.perf_counter()
        threads = [threading.Thread(target=writer, name=f"dcp-fs3-{i}")
                   for i in range(1, self.thread_count)]
        for t in threads:
            t.start()
        writer()
        for t in threads:
            t.join()
        if errors:
            raise RuntimeError(f"haiscale.dcp: writing the checkpoint to {self.path} failed: "
                               f"{errors[0]}") from errors[0]
        written = []
        while not results.empty():
            written += results.get_nowait()
        if self.step is not None:
            from .checkpoint import _report_checkpoint

            _report_checkpoint(self.step, sum(r.size_in_bytes for r in written),
                               time.perf_counter() - began)
        future = Future()
        future.set_result(written)
        return future

    @classmethod
    def validate_checkpoint_id(cls, checkpoint_id):
        return Fs3FileSystem.validate_checkpoint_id(checkpoint_id)


class Fs3StorageReader(FileSystemReader):
    """DCP's StorageReader from fs3 (dcp.load, with resharding); see the module's docstring."""

    def __init__(self, path, fs=None, batch_bytes=256 << 20):
        super().__init__(_fs3_path(path))
        self.fs = Fs3FileSystem(fs)
        self.path = self.fs.init_path(path)
        self.batch_bytes = batch_bytes

    def read_data(self, plan, planner):
        fs = self.fs.fs
        files = {}
        wanted = []  # (request, its storage info), in file order
        for req in plan.items:
            info = self.storage_data[req.storage_index]
            if info.relative_path not in files:
                files[info.relative_path] = fs.open(
                    self.fs.concat_path(self.path, info.relative_path))
            wanted.append((req, info))
        wanted.sort(key=lambda r: (r[1].relative_path, r[1].offset))
        batch, size = [], 0
        for req, info in wanted:
            if batch and size + info.length > self.batch_bytes:
                self._read_batch(batch, files, planner)
                batch, size = [], 0
            batch.append((req, info))
            size += info.length
        if batch:
            self._read_batch(batch, files, planner)
        future = Future()
        future.set_result(None)
        return future

    def _read_batch(self, batch, files, planner):
        """Reads every item of `batch` at once, then hands each to the planner as DCP does."""
        buffers, ranges = [], []
        for _, info in batch:
            buf = bytearray(info.length)
            buffers.append(buf)
            view = memoryview(buf)
            for at in range(0, info.length, _MAX_RANGE):
                piece = view[at:at + _MAX_RANGE]
                ranges.append((files[info.relative_path], info.offset + at, piece))
        got = self.fs.fs.read_batch(ranges)
        for (_, off, piece), n in zip(ranges, got):
            if n != piece.nbytes:
                raise RuntimeError(f"haiscale.dcp: {self.path}: short read at offset {off} "
                                   f"({n} of {piece.nbytes} bytes): the checkpoint is truncated")
        for (req, info), buf in zip(batch, buffers):
            stream = self.transforms.transform_load_stream(
                req, info.transform_descriptors or (), io.BytesIO(buf))
            if req.type == LoadItemType.BYTE_IO:
                planner.load_bytes(req, io.BytesIO(stream.read()))
                continue
            if not stream.seekable():
                stream = io.BytesIO(stream.read())
            tensor = torch.load(stream, map_location="cpu", weights_only=True)
            tensor = narrow_tensor_by_index(tensor, req.storage_offsets, req.lengths)
            target = planner.resolve_tensor(req).detach()
            if target.size() != tensor.size():
                raise RuntimeError(f"haiscale.dcp: {req.storage_index} is {tuple(tensor.size())} "
                                   f"in the checkpoint, {tuple(target.size())} here")
            target.copy_(tensor)
            planner.commit_tensor(req, target)

    @classmethod
    def validate_checkpoint_id(cls, checkpoint_id):
        return Fs3FileSystem.validate_checkpoint_id(checkpoint_id)
