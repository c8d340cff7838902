"""ffdeploy.daemons (deploy/ffdeploy/), the one way the Python harnesses start daemons: configs as data, a real
daemon started, crashed and restarted, stopped cleanly, and a bad config reported."""

import os
import tomllib

import pytest

from ffdeploy.daemons import Daemon, fs3_mgmtd, fs3_storage, stop_all, toml

BIN = os.path.join(os.environ.get("FF_BUILD_DIR", ""), "fs3")


def test_configs_are_toml_that_reads_back_the_same():
    config = {"server": {"listen": "127.0.0.1:0", "max_message_mib": 64},
              "metrics": {"enabled": False},
              "storage": {"node": 'a "quoted" name', "ratio": 0.5, "tags": ["x", "y"], "unset": None,
                          "targets": [{"id": 1, "path": "/d/1"}, {"id": 2, "path": "/d/2"}]}}
    back = tomllib.loads(toml(config))
    del config["storage"]["unset"]  # None: left out, so the daemon's default holds
    assert back == config


def test_a_daemon_starts_crashes_restarts_and_stops(tmp_path):
    mgmtd = fs3_mgmtd(BIN, str(tmp_path), lease_ms=3000)
    storage = fs3_storage(BIN, str(tmp_path), "s1", "", [(7, str(tmp_path / "t7"))])
    try:
        address = mgmtd.start().rpc
        assert address.startswith("127.0.0.1:") and mgmtd.running()
        storage.config["storage"]["mgmtd"] = address
        storage.start()
        assert mgmtd.kill() == -9 and not mgmtd.running()  # a crash
        assert mgmtd.start().rpc == address  # its port was pinned: back where storage looks
        assert open(mgmtd.path("log")).read().count("ready") >= 2  # one log across restarts
    finally:
        stop_all([storage, mgmtd])
    assert mgmtd.proc.returncode == 0 and storage.proc.returncode == 0  # SIGTERM: clean exits


def test_a_daemon_that_cannot_start_says_why(tmp_path):
    bad = fs3_mgmtd(BIN, str(tmp_path), lease_ms=-1)
    with pytest.raises(RuntimeError, match="lease_ms"):
        bad.start(timeout=10)
    assert not bad.running()


def test_another_process_finds_kills_and_restarts_a_daemon(tmp_path):
    """What the CLIs do across invocations (deploy/fs3-local.sh kill|restart NAME): Daemon.load
    from the files the first process left; a daemon that exited unreaped counts as not running."""
    mgmtd = fs3_mgmtd(BIN, str(tmp_path), lease_ms=3000)
    try:
        address = mgmtd.start().rpc
        assert Daemon.saved(str(tmp_path)) == ["mgmtd"]
        other = Daemon.load(str(tmp_path), "mgmtd")
        assert other.pid == mgmtd.pid and other.running() and other.rpc == address
        other.kill()  # mgmtd.proc is never waited for here: a zombie of this process
        assert not Daemon.load(str(tmp_path), "mgmtd").running()
        again = Daemon.load(str(tmp_path), "mgmtd").start()
        assert again.rpc == address and again.running()
        assert again.stop() == 0
    finally:
        mgmtd.kill()


def test_local_cluster_names_the_nodes_hai_server_has(tmp_path):
    """local-cluster's nodes come from the scheduler's own reading of cluster.toml (hai-sim
    topology), as hai-server's do: leaves alike (`count`) and listed `node_names` included. Its
    own parser named cluster-lab.toml's nodes L-n00..L-n03 where hai-server has L00-n00..L01-n03."""
    from ffdeploy.local_cluster import node_names

    root = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
    hai_sim = os.path.join(os.environ.get("FF_BUILD_DIR", ""), "scheduler", "hai-sim")
    lab = node_names(os.path.join(root, "deploy", "config", "cluster-lab.toml"), hai_sim)
    assert lab == [f"L0{leaf}-n0{n}" for leaf in range(2) for n in range(4)]
    listed = tmp_path / "listed.toml"
    listed.write_text('name = "x"\n[[zones]]\nname = "A"\n  [[zones.leaves]]\n  name = "a"\n'
                      '  node_names = ["gpu7", "gpu9"]\n  gpus_per_node = 8\n')
    assert node_names(str(listed), hai_sim) == ["gpu7", "gpu9"]
    bad = tmp_path / "bad.toml"
    bad.write_text('name = "x"\n[[zones]]\nname = "A"\n  [[zones.leaves]]\n  name = "a"\n'
                   '  count = 2\n  node_names = ["n1"]\n')
    with pytest.raises(Exception, match="node_names needs count = 1"):
        node_names(str(bad), hai_sim)


def test_the_network_lab_reads_cluster_toml_as_hai_server_does(tmp_path):
    """The network lab's hosts are hai-server's nodes: netlab reads cluster.toml through the same
    reader (ffdeploy.read_cluster, the scheduler's), with the links' rates from it; a file that is
    no topology is refused with the scheduler's message."""
    from ffdeploy import netlab
    from ffdeploy.local_cluster import node_names

    root = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
    hai_sim = os.path.join(os.environ.get("FF_BUILD_DIR", ""), "scheduler", "hai-sim")
    cluster = os.path.join(root, "deploy", "config", "cluster-lab.toml")
    topo = netlab.load_topology(cluster, 0.001, hai_sim)
    hosts = [h["node"] for z in topo["zones"] for leaf in z["leaves"] for h in leaf["hosts"]]
    assert hosts == node_names(cluster, hai_sim)
    assert len(set(h["address"] for z in topo["zones"] for leaf in z["leaves"]
                   for h in leaf["hosts"])) == len(hosts)
    assert topo["node_mbit"] == 200 * 1000 * 0.001
    bad = tmp_path / "bad.toml"
    bad.write_text('name = "x"\n')
    with pytest.raises(ValueError, match="zones"):
        netlab.load_topology(str(bad), 0.001, hai_sim)
