#!/usr/bin/env python3
"""The Python launcher (client/python/braid_launcher.py) against a real braid-server.

Generates the Python client (client/python/generate.sh), starts braid-server
on loopback with a fresh SQLite database (ready once it logs the port it
listens on), and runs the launcher as a user would:

- a plan for tests/data/mlp8x1024_opset14.onnx on cpu-local with
  --nproc-per-node 0: exit 0, progress lines on stderr, the summary on
  stdout, and a plan file (GetPlanResponse JSON) whose plan is for a
  training graph and hashes to the plan_sha256 the server gave;
- bad input: a model file that does not exist and a model that is not ONNX
  exit 2, a wrong token exits 1, each with one line on stderr;
- with --nproc-per-node 2, two ranks of client/python/examples/train_mlp.py
  (PyTorch, Gloo) train with the plan and report their times, which the
  server then shows for the job (skipped without PyTorch).

  /usr/bin/python3 tests/launcher_e2e_test.py --server-bin build/bin/braid-server \\
      [--python-out build/python]
"""
import argparse
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import unittest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LAUNCHER = os.path.join(ROOT, "client", "python", "braid_launcher.py")
TRAIN_MLP = os.path.join(ROOT, "client", "python", "examples", "train_mlp.py")
MODEL = os.path.join(ROOT, "tests", "data", "mlp8x1024_opset14.onnx")
CLIENT_TOKEN = "launcher-e2e-client-token"
WORKER_TOKEN = "launcher-e2e-worker-token"
# The machines this runs on are small and shared: generous deadlines, never
# a fixed sleep.
SERVER_READY_S = 60
LAUNCH_S = 120

ARGS = None  # set in main()
SERVER = None  # the Server every case talks to


class Server:
    """braid-server on 127.0.0.1 (port chosen by the kernel) with its own
    database in `tmp`; ready once its log names the port."""

    def __init__(self, server_bin, tmp):
        self.log_path = os.path.join(tmp, "server.log")
        env = dict(os.environ)
        # Roofline costs: no GNN checkpoint to load, no shipped profiles.
        env.setdefault("BRAID_GNN_CHECKPOINT", "none")
        env.setdefault("BRAID_PROFILES", "none")
        self.log = open(self.log_path, "w")
        self.proc = subprocess.Popen(
            [server_bin, "--listen", "127.0.0.1:0", "--db", os.path.join(tmp, "braid.db"),
             "--client-token", CLIENT_TOKEN, "--worker-token", WORKER_TOKEN],
            stdout=self.log, stderr=subprocess.STDOUT, env=env)
        self.port = self._wait_for_port()
        self.address = f"127.0.0.1:{self.port}"

    def _wait_for_port(self):
        pattern = re.compile(r"braid-server listening on \S+ \(port (\d+)")
        deadline = time.monotonic() + SERVER_READY_S
        while time.monotonic() < deadline:
            with open(self.log_path) as f:
                m = pattern.search(f.read())
            if m:
                return int(m.group(1))
            if self.proc.poll() is not None:
                raise RuntimeError(f"braid-server exited {self.proc.returncode}:\n{self.text()}")
            time.sleep(0.05)
        raise RuntimeError(f"braid-server did not log its port in {SERVER_READY_S} s:\n{self.text()}")

    def text(self):
        with open(self.log_path) as f:
            return f.read()

    def stop(self):
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.log.close()


def launcher(*args, token=CLIENT_TOKEN, cwd=None):
    """Runs the launcher as a user would (Debian's python3, the generated
    client and client/python on PYTHONPATH)."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([ARGS.python_out, os.path.join(ROOT, "client", "python")])
    env.pop("BRAID_CLIENT_TOKEN", None)
    cmd = [sys.executable, LAUNCHER, "--server", SERVER.address, "--token", token] + list(args)
    return subprocess.run(cmd, env=env, cwd=cwd, capture_output=True, text=True, timeout=LAUNCH_S)


def describe(r):
    return f"exit {r.returncode}\n--- stdout\n{r.stdout}\n--- stderr\n{r.stderr}"


def plan_digest(plan_file_dict):
    """PlanDigest (proto/plan_digest.h) of the plan in a GetPlanResponse
    JSON: SHA-256 of the plan without its cost figures, serialized
    deterministically."""
    from google.protobuf import json_format
    from braid.v1 import strategy_pb2
    resp = json_format.ParseDict(plan_file_dict, strategy_pb2.GetPlanResponse())
    plan = resp.plan
    for f in ("predicted_iteration_s", "predicted_compute_s", "predicted_comm_s",
              "cost_generation"):
        plan.ClearField(f)
    return hashlib.sha256(plan.SerializeToString(deterministic=True)).hexdigest()


class LauncherTest(unittest.TestCase):

    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="braid_launcher_")

    def tearDown(self):
        shutil.rmtree(self.tmp, ignore_errors=True)

    def submit(self, seed, *extra):
        """A fresh search per seed (the plan cache keys on the options)."""
        plan_out = os.path.join(self.tmp, "plan.json")
        t0 = time.monotonic()
        r = launcher("--model", MODEL, "--cluster", "cpu-local", "--ranks", "2",
                     "--op-fusion", "off", "--budget-s", "10", "--seed", str(seed),
                     "--plan-out", plan_out, *extra)
        print(f"  launcher ({' '.join(extra) or 'plan only'}): {time.monotonic() - t0:.1f} s",
              file=sys.stderr)
        return r, plan_out

    def test_plan_summary_and_plan_file(self):
        r, plan_out = self.submit(1, "--nproc-per-node", "0")
        self.assertEqual(r.returncode, 0, describe(r))
        # Progress (stderr is no terminal: plain lines), ending in "done".
        progress = re.findall(r"^braid: (job-[0-9a-f]{16}) (\w+) +best +[0-9.]+ ms", r.stderr, re.M)
        self.assertTrue(progress, describe(r))
        job = progress[-1][0]
        self.assertEqual(progress[-1][1], "done", describe(r))
        # The summary on stdout names the same job.
        m = re.search(r"^job (job-[0-9a-f]{16}): ([0-9.]+) ms per iteration, (\d+) fused kernels, "
                      r"(\d+) buckets$", r.stdout, re.M)
        self.assertIsNotNone(m, describe(r))
        self.assertEqual(m.group(1), job)
        self.assertGreater(float(m.group(2)), 0)
        self.assertEqual(m.group(3), "0", "--op-fusion off plans no fused kernels")
        self.assertGreater(int(m.group(4)), 0)
        # The plan file: GetPlanResponse JSON, the plan for a training graph.
        with open(plan_out) as f:
            d = json.load(f)
        self.assertEqual(d["job_id"], job)
        plan = d["plan"]
        self.assertRegex(plan["graph_fingerprint"], r"^[0-9a-f]{16,}$")
        self.assertGreater(plan["predicted_iteration_s"], 0)
        self.assertEqual(len(plan["buckets"]), int(m.group(4)))
        self.assertTrue(all(b["gradients"] for b in plan["buckets"]), plan["buckets"])
        self.assertTrue(plan.get("ddp_buckets"), "the DDP-bucket baseline travels with the plan")
        # The file holds the very plan the server digested.
        self.assertRegex(d["plan_sha256"], r"^[0-9a-f]{64}$")
        self.assertEqual(plan_digest(d), d["plan_sha256"])

    def assertOneLineError(self, r, code, pattern):
        self.assertEqual(r.returncode, code, describe(r))
        lines = r.stderr.strip().splitlines()
        self.assertEqual(len(lines), 1, describe(r))
        self.assertRegex(lines[0], pattern)
        self.assertEqual(r.stdout, "", describe(r))

    def test_a_missing_model_file_is_bad_input(self):
        missing = os.path.join(self.tmp, "no-such-model.onnx")
        r = launcher("--model", missing, "--cluster", "cpu-local", "--nproc-per-node", "0",
                     "--plan-out", os.path.join(self.tmp, "plan.json"))
        self.assertOneLineError(r, 2, r"^braid_launcher: --model .*no-such-model\.onnx: "
                                      r"No such file or directory$")
        self.assertFalse(os.path.exists(os.path.join(self.tmp, "plan.json")))

    def test_a_model_that_is_not_onnx_is_bad_input(self):
        r = launcher("--model", os.path.join(ROOT, "tests", "data", "random_bytes.onnx"),
                     "--cluster", "cpu-local", "--nproc-per-node", "0",
                     "--plan-out", os.path.join(self.tmp, "plan.json"))
        self.assertOneLineError(r, 2, r"^braid_launcher: INVALID_ARGUMENT: \S")
        self.assertFalse(os.path.exists(os.path.join(self.tmp, "plan.json")))

    def test_a_wrong_token_fails_with_one_line(self):
        r = launcher("--model", MODEL, "--cluster", "cpu-local", "--nproc-per-node", "0",
                     "--plan-out", os.path.join(self.tmp, "plan.json"), token="not-the-token")
        self.assertOneLineError(r, 1, r"^braid_launcher: UNAUTHENTICATED: \S")
        self.assertFalse(os.path.exists(os.path.join(self.tmp, "plan.json")))

    def test_two_ranks_train_with_the_plan_and_report(self):
        try:
            import torch  # noqa: F401
        except ImportError:
            self.skipTest("PyTorch is missing: train_mlp.py cannot run")
        import socket
        with socket.socket() as s:  # a free rendezvous port for the ranks' Gloo group
            s.bind(("127.0.0.1", 0))
            master_port = s.getsockname()[1]
        r, plan_out = self.submit(
            2, "--nproc-per-node", "2", "--master-port", str(master_port), "--",
            sys.executable, TRAIN_MLP, "--steps", "3", "--warmup", "1", "--threads", "1")
        self.assertEqual(r.returncode, 0, describe(r))
        with open(plan_out) as f:
            d = json.load(f)
        buckets = len(d["plan"]["buckets"])
        for rank in (0, 1):
            self.assertRegex(r.stdout, rf"train_mlp: rank {rank}/2: {buckets} buckets, median step "
                                       r"[0-9.]+ ms with the plan, [0-9.]+ ms with DDP")
        self.assertRegex(r.stdout, r"train_mlp: reported to 127\.0\.0\.1:\d+: 2 ranks, measured "
                                   r"[0-9.]+ ms")
        # The server holds the ranks' measurements for the job.
        import grpc
        from braid.v1 import strategy_pb2, strategy_pb2_grpc
        with grpc.insecure_channel(SERVER.address) as ch:
            st = strategy_pb2_grpc.StrategyStub(ch).GetJob(
                strategy_pb2.GetJobRequest(job_id=d["job_id"].encode()),
                metadata=[("authorization", "Bearer " + CLIENT_TOKEN)], timeout=30)
        self.assertGreater(st.measured_iteration_s, 0)
        self.assertGreater(st.measured_baseline_s, 0)


def main():
    global ARGS, SERVER
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--server-bin", required=True)
    p.add_argument("--python-out", help="where to generate the Python client (default: a "
                                        "temporary directory)")
    ARGS, rest = p.parse_known_args()
    tmp = tempfile.mkdtemp(prefix="braid_launcher_e2e_")
    try:
        if not ARGS.python_out:
            ARGS.python_out = os.path.join(tmp, "python")
        ARGS.python_out = os.path.abspath(ARGS.python_out)
        subprocess.run(["bash", os.path.join(ROOT, "client", "python", "generate.sh"),
                        ARGS.python_out], check=True, stdout=subprocess.DEVNULL)
        sys.path.insert(0, ARGS.python_out)
        SERVER = Server(ARGS.server_bin, tmp)
        try:
            prog = unittest.main(argv=[sys.argv[0]] + rest, exit=False, verbosity=2)
        finally:
            SERVER.stop()
        if not prog.result.wasSuccessful():
            print("--- braid-server log (tail)", file=sys.stderr)
            print(SERVER.text()[-6000:], file=sys.stderr)
        return 0 if prog.result.wasSuccessful() else 1
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
