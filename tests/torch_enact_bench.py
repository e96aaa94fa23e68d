#!/usr/bin/env python3
"""braid.torch against PyTorch's own gradient AllReduce, side by side.

On 2 CPU Gloo ranks over loopback (one thread each), for each model, three
variants train their own copy of the model (identical init, identical data per
rank), interleaved step by step (the order rotates every round):

  ddp    torch DDP, bucket_cap_mb=25 (broadcast_buffers=False: no variant syncs
         BatchNorm statistics)
  flat   one flattened all_reduce of every gradient after backward
  enact  braid.torch.enact(model, plan): the plan's buckets, launched in plan
         order during backward; the plan is `build/bin/braid plan <onnx>
         --cluster cpu-local --ranks 2 -o plan.json`, or --plan FILE

A step is forward + backward + AllReduce + SGD step, timed after a barrier; its
time is the max over the ranks. After --warmup rounds, --rounds rounds are
timed. Printed per variant: the median and a distribution-free 95% confidence
interval of the median (order statistics of the binomial); for enact also the
paired per-round difference to the better of ddp and flat (median, 95% CI, %).

  /usr/bin/python3 tests/torch_enact_bench.py --model mlp [--rounds 30] [--json [FILE]]

Models (--model, repeatable; default all): mlp (tests/data/mlp8x1024_opset14.onnx,
8 x Linear(1024, 1024) + ReLU, batch 64), transformer
(tests/data/transformer_encoder_d256_opset14.onnx, nn.TransformerEncoder 4 x d256,
sequence 64, batch 8) and resnet18 (tests/data/resnet18_train_opset13.onnx,
torchvision, batch 8, 224 x 224; needs python3-torchvision). Not a ctest: it
takes minutes on 2 cores.
"""
import argparse
import copy
import json
import math
import os
import socket
import statistics
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "client", "python"))

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
import torch.multiprocessing as mp  # noqa: E402
import torch.nn as nn  # noqa: E402

import braid.torch as bt  # noqa: E402

VARIANTS = ("ddp", "flat", "enact")


# ---------------------------------------------------------------- models

def mlp(batch):
    layers = []
    for _ in range(8):
        layers += [nn.Linear(1024, 1024), nn.ReLU()]
    m = nn.Sequential(*layers)
    x = torch.randn(batch or 64, 1024)
    return m, x, torch.randn(batch or 64, 1024), nn.functional.mse_loss, None


def transformer(batch):
    m = nn.TransformerEncoder(nn.TransformerEncoderLayer(256, 4, dim_feedforward=1024), 4)
    x = torch.randn(64, batch or 8, 256)  # [T, B, D]
    # tests/data/export_accuracy_models.py's export arguments: the exporter
    # renames the weights it transposes for MatMul ("onnx::MatMul_568").
    export = dict(opset_version=14, training=torch.onnx.TrainingMode.EVAL,
                  input_names=["input"])
    return m, x, torch.randn(64, batch or 8, 256), nn.functional.mse_loss, export


def resnet18(batch):
    import torchvision
    m = torchvision.models.resnet18(weights=None)
    x = torch.randn(batch or 8, 3, 224, 224)
    return m, x, torch.randint(0, 1000, (batch or 8,)), nn.functional.cross_entropy, None


MODELS = {
    "mlp": ("tests/data/mlp8x1024_opset14.onnx", mlp),
    "transformer": ("tests/data/transformer_encoder_d256_opset14.onnx", transformer),
    "resnet18": ("tests/data/resnet18_train_opset13.onnx", resnet18),
}


# ---------------------------------------------------------------- statistics

def median_ci(xs, conf=0.95):
    """Distribution-free CI of the median: [x_(k), x_(n-k+1)] with the largest k
    such that P(Binomial(n, 1/2) <= k - 1) <= (1 - conf) / 2; (nan, nan) when n
    is too small for one."""
    xs = sorted(xs)
    n = len(xs)
    tail, acc, k = (1 - conf) / 2, 0.0, 0
    for i in range(n + 1):
        p = math.comb(n, i) / 2 ** n
        if acc + p > tail:
            break
        acc, k = acc + p, i + 1
    if k == 0:
        return math.nan, math.nan
    return xs[k - 1], xs[n - k]


def summarize(times):
    """times: {variant: [seconds per round]} -> the report dict (ms)."""
    out = {"variants": {}}
    for v, ts in times.items():
        lo, hi = median_ci(ts)
        out["variants"][v] = {"median_ms": statistics.median(ts) * 1e3, "ci95_ms": [lo * 1e3,
                                                                                    hi * 1e3]}
    better = min(("ddp", "flat"), key=lambda v: out["variants"][v]["median_ms"])
    d = [a - b for a, b in zip(times["enact"], times[better])]
    lo, hi = median_ci(d)
    ref = out["variants"][better]["median_ms"]
    md = statistics.median(d) * 1e3
    out["enact_minus_best"] = {"against": better, "median_ms": md, "ci95_ms": [lo * 1e3, hi * 1e3],
                               "percent": 100 * md / ref,
                               "ci95_percent": [100 * lo * 1e3 / ref, 100 * hi * 1e3 / ref]}
    return out


# ---------------------------------------------------------------- ranks

def flat_allreduce(model, world):
    grads = [p.grad for p in model.parameters() if p.grad is not None]
    flat = torch._utils._flatten_dense_tensors(grads)
    dist.all_reduce(flat)
    flat.div_(world)
    for g, s in zip(grads, torch._utils._unflatten_dense_tensors(flat, grads)):
        g.copy_(s)


def rank_main(rank, port, model_name, plan_path, args, out_path):
    import time
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                            world_size=2)
    world = dist.get_world_size()
    torch.manual_seed(0)
    base, _, _, loss_fn, export = MODELS[model_name][1](args.batch)
    base.train()
    torch.manual_seed(1 + rank)  # different data per rank, the same for every variant
    _, x, y, _, _ = MODELS[model_name][1](args.batch)
    name_map = bt.onnx_name_map(base, x, **export) if export else None
    models = {v: copy.deepcopy(base) for v in VARIANTS}
    handle = bt.enact(models["enact"], plan_path, name_map=name_map)  # checks the names
    models["ddp"] = nn.parallel.DistributedDataParallel(models["ddp"], bucket_cap_mb=25,
                                                        broadcast_buffers=False)
    opts = {v: torch.optim.SGD(m.parameters(), lr=1e-4) for v, m in models.items()}
    handle.wrap_optimizer(opts["enact"])

    def step(v):
        m, opt = models[v], opts[v]
        opt.zero_grad(set_to_none=True)
        loss_fn(m(x), y).backward()
        if v == "flat":
            flat_allreduce(m, world)
        opt.step()

    times = {v: [] for v in VARIANTS}
    in_backward = []
    for r in range(args.warmup + args.rounds):
        k = r % len(VARIANTS)
        t = {}
        for v in VARIANTS[k:] + VARIANTS[:k]:
            dist.barrier()
            t0 = time.perf_counter()
            step(v)
            t[v] = time.perf_counter() - t0
        tt = torch.tensor([t[v] for v in VARIANTS], dtype=torch.float64)
        dist.all_reduce(tt, op=dist.ReduceOp.MAX)
        if r >= args.warmup:
            for v, s in zip(VARIANTS, tt.tolist()):
                times[v].append(s)
            in_backward.append(handle.last_in_backward)
        if rank == 0 and args.progress:
            print(f"  round {r + 1}/{args.warmup + args.rounds}: " +
                  " ".join(f"{v} {tt[i] * 1e3:.1f}" for i, v in enumerate(VARIANTS)),
                  file=sys.stderr, flush=True)
    if rank == 0:
        res = summarize(times)
        res.update(model=model_name, onnx=MODELS[model_name][0], rounds=args.rounds,
                   warmup=args.warmup, ranks=world, threads_per_rank=1,
                   buckets=[len(b) for b in handle.buckets],
                   buckets_launched_in_backward=statistics.median(in_backward),
                   parameters=sum(p.numel() for p in base.parameters()),
                   renamed_by_onnx=len(name_map or {}), times_s=times)
        with open(out_path, "w") as f:
            json.dump(res, f)
    dist.destroy_process_group()


# ---------------------------------------------------------------- driver

def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def make_plan(args, model_name, tmp):
    """(plan path, braid's predicted ms per variant or None)."""
    if args.plan:
        return args.plan, None
    onnx = os.path.join(ROOT, MODELS[model_name][0])
    out = os.path.join(tmp, model_name + ".plan.json")
    cmd = [args.braid, "plan", onnx, "--cluster", "cpu-local", "--ranks", "2", "--json",
           "-o", out] + args.braid_arg
    r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    if r.returncode != 0:
        raise SystemExit(f"torch_enact_bench: {' '.join(cmd)} failed:\n{r.stderr}")
    return out, json.loads(r.stdout).get("iteration_ms")


def fmt_ci(ci):
    return f"[{ci[0]:8.2f}, {ci[1]:8.2f}]"


def print_table(res, predicted):
    print(f"{res['model']} ({res['onnx']}, {res['parameters'] / 1e6:.2f} M parameters): "
          f"{res['ranks']} Gloo ranks x {res['threads_per_rank']} thread, "
          f"{res['rounds']} interleaved rounds after {res['warmup']} warm-up")
    print(f"plan: {len(res['buckets'])} buckets of {res['buckets']} gradients, "
          f"{res['buckets_launched_in_backward']:g} launched during backward (median); "
          f"{res['renamed_by_onnx']} ONNX names mapped to parameters by value")
    print(f"{'variant':<8} {'median ms':>10} {'95% CI of median, ms':>22}"
          + (f" {'braid predicted ms':>19}" if predicted else ""))
    pred = {"ddp": "ddp", "enact": "braid"}
    for v in VARIANTS:
        s = res["variants"][v]
        p = ""
        if predicted:
            p = f" {predicted[pred[v]]:19.2f}" if v in pred and pred[v] in predicted else \
                f" {'':>19}"
        print(f"{v:<8} {s['median_ms']:10.2f} {fmt_ci(s['ci95_ms']):>22}{p}")
    d = res["enact_minus_best"]
    print(f"enact - {d['against']} (paired per round): median {d['median_ms']:+.2f} ms "
          f"{fmt_ci(d['ci95_ms'])}, {d['percent']:+.1f}% of {d['against']} "
          f"[{d['ci95_percent'][0]:+.1f}%, {d['ci95_percent'][1]:+.1f}%]")


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", action="append", choices=sorted(MODELS),
                   help="repeatable; default: all")
    p.add_argument("--rounds", type=int, default=30)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--batch", type=int, default=0, help="per-rank batch (default: the ONNX's)")
    p.add_argument("--plan", help="plan file to enact instead of running braid plan "
                                  "(with one --model)")
    p.add_argument("--braid", default=os.path.join(ROOT, "build", "bin", "braid"))
    p.add_argument("--braid-arg", action="append", default=[],
                   help="extra argument for braid plan, repeatable (e.g. --braid-arg=--db=none)")
    p.add_argument("--json", nargs="?", const="-", metavar="FILE",
                   help="write the results as JSON to FILE (tables still printed), or with "
                        "no FILE print JSON instead of tables")
    p.add_argument("--progress", action="store_true", help="per-round times on stderr")
    args = p.parse_args()
    names = args.model or list(MODELS)
    if args.plan and len(names) != 1:
        p.error("--plan needs exactly one --model")
    if os.environ.get("BRAID_PARSE_ONLY", "") not in ("", "0"):
        sys.exit(0)  # parse-only (base/command_line.h): the arguments were accepted
    results = []
    with tempfile.TemporaryDirectory() as tmp:
        for name in names:
            plan, predicted = make_plan(args, name, tmp)
            out = os.path.join(tmp, name + ".result.json")
            mp.spawn(rank_main, args=(free_port(), name, plan, args, out), nprocs=2, join=True)
            with open(out) as f:
                res = json.load(f)
            res["plan"] = args.plan or "braid plan " + MODELS[name][0] + " --cluster cpu-local " \
                "--ranks 2 " + " ".join(args.braid_arg)
            res["braid_predicted_ms"] = predicted
            results.append(res)
            if args.json != "-":
                print_table(res, predicted)
                print(flush=True)
    if args.json == "-":
        json.dump(results, sys.stdout, indent=1)
        print()
    elif args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()
