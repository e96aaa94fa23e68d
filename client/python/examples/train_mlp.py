#!/usr/bin/env python3
"""Trains the MLP of tests/data/mlp8x1024_opset14.onnx with braid's plan.

Run by client/python/braid_launcher.py (which sets BRAID_PLAN, BRAID_JOB_ID,
BRAID_SERVER, BRAID_TOKEN and the torchrun variables RANK, WORLD_SIZE,
MASTER_ADDR, MASTER_PORT) or by torchrun with --plan. Every rank enacts the
plan's AllReduce buckets with braid.torch, trains --steps SGD steps, interleaved
step by step with the same model under torch DDP (the DDP-bucket baseline,
bucket_cap_mb=25) unless --no-baseline, times each step (barrier first, then
forward, backward, AllReduce, optimizer step), prints the medians and, when
BRAID_SERVER and BRAID_JOB_ID are set, reports the times to braid-server
(Strategy.ReportMeasurement), which recalibrates and may roll the plan back.

  PYTHONPATH=build/python:client/python python3 client/python/braid_launcher.py \\
      --token "$BRAID_CLIENT_TOKEN" --model tests/data/mlp8x1024_opset14.onnx \\
      --cluster cpu-local --ranks 2 --nproc-per-node 2 -- \\
      python3 client/python/examples/train_mlp.py --steps 30

Gloo on CPU; with --backend nccl the same code runs on each rank's GPU
(LOCAL_RANK), not tested here.
"""
import argparse
import copy
import os
import statistics
import sys
import time

import torch
import torch.distributed as dist
import torch.nn as nn

# braid.torch from this checkout (client/python) when PYTHONPATH lacks it.
sys.path.insert(1, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import braid.torch  # noqa: E402


def make_mlp(width, depth):
    layers = []
    for _ in range(depth):
        layers += [nn.Linear(width, width), nn.ReLU()]
    return nn.Sequential(*layers)


def timed_step(model, opt, x, y):
    dist.barrier()
    t0 = time.perf_counter()
    opt.zero_grad(set_to_none=True)
    nn.functional.mse_loss(model(x), y).backward()
    opt.step()
    if x.is_cuda:
        torch.cuda.synchronize()
    return time.perf_counter() - t0


def report(server, job, rank, world, plan, plan_s, base_s):
    """Sends this rank's times (Strategy.ReportMeasurement); rank 0 prints the
    server's answer. 1 when the report failed, else 0."""
    import grpc
    try:
        r = braid.torch.report(server, os.environ.get("BRAID_TOKEN", ""), job, rank, world,
                               plan_s, base_s, source="braid.torch train_mlp.py",
                               plan_sha256=plan.plan_sha256,
                               tls_ca=os.environ.get("BRAID_TLS_CA"))
    except grpc.RpcError as e:
        print(f"train_mlp: rank {rank}: ReportMeasurement failed: {e.code().name}: "
              f"{e.details()}", file=sys.stderr)
        return 1
    except ValueError as e:
        print(f"train_mlp: rank {rank}: not reported: {e}", file=sys.stderr)
        return 0
    if rank == 0:
        print(f"train_mlp: reported to {server}: {r.ranks_reported} ranks, measured "
              f"{r.measured_iteration_s * 1e3:.2f} ms, baseline "
              f"{r.baseline_iteration_s * 1e3:.2f} ms, predicted "
              f"{r.predicted_iteration_s * 1e3:.2f} ms, calibration {r.calibration:.3f}"
              + (f", rolled back: {r.rollback_reason}" if r.rolled_back else ""), flush=True)
    return 0


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--plan", default=os.environ.get("BRAID_PLAN"),
                   help="plan JSON (default: $BRAID_PLAN)")
    p.add_argument("--steps", type=int, default=30, help="timed steps")
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--width", type=int, default=1024)
    p.add_argument("--depth", type=int, default=8)
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--no-baseline", action="store_true", help="skip the interleaved DDP steps")
    p.add_argument("--backend", default="nccl" if torch.cuda.is_available() else "gloo")
    p.add_argument("--threads", type=int, default=0, help="torch threads per rank (0: keep)")
    args = p.parse_args()
    if not args.plan:
        print("train_mlp: no plan: pass --plan or run under braid_launcher.py (BRAID_PLAN)",
              file=sys.stderr)
        return 2
    if args.threads:
        torch.set_num_threads(args.threads)
    for k, v in (("RANK", "0"), ("WORLD_SIZE", "1"), ("MASTER_ADDR", "127.0.0.1"),
                 ("MASTER_PORT", "29500")):
        os.environ.setdefault(k, v)
    dist.init_process_group(args.backend, init_method="env://")
    rank, world = dist.get_rank(), dist.get_world_size()
    device = torch.device("cpu")
    if args.backend == "nccl":
        device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", "0")))
        torch.cuda.set_device(device)

    plan = braid.torch.load_plan(args.plan)
    torch.manual_seed(0)  # the same initial weights on every rank
    model = make_mlp(args.width, args.depth).to(device)
    baseline = copy.deepcopy(model)
    handle = braid.torch.enact(model, plan)  # ValueError if the plan is not this model's
    opt = handle.wrap_optimizer(torch.optim.SGD(model.parameters(), lr=args.lr))
    ddp = None
    if not args.no_baseline:
        ddp = nn.parallel.DistributedDataParallel(baseline, bucket_cap_mb=25)
        ddp_opt = torch.optim.SGD(ddp.parameters(), lr=args.lr)

    gen = torch.Generator().manual_seed(rank)
    x = torch.randn(args.batch, args.width, generator=gen).to(device)
    y = torch.randn(args.batch, args.width, generator=gen).to(device)
    plan_s, base_s = [], []
    for step in range(args.warmup + args.steps):
        t = timed_step(model, opt, x, y)
        tb = timed_step(ddp, ddp_opt, x, y) if ddp is not None else None
        if step >= args.warmup:
            plan_s.append(t)
            if tb is not None:
                base_s.append(tb)
    line = (f"train_mlp: rank {rank}/{world}: {len(handle.buckets)} buckets, median step "
            f"{statistics.median(plan_s) * 1e3:.2f} ms with the plan")
    if base_s:
        line += f", {statistics.median(base_s) * 1e3:.2f} ms with DDP"
    print(line, flush=True)

    server, job = os.environ.get("BRAID_SERVER"), os.environ.get("BRAID_JOB_ID")
    rc = 0
    if server and job:
        # Ranks 1.. report first and rank 0 last, so that the server's answer
        # to rank 0 covers every rank; every rank reaches the barrier,
        # reported or not.
        if rank != 0:
            rc = report(server, job, rank, world, plan, plan_s, base_s)
        dist.barrier()
        if rank == 0:
            rc = report(server, job, rank, world, plan, plan_s, base_s)
    dist.destroy_process_group()
    return rc


if __name__ == "__main__":
    sys.exit(main())
