"""mount.fs3, the mount(8) helper behind deploy/systemd/fs3.mount and /etc/fstab lines, against a
real fs3 on loopback: `mount.fs3 CONFIG MOUNTPOINT -o OPTIONS` (what `mount -t fs3` runs) mounts
and returns, `umount` ends fs3-fuse, and every failure is one clear line with nothing left mounted.

Needs root (FUSE mount), like the units it serves; the build from $FF_BUILD_DIR."""

import os
import socket
import subprocess
import time

import pytest
from fs3_cluster import Fs3Cluster

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
HELPER = os.path.join(ROOT, "deploy", "systemd", "mount.fs3")



@pytest.fixture(autouse=True)
def as_root():
    assert os.geteuid() == 0, "mount.fs3 mounts fs3 with FUSE: run as root (CI does)"


def fuse_pids(mountpoint):
    """fs3-fuse processes serving `mountpoint`."""
    pids = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                argv = f.read().split(b"\0")
        except OSError:
            continue
        if argv and argv[0].endswith(b"fs3-fuse") and str(mountpoint).encode() in argv:
            pids.append(int(pid))
    return pids


def helper(*args, timeout_s=None, log=None):
    env = dict(os.environ, FS3_FUSE=os.path.join(os.environ["FF_BUILD_DIR"], "fs3", "fs3-fuse"))
    if log is not None:
        env["FS3_FUSE_LOG"] = str(log)
    if timeout_s is not None:
        env["FS3_MOUNT_TIMEOUT_S"] = str(timeout_s)
    return subprocess.run([HELPER, *map(str, args)], env=env, capture_output=True, text=True,
                          timeout=120)


def write_config(path, meta, mgmtd):
    path.write_text('[metrics]\nlisten = "127.0.0.1:0"\n[fuse]\n'
                    f'meta = "{meta}"\nmgmtd = "{mgmtd}"\nmount_options = "default_permissions"\n')
    return path


def test_mounts_serves_and_umount_ends_fs3_fuse(tmp_path):
    (tmp_path / "fs3").mkdir()
    with Fs3Cluster(str(tmp_path / "fs3"), storage=1, replication=1) as c:
        config = write_config(tmp_path / "fs3-fuse.toml", c.meta, c.mgmtd)
        mnt = tmp_path / "mnt"
        mnt.mkdir()
        # The options systemd and fstab pass along are accepted.
        log = tmp_path / "fuse.log"
        try:
            r = helper(config, mnt, "-o", "rw,_netdev,nofail,x-systemd.automount", log=log)
            assert r.returncode == 0, r.stderr
            assert os.path.ismount(mnt)
            assert len(fuse_pids(mnt)) == 1
            (mnt / "hello").write_text("through the mount helper")
            assert (mnt / "hello").read_text() == "through the mount helper"
            # Mounting again is refused by fs3-fuse; the first mount stays.
            again = helper(config, mnt, log=log)
            assert again.returncode == 32, again.stderr
            assert "without mounting" in again.stderr and "something is mounted there" in again.stderr
            assert os.path.ismount(mnt)
        finally:
            subprocess.run(["umount", str(mnt)], capture_output=True)
        deadline = time.time() + 20
        while fuse_pids(mnt) and time.time() < deadline:
            time.sleep(0.1)
        assert not os.path.ismount(mnt)
        assert fuse_pids(mnt) == [], "fs3-fuse outlived its mount"
        assert "unmounted" in log.read_text()


def test_bad_input_is_one_clear_line_and_mounts_nothing(tmp_path):
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    config = write_config(tmp_path / "fs3-fuse.toml", "127.0.0.1:1", "127.0.0.1:1")
    cases = [
        ((config, mnt, "-o", "rw,allow_root"), 1,
         "option 'allow_root' is not supported here; set FUSE options in"),
        ((tmp_path / "missing.toml", mnt), 1, "cannot read the config"),
        ((config, tmp_path / "nowhere"), 32, "is not a directory"),
        ((config,), 1, "usage: mount.fs3 CONFIG MOUNTPOINT"),
    ]
    for args, code, message in cases:
        r = helper(*args, log=tmp_path / "fuse.log")
        assert r.returncode == code, (args, r.stderr)
        assert message in r.stderr, (args, r.stderr)
        assert not os.path.ismount(mnt)


def test_an_unreachable_cluster_fails_the_mount_with_fs3_fuses_reason(tmp_path):
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    config = write_config(tmp_path / "fs3-fuse.toml", "127.0.0.1:1", "127.0.0.1:1")
    r = helper(config, mnt, log=tmp_path / "fuse.log")
    assert r.returncode == 32
    assert "without mounting" in r.stderr and "Connection refused" in r.stderr, r.stderr
    assert not os.path.ismount(mnt)
    assert fuse_pids(mnt) == []


def test_a_mount_that_does_not_come_up_in_time_is_given_up(tmp_path):
    # fs3-mgmtd's address accepts connections and never answers: fs3-fuse waits; the helper
    # gives up after FS3_MOUNT_TIMEOUT_S and stops it.
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen(16)
        address = "127.0.0.1:%d" % silent.getsockname()[1]
        mnt = tmp_path / "mnt"
        mnt.mkdir()
        config = write_config(tmp_path / "fs3-fuse.toml", address, address)
        r = helper(config, mnt, timeout_s=3, log=tmp_path / "fuse.log")
        assert r.returncode == 32
        assert "not mounted after 3 s; fs3-fuse stopped" in r.stderr, r.stderr
        deadline = time.time() + 10
        while fuse_pids(mnt) and time.time() < deadline:
            time.sleep(0.1)
        assert fuse_pids(mnt) == []
        assert not os.path.ismount(mnt)
