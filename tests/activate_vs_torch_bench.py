#!/usr/bin/env python3
"""braid's own runtime (braid-worker activate) against PyTorch DDP, same ranks.

For each model, on 2 CPU ranks over loopback (one thread each), alternating
process-level runs --alternations times:

  activate  `braid-worker activate --baseline`: braid's executor running the
            plan of `braid plan <onnx> --cluster cpu-local --ranks 2` (fused
            groups by braid's CPU fused executor, the plan's buckets) and,
            interleaved on the same ranks, the same executor with the DDP
            baseline's buckets and no fused kernels (`braid_ddp_buckets`);
  torch     tests/torch_enact_bench.py on the same plan file: PyTorch DDP
            (25 MB buckets), one flat allreduce, braid.torch.enact.

Each run's timed iterations are pooled per variant; printed: median and a
distribution-free 95% CI of the median, and braid's plan against PyTorch DDP
(ratio of medians; and the range of that ratio over the alternations). The
executor runs real kernels on random inputs (no data loading, no Python), so
it is braid's runtime against PyTorch's, not the plan alone: the plan alone is
`plan` against `braid_ddp_buckets` (paired per iteration, printed too).

  BRAID_DB=profiles.db /usr/bin/python3 tests/activate_vs_torch_bench.py \\
      [--model mlp|transformer|resnet18 ...] [--alternations 5] [--iterations 10]
"""
import argparse
import json
import math
import os
import socket
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MODELS = {
    "mlp": "tests/data/mlp8x1024_opset14.onnx",
    "transformer": "tests/data/transformer_encoder_d256_opset14.onnx",
    "resnet18": "tests/data/resnet18_train_opset13.onnx",
}


def median_ci(xs, level=0.95):
    """Median and the order-statistic confidence interval of the median."""
    xs = sorted(xs)
    n = len(xs)
    med = xs[n // 2] if n % 2 else 0.5 * (xs[n // 2 - 1] + xs[n // 2])
    tail = (1 - level) / 2
    cdf, lo = 0.0, 0
    for k in range(n // 2):
        cdf += math.comb(n, k) * 0.5 ** n
        if cdf > tail:
            break
        lo = k
    return med, xs[lo], xs[n - 1 - lo]


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def activate(args, onnx, plan, secret):
    port = free_port()
    base = [args.worker, "activate", "--world-size", "2", "--rendezvous", f"127.0.0.1:{port}",
            "--plan", plan, "--secret-file", secret, "--model", onnx, "--baseline",
            "--warmup", str(args.warmup), "--iterations", str(args.iterations)]
    r1 = subprocess.Popen(base + ["--rank", "1"], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    r0 = subprocess.run(base + ["--rank", "0", "--json"], stdout=subprocess.PIPE,
                        stderr=subprocess.PIPE, text=True)
    r1.wait()
    if r0.returncode != 0 or r1.returncode != 0:
        raise SystemExit(f"activate failed: {r0.stderr}")
    return json.loads(r0.stdout)


def torch_run(args, name, plan):
    with tempfile.NamedTemporaryFile(suffix=".json") as f:
        cmd = ["/usr/bin/python3", os.path.join(ROOT, "tests", "torch_enact_bench.py"),
               "--model", name, "--plan", plan, "--rounds", str(args.iterations),
               "--warmup", str(args.warmup), "--json", f.name]
        r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        if r.returncode != 0:
            raise SystemExit(f"torch_enact_bench failed: {r.stderr}")
        return json.load(open(f.name))[0]["times_s"]


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", action="append", choices=sorted(MODELS))
    p.add_argument("--alternations", type=int, default=5)
    p.add_argument("--iterations", type=int, default=10)
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--braid", default=os.path.join(ROOT, "build", "bin", "braid"))
    p.add_argument("--worker", default=os.path.join(ROOT, "build", "bin", "braid-worker"))
    p.add_argument("--json", metavar="FILE")
    args = p.parse_args()
    if os.environ.get("BRAID_PARSE_ONLY", "") not in ("", "0"):
        sys.exit(0)  # parse-only (base/command_line.h): the arguments were accepted
    out = {}
    with tempfile.TemporaryDirectory() as tmp:
        secret = os.path.join(tmp, "secret")
        with open(secret, "w") as f:
            f.write("activate-vs-torch-bench-" + os.urandom(8).hex())
        for name in args.model or list(MODELS):
            onnx = os.path.join(ROOT, MODELS[name])
            plan = os.path.join(tmp, name + ".plan.json")
            r = subprocess.run([args.braid, "plan", onnx, "--cluster", "cpu-local", "--ranks", "2",
                                "--json", "-o", plan], stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True,
                               env=dict(os.environ, BRAID_PLAN_SECRET_FILE=secret))
            if r.returncode != 0:
                raise SystemExit(r.stderr)
            predicted = json.loads(r.stdout)["iteration_ms"]
            pooled = {"plan": [], "braid_ddp_buckets": [], "torch_ddp": [], "torch_flat": [],
                      "torch_enact": []}
            diffs, ratios = [], []
            for _ in range(args.alternations):
                a = activate(args, onnx, plan, secret)
                t = torch_run(args, name, plan)
                pooled["plan"] += a["plan_iteration_s"]
                pooled["braid_ddp_buckets"] += a["baseline_iteration_s"]
                diffs += [x - y for x, y in zip(a["plan_iteration_s"], a["baseline_iteration_s"])]
                for v in ("ddp", "flat", "enact"):
                    pooled["torch_" + v] += t[v]
                ratios.append(median_ci(a["plan_iteration_s"])[0] / median_ci(t["ddp"])[0])
            res = {"predicted_ms": predicted, "fusion_groups": a["fusion_groups"],
                   "buckets": a["buckets"], "variants": {}}
            print(f"{name} ({MODELS[name]}): 2 ranks x 1 thread, {args.alternations} alternations "
                  f"x {args.iterations} iterations; plan: {a['fusion_groups']} fused groups, "
                  f"{a['buckets']} buckets; predicted plan {predicted['braid']:.2f} ms, "
                  f"ddp {predicted['ddp']:.2f} ms (simulated)")
            print(f"  {'variant':<18} {'median ms':>10}  {'95% CI of median':>22}")
            for v, xs in pooled.items():
                m, lo, hi = median_ci(xs)
                res["variants"][v] = {"median_ms": m * 1e3, "ci_ms": [lo * 1e3, hi * 1e3], "n": len(xs)}
                print(f"  {v:<18} {m * 1e3:10.2f}  [{lo * 1e3:9.2f}, {hi * 1e3:9.2f}]")
            m, lo, hi = median_ci(diffs)
            res["plan_minus_braid_ddp_buckets_ms"] = [m * 1e3, lo * 1e3, hi * 1e3]
            print(f"  plan - braid_ddp_buckets (paired): {m * 1e3:+.2f} ms [{lo * 1e3:+.2f}, {hi * 1e3:+.2f}]")
            tm = res["variants"]["torch_ddp"]["median_ms"]
            pm = res["variants"]["plan"]["median_ms"]
            res["plan_vs_torch_ddp"] = {"ratio_of_medians": pm / tm, "per_alternation": ratios}
            print(f"  plan / torch_ddp: {pm / tm:.3f} (per alternation {min(ratios):.3f} .. "
                  f"{max(ratios):.3f}): braid's runtime {100 * (1 - pm / tm):+.1f}% faster\n")
            out[name] = res
    if args.json:
        with open(args.json, "w") as f:
            json.dump(out, f, indent=1)


if __name__ == "__main__":
    sys.exit(main())
