"""haiscale.tp: tensor parallelism in the manner of Megatron-LM, over any process group.

A transformer block splits across a tensor group of T ranks with two pairs of layers:

    attention:  qkv = ColumnParallelLinear(d, 3 d, chunks=3)    # each rank: its heads' q, k, v
                proj = RowParallelLinear(d, d)                   # partial sums, one allreduce
    MLP:        fc  = ColumnParallelLinear(d, 4 d)               # each rank: a quarter of the units
                out = RowParallelLinear(4 d, d)                  # one allreduce

so a block costs one allreduce in forward and one in backward per pair. The vocabulary splits too:
`VocabParallelEmbedding` holds a range of token ids per rank, and `vocab_parallel_cross_entropy`
computes the loss from logits split over the vocabulary without gathering them (three small
allreduces of one value per token).

Every layer can be built from the full layer of a single-process model (`from_linear`,
`from_embedding`): each rank keeps its slice, so a model initialised (or loaded) whole trains
identically when split. The process group's size must divide the split dimension.
"""

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F


def _size(group):
    return dist.get_world_size(group)


def _rank(group):
    return dist.get_rank(group)


# ---- the four communication patterns, as autograd functions ---------------------------------------


class _CopyToRegion(torch.autograd.Function):
    """Identity forward; allreduce of the gradient backward (the input feeds every rank's shard)."""

    @staticmethod
    def forward(ctx, x, group):
        ctx.group = group
        return x.view_as(x)

    @staticmethod
    def backward(ctx, grad):
        grad = grad.contiguous()
        dist.all_reduce(grad, group=ctx.group)
        return grad, None


class _ReduceFromRegion(torch.autograd.Function):
    """Allreduce forward (partial sums of a row-parallel product); identity backward."""

    @staticmethod
    def forward(ctx, x, group):
        x = x.contiguous()
        dist.all_reduce(x, group=group)
        return x

    @staticmethod
    def backward(ctx, grad):
        return grad, None


class _GatherFromRegion(torch.autograd.Function):
    """All-gather along the last dimension forward; this rank's slice of the gradient backward."""

    @staticmethod
    def forward(ctx, x, group):
        ctx.group = group
        n = _size(group)
        parts = [torch.empty_like(x) for _ in range(n)]
        dist.all_gather(parts, x.contiguous(), group=group)
        return torch.cat(parts, dim=-1)

    @staticmethod
    def backward(ctx, grad):
        n, r = _size(ctx.group), _rank(ctx.group)
        return grad.chunk(n, dim=-1)[r].contiguous(), None


def copy_to_tensor_parallel_region(x, group=None):
    return _CopyToRegion.apply(x, group)


def reduce_from_tensor_parallel_region(x, group=None):
    return _ReduceFromRegion.apply(x, group)


def gather_from_tensor_parallel_region(x, group=None):
    return _GatherFromRegion.apply(x, group)


def _check_divisible(what, n, group):
    size = _size(group)
    if n % size:
        raise ValueError(f"haiscale.tp: {what} {n} is not divisible by the tensor group's size {size}")
    return n // size


# ---- layers ---------------------------------------------------------------------------------------


class ColumnParallelLinear(nn.Module):
    """y = x A^T + b with A split by rows (output features) over the group.

    Each rank computes its slice of the output features; `gather_output=True` all-gathers them.
    `chunks=k` treats the output as k equal parts (e.g. q, k, v) and gives each rank its slice of
    every part, so a fused projection splits by attention heads.
    """

    def __init__(self, in_features, out_features, bias=True, gather_output=False, chunks=1, group=None,
                 dtype=None, device=None):
        super().__init__()
        self.group = group
        self.in_features, self.out_features = in_features, out_features
        self.gather_output, self.chunks = gather_output, chunks
        if out_features % chunks:
            raise ValueError(f"haiscale.tp: {out_features} output features do not split into {chunks} chunks")
        local = _check_divisible("output features per chunk", out_features // chunks, group) * chunks
        self.weight = nn.Parameter(torch.empty(local, in_features, dtype=dtype, device=device))
        self.bias = nn.Parameter(torch.zeros(local, dtype=dtype, device=device)) if bias else None
        nn.init.normal_(self.weight, std=0.02)

    def _slice(self, t):
        n, r = _size(self.group), _rank(self.group)
        return torch.cat([part.chunk(n, dim=0)[r] for part in t.chunk(self.chunks, dim=0)], dim=0)

    @classmethod
    def from_linear(cls, linear, group=None, gather_output=False, chunks=1):
        layer = cls(linear.in_features, linear.out_features, linear.bias is not None, gather_output, chunks, group,
                    dtype=linear.weight.dtype, device=linear.weight.device)
        with torch.no_grad():
            layer.weight.copy_(layer._slice(linear.weight))
            if linear.bias is not None:
                layer.bias.copy_(layer._slice(linear.bias))
        return layer

    def forward(self, x):
        y = F.linear(copy_to_tensor_parallel_region(x, self.group), self.weight, self.bias)
        if self.gather_output:
            if self.chunks != 1:
                raise ValueError("haiscale.tp: gather_output with chunks > 1 would interleave the chunks")
            y = gather_from_tensor_parallel_region(y, self.group)
        return y

    def extra_repr(self):
        return f"in={self.in_features}, out={self.out_features} (local {self.weight.shape[0]}), chunks={self.chunks}"


class RowParallelLinear(nn.Module):
    """y = x A^T + b with A split by columns (input features): each rank multiplies its slice of
    the input (the output of a ColumnParallelLinear) and one allreduce sums the partial products.
    The bias is replicated and added once, after the sum."""

    def __init__(self, in_features, out_features, bias=True, group=None, dtype=None, device=None):
        super().__init__()
        self.group = group
        self.in_features, self.out_features = in_features, out_features
        local = _check_divisible("input features", in_features, group)
        self.weight = nn.Parameter(torch.empty(out_features, local, dtype=dtype, device=device))
        self.bias = nn.Parameter(torch.zeros(out_features, dtype=dtype, device=device)) if bias else None
        nn.init.normal_(self.weight, std=0.02)

    @classmethod
    def from_linear(cls, linear, group=None):
        layer = cls(linear.in_features, linear.out_features, linear.bias is not None, group,
                    dtype=linear.weight.dtype, device=linear.weight.device)
        n, r = _size(group), _rank(group)
        with torch.no_grad():
            layer.weight.copy_(linear.weight.chunk(n, dim=1)[r])
            if linear.bias is not None:
                layer.bias.copy_(linear.bias)
        return layer

    def forward(self, x_parallel):
        y = reduce_from_tensor_parallel_region(F.linear(x_parallel, self.weight), self.group)
        return y + self.bias if self.bias is not None else y

    def extra_repr(self):
        return f"in={self.in_features} (local {self.weight.shape[1]}), out={self.out_features}"


class _VocabRange:
    def __init__(self, vocab_size, group):
        per = _check_divisible("vocabulary", vocab_size, group)
        self.start = _rank(group) * per
        self.end = self.start + per


class VocabParallelEmbedding(nn.Module):
    """An embedding whose rows (token ids) are split over the group: each rank looks up the ids in
    its range, zeros for the others, and one allreduce assembles the vectors."""

    def __init__(self, num_embeddings, embedding_dim, group=None, dtype=None, device=None):
        super().__init__()
        self.group = group
        self.num_embeddings, self.embedding_dim = num_embeddings, embedding_dim
        self.range = _VocabRange(num_embeddings, group)
        self.weight = nn.Parameter(torch.empty(self.range.end - self.range.start, embedding_dim, dtype=dtype,
                                               device=device))
        nn.init.normal_(self.weight, std=0.02)

    @classmethod
    def from_embedding(cls, embedding, group=None):
        layer = cls(embedding.num_embeddings, embedding.embedding_dim, group, dtype=embedding.weight.dtype,
                    device=embedding.weight.device)
        with torch.no_grad():
            layer.weight.copy_(embedding.weight[layer.range.start:layer.range.end])
        return layer

    def forward(self, ids):
        outside = (ids < self.range.start) | (ids >= self.range.end)
        local = (ids - self.range.start).masked_fill(outside, 0)
        y = F.embedding(local, self.weight).masked_fill(outside.unsqueeze(-1), 0.0)
        return reduce_from_tensor_parallel_region(y, self.group)

    def extra_repr(self):
        return f"{self.num_embeddings} (local {self.range.start}..{self.range.end}), {self.embedding_dim}"


class _VocabParallelCrossEntropy(torch.autograd.Function):
    @staticmethod
    def forward(ctx, logits, targets, group, vocab_start):
        logits = logits.float()
        local_max = logits.max(dim=-1)[0]
        dist.all_reduce(local_max, op=dist.ReduceOp.MAX, group=group)
        shifted = logits - local_max.unsqueeze(-1)
        vocab_local = logits.shape[-1]
        outside = (targets < vocab_start) | (targets >= vocab_start + vocab_local)
        local_targets = (targets - vocab_start).masked_fill(outside, 0)
        target_logit = shifted.gather(-1, local_targets.unsqueeze(-1)).squeeze(-1).masked_fill(outside, 0.0)
        exp = shifted.exp()
        sum_exp = exp.sum(dim=-1)
        both = torch.stack([target_logit, sum_exp])
        dist.all_reduce(both, group=group)
        target_logit, sum_exp = both[0], both[1]
        loss = sum_exp.log() - target_logit
        softmax = exp.div_(sum_exp.unsqueeze(-1))
        ctx.save_for_backward(softmax, local_targets, outside)
        return loss

    @staticmethod
    def backward(ctx, grad_loss):
        softmax, local_targets, outside = ctx.saved_tensors
        grad = softmax
        onehot = torch.zeros_like(grad).scatter_(-1, local_targets.unsqueeze(-1), 1.0)
        onehot.masked_fill_(outside.unsqueeze(-1), 0.0)
        grad.sub_(onehot).mul_(grad_loss.unsqueeze(-1))
        return grad, None, None, None


def vocab_parallel_cross_entropy(logits_parallel, targets, group=None, vocab_start=None, reduction="mean"):
    """Cross-entropy of logits split over the vocabulary (the last dimension) across the group:
    this rank holds classes [vocab_start, vocab_start + logits.shape[-1]) (by default its
    rank's equal share). Equals F.cross_entropy on the gathered logits."""
    if vocab_start is None:
        vocab_start = _rank(group) * logits_parallel.shape[-1]
    loss = _VocabParallelCrossEntropy.apply(logits_parallel, targets, group, vocab_start)
    if reduction == "mean":
        return loss.mean()
    if reduction == "sum":
        return loss.sum()
    if reduction == "none":
        return loss
    raise ValueError(f"haiscale.tp: reduction must be mean, sum or none, got {reduction!r}")
