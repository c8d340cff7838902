"""HaiScale: parallel training over HFReduce for PyTorch.

``import haiscale`` registers "hfreduce" as a torch.distributed backend for CPU and CUDA tensors,
so stock PyTorch code runs over it unchanged::

    import torch.distributed as dist
    import haiscale  # noqa: F401  (registers the backend)

    dist.init_process_group("hfreduce")  # env:// -- RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT

Node grouping (which ranks share a node's shared memory and CPU reduction) comes from
``HFREDUCE_NODE_ID`` when set, else torchrun's ``GROUP_RANK``, else the host name.
"""

from haiscale import errors, ft
from haiscale._backend import backend_info, new_process_group, register

__all__ = ["backend_info", "errors", "ft", "new_process_group", "register"]

register()
