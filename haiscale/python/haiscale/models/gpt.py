"""A small GPT-style decoder (token + position embeddings, pre-norm blocks of causal
self-attention and an MLP, an output head tied to the token embedding by default), for examples,
tests and benchmarks.

The model is a sequence of layers -- `Embeddings`, `Block` x n_layers, `LMHead` -- so that
`as_sequential()` hands it to `haiscale.pipeline.partition`, and `parallelize(tp_group)` splits
every block, the embedding and the head over a tensor-parallel group (haiscale.tp), in place,
keeping each rank's slice of the weights it was initialised (or loaded) with.
"""

from dataclasses import dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F


@dataclass
class GPTConfig:
    vocab_size: int = 1024
    seq_len: int = 64
    d_model: int = 128
    n_heads: int = 4
    n_layers: int = 2
    dropout: float = 0.0
    tie_embeddings: bool = True  # head = token embedding (pipelines need False: they sit on two stages)


class CausalSelfAttention(nn.Module):
    def __init__(self, c: GPTConfig):
        super().__init__()
        if c.d_model % c.n_heads:
            raise ValueError(f"d_model {c.d_model} is not a multiple of n_heads {c.n_heads}")
        self.n_heads = c.n_heads  # heads on this rank (fewer once split over a tensor group)
        self.head_dim = c.d_model // c.n_heads
        self.qkv = nn.Linear(c.d_model, 3 * c.d_model)
        self.proj = nn.Linear(c.d_model, c.d_model)

    def forward(self, x):
        b, t, _ = x.shape
        local = self.n_heads * self.head_dim
        q, k, v = self.qkv(x).split(local, dim=2)
        q, k, v = (z.view(b, t, self.n_heads, self.head_dim).transpose(1, 2) for z in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.proj(y.transpose(1, 2).reshape(b, t, local))


class Block(nn.Module):
    def __init__(self, c: GPTConfig):
        super().__init__()
        self.ln1 = nn.LayerNorm(c.d_model)
        self.attn = CausalSelfAttention(c)
        self.ln2 = nn.LayerNorm(c.d_model)
        self.mlp = nn.Sequential(nn.Linear(c.d_model, 4 * c.d_model), nn.GELU(),
                                 nn.Linear(4 * c.d_model, c.d_model))

    def forward(self, x):
        x = x + self.attn(self.ln1(x))
        return x + self.mlp(self.ln2(x))


class Embeddings(nn.Module):
    def __init__(self, c: GPTConfig):
        super().__init__()
        self.tok = nn.Embedding(c.vocab_size, c.d_model)
        self.pos = nn.Embedding(c.seq_len, c.d_model)

    def forward(self, tokens):
        return self.tok(tokens) + self.pos(torch.arange(tokens.shape[1], device=tokens.device))


class LMHead(nn.Module):
    """Final norm and the projection to logits. Split over a tensor group, the logits are this
    rank's slice of the vocabulary (use `loss`, which never gathers them)."""

    def __init__(self, c: GPTConfig):
        super().__init__()
        self.ln = nn.LayerNorm(c.d_model)
        self.proj = nn.Linear(c.d_model, c.vocab_size, bias=False)
        self.tp_group = None

    def forward(self, x):
        x = self.ln(x)
        if self.tp_group is not None:
            from haiscale.tp import copy_to_tensor_parallel_region
            x = copy_to_tensor_parallel_region(x, self.tp_group)
        return F.linear(x, self.proj.weight)

    def loss(self, logits, targets):
        if self.tp_group is not None:
            from haiscale.tp import vocab_parallel_cross_entropy
            return vocab_parallel_cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1),
                                                self.tp_group)
        return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1))


class GPT(nn.Module):
    def __init__(self, c: GPTConfig | None = None):
        super().__init__()
        c = GPTConfig() if c is None else c
        self.config = c
        self.embed = Embeddings(c)
        self.blocks = nn.Sequential(*[Block(c) for _ in range(c.n_layers)])
        self.head = LMHead(c)
        self.apply(self._init_weights)
        if c.tie_embeddings:
            self.head.proj.weight = self.embed.tok.weight

    @staticmethod
    def _init_weights(module):
        # GPT-2's initialisation: small normal weights, zero biases (the embedding's default
        # N(0, 1), tied to the head, would start with huge logits).
        if isinstance(module, (nn.Linear, nn.Embedding)):
            nn.init.normal_(module.weight, mean=0.0, std=0.02)
        if isinstance(module, nn.Linear) and module.bias is not None:
            nn.init.zeros_(module.bias)

    def forward(self, tokens, targets=None):
        logits = self.head(self.blocks(self.embed(tokens)))
        if targets is None:
            return logits
        return self.head.loss(logits, targets)

    def as_sequential(self):
        """The layers in order (sharing this model's modules): embeddings, blocks, head -> logits.
        The loss is `criterion` below, on the last stage of a pipeline."""
        return nn.Sequential(self.embed, *self.blocks, self.head)

    def criterion(self, logits, targets):
        return self.head.loss(logits, targets)

    def parallelize(self, tp_group):
        """Splits the model over the tensor group, in place (Megatron-style): per block, qkv and
        the first MLP layer by columns (attention heads and MLP units), the output projections by
        rows; the token embedding and the head by vocabulary. LayerNorms and the position
        embedding stay replicated. Returns self."""
        from haiscale import tp

        size = torch.distributed.get_world_size(tp_group)
        c = self.config
        if c.n_heads % size:
            raise ValueError(f"haiscale: {c.n_heads} heads do not split over a tensor group of {size}")
        for block in self.blocks:
            attn = block.attn
            attn.qkv = tp.ColumnParallelLinear.from_linear(attn.qkv, tp_group, chunks=3)
            attn.proj = tp.RowParallelLinear.from_linear(attn.proj, tp_group)
            attn.n_heads = c.n_heads // size
            block.mlp[0] = tp.ColumnParallelLinear.from_linear(block.mlp[0], tp_group)
            block.mlp[2] = tp.RowParallelLinear.from_linear(block.mlp[2], tp_group)
        tied = self.head.proj.weight is self.embed.tok.weight
        self.embed.tok = tp.VocabParallelEmbedding.from_embedding(self.embed.tok, tp_group)
        head = (tp.VocabParallelEmbedding.from_embedding(_head_as_embedding(self.head.proj), tp_group)
                if not tied else None)
        self.head.proj = nn.Module()
        self.head.proj.weight = self.embed.tok.weight if tied else head.weight
        self.head.tp_group = tp_group
        return self



def _head_as_embedding(linear):
    """The head's weight (vocab x d_model) seen as an embedding, to slice it by vocabulary."""
    e = nn.Embedding(linear.weight.shape[0], linear.weight.shape[1])
    e.weight = linear.weight
    return e
