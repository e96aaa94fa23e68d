#!/usr/bin/env python3
"""A torchrun-style launcher that asks braid for a training plan first.

It submits the model and cluster to braid-server (Strategy.SubmitGraph),
follows the search (WatchJob), fetches the plan (GetPlan), writes it to a
JSON file, then starts the training command with BRAID_PLAN, BRAID_JOB_ID and
the usual torchrun variables (RANK, LOCAL_RANK, WORLD_SIZE, MASTER_ADDR,
MASTER_PORT) set for each local rank. With --nproc-per-node 0 it only prints
the plan's summary.

  client/python/generate.sh build/python
  PYTHONPATH=build/python python3 client/python/braid_launcher.py \
      --server braid:50051 --token "$BRAID_CLIENT_TOKEN" \
      --model model.onnx --cluster dgx-h100 --nproc-per-node 8 -- python train.py

Exit codes: 0 success, 2 bad input, 1 anything else (the server's error is
printed on one line).
"""
import argparse
import json
import os
import subprocess
import sys

import grpc
from google.protobuf import json_format

from braid.v1 import strategy_pb2, strategy_pb2_grpc

FINAL = {strategy_pb2.JOB_PHASE_DONE, strategy_pb2.JOB_PHASE_FAILED,
         strategy_pb2.JOB_PHASE_CANCELLED}


def build_request(args):
    req = strategy_pb2.SubmitGraphRequest(name=(args.name or args.model).encode())
    if args.model.startswith("zoo:"):
        req.zoo_model = args.model[4:].encode()
    else:
        with open(args.model, "rb") as f:
            data = f.read()
        if args.model.endswith(".onnx"):
            req.onnx = data
        else:
            req.graph_text = data
    req.cluster_preset = args.cluster.encode()
    opts = req.options
    if args.seed is not None:
        opts.seed = args.seed
    if args.budget_s is not None:
        opts.budget_s = args.budget_s
    if args.ranks is not None:
        opts.ranks = args.ranks
    return req


def fetch_plan(args):
    creds = grpc.ssl_channel_credentials(open(args.tls_ca, "rb").read()) if args.tls_ca else None
    channel = (grpc.secure_channel(args.server, creds) if creds
               else grpc.insecure_channel(args.server))
    stub = strategy_pb2_grpc.StrategyStub(channel)
    md = [("authorization", "Bearer " + args.token)]
    sub = stub.SubmitGraph(build_request(args), metadata=md, timeout=120)
    last = sub.status
    if last.phase not in FINAL:
        for st in stub.WatchJob(strategy_pb2.WatchJobRequest(job_id=sub.job_id), metadata=md):
            last = st
            phase = strategy_pb2.JobPhase.Name(st.phase)[len("JOB_PHASE_"):].lower()
            print(f"\rbraid: {sub.job_id} {phase:<10} best {st.best_cost_s * 1e3:10.3f} ms "
                  f"{st.candidates_evaluated:8d} candidates {st.elapsed_s:6.1f} s",
                  end="", file=sys.stderr, flush=True)
        print(file=sys.stderr)
    if last.phase != strategy_pb2.JOB_PHASE_DONE:
        raise RuntimeError(f"job {sub.job_id} ended {strategy_pb2.JobPhase.Name(last.phase)}: "
                           f"{last.error}")
    return stub.GetPlan(strategy_pb2.GetPlanRequest(job_id=sub.job_id), metadata=md, timeout=60)


def summary(plan):
    best = min(plan.baselines, key=lambda b: b.iteration_s, default=None)
    t = plan.plan.predicted_iteration_s
    lines = [f"job {plan.job_id}: {t * 1e3:.3f} ms per iteration, "
             f"{len(plan.plan.fusion_groups)} fused kernels, {len(plan.plan.buckets)} buckets"]
    if best is not None and t > 0:
        lines.append(f"best baseline {best.name}: {best.iteration_s * 1e3:.3f} ms, "
                     f"speed-up {100 * (best.iteration_s - t) / t:.1f}%")
    return "\n".join(lines)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--server", default=os.environ.get("BRAID_SERVER", "127.0.0.1:50051"))
    p.add_argument("--token", default=os.environ.get("BRAID_CLIENT_TOKEN", ""))
    p.add_argument("--tls-ca", help="PEM roots: use TLS")
    p.add_argument("--model", required=True, help="zoo:NAME, model.onnx or a braid text graph")
    p.add_argument("--cluster", required=True, help="cluster preset")
    p.add_argument("--name")
    p.add_argument("--seed", type=int)
    p.add_argument("--budget-s", type=float)
    p.add_argument("--ranks", type=int)
    p.add_argument("--plan-out", default="braid-plan.json")
    p.add_argument("--nproc-per-node", type=int, default=0)
    p.add_argument("--nnodes", type=int, default=1)
    p.add_argument("--node-rank", type=int, default=0)
    p.add_argument("--master-addr", default="127.0.0.1")
    p.add_argument("--master-port", type=int, default=29500)
    p.add_argument("command", nargs=argparse.REMAINDER, help="-- training command")
    args = p.parse_args()
    if not args.token:
        print("braid_launcher: --token (or BRAID_CLIENT_TOKEN) must be set", file=sys.stderr)
        return 2
    try:
        plan = fetch_plan(args)
    except grpc.RpcError as e:
        print(f"braid_launcher: {e.code().name}: {e.details()}", file=sys.stderr)
        return 2 if e.code() == grpc.StatusCode.INVALID_ARGUMENT else 1
    except (OSError, RuntimeError) as e:
        print(f"braid_launcher: {e}", file=sys.stderr)
        return 1
    with open(args.plan_out, "w") as f:
        json.dump(json_format.MessageToDict(plan, preserving_proto_field_name=True), f, indent=1)
    print(summary(plan))
    cmd = [c for c in args.command if c != "--"]
    if args.nproc_per_node <= 0 or not cmd:
        return 0
    world = args.nnodes * args.nproc_per_node
    procs = []
    for local in range(args.nproc_per_node):
        env = dict(os.environ, BRAID_PLAN=os.path.abspath(args.plan_out), BRAID_JOB_ID=plan.job_id,
                   RANK=str(args.node_rank * args.nproc_per_node + local), LOCAL_RANK=str(local),
                   WORLD_SIZE=str(world), LOCAL_WORLD_SIZE=str(args.nproc_per_node),
                   MASTER_ADDR=args.master_addr, MASTER_PORT=str(args.master_port))
        procs.append(subprocess.Popen(cmd, env=env))
    return max(pr.wait() for pr in procs)


if __name__ == "__main__":
    sys.exit(main())
