"""Exports the two weightless models of the simulator-accuracy runs (see README.md)."""
# --- mlp8x1024_opset14.onnx
import torch, torch.nn as nn
layers = []
for _ in range(8):
    layers += [nn.Linear(1024, 1024), nn.ReLU()]
m = nn.Sequential(*layers).eval()
x = torch.randn(64, 1024)
torch.onnx.export(m, x, "tests/data/mlp8x1024_opset14.onnx", opset_version=14, export_params=False,
                  input_names=["x"], output_names=["y"])

# --- transformer_encoder_d256_opset14.onnx
import torch, torch.nn as nn
enc = nn.TransformerEncoder(nn.TransformerEncoderLayer(256, 4, dim_feedforward=1024), 4).eval()
seq = torch.randn(64, 8, 256)  # [T, B, D]; B divides by 2 and 4 ranks
torch.onnx.export(enc, seq, "tests/data/transformer_encoder_d256_opset14.onnx", opset_version=14,
                  training=torch.onnx.TrainingMode.EVAL, export_params=False, input_names=["input"])
