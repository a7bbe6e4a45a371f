"""Parameters as DDP sees them and torch's own bucket assignment, on small CPU models."""

import torch
import torch.distributed as dist

from bench_ddp import layout, presets


class Tied(torch.nn.Module):
    """An embedding that is also the output projection, Hugging Face's way."""

    def __init__(self):
        super().__init__()
        self.emb = torch.nn.Embedding(10, 4)
        self.mid = torch.nn.Linear(4, 4)
        self.head = torch.nn.Linear(4, 10, bias=False)
        self.head.weight = self.emb.weight

    def get_input_embeddings(self):
        return self.emb

    def get_output_embeddings(self):
        return self.head


def test_the_layout_lists_each_parameter_once_in_registration_order():
    model = Tied()
    model.mid.bias.requires_grad_(False)
    tensors = layout.param_layout(torch, model)["tensors"]
    assert [t["name"] for t in tensors] == ["emb.weight", "mid.weight", "mid.bias"]
    assert tensors[0] == {"name": "emb.weight", "shape": [10, 4], "dtype": "float32", "trainable": True,
                          "lookup": True, "tied_output": True}
    assert tensors[2]["trainable"] is False and "lookup" not in tensors[2]


def test_the_preset_decoder_says_its_embedding_is_tied_unless_untied():
    spec = {"kind": "decoder", "layers": 1, "width": 16, "heads": 2, "seq": 8, "vocab": 50, "arch": "llama",
            "untied": False, "ffn": 32, "kv_heads": 1}
    tied = presets.build_model(torch, spec)
    assert layout.tied_output_weight(tied) is tied.wte.weight
    assert layout.tied_output_weight(presets.build_model(torch, dict(spec, untied=True))) is None


def test_buckets_without_ddp_are_torchs_assignment_in_reverse_order():
    model = torch.nn.Sequential(*[torch.nn.Linear(256, 256) for _ in range(6)])
    got = layout.torch_buckets(torch, dist, model, None, 0.5)
    trainable = [p for p in model.parameters() if p.requires_grad]
    assert got["source"] == "assignment"
    assert (got["cap_bytes"], got["first_cap_bytes"]) == (512 * 1024, dist._DEFAULT_FIRST_BUCKET_BYTES)
    flat = [i for b in got["buckets"] for i in b]
    assert sorted(flat) == list(range(len(trainable)))
    # The last registered parameters fill the first bucket, as the backward pass reaches them first.
    assert got["buckets"][0][0] == len(trainable) - 1
    for b in got["buckets"][1:]:
        assert sum(trainable[i].numel() * 4 for i in b) <= got["cap_bytes"] + 256 * 256 * 4


def test_an_explicit_cap_replaces_the_first_buckets_own_where_torch_says_so():
    class Wrapped:
        bucket_bytes_cap_default = False

    assert layout.bucket_caps(dist, Wrapped(), 50) == (50 << 20, 50 << 20)
    assert layout.bucket_caps(dist, None, None) == (25 << 20, dist._DEFAULT_FIRST_BUCKET_BYTES)
