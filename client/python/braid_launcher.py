#!/usr/bin/env python3
"""A torchrun-style launcher that asks braid for a training plan first.

It submits the model and cluster to braid-server (Strategy.SubmitGraph),
follows the search (WatchJob), fetches the plan (GetPlan), writes it to a
JSON file, then starts the training command with BRAID_PLAN, BRAID_JOB_ID,
BRAID_SERVER, BRAID_TOKEN (and BRAID_TLS_CA with --tls-ca) and the usual
torchrun variables (RANK, LOCAL_RANK, WORLD_SIZE, LOCAL_WORLD_SIZE,
MASTER_ADDR, MASTER_PORT) set for each local rank. With --nproc-per-node 0 it
only prints the plan's summary.

The flow end to end:
  1. the launcher: SubmitGraph, WatchJob (progress on stderr), GetPlan, the
     plan written to --plan-out as GetPlanResponse JSON;
  2. every rank: braid.torch.enact(model, os.environ["BRAID_PLAN"]) binds the
     plan's AllReduce buckets to the model's parameters, the optimizer wrapped
     by handle.wrap_optimizer synchronizes them before each step;
  3. every rank, after training: braid.torch.report(BRAID_SERVER, BRAID_TOKEN,
     BRAID_JOB_ID, rank, world, plan step times, baseline step times) -- with
     the job's report credential and this launch's run (BRAID_REPORT_CREDENTIAL,
     BRAID_ATTEMPT_ID, which the launcher sets from SubmitGraph and StartRun) -- sends
     Strategy.ReportMeasurement; the server recalibrates its predictions and
     rolls the plan back to the DDP-bucket baseline if it measured slower.
  client/python/examples/train_mlp.py does steps 2 and 3:

  client/python/generate.sh build/python
  PYTHONPATH=build/python:client/python python3 client/python/braid_launcher.py \
      --server 127.0.0.1:50051 --token "$BRAID_CLIENT_TOKEN" \
      --model tests/data/mlp8x1024_opset14.onnx --cluster cpu-local --ranks 2 --op-fusion off \
      --nproc-per-node 2 -- python3 client/python/examples/train_mlp.py --steps 30

Progress: on a terminal one line rewritten at most twice a second; otherwise
(a log) a plain line at most every 5 s, on each phase change and at the end.

Exit codes: 0 success, 2 bad input, 1 anything else (the server's error is
printed on one line).
"""
import argparse
import json
import os
import subprocess
import sys
import time

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
    if args.op_fusion == "off":
        opts.op_fusion = False
    return req


class Progress:
    """Throttled search progress: a TTY gets one line rewritten with \\r at most
    every `tty_interval_s`; anything else gets plain lines at most every
    `log_interval_s`, plus one on every phase change. close() prints the last
    status if it was held back."""

    def __init__(self, stream, tty=None, tty_interval_s=0.5, log_interval_s=5.0,
                 clock=time.monotonic):
        self.stream = stream
        self.tty = stream.isatty() if tty is None else tty
        self.interval = tty_interval_s if self.tty else log_interval_s
        self.clock = clock
        self.last_t = None
        self.phase = None
        self.held = None  # the newest line not printed yet

    def update(self, line, phase):
        now = self.clock()
        if (phase != self.phase or self.last_t is None or now - self.last_t >= self.interval):
            self.phase, self.last_t = phase, now
            self._emit(line)
        else:
            self.held = line

    def _emit(self, line):
        self.held = None
        if self.tty:
            print("\r" + line, end="", file=self.stream, flush=True)
        else:
            print(line, file=self.stream, flush=True)

    def close(self):
        if self.held is not None:
            self._emit(self.held)
        if self.tty and self.last_t is not None:
            print(file=self.stream, flush=True)


def channel_to(args):
    """A gRPC channel to --server: TLS with --tls-ca, plaintext without."""
    if args.tls_ca:
        with open(args.tls_ca, "rb") as f:
            return grpc.secure_channel(args.server, grpc.ssl_channel_credentials(f.read()))
    return grpc.insecure_channel(args.server)


def fetch_plan(args, request):
    channel = channel_to(args)
    stub = strategy_pb2_grpc.StrategyStub(channel)
    md = [("authorization", "Bearer " + args.token)]
    sub = stub.SubmitGraph(request, metadata=md, timeout=120)
    last = sub.status
    if last.phase not in FINAL:
        progress = Progress(sys.stderr)
        try:
            for st in stub.WatchJob(strategy_pb2.WatchJobRequest(job_id=sub.job_id.encode()),
                                    metadata=md):
                last = st
                phase = strategy_pb2.JobPhase.Name(st.phase)[len("JOB_PHASE_"):].lower()
                progress.update(f"braid: {sub.job_id} {phase:<10} best "
                                f"{st.best_cost_s * 1e3:10.3f} ms {st.candidates_evaluated:8d} "
                                f"candidates {st.elapsed_s:6.1f} s", phase)
        finally:
            progress.close()
    if last.phase != strategy_pb2.JOB_PHASE_DONE:
        raise RuntimeError(f"job {sub.job_id} ended {strategy_pb2.JobPhase.Name(last.phase)}: "
                           f"{last.error}")
    plan = stub.GetPlan(strategy_pb2.GetPlanRequest(job_id=sub.job_id.encode()), metadata=md,
                        timeout=60)
    return plan, sub.report_credential


def start_run(args, job_id, credential, world):
    """Begins one run of the job's plan (Strategy.StartRun): the attempt id
    every rank of this launch reports under."""
    with channel_to(args) as channel:
        r = strategy_pb2_grpc.StrategyStub(channel).StartRun(
            strategy_pb2.StartRunRequest(job_id=job_id.encode(),
                                         report_credential=credential.encode(),
                                         world_size=world, source=b"braid_launcher"),
            metadata=[("authorization", "Bearer " + args.token)], timeout=60)
    return r.attempt_id


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
    p.add_argument("--op-fusion", choices=("on", "off"), default="on",
                   help="off: buckets only, for a PyTorch-eager script using braid.torch "
                        "(it runs every op unfused)")
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
    # The model is read before any call: a file that cannot be read is bad input.
    try:
        request = build_request(args)
    except OSError as e:
        print(f"braid_launcher: --model {args.model}: {e.strerror or e}", file=sys.stderr)
        return 2
    try:
        plan, credential = fetch_plan(args, request)
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
    try:
        attempt = start_run(args, plan.job_id, credential, world)
    except grpc.RpcError as e:
        print(f"braid_launcher: StartRun: {e.code().name}: {e.details()}", file=sys.stderr)
        return 1
    procs = []
    for local in range(args.nproc_per_node):
        env = dict(os.environ, BRAID_PLAN=os.path.abspath(args.plan_out), BRAID_JOB_ID=plan.job_id,
                   BRAID_SERVER=args.server, BRAID_TOKEN=args.token,
                   BRAID_REPORT_CREDENTIAL=credential, BRAID_ATTEMPT_ID=attempt,
                   RANK=str(args.node_rank * args.nproc_per_node + local), LOCAL_RANK=str(local),
                   WORLD_SIZE=str(world), LOCAL_WORLD_SIZE=str(args.nproc_per_node),
                   MASTER_ADDR=args.master_addr, MASTER_PORT=str(args.master_port))
        if args.tls_ca:
            env["BRAID_TLS_CA"] = os.path.abspath(args.tls_ca)
        procs.append(subprocess.Popen(cmd, env=env))
    return max(pr.wait() for pr in procs)


if __name__ == "__main__":
    sys.exit(main())
