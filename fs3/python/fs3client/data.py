"""Datasets over fs3 for torch.utils.data.

    from fs3client.data import TokenWindows
    ds = TokenWindows("/datasets/tokens.bin", seq_len=128, dtype="uint16")   # FS3_META / FS3_MGMTD
    loader = torch.utils.data.DataLoader(ds, batch_size=32, shuffle=True, num_workers=2)
    for x, y in loader: ...        # x, y: int64 [32, 128]; y is x shifted by one token

A token file is a flat array of little-endian integers (write one with write_tokens). A batch of
windows is one batched fs3 read (DataLoader calls __getitems__ with the batch's indices), straight
into a NumPy buffer; each worker process connects on its own.

gRPC, under the native client, does not survive fork(): a process that has connected must not
fork DataLoader workers (they would hang or die). So TokenWindows keeps the process that makes it
free of connections (a helper process looks up the file's size) and connects only where it reads:
in each worker, or in the main process when num_workers=0. Every multiprocessing context works.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import torch

from . import File, FileSystem

__all__ = ["TokenWindows", "write_tokens"]


def _open_in_helper(meta: str, mgmtd: str, path: str) -> File:
    """fs.open(path) in a child process, so that this one never starts gRPC (see above)."""
    code = ("import json, sys, fs3client\n"
            "try:\n"
            "    f = fs3client.FileSystem(sys.argv[1], sys.argv[2]).open(sys.argv[3])\n"
            "    print(json.dumps({'ino': f.ino, 'size': f.size}))\n"
            "except OSError as e:\n"
            "    print(json.dumps({'errno': e.errno, 'error': str(e)}))\n")
    pkg_parent = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env = dict(os.environ)
    env["PYTHONPATH"] = pkg_parent + os.pathsep + env.get("PYTHONPATH", "")
    out = subprocess.run([sys.executable, "-c", code, meta, mgmtd, path], env=env,
                         capture_output=True, text=True, timeout=120)
    try:
        r = json.loads(out.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        raise OSError(f"fs3client: looking up {path} failed: {out.stderr.strip()[-500:]}") from None
    if "error" in r:
        raise OSError(r["errno"], r["error"])
    return File(path, r["ino"], r["size"])


def write_tokens(fs: FileSystem, path: str, tokens, dtype="uint16"):
    """Writes `tokens` (any integer array) to `path` on fs3 as a flat `dtype` array."""
    arr = np.ascontiguousarray(np.asarray(tokens), dtype=np.dtype(dtype).newbyteorder("<"))
    info = np.iinfo(arr.dtype)
    src = np.asarray(tokens)
    if src.size and (src.min() < info.min or src.max() > info.max):
        raise ValueError(f"tokens do not fit {arr.dtype}")
    return fs.write_file(path, arr)


class TokenWindows(torch.utils.data.Dataset):
    """Window i is tokens [i*stride, i*stride + seq_len] of the file: (x, y) = (its first
    seq_len tokens, its last seq_len tokens), both int64 tensors."""

    def __init__(self, path: str, seq_len: int, dtype="uint16", stride: int | None = None,
                 meta: str | None = None, mgmtd: str | None = None):
        if seq_len < 1:
            raise ValueError("seq_len must be positive")
        self.path = path
        self.seq_len = seq_len
        self.dtype = np.dtype(dtype).newbyteorder("<")
        if self.dtype.kind not in "iu":
            raise ValueError(f"token dtype must be an integer type, not {self.dtype}")
        self.stride = stride or seq_len
        self.meta = meta or os.environ.get("FS3_META")
        self.mgmtd = mgmtd or os.environ.get("FS3_MGMTD")
        if not self.meta or not self.mgmtd:
            raise ValueError("TokenWindows needs meta and mgmtd (or FS3_META and FS3_MGMTD)")
        self._fs = None
        self._pid = None
        f = _open_in_helper(self.meta, self.mgmtd, path)
        if f.size % self.dtype.itemsize:
            raise ValueError(f"{path}: {f.size} bytes is not a whole number of {self.dtype} tokens")
        self.tokens = f.size // self.dtype.itemsize
        self._file = f
        if self.tokens < seq_len + 1:
            raise ValueError(f"{path} holds {self.tokens} tokens, fewer than one window "
                             f"({seq_len + 1})")

    def fs(self) -> FileSystem:
        """This process's connection (made again after fork, in DataLoader workers)."""
        if self._fs is None or self._pid != os.getpid():
            self._fs = FileSystem(self.meta, self.mgmtd)
            self._pid = os.getpid()
        return self._fs

    def __getstate__(self):
        state = dict(self.__dict__)
        state["_fs"] = None
        state["_pid"] = None
        return state

    def __len__(self) -> int:
        return (self.tokens - self.seq_len - 1) // self.stride + 1

    def __getitem__(self, i: int):
        return self.__getitems__([i])[0]

    def __getitems__(self, indices):
        n = len(indices)
        for i in indices:
            if not 0 <= i < len(self):
                raise IndexError(f"window {i} of {len(self)}")
        window = self.seq_len + 1
        buf = np.empty((n, window), dtype=self.dtype)
        item = self.dtype.itemsize
        ranges = [(self._file, int(i) * self.stride * item, buf[k]) for k, i in enumerate(indices)]
        got = self.fs().read_batch(ranges)
        if any(g != window * item for g in got):
            raise OSError(f"{self.path}: short read (the file shrank?)")
        t = torch.from_numpy(buf.astype(np.int64))
        return [(t[k, :-1], t[k, 1:]) for k in range(n)]
