#!/usr/bin/env python3
"""braid's runtime against PyTorch DDP and braid's timing executor, data parallel.

On 2 CPU Gloo ranks over loopback (one thread each, rank r bound to core r),
for each model, three ways to train the same model data-parallel run their
own processes, interleaved round by round (the order rotates every round):

  runtime   braid's runtime: `braid run G --plan dp.json --ranks 2` trains
            the per-device program of `braid plan G --parallel --strategy
            data_parallel` on braid-rank ranks, its fusion groups fused and
            its gradient buckets one AllReduce each; G is the PyTorch model
            exported here at the global batch (2 x the per-rank batch): a
            parallel plan splits a model's own batch, and the ONNX file's is
            static
  ddp       torch DDP (bucket_cap_mb=25, broadcast_buffers=False) on the
            PyTorch model the ONNX file was exported from, SGD with momentum
  executor  braid's timing executor: `braid run ONNX --plan fp.json --ranks 2`
            with the plan of `braid plan ONNX --cluster cpu-local --ranks 2`
            (its buckets and fused groups), its "plan" strategy

Every variant trains the same per-rank batch (the ONNX file's, 64) for --warmup + --iters steps per round; a round's figure is the
median of its timed steps, each step rank 0's wall time from its start to
its optimizer update (no barrier: the gradient AllReduce lines the ranks up).
Printed per variant: the median over rounds with a distribution-free 95%
confidence interval; and the paired per-round differences runtime - ddp and
runtime - executor with theirs.

  /usr/bin/python3 tests/runtime_ddp_bench.py --model mlp [--rounds 12] [--json FILE]

Model: mlp (tests/data/mlp8x1024_opset14.onnx, 8 x Linear(1024, 1024) +
ReLU, batch 64). The transformer encoder export is left out: its dim 0 is
the sequence ([T, B, D]), so braid's data-parallel split of it is not DDP's
split of the batch. Not a ctest: it takes minutes on 2 cores.
BRAID_PARSE_ONLY=1 stops after the arguments are read.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.abspath(__file__ + "/.."))

VARIANTS = ("runtime", "ddp", "executor")
MODELS = {
    "mlp": "tests/data/mlp8x1024_opset14.onnx",
}
PER_RANK_BATCH = 64


def export_global(name, path):
    """The PyTorch model of `name` exported at the global batch (2 ranks)."""
    import torch
    teb = enact_bench()
    torch.manual_seed(0)
    model, x, _, _, _ = teb.MODELS[name][1](2 * PER_RANK_BATCH)
    torch.onnx.export(model, x, path, opset_version=14, input_names=["x"])


def enact_bench():
    """tests/torch_enact_bench.py: its models, statistics and port helper."""
    sys.path.insert(0, os.path.join(ROOT, "tests"))
    import torch_enact_bench
    return torch_enact_bench


# ---------------------------------------------------------------- DDP ranks

def ddp_rank(args):
    """One DDP rank (started by ddp_round): writes rank 0's step times."""
    os.sched_setaffinity(0, {args.ddp_rank % os.cpu_count()})
    import torch
    import torch.distributed as dist
    import torch.nn as nn
    teb = enact_bench()
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{args.port}",
                            rank=args.ddp_rank, world_size=2)
    torch.manual_seed(0)
    make = teb.MODELS[args.model][1]
    model, _, _, loss_fn, _ = make(0)  # the exported shapes
    torch.manual_seed(1 + args.ddp_rank)
    _, x, y, _, _ = make(0)
    model.train()
    ddp = nn.parallel.DistributedDataParallel(model, bucket_cap_mb=25, broadcast_buffers=False)
    opt = torch.optim.SGD(ddp.parameters(), lr=1e-4, momentum=0.9)
    times = []
    for _ in range(args.steps):
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        loss_fn(ddp(x), y).backward()
        opt.step()
        times.append(time.perf_counter() - t0)
    if args.ddp_rank == 0:
        with open(args.out, "w") as f:
            json.dump(times, f)
    dist.destroy_process_group()


def ddp_round(args, model, steps, tmp):
    out = os.path.join(tmp, "ddp.json")
    port = enact_bench().free_port()
    procs = [subprocess.Popen([sys.executable, __file__, "--ddp-rank", str(r), "--port", str(port),
                               "--model", model, "--steps", str(steps), "--out", out],
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
             for r in range(2)]
    for p in procs:
        o, _ = p.communicate(timeout=1800)
        if p.returncode != 0:
            raise SystemExit(f"runtime_ddp_bench: a DDP rank failed:\n{o}")
    with open(out) as f:
        return json.load(f)


# ---------------------------------------------------------------- braid

def braid(args, *cmd):
    r = subprocess.run([args.braid, *cmd], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    if r.returncode != 0:
        raise SystemExit(f"runtime_ddp_bench: braid {' '.join(cmd)} failed:\n{r.stderr[-3000:]}")
    return r.stdout


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", action="append", choices=sorted(MODELS))
    p.add_argument("--rounds", type=int, default=12)
    p.add_argument("--iters", type=int, default=10)
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--braid", default=os.path.join(ROOT, "build", "bin", "braid"))
    p.add_argument("--json", metavar="FILE", help="also write the results as JSON")
    # One DDP rank (internal).
    p.add_argument("--ddp-rank", type=int, help=argparse.SUPPRESS)
    p.add_argument("--port", type=int, help=argparse.SUPPRESS)
    p.add_argument("--steps", type=int, help=argparse.SUPPRESS)
    p.add_argument("--out", help=argparse.SUPPRESS)
    args = p.parse_args()
    if os.environ.get("BRAID_PARSE_ONLY") == "1":
        return
    if args.ddp_rank is not None:
        args.model = args.model[0]
        return ddp_rank(args)
    median_ci = enact_bench().median_ci
    results = []
    with tempfile.TemporaryDirectory(prefix="braid-runtime-ddp-") as tmp:
        for name in args.model or sorted(MODELS):
            onnx = os.path.join(ROOT, MODELS[name])
            batch = PER_RANK_BATCH
            dp, fp = os.path.join(tmp, name + ".dp.json"), os.path.join(tmp, name + ".fp.json")
            global_onnx = os.path.join(tmp, name + ".global.onnx")
            export_global(name, global_onnx)
            braid(args, "plan", global_onnx, "--parallel", "--cluster", "cpu-local", "--ranks", "2",
                  "--strategy", "data_parallel", "--no-pipeline", "-o", dp)
            braid(args, "plan", onnx, "--cluster", "cpu-local", "--ranks", "2", "-o", fp)
            rounds = {v: [] for v in VARIANTS}
            info = {}
            steps = args.warmup + args.iters
            for r in range(args.rounds):
                k = r % len(VARIANTS)
                line = []
                for v in VARIANTS[k:] + VARIANTS[:k]:
                    if v == "runtime":
                        j = json.loads(braid(args, "run", global_onnx, "--plan", dp, "--ranks", "2",
                                             "--rounds", "1", "--iters", str(args.iters),
                                             "--warmup", str(args.warmup), "--json"))
                        row = j["strategies"][0]
                        t = [x / 1e3 for x in row["measured_all_ms"]]
                        if j["global_batch"] != 2 * batch:
                            raise SystemExit(f"runtime_ddp_bench: the runtime's global batch is "
                                             f"{j['global_batch']}, not {2 * batch}")
                        info["runtime"] = {"spec": row["spec"], "global_batch": j["global_batch"]}
                    elif v == "executor":
                        j = json.loads(braid(args, "run", onnx, "--plan", fp, "--ranks", "2",
                                             "--iters", str(args.iters), "--warmup",
                                             str(args.warmup), "--json"))
                        row = next(s for s in j["strategies"] if s["strategy"] == "plan")
                        t = [x / 1e3 for x in row["measured_all_ms"]]
                        info["executor"] = {"buckets": row.get("buckets")}
                    else:
                        t = ddp_round(args, name, steps, tmp)[args.warmup:]
                    rounds[v].append(statistics.median(t))
                    line.append(f"{v} {rounds[v][-1] * 1e3:.1f}")
                print(f"  {name} round {r + 1}/{args.rounds}: " + ", ".join(line), file=sys.stderr,
                      flush=True)
            res = {"model": name, "onnx": MODELS[name], "per_rank_batch": batch, "ranks": 2,
                   "rounds": args.rounds, "iters": args.iters, "warmup": args.warmup, "info": info,
                   "variants": {}, "paired": {}, "round_medians_s": rounds}
            for v in VARIANTS:
                lo, hi = median_ci(rounds[v])
                res["variants"][v] = {"median_ms": statistics.median(rounds[v]) * 1e3,
                                      "ci95_ms": [lo * 1e3, hi * 1e3]}
            for other in ("ddp", "executor"):
                d = [a - b for a, b in zip(rounds["runtime"], rounds[other])]
                lo, hi = median_ci(d)
                ref = res["variants"][other]["median_ms"]
                md = statistics.median(d) * 1e3
                res["paired"][f"runtime - {other}"] = {
                    "median_ms": md, "ci95_ms": [lo * 1e3, hi * 1e3], "percent": 100 * md / ref,
                    "ci95_percent": [100 * lo * 1e3 / ref, 100 * hi * 1e3 / ref]}
            results.append(res)
            print(f"{name} ({MODELS[name]}), per-rank batch {batch}, 2 ranks x 1 thread bound to cores, "
                  f"{args.rounds} rounds x {args.iters} steps after {args.warmup} warm-up")
            print(f"  runtime program: {info['runtime']['spec']}")
            for v in VARIANTS:
                s = res["variants"][v]
                print(f"  {v:<9} {s['median_ms']:9.2f} ms  [{s['ci95_ms'][0]:.2f}, {s['ci95_ms'][1]:.2f}]")
            for k, d in res["paired"].items():
                print(f"  {k:<20} {d['median_ms']:+8.2f} ms  [{d['ci95_ms'][0]:+.2f}, {d['ci95_ms'][1]:+.2f}]"
                      f"  {d['percent']:+.1f}% [{d['ci95_percent'][0]:+.1f}%, {d['ci95_percent'][1]:+.1f}%]")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()
