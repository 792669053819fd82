"""Policies: tabular logit table, MNIST MLP and the token transformer (docs/algorithms.md)."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from gymnasium import spaces

from tpo_agents.policies import (
    GroupPolicy,
    MlpPolicy,
    MuonAdam,
    NormalizedStep,
    TabularPolicy,
    TransformerPolicy,
)
from tpo_agents.policies.transformer import causal_attention, gelu_tanh

torch.set_num_threads(1)


def constant(value: float):
    return lambda _progress: value


def token_policy(V: int = 2, H: int = 4, seed: int = 0, **kwargs) -> TransformerPolicy:
    torch.manual_seed(seed)
    return TransformerPolicy(
        spaces.MultiDiscrete([V + 1] * (2 * H)), spaces.Discrete(V), constant(1e-3), **kwargs
    )


# --------------------------------------------------------------------------------------------- tabular
def test_tabular_zeros_init_is_uniform_per_context() -> None:
    policy = TabularPolicy(spaces.Discrete(1), spaces.Discrete(100), constant(0.1))
    assert isinstance(policy, GroupPolicy)
    assert isinstance(policy.optimizer, NormalizedStep)
    log_probs = policy.action_log_probs(torch.zeros(5, dtype=torch.long))
    assert log_probs.shape == (5, 100)
    torch.testing.assert_close(log_probs, torch.full((5, 100), -math.log(100)))


def test_tabular_normal_init_uses_global_rng_and_indexes_contexts() -> None:
    torch.manual_seed(3)
    a = TabularPolicy(spaces.Discrete(100), spaces.Discrete(10), constant(0.1), init="normal")
    torch.manual_seed(3)
    b = TabularPolicy(spaces.Discrete(100), spaces.Discrete(10), constant(0.1), init="normal")
    torch.testing.assert_close(a.logits, b.logits)
    assert 0.9 < a.logits.std().item() < 1.1 and abs(a.logits.mean().item()) < 0.1
    obs = torch.tensor([7, 0, 99, 7])
    log_probs = a.action_log_probs(obs)
    torch.testing.assert_close(log_probs, torch.log_softmax(a.logits[obs], -1))
    torch.testing.assert_close(a.all_log_probs()[obs], log_probs)
    with pytest.raises(ValueError):
        TabularPolicy(spaces.Discrete(2), spaces.Discrete(2), constant(0.1), init="bogus")


def test_tabular_normalized_step_moves_logits_by_alpha() -> None:
    torch.manual_seed(0)
    policy = TabularPolicy(spaces.Discrete(4), spaces.Discrete(5), constant(0.1), init="normal")
    before = policy.logits.detach().clone()
    obs = torch.arange(4)
    loss = -policy.action_log_probs(obs)[:, 0].mean()  # CE towards action 0 in every context
    policy.optimizer.zero_grad()
    loss.backward()
    grad = policy.logits.grad.clone()
    policy.optimizer.step()
    delta = policy.logits.detach() - before
    assert abs(delta.norm().item() - 0.1) < 1e-6
    torch.testing.assert_close(delta, -0.1 * grad / grad.norm())
    # the ascent direction g = -grad is e_0 - pi per context (times 1/4)
    pi = torch.softmax(before, -1)
    torch.testing.assert_close(-grad * 4, torch.eye(5)[0] - pi)


def test_tabular_predict_through_sb3() -> None:
    policy = TabularPolicy(spaces.Discrete(3), spaces.Discrete(4), constant(0.1))
    with torch.no_grad():
        policy.logits[:, 2] = 5.0
    actions, _ = policy.predict(np.array([0, 1, 2]), deterministic=True)
    assert actions.tolist() == [2, 2, 2]
    action, _ = policy.predict(np.int64(1), deterministic=True)
    assert action.shape == () and int(action) == 2


# --------------------------------------------------------------------------------------------- MLP
def test_mlp_shapes_init_and_optimizer() -> None:
    torch.manual_seed(0)
    policy = MlpPolicy(spaces.Box(0.0, 1.0, (784,), np.float32), spaces.Discrete(10), constant(1e-3))
    linears = [m for m in policy.net if isinstance(m, torch.nn.Linear)]
    assert [(m.in_features, m.out_features) for m in linears] == [(784, 50), (50, 50), (50, 10)]
    w = linears[0].weight.detach()
    assert abs(w.std().item() - 1 / 28) < 0.001  # LeCun normal: 1/sqrt(784) = 0.0357
    assert w.abs().max().item() <= 2 / 0.87962566103423978 / 28 + 1e-6  # truncated at 2 sigma
    assert all((m.bias == 0).all() for m in linears)
    assert isinstance(policy.optimizer, torch.optim.Adam)
    group = policy.optimizer.param_groups[0]
    assert group["lr"] == 1e-3 and group["betas"] == (0.9, 0.999) and group["eps"] == 1e-8
    obs = torch.rand(6, 784)
    log_probs = policy.action_log_probs(obs)
    assert log_probs.shape == (6, 10)
    torch.testing.assert_close(log_probs.exp().sum(-1), torch.ones(6))
    actions, _ = policy.predict(obs.numpy(), deterministic=True)
    assert actions.shape == (6,)
    np.testing.assert_array_equal(actions, log_probs.argmax(-1).numpy())


def test_mlp_discrete_observations_are_one_hot() -> None:
    policy = MlpPolicy(spaces.Discrete(5), spaces.Discrete(3), constant(1e-3), net_arch=[8])
    assert policy.net[0].in_features == 5
    assert policy.action_log_probs(torch.tensor([0, 4, 2])).shape == (3, 3)
    policy = MlpPolicy(spaces.MultiDiscrete([2, 3]), spaces.Discrete(3), constant(1e-3), net_arch=[])
    assert policy.net[0].in_features == 5
    assert policy.action_log_probs(torch.tensor([[0, 2], [1, 1]])).shape == (2, 3)


# --------------------------------------------------------------------------------------------- transformer
@pytest.mark.parametrize(("V", "H", "count"), [(2, 10, 101_634), (16, 10, 103_440), (2, 5, 100_994)])
def test_transformer_parameter_count(V: int, H: int, count: int) -> None:
    policy = token_policy(V, H)
    assert sum(p.numel() for p in policy.parameters()) == count


def test_transformer_optimizer_partition() -> None:
    policy = token_policy(2, 10)
    assert isinstance(policy.optimizer, MuonAdam)
    groups = {g["kind"]: set(g["param_names"]) for g in policy.optimizer.param_groups}
    expected_muon = {"model.token_embedding", "model.position_embedding", "model.head.kernel"}
    for i in range(2):
        expected_muon |= {f"model.layers.{i}.attn.{x}.bias" for x in ("query", "key", "value")}
        expected_muon |= {f"model.layers.{i}.mlp.fc1.kernel", f"model.layers.{i}.mlp.fc2.kernel"}
    assert groups["muon"] == expected_muon
    names = dict(policy.named_parameters())
    assert groups["adam"] == set(names) - expected_muon
    assert (
        "model.layers.0.attn.query.kernel" in groups["adam"] and "model.layers.1.ln2.scale" in groups["adam"]
    )
    shapes = {k: tuple(v.shape) for k, v in names.items()}
    assert shapes["model.token_embedding"] == (2, 64)
    assert shapes["model.position_embedding"] == (20, 64)
    assert shapes["model.layers.0.attn.key.kernel"] == (64, 2, 32)
    assert shapes["model.layers.0.attn.key.bias"] == (2, 32)
    assert shapes["model.layers.0.attn.out.kernel"] == (2, 32, 64)
    assert shapes["model.layers.0.mlp.fc1.kernel"] == (64, 256)
    assert shapes["model.head.kernel"] == (64, 2)
    assert all(g["lr"] == 1e-3 for g in policy.optimizer.param_groups)


def test_transformer_init_statistics() -> None:
    policy = token_policy(16, 10, seed=1)
    model = policy.model
    assert abs(model.token_embedding.std().item() - 0.125) < 0.01
    assert abs(model.position_embedding.std().item() - 0.02) < 0.002
    fc1 = model.layers[0].mlp.fc1.kernel
    assert abs(fc1.std().item() - 0.125) < 0.005
    assert fc1.abs().max().item() <= 2 / 0.87962566103423978 * 0.125 + 1e-6
    out = model.layers[0].attn.out.kernel
    assert abs(out.std().item() - 0.125) < 0.01
    for name, p in policy.named_parameters():
        if name.endswith("bias"):
            assert (p == 0).all(), name
        if name.endswith("scale"):
            assert (p == 1).all(), name
    assert model.ln_f.eps == 1e-6 and model.layers[0].ln1.eps == 1e-6
    assert abs(gelu_tanh(torch.tensor(1.0)).item() - 0.841192) < 1e-6  # flax's nn.gelu(1.0)


def test_gelu_tanh_equals_torch_tanh_gelu_and_its_gradient() -> None:
    x = torch.linspace(-12, 12, 2001)
    torch_gelu = torch.nn.functional.gelu(x, approximate="tanh")
    torch.testing.assert_close(gelu_tanh(x), torch_gelu, rtol=1e-6, atol=1e-6)
    assert gelu_tanh(torch.tensor(0.0)).item() == 0.0
    exact = x.double().requires_grad_()
    torch.nn.functional.gelu(exact, approximate="tanh").sum().backward()
    leaf = x.clone().requires_grad_()
    gelu_tanh(leaf).sum().backward()
    torch.testing.assert_close(leaf.grad.double(), exact.grad, rtol=1e-5, atol=1e-6)
    small = torch.randn(3, 4, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(gelu_tanh, (small,))


def numpy_forward(policy: TransformerPolicy, tokens: np.ndarray) -> np.ndarray:
    """Numpy forward of the architecture in docs/algorithms.md (heads contiguous): log-probs [N, T, V]."""
    p = {k: v.detach().double().numpy() for k, v in policy.named_parameters()}
    pre = "model."

    def ln(x, name):
        mu = x.mean(-1, keepdims=True)
        var = ((x - mu) ** 2).mean(-1, keepdims=True)
        return (x - mu) / np.sqrt(var + 1e-6) * p[name + ".scale"] + p[name + ".bias"]

    def gelu(x):
        return 0.5 * x * (1 + np.tanh(np.sqrt(2 / np.pi) * (x + 0.044715 * x**3)))

    T = tokens.shape[1]
    x = p[pre + "token_embedding"][tokens] + p[pre + "position_embedding"][:T]
    causal = np.tril(np.ones((T, T), dtype=bool))
    for i in range(2):
        lp = f"{pre}layers.{i}."
        h = ln(x, lp + "ln1")
        q, k, v = (
            np.einsum("ntd,dhk->nhtk", h, p[lp + f"attn.{n}.kernel"])
            + p[lp + f"attn.{n}.bias"][None, :, None, :]
            for n in ("query", "key", "value")
        )
        logits = np.einsum("nhqk,nhsk->nhqs", q, k) / np.sqrt(q.shape[-1])
        logits = np.where(causal, logits, -np.inf)
        w = np.exp(logits - logits.max(-1, keepdims=True))
        w /= w.sum(-1, keepdims=True)
        o = np.einsum("nhqs,nhsk->nqhk", w, v)
        x = x + np.einsum("nqhk,hkd->nqd", o, p[lp + "attn.out.kernel"]) + p[lp + "attn.out.bias"]
        h = ln(x, lp + "ln2")
        h = gelu(h @ p[lp + "mlp.fc1.kernel"] + p[lp + "mlp.fc1.bias"])
        x = x + h @ p[lp + "mlp.fc2.kernel"] + p[lp + "mlp.fc2.bias"]
    z = ln(x, pre + "ln_f") @ p[pre + "head.kernel"] + p[pre + "head.bias"]
    z = z - z.max(-1, keepdims=True)
    return z - np.log(np.exp(z).sum(-1, keepdims=True))


def test_transformer_matches_numpy_reference() -> None:
    policy = token_policy(3, 4, seed=2)
    with torch.no_grad():  # non-trivial biases and LN params so that every term is exercised
        for name, p in policy.named_parameters():
            if name.endswith(("bias", "scale")):
                p.add_(0.1 * torch.randn_like(p))
    tokens = torch.randint(0, 3, (5, 8))
    ours = policy.model(tokens).detach().double().numpy()
    np.testing.assert_allclose(ours, numpy_forward(policy, tokens.numpy()), atol=2e-5)


def test_transformer_is_causal() -> None:
    policy = token_policy(4, 5, seed=3)
    tokens = torch.randint(0, 4, (3, 10))
    changed = tokens.clone()
    changed[:, 6:] = (changed[:, 6:] + 1) % 4
    a, b = policy.model(tokens), policy.model(changed)
    torch.testing.assert_close(a[:, :6], b[:, :6])
    assert not torch.allclose(a[:, 6:], b[:, 6:])


def test_completion_log_probs_equal_stepwise_action_log_probs() -> None:
    V, H = 3, 5
    policy = token_policy(V, H, seed=4)
    prompts = torch.randint(0, V, (6, H))
    completions = torch.randint(0, V, (6, H))
    teacher = policy.completion_log_probs(prompts, completions)
    assert teacher.shape == (6, H, V)
    for t in range(H):
        obs = torch.cat([prompts, completions[:, :t], torch.full((6, H - t), V)], dim=1)
        torch.testing.assert_close(policy.action_log_probs(obs), teacher[:, t], atol=1e-5, rtol=1e-5)
    # rows at different steps in one batch
    steps = torch.tensor([0, 1, 2, 3, 4, 2])
    obs = torch.stack(
        [
            torch.cat([prompts[i], completions[i, : int(s)], torch.full((H - int(s),), V)])
            for i, s in enumerate(steps)
        ]
    )
    torch.testing.assert_close(
        policy.action_log_probs(obs), teacher[torch.arange(6), steps], atol=1e-5, rtol=1e-5
    )
    token_lp = policy.completion_token_log_probs(prompts, completions)
    torch.testing.assert_close(token_lp, teacher.gather(-1, completions[..., None])[..., 0])
    # gradients flow
    token_lp.sum().backward()
    assert policy.model.token_embedding.grad is not None


@pytest.mark.parametrize("use_cache", [True, False])
def test_sample_completions_reproducible_and_consistent(use_cache: bool) -> None:
    V, H = 3, 5
    policy = token_policy(V, H, seed=5)
    prompts = torch.randint(0, V, (40, H))
    c1, l1 = policy.sample_completions(prompts, torch.Generator().manual_seed(7), use_cache=use_cache)
    c2, l2 = policy.sample_completions(prompts, torch.Generator().manual_seed(7), use_cache=use_cache)
    assert c1.shape == (40, H) and c1.dtype == torch.long and l1.shape == (40, H, V)
    assert torch.equal(c1, c2) and torch.equal(l1, l2)
    assert 0 <= int(c1.min()) and int(c1.max()) < V
    with torch.no_grad():
        teacher = policy.completion_log_probs(prompts, c1)
    torch.testing.assert_close(l1, teacher, atol=1e-5, rtol=1e-5)


def test_sample_completions_cache_matches_full_recompute() -> None:
    policy = token_policy(2, 6, seed=6)
    prompts = torch.randint(0, 2, (30, 6))
    c1, l1 = policy.sample_completions(prompts, torch.Generator().manual_seed(1), use_cache=True)
    c2, l2 = policy.sample_completions(prompts, torch.Generator().manual_seed(1), use_cache=False)
    assert torch.equal(c1, c2)
    torch.testing.assert_close(l1, l2, atol=1e-5, rtol=1e-5)


def test_transformer_predict_and_save_load(tmp_path) -> None:
    V, H = 2, 4
    policy = token_policy(V, H, seed=7)
    obs = np.array([[1, 0, 1, 1, 0, 1, V, V], [0, 0, 1, 0, V, V, V, V]], dtype=np.int64)
    expected = policy.action_log_probs(torch.as_tensor(obs)).argmax(-1).numpy()
    actions, _ = policy.predict(obs, deterministic=True)
    np.testing.assert_array_equal(actions, expected)
    single, _ = policy.predict(obs[0], deterministic=True)
    assert single.shape == () and int(single) == expected[0]
    sampled, _ = policy.predict(obs)
    assert set(sampled.tolist()) <= {0, 1}
    path = tmp_path / "policy.pt"
    policy.save(str(path))
    loaded = TransformerPolicy.load(str(path))
    torch.testing.assert_close(
        loaded.action_log_probs(torch.as_tensor(obs)), policy.action_log_probs(torch.as_tensor(obs))
    )
    assert loaded.model.n_heads == 2


def test_transformer_heads_kwarg_and_optimizer_round_trip() -> None:
    policy = token_policy(2, 3, seed=8, n_heads=4)
    assert policy.model.layers[0].attn.query.kernel.shape == (64, 4, 16)
    prompts = torch.randint(0, 2, (4, 3))
    for _ in range(2):
        policy.optimizer.zero_grad()
        policy.completion_log_probs(prompts, prompts).sum().backward()
        policy.optimizer.step()
    state = policy.optimizer.state_dict()
    other = token_policy(2, 3, seed=9, n_heads=4)
    other.optimizer.load_state_dict(state)
    assert [g["step"] for g in other.optimizer.param_groups] == [2, 2]


def test_custom_optimizer_class() -> None:
    policy = TabularPolicy(
        spaces.Discrete(2), spaces.Discrete(3), constant(0.5), optimizer_class=torch.optim.SGD
    )
    assert isinstance(policy.optimizer, torch.optim.SGD) and policy.optimizer.param_groups[0]["lr"] == 0.5


def test_grouped_completion_log_probs_equal_the_plain_forward_and_its_gradient() -> None:
    """Encoding each shared prompt once gives the same log-probs and the same parameter gradient."""
    policy = token_policy(V=3, H=4, seed=3)
    gen = torch.Generator().manual_seed(0)
    prompts = torch.randint(0, 3, (2, 4), generator=gen)
    owner = torch.tensor([0, 0, 1, 0, 1])
    completions = torch.randint(0, 3, (5, 4), generator=gen)
    grouped = policy.grouped_completion_log_probs(prompts, owner, completions)
    plain = policy.completion_log_probs(prompts[owner], completions)
    assert torch.allclose(grouped, plain, atol=1e-5)
    weights = torch.randn(plain.shape, generator=gen)
    grads = []
    for log_probs in (grouped, plain):
        policy.zero_grad()
        (weights * log_probs).sum().backward(retain_graph=True)
        grads.append(torch.cat([p.grad.flatten() for p in policy.parameters() if p.grad is not None]))
    assert torch.allclose(grads[0], grads[1], atol=1e-4)


@pytest.mark.parametrize("n_queries, n_keys, start", [(7, 7, 0), (3, 7, 4), (1, 7, 6), (4, 9, 2)])
def test_causal_attention_equals_torch_sdpa_and_its_gradient(n_queries: int, n_keys: int, start: int) -> None:
    """Queries at positions start..start+Tq-1 attend to keys 0..their own position, as torch's SDPA with
    that mask; forward and the gradients of q, k and v agree up to float32 rounding."""
    gen = torch.Generator().manual_seed(start)
    q = torch.randn(5, 2, n_queries, 8, generator=gen, requires_grad=True)
    k, v = (torch.randn(5, 2, n_keys, 8, generator=gen, requires_grad=True) for _ in range(2))
    mask = torch.ones(n_queries, n_keys, dtype=torch.bool).tril(diagonal=start)
    weights = torch.randn(5, 2, n_queries, 8, generator=gen)
    outputs, grads = [], []
    for attend in (lambda: causal_attention(q, k, v, start),
                   lambda: torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=mask)):
        out = attend()
        outputs.append(out)
        grads.append(torch.autograd.grad((weights * out).sum(), (q, k, v)))
    torch.testing.assert_close(outputs[0], outputs[1], rtol=1e-5, atol=1e-6)
    for ours, torch_grad in zip(*grads, strict=True):
        torch.testing.assert_close(ours, torch_grad, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("n_seeds", [1, 2])
def test_hidden_from_a_position_equals_the_full_forward_and_its_gradient(n_seeds: int) -> None:
    """The last layer computes its outputs from ``first`` on only: the same rows and parameter gradients
    as the full forward's."""
    policy = token_policy(V=3, H=4, seed=5, n_seeds=n_seeds)
    gen = torch.Generator().manual_seed(1)
    tokens = torch.randint(0, 3, (4 * n_seeds, 7), generator=gen)
    weights = torch.randn(4 * n_seeds, 4, policy.model.d_model, generator=gen)
    grads = []
    for hidden in (policy.model.hidden(tokens, 3), policy.model.hidden(tokens)[:, 3:]):
        assert hidden.shape == (4 * n_seeds, 4, policy.model.d_model)
        policy.zero_grad()
        (weights * hidden).sum().backward()
        grads.append({name: p.grad.clone() for name, p in policy.named_parameters() if p.grad is not None})
    torch.testing.assert_close(policy.model.hidden(tokens, 3), policy.model.hidden(tokens)[:, 3:])
    for name, grad in grads[0].items():
        if not name.endswith("key.bias"):  # zero in exact arithmetic: rounding noise
            torch.testing.assert_close(grad, grads[1][name], rtol=1e-4, atol=1e-5, msg=name)


def test_a_small_multi_context_table_lies_action_major_and_saves_as_it_is(tmp_path) -> None:
    """Few actions: the actions axis outermost in memory (fast softmax), invisible in values and files."""
    from tpo_agents.zoo.registry import get_algo, make_agent

    model = make_agent("tpo", "TabularPolicy", "TPO/MultiContextBandit-v0", n_seeds=2, seed=1,
                       env_kwargs={"n_contexts": 4, "n_arms": 3}, policy_kwargs={"init": "normal"})
    logits = model.policy.logits
    assert logits.shape == (2, 4, 3) and logits.movedim(-1, 0).is_contiguous()
    model.learn(n_iterations=2)
    model.save(tmp_path / "model.zip")
    loaded = get_algo("tpo").load(tmp_path / "model.zip")
    assert torch.equal(loaded.policy.logits.detach(), logits.detach())
    single = make_agent("tpo", "TabularPolicy", "TPO/KArmedBandit-v0", env_kwargs={"n_arms": 3})
    assert single.policy.logits.is_contiguous()  # one context: the row stays contiguous
