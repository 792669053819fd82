"""Target Policy Optimization on ``TPO/TokenReversal-v0`` in one file (paper Sec. 2, 3.4; Table 1, V = 2).

Reverse copy with the bag-of-tokens reward: a prompt x of H tokens over {0..V-1}, the target
y*_t = x_{H-1-t}, reward r_t = 1[a_t = y*_t]; task error = 1 - mean_t r_t of the behaviour trajectories.

Token-level TPO, one update:

1. collect: B prompts; at each prefix state x_t draw K candidates a_{t,1..K} ~ pi_old(.|x_t) (with
   replacement), let the env score them without stepping (s_{t,i} = r(a_{t,i})), continue with a_{t,1};
2. targets, frozen for the update: L_old = log pi_old(a_{t,i} | x_t) from one teacher-forced forward of
   the collected batch at theta_old, u = standardised scores (u = 0 for equal scores),
   q = softmax_K(L_old + u / eta);
3. n_epochs optimizer steps (Muon for the 2-D parameters, Nesterov Adam for the rest) on the
   cross-entropy  loss = -mean_groups sum_i q_i log softmax_K(L_theta)_i,  gradient (p - q) / n_groups.

    python examples/tpo_token_reversal.py --updates 1000

The model is the library's causal transformer (``tpo_agents/policies/transformer.py``) with its parameters
in the same flax layout and names, the optimizer the library's MuonAdam (``tpo_agents/policies/optim.py``).
"""

from __future__ import annotations

import argparse
import math
import time

import gymnasium as gym
import torch
import torch.nn.functional as F
from torch import Tensor, nn

import tpo_gym  # noqa: F401  (registers the TPO/ envs)

TRUNCATED_NORMAL_STD = 0.87962566103423978  # std of a standard normal truncated to [-2, 2]
NS_COEFFICIENTS = (3.4445, -4.7750, 2.0315)  # (a, b, c) of Muon's quintic Newton-Schulz iteration


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """Command-line flags; the defaults are the paper's Table 1 setting (V = 2)."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--updates", type=int, default=1000, help="batches collected and trained on")
    p.add_argument("--sequence-length", type=int, default=10, help="H")
    p.add_argument("--vocab-size", type=int, default=2, help="V")
    p.add_argument("--batch-size", type=int, default=100, help="B, prompts per update")
    p.add_argument("--group-size", type=int, default=8, help="K, next-token candidates per prefix")
    p.add_argument("--n-epochs", type=int, default=4, help="optimizer steps per batch")
    p.add_argument("--eta", type=float, default=1.0, help="target temperature eta")
    p.add_argument("--no-anchor", action="store_true", help="no-anchor ablation: q = softmax_K(u / eta)")
    p.add_argument("--learning-rate", type=float, default=1e-3)
    p.add_argument("--d-model", type=int, default=64)
    p.add_argument("--n-heads", type=int, default=2)
    p.add_argument("--n-layers", type=int, default=2)
    p.add_argument("--ffn-mult", type=int, default=4)
    p.add_argument("--log-every", type=int, default=10, help="print the task error every this many updates")
    return p.parse_args(argv)


# --------------------------------------------------------------------------------- the policy
def lecun_normal(*shape: int, fan_in: int) -> Tensor:
    """flax's LeCun normal: a standard normal truncated to [-2, 2], rescaled to std 1/sqrt(fan_in)."""
    x = nn.init.trunc_normal_(torch.empty(shape), mean=0.0, std=1.0, a=-2.0, b=2.0)
    return x / (math.sqrt(fan_in) * TRUNCATED_NORMAL_STD)


def params(**tensors: Tensor) -> nn.Module:
    """A module holding ``tensors`` as parameters of those names (``kernel``, ``bias``, ``scale``)."""
    module = nn.Module()
    for name, value in tensors.items():
        setattr(module, name, nn.Parameter(value))
    return module


def layer_norm(x: Tensor, ln: nn.Module) -> Tensor:
    """(x - mean) / sqrt(var + 1e-6) * scale + bias over the last axis."""
    return F.layer_norm(x, x.shape[-1:], ln.scale, ln.bias, eps=1e-6)  # flax's epsilon


class CausalTransformer(nn.Module):
    """Decoder-only transformer, flax layout: kernels (in, out), attention kernels (d, heads, d_head) with
    biases (heads, d_head), out kernel (heads, d_head, d). Pre-norm blocks
    ``x += MHA(LN(x)); x += fc2(gelu_tanh(fc1(LN(x))))``, final LN, head, log_softmax over V."""

    def __init__(self, vocab_size: int, max_len: int, d_model: int = 64, n_heads: int = 2,
                 n_layers: int = 2, ffn_mult: int = 4) -> None:
        super().__init__()
        d, hd, f = d_model, d_model // n_heads, ffn_mult * d_model
        self.n_heads, self.head_dim = n_heads, hd
        self.token_embedding = nn.Parameter(torch.randn(vocab_size, d) / math.sqrt(d))
        self.position_embedding = nn.Parameter(torch.randn(max_len, d) * 0.02)
        self.layers = nn.ModuleList()
        for _ in range(n_layers):
            layer = nn.Module()
            layer.ln1 = params(scale=torch.ones(d), bias=torch.zeros(d))
            layer.attn = nn.Module()
            for name in ("query", "key", "value"):
                setattr(layer.attn, name, params(kernel=lecun_normal(d, n_heads, hd, fan_in=d),
                                                 bias=torch.zeros(n_heads, hd)))
            layer.attn.out = params(kernel=lecun_normal(n_heads, hd, d, fan_in=d), bias=torch.zeros(d))
            layer.ln2 = params(scale=torch.ones(d), bias=torch.zeros(d))
            layer.mlp = nn.Module()
            layer.mlp.fc1 = params(kernel=lecun_normal(d, f, fan_in=d), bias=torch.zeros(f))
            layer.mlp.fc2 = params(kernel=lecun_normal(f, d, fan_in=f), bias=torch.zeros(d))
            self.layers.append(layer)
        self.ln_f = params(scale=torch.ones(d), bias=torch.zeros(d))
        self.head = params(kernel=lecun_normal(d, vocab_size, fan_in=d), bias=torch.zeros(vocab_size))

    def forward(self, tokens: Tensor) -> Tensor:
        """Next-token log-probs ``[N, T, V]`` of ``tokens [N, T]``: entry t is log pi(. | tokens[:, :t+1])."""
        T = tokens.shape[1]
        x = F.embedding(tokens, self.token_embedding) + self.position_embedding[:T]
        future = torch.ones(T, T, dtype=torch.bool).triu(1)
        for layer in self.layers:
            h, a = layer_norm(x, layer.ln1), layer.attn
            q, k, v = (torch.einsum("ntd,dhk->nhtk", h, p.kernel) + p.bias[:, None]
                       for p in (a.query, a.key, a.value))
            logits = (q @ k.mT / math.sqrt(self.head_dim)).masked_fill(future, float("-inf"))
            o = torch.softmax(logits, dim=-1) @ v  # [N, heads, T, d_head]
            x = x + torch.einsum("nhtk,hkd->ntd", o, a.out.kernel) + a.out.bias
            h, m = layer_norm(x, layer.ln2), layer.mlp
            x = x + F.gelu(h @ m.fc1.kernel + m.fc1.bias, approximate="tanh") @ m.fc2.kernel + m.fc2.bias
        return torch.log_softmax(layer_norm(x, self.ln_f) @ self.head.kernel + self.head.bias, dim=-1)


# ------------------------------------------------------------------------------ the optimizer
def newton_schulz(g: Tensor, steps: int = 5, eps: float = 1e-8) -> Tensor:
    """Approximate orthogonalisation: X = G^T if rows > cols, X /= ||X||_F + eps, then ``steps`` times
    A = X X^T, X <- a X + (b A + c A^2) X; transposed back."""
    a, b, c = NS_COEFFICIENTS
    transpose = g.shape[0] > g.shape[1]
    x = g.mT if transpose else g
    x = x / (torch.linalg.matrix_norm(x) + eps)
    for _ in range(steps):
        gram = x @ x.mT
        x = a * x + (b * gram + c * gram @ gram) @ x
    return x.mT if transpose else x


class MuonAdam:
    """optax ``contrib.muon`` (its defaults): exactly 2-D parameters (flax (fan_in, fan_out) layout) take
    Muon, all others Nesterov Adam, one step counter t = 1, 2, ... for both.

    Muon:  m = beta m + (1 - beta) g;  m_hat = beta m / (1 - beta^(t+1)) + (1 - beta) g / (1 - beta^t);
           p -= lr newton_schulz(m_hat) sqrt(max(1, fan_out / fan_in))                     (beta = 0.95)
    Adam:  m = b1 m + (1 - b1) g;  v = b2 v + (1 - b2) g^2;  v_hat = v / (1 - b2^t);
           m_hat = b1 m / (1 - b1^(t+1)) + (1 - b1) g / (1 - b1^t);
           p -= lr m_hat / (sqrt(v_hat) + eps)                                 (b1, b2 = 0.9, 0.999)
    """

    def __init__(self, parameters: list[nn.Parameter], lr: float = 1e-3, beta: float = 0.95,
                 betas: tuple[float, float] = (0.9, 0.999), eps: float = 1e-8) -> None:
        self.params, self.lr, self.beta, self.betas, self.eps, self.t = parameters, lr, beta, betas, eps, 0
        self.m = [torch.zeros_like(p) for p in parameters]
        self.v = [torch.zeros_like(p) for p in parameters]

    @torch.no_grad()
    def step(self) -> None:
        self.t += 1
        t, beta, (b1, b2) = self.t, self.beta, self.betas
        for p, m, v in zip(self.params, self.m, self.v, strict=True):
            g = p.grad
            if p.ndim == 2:  # Muon: embeddings, head kernel, MLP kernels, q/k/v biases (heads, d_head)
                m.mul_(beta).add_(g, alpha=1 - beta)
                m_hat = beta / (1 - beta ** (t + 1)) * m + (1 - beta) / (1 - beta**t) * g
                fan_in, fan_out = p.shape
                p.sub_(self.lr * math.sqrt(max(1.0, fan_out / fan_in)) * newton_schulz(m_hat))
            else:  # Adam: LayerNorms, 1-D biases, attention kernels (3-D)
                m.mul_(b1).add_(g, alpha=1 - b1)
                v.mul_(b2).addcmul_(g, g, value=1 - b2)
                m_hat = b1 / (1 - b1 ** (t + 1)) * m + (1 - b1) / (1 - b1**t) * g
                p.sub_(self.lr * m_hat / ((v / (1 - b2**t)).sqrt() + self.eps))

    def zero_grad(self) -> None:
        for p in self.params:
            p.grad = None


# ------------------------------------------------------------------------------- TPO
@torch.no_grad()
def collect(envs: gym.vector.VectorEnv, model: CausalTransformer, K: int) -> dict[str, Tensor]:
    """B behaviour trajectories with K scored candidates a_{t,i} ~ pi_old(.|x_t) at every prefix x_t.

    Returns ``prompts [B, H]``, ``actions [B, H]`` (= candidates[..., 0]), ``candidates [B, H, K]``,
    ``scores [B, H, K]`` (s_{t,i} = r(a_{t,i}), from the env's ``score_candidates``, no stepping) and
    ``rewards [B, H]`` (the behaviour trajectory's r_t)."""
    obs, _ = envs.reset()
    H = obs.shape[1] // 2
    prompts = torch.as_tensor(obs[:, :H])
    tokens, candidates, scores, rewards = prompts, [], [], []
    for _ in range(H):
        log_pi = model(tokens)[:, -1]  # log pi_old(.|x_t)
        a = torch.multinomial(log_pi.exp(), K, replacement=True)  # [B, K]
        scores.append(torch.as_tensor(envs.unwrapped.score_candidates(a.numpy())).float())
        _, r, _, _, _ = envs.step(a[:, 0].numpy())  # the trajectory continues with candidate 0
        tokens = torch.cat([tokens, a[:, :1]], dim=1)
        candidates.append(a)
        rewards.append(torch.as_tensor(r).float())
    candidates_t = torch.stack(candidates, dim=1)
    return {"prompts": prompts, "actions": candidates_t[..., 0], "candidates": candidates_t,
            "scores": torch.stack(scores, dim=1), "rewards": torch.stack(rewards, dim=1)}


def tpo_target(L_old: Tensor, s: Tensor, eta: float = 1.0, anchor: bool = True) -> Tensor:
    """The TPO target of groups ``[..., K]`` (paper Sec. 2): u = the scores standardised within each group
    (population std; u = 0 exactly for equal scores), q = softmax_K(L_old + u / eta); without the anchor
    (the paper's ablation) q = softmax_K(u / eta)."""
    centred = s - s.mean(-1, keepdim=True)
    sigma = centred.pow(2).mean(-1, keepdim=True).sqrt()
    signal = sigma > 1e-6
    u = torch.where(signal, centred / torch.where(signal, sigma, torch.ones_like(sigma)), 0.0)
    return torch.softmax((L_old if anchor else 0.0) + u / eta, dim=-1)


def tpo_loss_and_gradient(L: Tensor, q: Tensor) -> tuple[Tensor, Tensor]:
    """loss = -mean_groups sum_i q_i log softmax_K(L)_i and its gradient on the log-scores L,
    (p - q) / n_groups with p = softmax_K(L): written out, so that a group with q = p (equal scores at
    theta = theta_old) contributes exactly 0."""
    L = L.detach()
    n_groups = q.numel() // q.shape[-1]
    loss = -(q * torch.log_softmax(L, dim=-1)).sum(-1).mean()
    return loss, (torch.softmax(L, dim=-1) - q) / n_groups


def update(model: CausalTransformer, optimizer: MuonAdam, batch: dict[str, Tensor], n_epochs: int = 4,
           eta: float = 1.0, anchor: bool = True) -> float:
    """One TPO update on a collected batch (paper Sec. 2): targets q frozen at theta_old, then ``n_epochs``
    optimizer steps with the gradient (p - q) / n_groups on the group log-scores L_theta. Returns the
    first epoch's loss -mean_groups sum_i q_i log p_i."""
    prompts, actions, candidates, s = batch["prompts"], batch["actions"], batch["candidates"], batch["scores"]
    H = prompts.shape[1]
    tokens = torch.cat([prompts, actions[:, :-1]], dim=1)  # teacher forcing: [x, a_0 .. a_{H-2}]

    # pi_old: one teacher-forced forward of the batch at theta_old (also the first epoch's pi_theta)
    log_pi = model(tokens)[:, H - 1:]  # [B, H, V]: log pi(. | x, a_<t)
    L_old = log_pi.detach().gather(-1, candidates)  # L_old[b, t, i] = log pi_old(a_{t,i} | x_t)
    q = tpo_target(L_old, s, eta, anchor)  # frozen for the update

    first_loss = 0.0
    for epoch in range(n_epochs):
        if epoch > 0:
            log_pi = model(tokens)[:, H - 1:]
        L = log_pi.gather(-1, candidates)  # L_theta, the group log-scores
        loss, gradient = tpo_loss_and_gradient(L, q)
        if epoch == 0:
            first_loss = float(loss)
        optimizer.zero_grad()
        L.backward(gradient)
        optimizer.step()
    return first_loss


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    torch.manual_seed(args.seed)
    H, V = args.sequence_length, args.vocab_size
    envs = gym.make_vec("TPO/TokenReversal-v0", num_envs=args.batch_size,
                        vectorization_mode="vector_entry_point",
                        reward="bag_of_tokens", sequence_length=H, vocab_size=V)
    envs.reset(seed=args.seed)
    model = CausalTransformer(V, 2 * H, args.d_model, args.n_heads, args.n_layers, args.ffn_mult)
    optimizer = MuonAdam(list(model.parameters()), lr=args.learning_rate)
    start = time.time()
    for iteration in range(1, args.updates + 1):
        batch = collect(envs, model, args.group_size)
        task_error = 1.0 - float(batch["rewards"].mean())  # of the behaviour trajectories, before the update
        loss = update(model, optimizer, batch, args.n_epochs, args.eta, not args.no_anchor)
        if iteration % args.log_every == 0 or iteration in (1, args.updates):
            print(f"update {iteration:5d}  episodes {iteration * args.batch_size:7d}  task_error "
                  f"{task_error:.4f}  loss {loss:.4f}  time {time.time() - start:.1f}s", flush=True)
    envs.close()


if __name__ == "__main__":
    main()
