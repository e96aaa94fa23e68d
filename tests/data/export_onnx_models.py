#!/usr/bin/python3
"""Exports the small ONNX test models under tests/data/ (see README.md).

Run from the repository root with Debian's python3 (python3-torch 1.13,
python3-torchvision 0.14, python3-onnx 1.12), CPU only, no network:

    /usr/bin/python3 tests/data/export_onnx_models.py

Models are built with weights=None and exported with export_params=False, so
the files hold graphs only and weights appear as graph inputs. One MLP is also
exported with export_params=True (weights as initializers). Malformed files
(truncated, random bytes, cyclic, custom op, opset 5, non-tensor input) are
built at the end. Everything is seeded, so re-running gives the same graphs.
"""

import math
import os
import random
import sys

from google.protobuf.message import DecodeError
import onnx
from onnx import TensorProto, helper
import torch
from torch import nn
import torchvision

OUT = os.path.dirname(os.path.abspath(__file__))
torch.manual_seed(0)


def export(model, args, name, opset, training=False, export_params=False,
           input_names=("input",), dynamic_axes=None):
    path = os.path.join(OUT, name)
    mode = torch.onnx.TrainingMode.TRAINING if training else torch.onnx.TrainingMode.EVAL
    model.train(training)
    torch.onnx.export(model, args, path, opset_version=opset, training=mode,
                      export_params=export_params,
                      do_constant_folding=not training,
                      input_names=list(input_names), output_names=["output"],
                      dynamic_axes=dynamic_axes)
    m = onnx.load(path)
    onnx.checker.check_model(m)
    print(f"{name}: {len(m.graph.node)} nodes, {os.path.getsize(path)} bytes", file=sys.stderr)


# ---- Language-model-ish modules --------------------------------------------

class LstmLm(nn.Module):
    def __init__(self, vocab=1000, emb=64, hidden=128, layers=2):
        super().__init__()
        self.emb = nn.Embedding(vocab, emb)
        self.lstm = nn.LSTM(emb, hidden, num_layers=layers)
        self.head = nn.Linear(hidden, vocab)

    def forward(self, tokens):  # tokens: [T, B] int64
        y, _ = self.lstm(self.emb(tokens))
        return self.head(y)


class CausalSelfAttention(nn.Module):
    def __init__(self, d, heads):
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(d, 3 * d)
        self.proj = nn.Linear(d, d)

    def forward(self, x):  # [B, T, D]
        b, t, d = x.shape
        q, k, v = self.qkv(x).split(d, dim=2)
        q = q.view(b, t, self.heads, d // self.heads).transpose(1, 2)
        k = k.view(b, t, self.heads, d // self.heads).transpose(1, 2)
        v = v.view(b, t, self.heads, d // self.heads).transpose(1, 2)
        att = (q @ k.transpose(-2, -1)) / math.sqrt(d // self.heads)
        mask = torch.tril(torch.ones(t, t))  # exported as Trilu (opset >= 14)
        att = att.masked_fill(mask == 0, float("-inf")).softmax(dim=-1)
        y = (att @ v).transpose(1, 2).reshape(b, t, d)
        return self.proj(y)


class GptBlock(nn.Module):
    def __init__(self, d, heads):
        super().__init__()
        self.ln1 = nn.LayerNorm(d)
        self.attn = CausalSelfAttention(d, heads)
        self.ln2 = nn.LayerNorm(d)
        self.mlp = nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(), nn.Linear(4 * d, d),
                                 nn.Dropout(0.1))

    def forward(self, x):
        x = x + self.attn(self.ln1(x))
        return x + self.mlp(self.ln2(x))


class TinyGpt(nn.Module):
    def __init__(self, vocab=512, ctx=32, d=64, heads=4, layers=2):
        super().__init__()
        self.tok = nn.Embedding(vocab, d)
        self.pos = nn.Embedding(ctx, d)
        self.blocks = nn.Sequential(*[GptBlock(d, heads) for _ in range(layers)])
        self.ln = nn.LayerNorm(d)
        self.head = nn.Linear(d, vocab, bias=False)

    def forward(self, idx):  # [B, T] int64
        t = idx.shape[1]
        pos = torch.arange(t, dtype=torch.long).unsqueeze(0)
        x = self.tok(idx) + self.pos(pos)
        return self.head(self.ln(self.blocks(x)))


class Gpt2Attention(nn.Module):
    """nanoGPT's CausalSelfAttention: one fused c_attn projection split into q, k, v."""

    def __init__(self, n_embd, n_head, dropout):
        super().__init__()
        self.n_head = n_head
        self.n_embd = n_embd
        self.c_attn = nn.Linear(n_embd, 3 * n_embd)
        self.c_proj = nn.Linear(n_embd, n_embd)
        self.attn_dropout = nn.Dropout(dropout)
        self.resid_dropout = nn.Dropout(dropout)

    def forward(self, x):  # [B, T, C]
        b, t, c = x.size()
        q, k, v = self.c_attn(x).split(self.n_embd, dim=2)
        k = k.view(b, t, self.n_head, c // self.n_head).transpose(1, 2)  # [B, nh, T, hs]
        q = q.view(b, t, self.n_head, c // self.n_head).transpose(1, 2)
        v = v.view(b, t, self.n_head, c // self.n_head).transpose(1, 2)
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))
        mask = torch.tril(torch.ones(t, t))  # exported as Trilu (opset >= 14)
        att = att.masked_fill(mask == 0, float("-inf")).softmax(dim=-1)
        att = self.attn_dropout(att)
        y = (att @ v).transpose(1, 2).contiguous().view(b, t, c)
        return self.resid_dropout(self.c_proj(y))


class Gpt2Mlp(nn.Module):
    def __init__(self, n_embd, dropout):
        super().__init__()
        self.c_fc = nn.Linear(n_embd, 4 * n_embd)
        self.gelu = nn.GELU()
        self.c_proj = nn.Linear(4 * n_embd, n_embd)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x):
        return self.dropout(self.c_proj(self.gelu(self.c_fc(x))))


class Gpt2Block(nn.Module):
    def __init__(self, n_embd, n_head, dropout):
        super().__init__()
        self.ln_1 = nn.LayerNorm(n_embd)
        self.attn = Gpt2Attention(n_embd, n_head, dropout)
        self.ln_2 = nn.LayerNorm(n_embd)
        self.mlp = Gpt2Mlp(n_embd, dropout)

    def forward(self, x):  # pre-norm residual blocks
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class Gpt2(nn.Module):
    """A small nanoGPT / GPT-2 decoder; lm_head is tied to the token embedding."""

    def __init__(self, vocab_size=512, block_size=32, n_layer=2, n_head=4, n_embd=128,
                 dropout=0.1):
        super().__init__()
        self.transformer = nn.ModuleDict(dict(
            wte=nn.Embedding(vocab_size, n_embd),
            wpe=nn.Embedding(block_size, n_embd),
            drop=nn.Dropout(dropout),
            h=nn.ModuleList([Gpt2Block(n_embd, n_head, dropout) for _ in range(n_layer)]),
            ln_f=nn.LayerNorm(n_embd)))
        self.lm_head = nn.Linear(n_embd, vocab_size, bias=False)
        self.transformer.wte.weight = self.lm_head.weight  # weight tying, as GPT-2

    def forward(self, idx):  # [B, T] int64
        t = idx.size(1)
        pos = torch.arange(0, t, dtype=torch.long)
        x = self.transformer.drop(self.transformer.wte(idx) + self.transformer.wpe(pos))
        for block in self.transformer.h:
            x = block(x)
        return self.lm_head(self.transformer.ln_f(x))


class SelfAttention(nn.Module):
    def __init__(self, d=64, heads=4):
        super().__init__()
        self.mha = nn.MultiheadAttention(d, heads)

    def forward(self, x):  # [T, B, D]
        return self.mha(x, x, x, need_weights=False)[0]


def mlp():
    torch.manual_seed(1)
    return nn.Sequential(nn.Linear(64, 128), nn.ReLU(), nn.Linear(128, 10))


# Every static batch is BATCH, which divides by the 2 and 4 data-parallel ranks
# the runtime trains these models at. resnet50_opset17 keeps a symbolic batch.
BATCH = 8


def export_models():
    img = torch.randn(BATCH, 3, 224, 224)
    tv = torchvision.models
    export(tv.resnet50(weights=None), img, "resnet50_opset17.onnx", 17,
           dynamic_axes={"input": {0: "batch"}, "output": {0: "batch"}})
    export(tv.resnet18(weights=None), img, "resnet18_train_opset13.onnx", 13, training=True)
    export(tv.mobilenet_v3_small(weights=None), img, "mobilenet_v3_small_opset16.onnx", 16)
    export(tv.vit_b_16(weights=None), img, "vit_b_16_opset14.onnx", 14)
    export(tv.densenet121(weights=None), img, "densenet121_opset15.onnx", 15)
    export(tv.inception_v3(weights=None, aux_logits=True, init_weights=False),
           torch.randn(BATCH, 3, 299, 299), "inception_v3_opset13.onnx", 13)
    export(tv.resnext50_32x4d(weights=None), img, "resnext50_32x4d_opset15.onnx", 15)
    export(tv.vgg11(weights=None), img, "vgg11_opset13.onnx", 13)

    enc = nn.TransformerEncoder(nn.TransformerEncoderLayer(64, 4, dim_feedforward=256), 2)
    seq = torch.randn(16, BATCH, 64)  # [T, B, D]
    export(enc, seq, "transformer_encoder_opset14.onnx", 14)
    export(enc, seq, "transformer_encoder_train_opset14.onnx", 14, training=True)
    export(SelfAttention(), seq, "multihead_attention_opset13.onnx", 13)
    export(LstmLm(), torch.randint(0, 1000, (12, BATCH)), "lstm_lm_opset14.onnx", 14,
           input_names=("tokens",))
    export(TinyGpt(), torch.randint(0, 512, (BATCH, 32)), "gpt_decoder_opset17.onnx", 17,
           input_names=("idx",))
    export(TinyGpt(), torch.randint(0, 512, (BATCH, 32)), "gpt_decoder_train_opset14.onnx", 14,
           input_names=("idx",), training=True)
    export(Gpt2(), torch.randint(0, 512, (BATCH, 32)), "gpt2_cattn_train_opset14.onnx", 14,
           input_names=("idx",), training=True)
    x = torch.randn(BATCH, 64)
    export(mlp(), x, "mlp_weightless.onnx", 13)
    export(mlp(), x, "mlp_with_initializers.onnx", 13, export_params=True)


# ---- Hand-built and malformed files ------------------------------------------

def save(model, name, check=True):
    if check:
        onnx.checker.check_model(model)
    onnx.save(model, os.path.join(OUT, name))


def f32(name, shape):
    return helper.make_tensor_value_info(name, TensorProto.FLOAT, shape)


def export_malformed():
    with open(os.path.join(OUT, "resnet18_train_opset13.onnx"), "rb") as f:
        data = f.read()
    with open(os.path.join(OUT, "truncated.onnx"), "wb") as f:
        f.write(data[: len(data) // 2])
    rng = random.Random(1234)
    junk = bytes(rng.randrange(256) for _ in range(4096))
    try:
        onnx.ModelProto().ParseFromString(junk)
        raise SystemExit("random bytes unexpectedly parse as a ModelProto")
    except DecodeError:
        pass
    with open(os.path.join(OUT, "random_bytes.onnx"), "wb") as f:
        f.write(junk)

    # a -> Add(x, c) -> b -> Relu -> c : b and c depend on each other.
    cyc = helper.make_graph(
        [helper.make_node("Add", ["x", "c"], ["b"], name="add_loop"),
         helper.make_node("Relu", ["b"], ["c"], name="relu_loop"),
         helper.make_node("Relu", ["c"], ["y"], name="out")],
        "cycle", [f32("x", [2, 8])], [f32("y", [2, 8])])
    save(helper.make_model(cyc, opset_imports=[helper.make_opsetid("", 13)]),
         "cycle.onnx", check=False)

    custom = helper.make_graph(
        [helper.make_node("Relu", ["x"], ["a"], name="relu_in"),
         helper.make_node("FancyOp", ["a"], ["b"], name="fancy", domain="com.example",
                          alpha=0.5),
         helper.make_node("Relu", ["b"], ["y"], name="relu_out")],
        "custom_op", [f32("x", [2, 8])], [f32("y", [2, 8])])
    save(helper.make_model(custom, opset_imports=[helper.make_opsetid("", 13),
                                                  helper.make_opsetid("com.example", 1)]),
         "custom_op.onnx")

    old = helper.make_graph([helper.make_node("Relu", ["x"], ["y"], name="relu")],
                            "opset5", [f32("x", [2, 8])], [f32("y", [2, 8])])
    save(helper.make_model(old, opset_imports=[helper.make_opsetid("", 5)]), "opset5.onnx",
         check=False)

    seq_in = helper.make_tensor_sequence_value_info("xs", TensorProto.FLOAT, [2, 8])
    seqg = helper.make_graph(
        [helper.make_node("SequenceAt", ["xs", "i"], ["y"], name="at")], "seq_input",
        [seq_in, helper.make_tensor_value_info("i", TensorProto.INT64, [])],
        [f32("y", [2, 8])])
    save(helper.make_model(seqg, opset_imports=[helper.make_opsetid("", 13)]),
         "sequence_input.onnx")

    # 1,000-node chain for the import-time benchmark: (MatMul, Add, Relu, Mul) x 250.
    nodes, inits = [], []
    cur = "x"
    for i in range(250):
        nodes += [helper.make_node("MatMul", [cur, f"w{i}"], [f"m{i}"], name=f"mm{i}"),
                  helper.make_node("Add", [f"m{i}", f"b{i}"], [f"a{i}"], name=f"add{i}"),
                  helper.make_node("Relu", [f"a{i}"], [f"r{i}"], name=f"relu{i}"),
                  helper.make_node("Mul", [f"r{i}", "half"], [f"h{i}"], name=f"mul{i}")]
        cur = f"h{i}"
    inits.append(helper.make_tensor("half", TensorProto.FLOAT, [], [0.5]))
    inputs = [f32("x", ["batch", 32])]
    for i in range(250):
        inputs += [f32(f"w{i}", [32, 32]), f32(f"b{i}", [32])]
    chain = helper.make_graph(nodes, "chain1000", inputs, [f32(cur, ["batch", 32])],
                              initializer=inits)
    save(helper.make_model(chain, opset_imports=[helper.make_opsetid("", 13)]),
         "chain1000.onnx")


if __name__ == "__main__":
    export_models()
    export_malformed()
