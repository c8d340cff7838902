"""Registration of the "hfreduce" torch.distributed backend (the C++ side is haiscale._C)."""

import os
import socket

import torch
import torch.distributed as dist

from haiscale import _build_info


def _load_extension():
    if torch.__version__ != _build_info.TORCH_VERSION:
        raise ImportError(
            f"haiscale._C was built against torch {_build_info.TORCH_VERSION}, but torch "
            f"{torch.__version__} is imported (the c10d Backend interface changes between "
            "releases): rebuild with `cmake --build build` against this torch"
        )
    from haiscale import _C

    return _C


_C = _load_extension()

BACKEND_NAME = "hfreduce"


def _env_int(name, default):
    value = os.environ.get(name)
    if value is None or value == "":
        return default
    try:
        return int(value)
    except ValueError:
        raise ValueError(f"hfreduce: environment variable {name}={value!r} is not an integer") from None


def node_id():
    """The node this process counts as: HFREDUCE_NODE_ID, else torchrun's GROUP_RANK (one agent
    per node), else the host name."""
    explicit = os.environ.get("HFREDUCE_NODE_ID")
    if explicit:
        return explicit
    group_rank = os.environ.get("GROUP_RANK")
    if group_rank and os.environ.get("TORCHELASTIC_RUN_ID") is not None:
        return f"torchrun-node-{group_rank}@{socket.gethostname()}"
    return socket.gethostname()


def _record_steps():
    """Under HAI-Platform ($HAI_STEPS_FILE set), record every training step with the time this
    process spends in hfreduce collectives (hai_job's step telemetry: hai top, straggler detection)."""
    if not os.environ.get("HAI_STEPS_FILE"):
        return
    try:
        import hai_job
    except ImportError:
        return
    if hai_job.record_steps():
        hai_job.set_comm_clock(_C.comm_clock)
        hai_job.add_peer_clock("link", _C.link_clock)


def _create(dist_options, backend_options):
    rank = dist_options.group_rank
    size = dist_options.group_size
    # LOCAL_RANK describes this process's place in the whole job: check it against the grouping
    # of a group that holds every rank (the default group), where it must agree.
    world = _env_int("WORLD_SIZE", -1)
    local_rank = _env_int("LOCAL_RANK", -1) if size == world else -1
    timeout_ms = int(dist_options.timeout.total_seconds() * 1000)
    if timeout_ms <= 0:
        timeout_ms = 30 * 60 * 1000
    _record_steps()
    return _C.create_backend(
        dist_options.store,
        rank,
        size,
        timeout_ms,
        dist_options.group_id or "",
        node_id(),
        local_rank,
        os.environ.get("HFREDUCE_LISTEN_HOST", "127.0.0.1"),
        os.environ.get("HFREDUCE_TRANSPORT", "auto"),
        _env_int("HFREDUCE_CHUNK_BYTES", 0),
        _env_int("HFREDUCE_PIPELINE_DEPTH", 0),
    )


def new_process_group(store, rank, world_size, timeout=None, group_name="", prefix="hfreduce"):
    """A process group over hfreduce of `world_size` ranks that meet through `store`, outside torch's
    default group: what a job whose membership changes makes each time it does (the survivors and
    newly started ranks alike, without restarting anyone), as torchft re-forms its groups.

    `store`: a store the members share and that outlives each of them: a c10d Store (a TCPStore
    served apart from the ranks; give each membership its own ``dist.PrefixStore``), or the
    "host:port" of an hfreduce store (hfreduce-store, or hai-server's: what haiscale.ft uses),
    with `prefix` naming the membership. Collectives: ``dist.all_reduce(t, group=pg)``, or the
    group's own methods where torch needs a registered group to map ranks
    (``pg.broadcast(t, root).wait()``). ``pg.abort()`` fails what is pending at once, on every
    member; ``pg.shutdown()`` releases it.
    """
    timeout_ms = int((timeout.total_seconds() if timeout is not None else 30 * 60) * 1000)
    _record_steps()
    listen_host = os.environ.get("HFREDUCE_LISTEN_HOST", "127.0.0.1")
    transport = os.environ.get("HFREDUCE_TRANSPORT", "auto")
    if isinstance(store, str):
        backend = _C.create_backend_at(store, prefix, rank, world_size, timeout_ms, group_name,
                                       node_id(), listen_host, transport)
        store = dist.HashStore()  # the ProcessGroup wants one; the backend uses the address
    else:
        backend = _C.create_backend(
            store,
            rank,
            world_size,
            timeout_ms,
            group_name,
            node_id(),
            -1,
            listen_host,
            transport,
            _env_int("HFREDUCE_CHUNK_BYTES", 0),
            _env_int("HFREDUCE_PIPELINE_DEPTH", 0),
        )
    pg = dist.ProcessGroup(store, rank, world_size)
    backend_type = dist.ProcessGroup.BackendType.CUSTOM
    for device in ("cpu", "cuda"):
        pg._register_backend(torch.device(device), backend_type, backend)
    pg._set_default_backend(backend_type)
    if group_name:
        pg._set_group_name(group_name)
    return pg


def register():
    """Registers "hfreduce" with torch.distributed (idempotent)."""
    if BACKEND_NAME.upper() in dist.Backend._plugins:
        return
    dist.Backend.register_backend(BACKEND_NAME, _create, extended_api=True, devices=["cpu", "cuda"])


def backend_info(group=None):
    """{'nodes': N, 'transport': 'shm'|'tcp'|'verbs'} of the hfreduce backend of `group`."""
    pg = group if group is not None else dist.group.WORLD
    backend = pg._get_backend(torch.device("cpu"))
    return {"nodes": _C.num_nodes(backend), "transport": _C.transport(backend)}
