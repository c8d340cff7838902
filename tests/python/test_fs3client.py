"""fs3client, the Python face of fs3's native client, against a real 3-replica fs3 on loopback:
reads land in numpy arrays, torch tensors and bytearrays without a copy; bad input raises and
changes nothing; the token dataset gives the right windows through DataLoader workers."""

import errno
import os
import subprocess
import sys

import numpy as np
import pytest
import torch
from fs3_cluster import Fs3Cluster

import fs3client
from fs3client.data import TokenWindows, write_tokens

LOADER_SCRIPT = """
import numpy as np, torch
from fs3client.data import TokenWindows
tokens = (np.arange(50_000) * 7919) % 50_000
def main():
    ds = TokenWindows("/tokens.bin", seq_len=128)
    for ctx in ("fork", "spawn"):
        loader = torch.utils.data.DataLoader(ds, batch_size=16, shuffle=True, num_workers=2,
                                             multiprocessing_context=ctx)
        seen = 0
        for i, (xb, yb) in enumerate(loader):
            assert xb.shape == (16, 128)
            assert torch.equal(xb[:, 1:], yb[:, :-1])
            for row in xb:  # each row is the window of the file that starts with its first token
                start = int(np.where(tokens == int(row[0]))[0][0])
                assert np.array_equal(row.numpy(), tokens[start:start + 128])
            seen += 1
            if i == 4:
                break
        print(ctx, seen)
if __name__ == "__main__":
    main()
"""


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    with Fs3Cluster(str(tmp_path_factory.mktemp("fs3"))) as c:
        yield c


@pytest.fixture
def fs(cluster):
    with fs3client.FileSystem(cluster.meta, cluster.mgmtd) as f:
        yield f


def test_write_then_batched_reads_into_numpy_torch_and_bytes(fs):
    fs.makedirs("/rw/a")
    data = np.random.default_rng(1).integers(0, 256, 3 << 20, dtype=np.uint8)  # spans 3 chunks
    f = fs.write_file("/rw/a/blob", data)
    assert f.size == data.nbytes == fs.stat("/rw/a/blob").st_size
    g = fs.write_file("/rw/small", b"hello fs3")
    a = np.zeros(4096, np.uint8)
    t = torch.zeros(1000, dtype=torch.int32)
    b = bytearray(9)
    tail = np.full(100, 7, np.uint8)
    batch = fs.read_batch_async([
        (f, (1 << 20) - 100, a),          # across a chunk boundary
        (f, 2 << 20, t),                  # into a tensor's storage
        (g, 0, b),
        (f, data.nbytes - 40, tail),      # short: 40 bytes, the rest untouched
    ])
    assert batch.wait() == [4096, 4000, 9, 40]
    assert np.array_equal(a, data[(1 << 20) - 100:(1 << 20) + 3996])
    assert np.array_equal(t.numpy().view(np.uint8), data[2 << 20:(2 << 20) + 4000])
    assert bytes(b) == b"hello fs3"
    assert np.array_equal(tail[:40], data[-40:]) and (tail[40:] == 7).all()
    assert fs.read(g) == b"hello fs3"
    assert sorted(fs.listdir("/rw")) == ["a", "small"]


def test_many_ranges_in_one_batch(fs):
    fs.makedirs("/many")
    files = [fs.write_file(f"/many/f{i}", bytes([i]) * 10000) for i in range(20)]
    bufs = [np.zeros(100, np.uint8) for _ in range(200)]
    ranges = [(files[k % 20], (k * 37) % 9900, bufs[k]) for k in range(200)]
    assert fs.read_batch(ranges) == [100] * 200
    for k, buf in enumerate(bufs):
        assert (buf == k % 20).all()


def test_rename_replaces_at_once_and_a_missing_source_changes_nothing(fs):
    fs.makedirs("/ren")
    fs.write_file("/ren/new.tmp", b"new contents")
    fs.write_file("/ren/current", b"old")
    fs.rename("/ren/new.tmp", "/ren/current")  # how a writer commits what it wrote
    assert sorted(fs.listdir("/ren")) == ["current"]
    assert fs.read(fs.open("/ren/current")) == b"new contents"
    with pytest.raises(FileNotFoundError):
        fs.rename("/ren/none", "/ren/current")
    assert fs.read(fs.open("/ren/current")) == b"new contents"
    fs.makedirs("/ren/sub/deeper")
    with pytest.raises(OSError) as e:
        fs.rmdir("/ren")  # not empty: refused
    assert e.value.errno == errno.ENOTEMPTY
    fs.rmtree("/ren")
    assert not fs.exists("/ren")


def test_a_write_of_many_chunks_lands_whole_from_a_read_only_buffer(fs):
    """Chunks of one write go out side by side; bytes (read-only) are written without a copy."""
    data = np.random.default_rng(2).integers(0, 256, (9 << 20) + 123, dtype=np.uint8).tobytes()
    fs.create("/wide")
    assert fs.write("/wide", 5, data) == len(data)
    f = fs.open("/wide")
    assert f.size == len(data) + 5
    assert fs.read(f, 5) == data


def test_bad_input_raises_and_changes_nothing(fs, cluster):
    with pytest.raises(FileNotFoundError, match="/nope"):
        fs.open("/nope")
    f = fs.write_file("/bad", b"x" * 100)
    with pytest.raises(ValueError, match="read-only"):
        fs.read_batch([(f, 0, b"immutable")])
    with pytest.raises(ValueError, match="do not fit"):
        fs.read_batch([(f, 0, bytearray(10), 11)])
    with pytest.raises(ValueError, match="contiguous"):
        fs.read_batch([(f, 0, np.zeros((10, 10), np.uint8)[:, 0])])
    with pytest.raises(IsADirectoryError):
        fs.open("/")
    with pytest.raises(FileExistsError):
        fs.mkdir("/many")
    # Another user may read a 0644 file but not write it; the file is unchanged.
    with fs3client.FileSystem(cluster.meta, cluster.mgmtd, uid=1000, gid=1000) as other:
        assert other.read(other.open("/bad"), 0, 5) == b"xxxxx"
        with pytest.raises(PermissionError):
            other.write("/bad", 0, b"yyyyy")
        with pytest.raises(PermissionError):
            other.mkdir("/theirs")
    assert fs.read(fs.open("/bad")) == b"x" * 100
    with pytest.raises(OSError) as e:
        fs3client.FileSystem("127.0.0.1:1", "127.0.0.1:1")
    assert e.value.errno in (errno.EHOSTUNREACH, errno.ECONNREFUSED, errno.EAGAIN, errno.EIO)


def test_token_windows_through_dataloader_workers(fs, cluster, monkeypatch):
    monkeypatch.setenv("FS3_META", cluster.meta)
    monkeypatch.setenv("FS3_MGMTD", cluster.mgmtd)
    tokens = (np.arange(50_000) * 7919) % 50_000
    write_tokens(fs, "/tokens.bin", tokens, dtype="uint16")
    ds = TokenWindows("/tokens.bin", seq_len=128)
    assert len(ds) == (50_000 - 129) // 128 + 1
    x, y = ds[5]
    assert x.dtype == torch.int64 and x.shape == (128,)
    assert np.array_equal(x.numpy(), tokens[640:768]) and np.array_equal(y.numpy(), tokens[641:769])
    with pytest.raises(IndexError):
        ds[len(ds)]
    # Through DataLoader workers, as training code uses it: in a fresh process (this one has
    # connected, so its forked children could not), with forked and with spawned workers.
    out = subprocess.run([sys.executable, "-c", LOADER_SCRIPT], capture_output=True, text=True,
                         timeout=300, env=dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path)))
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout.split() == ["fork", "5", "spawn", "5"]
    fs.write_file("/odd.bin", b"\x01\x02\x03")
    with pytest.raises(ValueError, match="whole number"):
        TokenWindows("/odd.bin", seq_len=1)
    with pytest.raises(FileNotFoundError):
        TokenWindows("/absent.bin", seq_len=8)
    with pytest.raises(ValueError, match="fit"):
        write_tokens(fs, "/big.bin", [70_000], dtype="uint16")


def test_a_forked_child_of_a_connected_process_is_told_why_it_cannot_connect(fs, cluster):
    pid = os.fork()
    if pid == 0:
        code = 3
        try:
            fs3client.FileSystem(cluster.meta, cluster.mgmtd)
        except RuntimeError as e:
            code = 0 if "does not survive fork" in str(e) else 4
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
