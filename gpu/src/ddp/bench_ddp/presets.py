"""The preset models core's ModelSpec describes, tensor for tensor (core/src/ddp/architecture.rs
counts the same tensors): an MLP of linear layers, or a GPT-2- or LLaMA-style decoder; and their
random batches and loss. `torch` is passed in: nothing here imports it."""

import contextlib
import math


def build_model(torch, spec):
    """The preset's module (on the current default device)."""
    if spec["kind"] == "mlp":
        return build_mlp(torch, spec)
    return build_decoder(torch, spec)


def build_mlp(torch, spec):
    nn = torch.nn
    F = torch.nn.functional

    class MLP(nn.Module):
        def __init__(self, width, depth, input, output):
            super().__init__()
            sizes = ([input] if input else []) + [width] * (depth + 1) + ([output] if output else [])
            self.blocks = nn.ModuleList(nn.Linear(a, b) for a, b in zip(sizes, sizes[1:]))

        def forward(self, x):
            last = len(self.blocks) - 1
            for i, layer in enumerate(self.blocks):
                x = layer(x)
                if i < last:
                    x = F.relu(x)
            return x

    return MLP(spec["width"], spec["depth"], spec.get("input"), spec.get("output"))


def norm_layer(torch, llama):
    """The decoder's norm: LayerNorm for GPT-2, RMSNorm for LLaMA (torch's own from 2.4 on)."""
    nn = torch.nn

    class RMSNorm(nn.Module):
        """nn.RMSNorm of torch >= 2.4, for an older torch on CPU: the same one weight."""

        def __init__(self, width, eps):
            super().__init__()
            self.eps, self.weight = eps, nn.Parameter(torch.ones(width))

        def forward(self, x):
            return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight

    def norm(width):
        if not llama:
            return nn.LayerNorm(width)
        return nn.RMSNorm(width, eps=1e-6) if hasattr(nn, "RMSNorm") else RMSNorm(width, 1e-6)

    return norm


def causal_attention(torch, q, k, v):
    """F.scaled_dot_product_attention where torch has it (2.0 on), else the same arithmetic."""
    F = torch.nn.functional
    if hasattr(F, "scaled_dot_product_attention"):
        return F.scaled_dot_product_attention(q, k, v, is_causal=True)
    t = q.size(-2)
    att = (q @ k.transpose(-2, -1)) / math.sqrt(q.size(-1))
    mask = torch.ones(t, t, dtype=torch.bool, device=q.device).triu(1)
    return att.masked_fill(mask, float("-inf")).softmax(dim=-1) @ v


def rotate(torch, x):
    """Rotary positions on (batch, heads, time, head width), made in the forward pass: a buffer
    would be broadcast by DDP in every forward."""
    t, hd = x.size(2), x.size(3)
    inv = 1.0 / (10000.0 ** (torch.arange(0, hd, 2, device=x.device, dtype=torch.float32) / hd))
    angles = torch.outer(torch.arange(t, device=x.device, dtype=torch.float32), inv)
    cos, sin = angles.cos().to(x.dtype), angles.sin().to(x.dtype)
    x1, x2 = x[..., 0::2], x[..., 1::2]
    return torch.stack((x1 * cos - x2 * sin, x1 * sin + x2 * cos), dim=-1).flatten(-2)


def block_class(torch, llama):
    """One decoder block: attention and MLP, each behind a pre-norm and a residual."""
    nn = torch.nn
    F = torch.nn.functional
    norm = norm_layer(torch, llama)

    class Block(nn.Module):
        def __init__(self, width, heads, kv_heads, ffn):
            super().__init__()
            self.heads, self.kv_heads, self.hd = heads, kv_heads, width // heads
            self.ln1 = norm(width)
            self.qkv = nn.Linear(width, (heads + 2 * kv_heads) * self.hd, bias=not llama)
            self.proj = nn.Linear(width, width, bias=not llama)
            self.ln2 = norm(width)
            # LLaMA's gate and up projections as one matrix: the same parameters, one matmul.
            self.fc = nn.Linear(width, (2 if llama else 1) * ffn, bias=not llama)
            self.fc_proj = nn.Linear(ffn, width, bias=not llama)

        def attention(self, x):
            b, t, c = x.shape
            q, k, v = self.qkv(self.ln1(x)).split([self.heads * self.hd, self.kv_heads * self.hd,
                                                   self.kv_heads * self.hd], dim=2)
            q = q.view(b, t, self.heads, self.hd).transpose(1, 2)
            k = k.view(b, t, self.kv_heads, self.hd).transpose(1, 2)
            v = v.view(b, t, self.kv_heads, self.hd).transpose(1, 2)
            if llama:
                q, k = rotate(torch, q), rotate(torch, k)
            if self.kv_heads != self.heads:
                k = k.repeat_interleave(self.heads // self.kv_heads, dim=1)
                v = v.repeat_interleave(self.heads // self.kv_heads, dim=1)
            y = causal_attention(torch, q, k, v)
            return self.proj(y.transpose(1, 2).contiguous().view(b, t, c))

        def forward(self, x):
            x = x + self.attention(x)
            h = self.fc(self.ln2(x))
            if llama:
                gate, up = h.chunk(2, dim=-1)
                h = F.silu(gate) * up
            else:
                h = F.gelu(h, approximate="tanh")
            return x + self.fc_proj(h)

    return Block, norm


def build_decoder(torch, spec):
    nn = torch.nn
    F = torch.nn.functional
    llama = spec.get("arch") == "llama"
    Block, norm = block_class(torch, llama)

    class Decoder(nn.Module):
        def __init__(self, s):
            super().__init__()
            width = s["width"]
            self.wte = nn.Embedding(s["vocab"], width)
            # Learned positions for GPT-2; LLaMA rotates queries and keys instead.
            self.wpe = None if llama else nn.Embedding(s["seq"], width)
            ffn = s.get("ffn") or 4 * width
            kv = s.get("kv_heads") or s["heads"]
            self.blocks = nn.ModuleList(Block(width, s["heads"], kv, ffn) for _ in range(s["layers"]))
            self.ln_f = norm(width)
            self.lm_head = nn.Linear(width, s["vocab"], bias=False) if s.get("untied") else None
            self.apply(self._init)

        @staticmethod
        def _init(module):
            if isinstance(module, (nn.Linear, nn.Embedding)):
                nn.init.normal_(module.weight, mean=0.0, std=0.02)
            if isinstance(module, nn.Linear) and module.bias is not None:
                nn.init.zeros_(module.bias)

        def ddpcheck_tied_output(self):
            """The token embedding where it is also the output projection."""
            return self.wte.weight if self.lm_head is None else None

        def forward(self, idx):
            x = self.wte(idx)
            if self.wpe is not None:
                x = x + self.wpe(torch.arange(idx.size(1), device=idx.device))
            for block in self.blocks:
                x = block(x)
            x = self.ln_f(x)
            # Tied embeddings: the output projection is the token embedding.
            return self.lm_head(x) if self.lm_head is not None else F.linear(x, self.wte.weight)

    return Decoder(spec)


def preset_workload(torch, spec, device, on_cuda):
    """A preset's model (built on the device) with its random batches and loss."""
    with device if on_cuda else contextlib.nullcontext():
        model = build_model(torch, spec)
    if spec["kind"] == "decoder":
        batch, loss = decoder_batches(torch, spec)
        return {"model": model, "batch": batch, "loss": loss, "optimizer": None, "tokens_per_sample": spec["seq"]}
    batch, loss = mlp_batches(torch, spec)
    return {"model": model, "batch": batch, "loss": loss, "optimizer": None, "tokens_per_sample": None}


def decoder_batches(torch, spec):
    """Random tokens, one more than the sequence; next-token cross-entropy."""
    F = torch.nn.functional
    seq, vocab = spec["seq"], spec["vocab"]

    def batch(n, dev, gen):
        return torch.randint(0, vocab, (n, seq + 1), device=dev, generator=gen)

    def loss(m, t):
        logits = m(t[:, :-1])
        return F.cross_entropy(logits.reshape(-1, logits.size(-1)), t[:, 1:].reshape(-1))

    return batch, loss


def mlp_batches(torch, spec):
    """Random inputs and targets; mean squared error."""
    F = torch.nn.functional
    n_in, n_out = spec.get("input") or spec["width"], spec.get("output") or spec["width"]

    def batch(n, dev, gen):
        return torch.randn(n, n_in, device=dev, generator=gen), torch.randn(n, n_out, device=dev, generator=gen)

    def loss(m, b):
        return F.mse_loss(m(b[0]).float(), b[1])

    return batch, loss
