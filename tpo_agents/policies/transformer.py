"""Small causal transformer policy for the token tasks (paper Sec. 3, 3.4; docs/algorithms.md).

The model input is the length-2H sequence ``[x_0..x_{H-1}, a_0..a_{H-1}]`` (prompt, then the generated
tokens; no special tokens); output token t is predicted at position ``H-1+t``.

Every parameter is stored in **flax's layout** so that optax's Muon partition ("exactly 2-D -> Muon,
everything else -> Adam", paper Sec. 3) and Muon's shape factor (``(rows, cols) = (fan_in, fan_out)``) apply
literally:

=========================================  ==================  =========
parameter                                  shape               optimizer
=========================================  ==================  =========
``token_embedding``                        (V, d)              Muon
``position_embedding``                     (2H, d)             Muon
``layers.i.attn.{query,key,value}.kernel`` (d, heads, d_head)  Adam
``layers.i.attn.{query,key,value}.bias``   (heads, d_head)     Muon
``layers.i.attn.out.kernel``               (heads, d_head, d)  Adam
``layers.i.attn.out.bias``                 (d,)                Adam
``layers.i.mlp.{fc1,fc2}.kernel``          (d, 4d), (4d, d)    Muon
``layers.i.mlp.{fc1,fc2}.bias``            1-D                 Adam
``*.ln*.{scale,bias}``, ``ln_f.*``          (d,)                Adam
``head.kernel`` / ``head.bias``            (d, V) / (V,)       Muon / Adam
=========================================  ==================  =========

Populations (``n_seeds = S``): every parameter gets a leading member axis and every layer with
parameters applies member m's to rows ``m*N/S .. (m+1)*N/S - 1`` of a member-major batch (batched
matmuls); attention itself has no parameters and runs on all rows at once.
"""

from __future__ import annotations

import math
from typing import Any

import torch
import torch.nn.functional as F
from gymnasium import spaces
from stable_baselines3.common.type_aliases import PyTorchObs, Schedule
from torch import Tensor, nn

from .base import GroupPolicy, lecun_normal_, member_of_rows, sample_categorical
from .optim import MuonAdam

__all__ = ["CausalTransformer", "TransformerSoftmaxPolicy"]


def linear(x: Tensor, kernel: Tensor, bias: Tensor) -> Tensor:
    """``x [M, in] @ kernel + bias``; a member-stacked ``kernel [S, in, out]`` and ``bias [S, out]`` apply
    member m's to the m-th of S equal blocks of rows."""
    if kernel.dim() == 2:
        return torch.addmm(bias, x, kernel)
    members = kernel.shape[0]
    return torch.baddbmm(bias.unsqueeze(1), x.reshape(members, -1, x.shape[-1]), kernel).reshape(len(x), -1)


class Dense(nn.Module):
    """``x @ kernel + bias`` with a flax-layout kernel ``(in, out)``; LeCun-normal kernel, zero bias."""

    def __init__(self, in_features: int, out_features: int) -> None:
        super().__init__()
        self.kernel = nn.Parameter(lecun_normal_(torch.empty(in_features, out_features), in_features))
        self.bias = nn.Parameter(torch.zeros(out_features))

    def forward(self, x: Tensor) -> Tensor:
        return linear(x.reshape(-1, x.shape[-1]), self.kernel, self.bias).reshape(*x.shape[:-1], -1)


class LayerNorm(nn.Module):
    """LayerNorm with flax's epsilon 1e-6, scale 1 and bias 0 at init."""

    def __init__(self, dim: int, eps: float = 1e-6) -> None:
        super().__init__()
        self.eps = eps
        self.scale = nn.Parameter(torch.ones(dim))
        self.bias = nn.Parameter(torch.zeros(dim))

    def forward(self, x: Tensor) -> Tensor:
        d = x.shape[-1]
        if self.scale.dim() == 1:
            return F.layer_norm(x, (d,), self.scale, self.bias, self.eps)
        members = self.scale.shape[0]
        y = F.layer_norm(x, (d,), eps=self.eps).reshape(members, -1, d)
        return (y * self.scale.unsqueeze(1) + self.bias.unsqueeze(1)).reshape(x.shape)


class HeadProjection(nn.Module):
    """Flax ``DenseGeneral(features=(heads, d_head))``: kernel (d, heads, d_head), bias (heads, d_head)."""

    def __init__(self, d_model: int, n_heads: int, head_dim: int) -> None:
        super().__init__()
        self.kernel = nn.Parameter(lecun_normal_(torch.empty(d_model, n_heads, head_dim), d_model))
        self.bias = nn.Parameter(torch.zeros(n_heads, head_dim))


class MultiHeadAttention(nn.Module):
    """Causal multi-head self-attention in flax layout (no dropout, logits scaled by 1/sqrt(d_head))."""

    def __init__(self, d_model: int, n_heads: int) -> None:
        super().__init__()
        if d_model % n_heads:
            raise ValueError(f"d_model={d_model} is not divisible by n_heads={n_heads}")
        self.n_heads = n_heads
        self.head_dim = d_model // n_heads
        self.query = HeadProjection(d_model, n_heads, self.head_dim)
        self.key = HeadProjection(d_model, n_heads, self.head_dim)
        self.value = HeadProjection(d_model, n_heads, self.head_dim)
        self.out = nn.Module()
        self.out.kernel = nn.Parameter(
            lecun_normal_(torch.empty(n_heads, self.head_dim, d_model), n_heads * self.head_dim)
        )
        self.out.bias = nn.Parameter(torch.zeros(d_model))

    def qkv(self, x: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """Projections of ``x [..., d]`` to three ``[..., heads, d_head]`` tensors (one matmul)."""
        d, parts = x.shape[-1], (self.query, self.key, self.value)
        kernel = torch.cat([p.kernel.reshape(*p.kernel.shape[:-2], -1) for p in parts], dim=-1)
        bias = torch.cat([p.bias.reshape(*p.bias.shape[:-2], -1) for p in parts], dim=-1)
        y = linear(x.reshape(-1, d), kernel, bias)
        y = y.reshape(*x.shape[:-1], 3, self.n_heads, self.head_dim)
        return y.unbind(dim=-3)

    def project_out(self, o: Tensor) -> Tensor:
        """``einsum('...hk,hkd->...d', o, out.kernel) + out.bias``."""
        width = self.n_heads * self.head_dim
        kernel = self.out.kernel.reshape(*self.out.kernel.shape[:-3], width, -1)
        return linear(o.reshape(-1, width), kernel, self.out.bias).reshape(*o.shape[:-2], -1)

    def forward(self, x: Tensor, first: int = 0) -> Tensor:
        """Causal attention over ``x [N, T, d]``, for the queries at positions ``first..T-1`` only (every
        position's keys and values): ``[N, T - first, d]``."""
        q, k, v = (t.transpose(1, 2) for t in self.qkv(x))  # [N, heads, T, d_head]
        return self.project_out(causal_attention(q[:, :, first:], k, v, first).transpose(1, 2))

    def forward_with_prefix(
        self, prefix: Tensor, suffix: Tensor, owner: Tensor, first: int = 0
    ) -> tuple[Tensor, Tensor]:
        """Causal attention of shared prefixes ``[P, Tp, d]`` (queries at positions ``first..Tp-1``) and of
        suffixes ``[R, Ts, d]``, suffix ``r`` continuing prefix ``owner[r]``: each suffix attends to its
        prefix's keys, then causally to its own."""
        q, k, v = (t.transpose(1, 2) for t in self.qkv(prefix))
        out_prefix = causal_attention(q[:, :, first:], k, v, first)
        qs, ks, vs = (t.transpose(1, 2) for t in self.qkv(suffix))
        keys, values = torch.cat([k[owner], ks], dim=2), torch.cat([v[owner], vs], dim=2)
        out_suffix = causal_attention(qs, keys, values, prefix.shape[1])
        return self.project_out(out_prefix.transpose(1, 2)), self.project_out(out_suffix.transpose(1, 2))

    def forward_cached(self, x: Tensor, cache_k: Tensor, cache_v: Tensor, start: int) -> Tensor:
        """Attention for new positions ``start..start+T-1`` (``x [N, T, d]``) using and filling a KV cache.

        ``cache_k``/``cache_v`` are ``[N, heads, T_max, d_head]``; rows ``< start`` must already be filled.
        """
        q, k, v = (t.transpose(1, 2) for t in self.qkv(x))
        stop = start + x.shape[1]
        cache_k[:, :, start:stop] = k
        cache_v[:, :, start:stop] = v
        o = causal_attention(q, cache_k[:, :, :stop], cache_v[:, :, :stop], start)
        return self.project_out(o.transpose(1, 2))


def causal_attention(q: Tensor, k: Tensor, v: Tensor, start: int = 0) -> Tensor:
    """``softmax(q k^T / sqrt(d_head) + mask) v`` for queries ``q [N, heads, Tq, d_head]`` at positions
    ``start..start+Tq-1`` over keys and values ``[N, heads, Tk, d_head]`` at positions ``0..Tk-1``: query i
    attends to keys ``0..start+i``.

    Written as two batched matmuls and a softmax: on the token tasks' short sequences (T <= 2H = 20,
    d_head = 32) this is faster than torch's CPU ``scaled_dot_product_attention`` (flash kernel): on
    ``[200, 2, 19, 32]``, forward 0.66 vs 0.90 ms and forward + backward 2.1 vs 3.3 ms (one thread,
    AVX-512 kernels; 2.1 vs 3.0 ms with AVX2's); equal to it up to float32 rounding (1e-6).
    """
    n_queries, n_keys, d_head = q.shape[-2], k.shape[-2], q.shape[-1]
    batch = q.shape[:-2]
    scores = torch.bmm(q.reshape(-1, n_queries, d_head), k.reshape(-1, n_keys, d_head).mT)
    scores = scores.mul_(1.0 / math.sqrt(d_head))
    if n_keys > start + 1:  # some key lies after the first query's position (not so when decoding one step)
        future = torch.ones(n_queries, n_keys, dtype=torch.bool, device=q.device).triu_(start + 1)
        scores = scores.masked_fill_(future, float("-inf"))
    weights = torch.softmax(scores, dim=-1)
    return torch.bmm(weights, v.reshape(-1, n_keys, d_head)).reshape(*batch, n_queries, d_head)


GELU_C = math.sqrt(2.0 / math.pi)
GELU_A = 0.044715


class _GeluTanh(torch.autograd.Function):
    """gelu_tanh(x) = 0.5 x (1 + tanh(u)) = x sigmoid(2u), u = c (x + a x^3), c = sqrt(2 / pi),
    a = 0.044715 (flax's default gelu); d/dx = s + x s (1 - s) 2 du/dx, s = sigmoid(2u),
    du/dx = c (1 + 3 a x^2). Through the sigmoid because torch's CPU ``tanh`` is slow: on a
    [200, 19, 256] batch ``F.gelu(x, approximate="tanh")`` measured 1.28 ms forward and 2.92 ms forward
    and backward with the AVX-512 kernels, 2.45 and 5.42 ms with AVX2's; this 0.49 and 1.13 ms, 0.76
    and 1.63 ms: the polynomials in one ``addcmul`` pass each and s (1 - s) g in torch's fused
    ``sigmoid_backward`` (four passes over the batch forward, five backward). Equal to it up to float32
    rounding (5e-7)."""

    @staticmethod
    def forward(ctx: Any, x: Tensor) -> Tensor:
        two_c = x.new_tensor(2 * GELU_C)
        s = torch.addcmul(two_c, x, x, value=2 * GELU_C * GELU_A).mul_(x).sigmoid_()  # sigmoid(2u)
        ctx.save_for_backward(x, s)
        return x * s

    @staticmethod
    def backward(ctx: Any, grad: Tensor) -> Tensor:
        x, s = ctx.saved_tensors
        slope = torch.addcmul(x.new_tensor(2 * GELU_C), x, x, value=6 * GELU_C * GELU_A).mul_(x)  # x 2 du/dx
        return torch.ops.aten.sigmoid_backward(slope, s).add_(s).mul_(grad)  # (slope s (1 - s) + s) grad


def gelu_tanh(x: Tensor) -> Tensor:
    """The tanh approximation of GELU, 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))) (flax's
    ``nn.gelu``), computed as x sigmoid(2u) (:class:`_GeluTanh`)."""
    return _GeluTanh.apply(x)


class MlpBlock(nn.Module):
    """``fc2(gelu_tanh(fc1(x)))``."""

    def __init__(self, d_model: int, hidden: int) -> None:
        super().__init__()
        self.fc1 = Dense(d_model, hidden)
        self.fc2 = Dense(hidden, d_model)

    def forward(self, x: Tensor) -> Tensor:
        return self.fc2(gelu_tanh(self.fc1(x)))


class Block(nn.Module):
    """Pre-norm layer: ``x += MHA(LN(x)); x += MLP(LN(x))``."""

    def __init__(self, d_model: int, n_heads: int, ffn_hidden: int) -> None:
        super().__init__()
        self.ln1 = LayerNorm(d_model)
        self.attn = MultiHeadAttention(d_model, n_heads)
        self.ln2 = LayerNorm(d_model)
        self.mlp = MlpBlock(d_model, ffn_hidden)

    def forward(self, x: Tensor, first: int = 0) -> Tensor:
        """The layer's output at positions ``first..T-1`` of ``x [N, T, d]`` (the keys and values of every
        position enter the attention)."""
        x = x[:, first:] + self.attn(self.ln1(x), first)
        return x + self.mlp(self.ln2(x))

    def forward_with_prefix(
        self, prefix: Tensor, suffix: Tensor, owner: Tensor, first: int = 0
    ) -> tuple[Tensor, Tensor]:
        attn_prefix, attn_suffix = self.attn.forward_with_prefix(
            self.ln1(prefix), self.ln1(suffix), owner, first
        )
        prefix, suffix = prefix[:, first:] + attn_prefix, suffix + attn_suffix
        return prefix + self.mlp(self.ln2(prefix)), suffix + self.mlp(self.ln2(suffix))

    def forward_cached(self, x: Tensor, cache_k: Tensor, cache_v: Tensor, start: int) -> Tensor:
        x = x + self.attn.forward_cached(self.ln1(x), cache_k, cache_v, start)
        return x + self.mlp(self.ln2(x))


class CausalTransformer(nn.Module):
    """Decoder-only transformer (docs/algorithms.md) returning next-token log-probabilities.

    :param vocab_size: V
    :param max_len: number of positions (2H)
    :param d_model: width (64)
    :param n_heads: attention heads (2 in the reference code; the paper text says 4)
    :param n_layers: layers (2)
    :param ffn_mult: FFN width multiplier (4)
    """

    def __init__(
        self,
        vocab_size: int,
        max_len: int,
        d_model: int = 64,
        n_heads: int = 2,
        n_layers: int = 2,
        ffn_mult: int = 4,
    ) -> None:
        super().__init__()
        self.vocab_size = vocab_size
        self.max_len = max_len
        self.d_model = d_model
        self.n_heads = n_heads
        self.head_dim = d_model // n_heads
        self.token_embedding = nn.Parameter(torch.randn(vocab_size, d_model) / math.sqrt(d_model))
        self.position_embedding = nn.Parameter(torch.randn(max_len, d_model) * 0.02)
        self.layers = nn.ModuleList(Block(d_model, n_heads, ffn_mult * d_model) for _ in range(n_layers))
        self.ln_f = LayerNorm(d_model)
        self.head = Dense(d_model, vocab_size)

    def embed(self, tokens: Tensor, start: int = 0) -> Tensor:
        if self.token_embedding.dim() == 2:
            positions = self.position_embedding[start : start + tokens.shape[1]]
            return F.embedding(tokens, self.token_embedding) + positions
        members, vocab, d = self.token_embedding.shape
        n, length = tokens.shape
        offsets = member_of_rows(n, members, tokens.device) * vocab
        x = F.embedding(tokens + offsets.unsqueeze(1), self.token_embedding.reshape(members * vocab, d))
        positions = self.position_embedding[:, start : start + length].unsqueeze(1)
        return (x.reshape(members, -1, length, d) + positions).reshape(n, length, d)

    def output(self, h: Tensor) -> Tensor:
        """Final LayerNorm, head and log_softmax on hidden states ``[..., d]``."""
        return torch.log_softmax(self.head(self.ln_f(h)), dim=-1)

    def hidden(self, tokens: Tensor, first: int = 0) -> Tensor:
        """Hidden states before the final LayerNorm at positions ``first..T-1``, ``[N, T - first, d]`` for
        ``tokens [N, T]``. Exact: the last layer computes its output rows from ``first`` on only (the
        earlier positions enter it as keys and values), the rows ``hidden(tokens)[:, first:]`` holds."""
        if tokens.shape[1] > self.max_len:
            raise ValueError(f"sequence length {tokens.shape[1]} exceeds max_len {self.max_len}")
        x = self.embed(tokens)
        last = len(self.layers) - 1
        for i, layer in enumerate(self.layers):
            x = layer(x, first if i == last else 0)
        return x

    def hidden_with_prefix(
        self, prefix: Tensor, suffix: Tensor, owner: Tensor, first: int = 0
    ) -> tuple[Tensor, Tensor]:
        """Hidden states of prefixes ``[P, Tp]`` at positions ``first..Tp-1`` and of suffixes ``[R, Ts]``
        (suffix ``r`` continues prefix ``owner[r]``), computing each shared prefix once; exact: the suffix
        rows equal ``hidden(cat(prefix[owner], suffix))[:, Tp:]``, the prefix rows
        ``hidden(prefix)[:, first:]``."""
        if prefix.shape[1] + suffix.shape[1] > self.max_len:
            raise ValueError(
                f"sequence length {prefix.shape[1] + suffix.shape[1]} exceeds max_len {self.max_len}"
            )
        x_prefix, x_suffix = self.embed(prefix), self.embed(suffix, prefix.shape[1])
        last = len(self.layers) - 1
        for i, layer in enumerate(self.layers):
            start = first if i == last else 0
            x_prefix, x_suffix = layer.forward_with_prefix(x_prefix, x_suffix, owner, start)
        return x_prefix, x_suffix

    def forward(self, tokens: Tensor) -> Tensor:
        """Next-token log-probs at every position, ``[N, T, V]``."""
        return self.output(self.hidden(tokens))

    # ----------------------------------------------------------------- incremental decoding
    def new_cache(self, batch: int, device: torch.device, dtype: torch.dtype) -> list[tuple[Tensor, Tensor]]:
        shape = (batch, self.n_heads, self.max_len, self.head_dim)
        return [
            (torch.empty(shape, device=device, dtype=dtype), torch.empty(shape, device=device, dtype=dtype))
            for _ in self.layers
        ]

    def forward_cached(self, tokens: Tensor, cache: list[tuple[Tensor, Tensor]], start: int) -> Tensor:
        """Log-probs ``[N, T, V]`` for tokens at positions ``start..start+T-1``, given the cache of
        positions ``< start`` (filled further by this call). Exact: same math as :meth:`forward`."""
        x = self.embed(tokens, start)
        for layer, (cache_k, cache_v) in zip(self.layers, cache, strict=True):
            x = layer.forward_cached(x, cache_k, cache_v, start)
        return self.output(x)


class TransformerSoftmaxPolicy(GroupPolicy):
    """Causal transformer policy over token buffers, with the Muon/Adam optimizer (paper Sec. 3).

    Observation: ``MultiDiscrete([V + 1] * 2H)`` integer buffer ``[x_0..x_{H-1}, a_0..a_{t-1}, PAD...]``
    with ``PAD = V`` for the slots not generated yet. Action: ``Discrete(V)``, the next token.

    :param observation_space: ``MultiDiscrete`` of length 2H
    :param action_space: ``Discrete(V)``
    :param lr_schedule: SB3 schedule; ``lr_schedule(1)`` is the lr of both optimizer parts (1e-3 in the paper)
    :param d_model: width (64)
    :param n_heads: heads (2, the reference code; the paper text says 4)
    :param n_layers: layers (2)
    :param ffn_mult: FFN width multiplier (4)
    :param optimizer_class: optimizer class (default :class:`MuonAdam` on the flax partition)
    :param optimizer_kwargs: extra optimizer keyword arguments
    :param n_seeds: S independent transformers (see :class:`GroupPolicy` and the module docstring);
        Muon orthogonalizes each member's matrices on its own
    """

    supports_members = True

    def __init__(
        self,
        observation_space: spaces.Space,
        action_space: spaces.Space,
        lr_schedule: Schedule,
        d_model: int = 64,
        n_heads: int = 2,
        n_layers: int = 2,
        ffn_mult: int = 4,
        optimizer_class: type[torch.optim.Optimizer] | None = None,
        optimizer_kwargs: dict[str, Any] | None = None,
        normalize_images: bool = False,
        n_seeds: int = 1,
    ) -> None:
        super().__init__(
            observation_space,
            action_space,
            lr_schedule,
            optimizer_class=optimizer_class,
            optimizer_kwargs=optimizer_kwargs,
            normalize_images=normalize_images,
            n_seeds=n_seeds,
        )
        if not isinstance(observation_space, spaces.MultiDiscrete) or len(observation_space.shape) != 1:
            raise ValueError(
                f"TransformerSoftmaxPolicy needs a 1-D MultiDiscrete observation, got {observation_space}"
            )
        length = int(observation_space.shape[0])
        if length % 2:
            raise ValueError(f"the observation length must be 2H, got {length}")
        self.vocab_size = self.n_actions
        self.horizon = length // 2
        self.pad_token = self.vocab_size
        self.model_kwargs = dict(d_model=d_model, n_heads=n_heads, n_layers=n_layers, ffn_mult=ffn_mult)
        self.model = CausalTransformer(self.vocab_size, 2 * self.horizon, **self.model_kwargs)
        if n_seeds > 1:  # every parameter stacked on a leading member axis, filled by load_members
            for module in self.model.modules():
                for name, p in list(module.named_parameters(recurse=False)):
                    setattr(module, name, nn.Parameter(p.detach().expand(n_seeds, *p.shape).clone()))
        self._build_optimizer()

    def _default_optimizer(self, lr: float) -> torch.optim.Optimizer:
        return MuonAdam(self.named_parameters(), lr=lr, n_seeds=self.n_seeds, **self.optimizer_kwargs)

    def _load_member(self, member: int, policy: GroupPolicy) -> None:
        for name, p in self.named_parameters():
            p[member].copy_(policy.get_parameter(name))

    def _store_member(self, member: int, policy: GroupPolicy) -> None:
        for name, p in policy.named_parameters():
            p.copy_(self.get_parameter(name)[member])

    def member_log_probs(self, obs: PyTorchObs) -> Tensor:
        assert isinstance(obs, Tensor)
        tokens = obs.reshape(-1, 2 * self.horizon)
        log_probs = self.action_log_probs(tokens.repeat(self.n_seeds, 1))
        return log_probs.reshape(self.n_seeds, len(tokens), -1)

    # ----------------------------------------------------------------- log-probs
    def action_log_probs(self, obs: PyTorchObs) -> Tensor:
        """Next-token log-probs ``[N, V]`` at each buffer's current state (PAD = V marks empty slots)."""
        assert isinstance(obs, Tensor)
        H = self.horizon
        tokens = obs.reshape(-1, 2 * H).to(self.device).long()
        is_pad = tokens == self.pad_token
        n_generated = (~is_pad[:, H:]).sum(dim=1)
        positions = (H - 1 + n_generated).clamp(max=2 * H - 1)
        needed = int(positions.max()) + 1  # the causal mask makes a shorter forward exact
        tokens = tokens.masked_fill(is_pad, 0)[:, :needed]
        first = int(positions.min())
        hidden = self.model.hidden(tokens, first)
        rows = torch.arange(tokens.shape[0], device=tokens.device)
        return self.model.output(hidden[rows, positions - first])

    def completion_log_probs(self, prompts: Tensor, completions: Tensor) -> Tensor:
        """Teacher-forced next-token log-probs ``[N, H, V]`` of all output positions (H-1 .. 2H-2).

        One forward pass of ``[prompt, completion[:-1]]``; the last completion token is never an input.
        Entry ``[n, t]`` is ``log pi(. | prompt_n, completion_n[:t])``.
        """
        prompts = prompts.to(self.device).long()
        completions = completions.to(self.device).long()
        H = prompts.shape[1]
        tokens = torch.cat([prompts, completions[:, :-1]], dim=1)
        return self.model.output(self.model.hidden(tokens, H - 1))

    def grouped_completion_log_probs(self, prompts: Tensor, owner: Tensor, completions: Tensor) -> Tensor:
        """``completion_log_probs(prompts[owner], completions)`` with each prompt encoded once, ``[R, H, V]``.

        For K completions of one prompt (sequence-level groups) this halves the work; the result is the
        same up to float rounding.
        """
        prompts, completions = prompts.to(self.device).long(), completions.to(self.device).long()
        owner = owner.to(self.device)
        hidden_prompts, hidden_completions = self.model.hidden_with_prefix(
            prompts, completions[:, :-1], owner, prompts.shape[1] - 1
        )
        first = self.model.output(hidden_prompts)[owner]
        return torch.cat([first, self.model.output(hidden_completions)], dim=1)

    def completion_token_log_probs(self, prompts: Tensor, completions: Tensor) -> Tensor:
        """``log pi(completion_t | prompt, completion_<t)``, shape ``[N, H]``."""
        log_probs = self.completion_log_probs(prompts, completions)
        return log_probs.gather(-1, completions.to(log_probs.device).long().unsqueeze(-1)).squeeze(-1)

    @torch.no_grad()
    def decode_start(self, prompts: Tensor) -> tuple[Tensor, list[tuple[Tensor, Tensor]]]:
        """Begin incremental decoding: ``(log pi(. | prompt) [N, V], KV cache)`` (exact, no grad)."""
        prompts = prompts.to(self.device).long()
        cache = self.model.new_cache(prompts.shape[0], prompts.device, self.model.token_embedding.dtype)
        return self.model.forward_cached(prompts, cache, 0)[:, -1], cache

    @staticmethod
    def select_cache(cache: list[tuple[Tensor, Tensor]], rows: Tensor) -> list[tuple[Tensor, Tensor]]:
        """The cache of the sequences ``rows`` (a new batch made of copies of existing sequences)."""
        return [(k.index_select(0, rows), v.index_select(0, rows)) for k, v in cache]

    @torch.no_grad()
    def decode_next(self, tokens: Tensor, cache: list[tuple[Tensor, Tensor]], t: int) -> Tensor:
        """Append output token ``t`` (``tokens [N]``) to the cache; return the next log-probs [N, V]."""
        tokens = tokens.to(self.device).long().reshape(-1, 1)
        return self.model.forward_cached(tokens, cache, self.horizon + t)[:, 0]

    @torch.no_grad()
    def sample_completions(
        self,
        prompts: Tensor,
        generator: torch.Generator | None = None,
        use_cache: bool = True,
    ) -> tuple[Tensor, Tensor]:
        """Ancestral sampling at temperature 1 of H tokens per prompt.

        :param prompts: ``[N, H]`` token ids
        :param generator: optional torch generator for the draws (on the policy's device; default:
            the members' generators, or torch's global one)
        :param use_cache: incremental decoding with a KV cache (exact); ``False`` reruns the full
            forward on the 2H buffer each step, as the reference does
        :return: ``(completions [N, H] int64, log_probs [N, H, V])`` where ``log_probs[:, t]`` is the
            sampling distribution of token t (detached)
        """
        prompts = prompts.to(self.device).long()
        N, H = prompts.shape
        generators = self.member_generators if generator is None else [generator]
        completions = torch.zeros(N, H, dtype=torch.long, device=prompts.device)
        log_probs = torch.empty(N, H, self.vocab_size, device=prompts.device)
        if use_cache:
            cache = self.model.new_cache(N, prompts.device, self.model.token_embedding.dtype)
            step_log_probs = self.model.forward_cached(prompts, cache, 0)[:, -1]
            for t in range(H):
                log_probs[:, t] = step_log_probs
                token = sample_categorical(step_log_probs, generators)
                completions[:, t] = token
                if t + 1 < H:
                    step_log_probs = self.model.forward_cached(token[:, None], cache, H + t)[:, 0]
        else:
            buffer = torch.cat([prompts, completions], dim=1)
            for t in range(H):
                step_log_probs = self.model(buffer[:, : H + t])[:, -1]
                log_probs[:, t] = step_log_probs
                token = sample_categorical(step_log_probs, generators)
                completions[:, t] = token
                buffer[:, H + t] = token
        return completions, log_probs

    def _get_constructor_parameters(self) -> dict[str, Any]:
        data = super()._get_constructor_parameters()
        data.update(self.model_kwargs)
        return data
