#!/usr/bin/env python3
"""braid.torch (client/python/braid/torch.py) on 2 Gloo ranks over loopback.

Trains an MLP for 20 SGD steps with torch DDP and with plans enacted through
braid.torch (buckets in reverse parameter order, in forward order, with an
unused parameter, and, when build/bin/braid exists, the plan `braid plan`
makes for the model's ONNX export), and checks that the parameters match DDP's,
that every bucket's all_reduce is issued once per step in plan order, and that
mismatched plans are refused naming the parameter. Also reads every plan file
format braid writes and imports braid.torch beside the generated braid.v1 stubs.

  /usr/bin/python3 tests/torch_enact_test.py [--braid build/bin/braid]

Exit 77 (ctest: skipped) when PyTorch is missing.
"""
import argparse
import json
import os
import socket
import subprocess
import sys
import tempfile
import unittest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "client", "python"))

try:
    import torch
    import torch.distributed as dist
    import torch.multiprocessing as mp
    import torch.nn as nn
except ImportError as e:  # pragma: no cover
    print(f"torch_enact_test: skipped, PyTorch is missing ({e})", file=sys.stderr)
    sys.exit(77)

import braid.torch as bt

STEPS = 20
BRAID = os.path.join(ROOT, "build", "bin", "braid")


def make_mlp(unused=False):
    torch.manual_seed(0)
    layers = [nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 10)]
    m = nn.Sequential(*layers)
    if unused:
        m.register_parameter("unused", nn.Parameter(torch.ones(3)))
    return m


def grads_of(model):
    return [n + ".grad" for n, p in model.named_parameters() if p.requires_grad]


def reverse_plan(model, per_bucket=2):
    """buckets of `per_bucket` gradients, last layer first (backward order)."""
    names = grads_of(model)[::-1]
    return {"format": "braid.plan.v1", "groups": [],
            "buckets": [names[i:i + per_bucket] for i in range(0, len(names), per_bucket)]}


def batch(rank, step):
    g = torch.Generator().manual_seed(1000 * rank + step)
    return torch.randn(16, 32, generator=g), torch.randint(0, 10, (16,), generator=g)


def train(model, step_fn, wrap=lambda opt: opt, steps=STEPS):
    opt = wrap(torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9))
    for s in range(steps):
        x, y = batch(dist.get_rank(), s)
        opt.zero_grad(set_to_none=True)
        nn.functional.cross_entropy(model(x), y).backward()
        step_fn(opt, s)
    return torch.cat([p.detach().reshape(-1) for n, p in model.named_parameters()
                      if not n.endswith("unused")])


def run_ddp():
    model = nn.parallel.DistributedDataParallel(make_mlp())
    return train(model, lambda opt, s: opt.step())


class CallLog:
    """Records the all_reduce calls braid.torch issues: their sizes and how many
    of the model's gradients existed when each was issued."""

    def __init__(self, model):
        self.model = model
        self.sizes, self.ready = [], []
        self.real = dist.all_reduce

    def __enter__(self):
        def logged(tensor, *a, **k):
            self.sizes.append(tensor.numel())
            self.ready.append(sum(p.grad is not None for p in self.model.parameters()))
            return self.real(tensor, *a, **k)
        dist.all_reduce = logged
        return self

    def __exit__(self, *exc):
        dist.all_reduce = self.real


def run_enact(plan, unused=False):
    model = make_mlp(unused)
    handle = bt.enact(model, plan)
    sizes = [sum(p.numel() for _, p in b) for b in handle.buckets]
    orders, in_backward = [], []
    with CallLog(model) as log:
        def step(opt, s):
            opt.step()
            orders.append(handle.last_order)
            in_backward.append(handle.last_in_backward)
        flat = train(model, step, wrap=handle.wrap_optimizer)
    n = len(handle.buckets)
    for s, order in enumerate(orders):
        assert order == list(range(n)), f"step {s}: buckets launched in order {order}"
    assert log.sizes == sizes * STEPS, f"all_reduce sizes {log.sizes[:2 * n]} != {sizes} per step"
    assert handle.steps == STEPS
    return flat, in_backward, model, log.ready[:n]


def rank_main(rank, port, plans, out_dir):
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                            world_size=2)
    results = {}
    ref = run_ddp()
    for name, plan in plans.items():
        unused = name == "unused"
        flat, in_backward, model, ready = run_enact(plan, unused)
        if unused:  # the parameter outside forward: its bucket launched by synchronize()
            assert torch.equal(model.unused.detach(), torch.ones(3)), "unused parameter moved"
        err = (flat - ref).abs().max().item()
        results[name] = {"max_abs_err": err, "in_backward": in_backward, "ready": ready}
    gathered = [None, None]
    dist.all_gather_object(gathered, {"params": ref.tolist()[:8]})
    assert gathered[0] == gathered[1], "DDP replicas differ"
    with open(os.path.join(out_dir, f"rank{rank}.json"), "w") as f:
        json.dump(results, f)
    dist.destroy_process_group()


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def braid_plan_of_mlp(tmp):
    """The plan `braid plan` makes for the MLP's ONNX export, or None."""
    if not os.access(BRAID, os.X_OK):
        return None
    onnx = os.path.join(tmp, "mlp.onnx")
    model = make_mlp().eval()
    torch.onnx.export(model, torch.randn(16, 32), onnx, opset_version=14, export_params=False,
                      input_names=["x"], output_names=["y"])
    out = os.path.join(tmp, "plan.json")
    subprocess.run([BRAID, "plan", onnx, "--cluster", "cpu-local", "--ranks", "2",
                    "--db", "none", "--estimator", "none", "-o", out],
                   check=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                   env=dict(os.environ, BRAID_GNN_CHECKPOINT="none"))
    return out


class EnactTest(unittest.TestCase):
    def test_two_gloo_ranks_match_ddp(self):
        with tempfile.TemporaryDirectory() as tmp:
            m = make_mlp()
            plans = {"reverse": reverse_plan(m),
                     "forward": {"buckets": [[g] for g in grads_of(m)]},
                     "unused": {"buckets": reverse_plan(m)["buckets"] + [["unused.grad"]]}}
            braid_plan = braid_plan_of_mlp(tmp)
            if braid_plan is not None:
                plans["braid"] = braid_plan
            else:
                print(f"torch_enact_test: {BRAID} missing, the braid-plan case is skipped",
                      file=sys.stderr)
            mp.spawn(rank_main, args=(free_port(), plans, tmp), nprocs=2, join=True)
            res = []
            for r in range(2):
                with open(os.path.join(tmp, f"rank{r}.json")) as f:
                    res.append(json.load(f))
        for r in range(2):
            for name in plans:
                self.assertLess(res[r][name]["max_abs_err"], 1e-5, f"rank {r}, plan {name}")
        # Buckets in backward order overlap it: each goes out as soon as its layer's
        # two gradients exist (2, 4, 6 of 6). Forward order cannot start before the
        # first layer's gradients, the last of backward (6, 6, ... of 6), but still
        # launches inside backward. The unused parameter's bucket goes out in
        # synchronize().
        for r in range(2):
            self.assertEqual(res[r]["reverse"]["ready"], [2, 4, 6])
            self.assertEqual(res[r]["reverse"]["in_backward"], [3] * STEPS)
            self.assertEqual(res[r]["forward"]["ready"], [6] * 6)
            self.assertEqual(res[r]["forward"]["in_backward"], [6] * STEPS)
            self.assertEqual(res[r]["unused"]["ready"], [2, 4, 6, 6])
            self.assertEqual(res[r]["unused"]["in_backward"], [3] * STEPS)


class PlanCheckTest(unittest.TestCase):
    def test_misspelt_gradient_is_refused_naming_it(self):
        m = make_mlp()
        plan = reverse_plan(m)
        plan["buckets"][1][0] = "2.weigth.grad"
        with self.assertRaisesRegex(ValueError, r"'2\.weigth\.grad'.*'2\.weigth' is missing "
                                                r"from the model"):
            bt.enact(m, plan)

    def test_parameter_missing_from_plan_is_refused_naming_it(self):
        m = make_mlp()
        plan = reverse_plan(m)
        plan["buckets"][-1].remove("0.bias.grad")
        with self.assertRaisesRegex(ValueError, r"parameter '0\.bias' is missing from the plan"):
            bt.enact(m, plan)

    def test_frozen_and_duplicated_are_refused(self):
        m = make_mlp()
        m[0].bias.requires_grad_(False)
        with self.assertRaisesRegex(ValueError, r"'0\.bias' does not require grad"):
            bt.enact(m, reverse_plan(make_mlp()))
        m = make_mlp()
        plan = reverse_plan(m)
        plan["buckets"].append(["4.bias.grad"])
        with self.assertRaisesRegex(ValueError, r"'4\.bias\.grad' is in buckets 0 and 3"):
            bt.enact(m, plan)

    def test_one_backward_per_step(self):
        m = make_mlp()
        handle = bt.enact(m, reverse_plan(m))
        # no process group: stop the first launch before it reaches all_reduce
        handle._pending[0] += 100
        m(torch.randn(2, 32)).sum().backward()
        with self.assertRaisesRegex(RuntimeError, "accumulated twice"):
            m(torch.randn(2, 32)).sum().backward()


class LoadPlanTest(unittest.TestCase):
    BUCKETS = [["4.weight.grad", "4.bias.grad"], ["2.weight.grad"]]

    def check(self, src, **meta):
        p = bt.load_plan(src)
        self.assertEqual(p.buckets, self.BUCKETS)
        for k, v in meta.items():
            self.assertEqual(getattr(p, k), v, k)

    def test_formats(self):
        v1 = {"format": "braid.plan.v1", "groups": [{"ops": ["/0/Gemm"], "duplicated": []}],
              "buckets": self.BUCKETS, "graph_fingerprint": "00112233aabbccdd"}
        self.check(v1, graph_fingerprint="00112233aabbccdd")
        self.check({"plan": v1, "iteration_ms": {"braid": 12.5}}, predicted_iteration_s=0.0125)
        resp = {"job_id": "j-1", "plan_json": json.dumps(v1), "plan_sha256": "ab" * 32,
                "plan": {"graph_fingerprint": "00112233aabbccdd", "predicted_iteration_s": 0.5,
                         "buckets": [{"gradients": b} for b in self.BUCKETS]}}
        self.check(resp, job_id="j-1", predicted_iteration_s=0.5, plan_sha256="ab" * 32)
        camel = {"jobId": "j-2", "planJson": json.dumps(v1),
                 "plan": {"predictedIterationS": 0.25}}
        self.check(camel, job_id="j-2", predicted_iteration_s=0.25)
        with tempfile.TemporaryDirectory() as tmp:
            path = os.path.join(tmp, "p.json")
            with open(path, "w") as f:
                json.dump(resp, f)
            self.check(path, job_id="j-1", source=path)
            with open(path, "w") as f:
                f.write("{")
            with self.assertRaisesRegex(ValueError, "not JSON"):
                bt.load_plan(path)
        with self.assertRaisesRegex(ValueError, "unsupported plan format"):
            bt.load_plan({"format": "braid.plan.v9", "buckets": []})
        with self.assertRaisesRegex(ValueError, "not a braid plan"):
            bt.load_plan({"groups": []})

    def test_message_and_stub_imports(self):
        """GetPlanResponse messages, with braid.v1 generated beside braid.torch,
        importing in both orders and with both PYTHONPATH orders."""
        with tempfile.TemporaryDirectory() as gen:
            r = subprocess.run(["bash", os.path.join(ROOT, "client/python/generate.sh"), gen],
                               stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
            if r.returncode != 0:
                self.skipTest(f"generate.sh failed: {r.stderr.strip()[-200:]}")
            src = os.path.join(ROOT, "client", "python")
            code = ("import importlib, sys\n"
                    "for m in sys.argv[1:]: importlib.import_module(m)\n"
                    "import braid.torch as bt, torch\n"
                    "from braid.v1 import strategy_pb2 as s, plan_pb2\n"
                    "assert bt.torch is torch and hasattr(torch, 'nn')\n"
                    "r = s.GetPlanResponse(job_id='j', plan=plan_pb2.Plan(buckets=["
                    "plan_pb2.Bucket(gradients=['a.grad', 'b.grad'])], predicted_iteration_s=2))\n"
                    "p = bt.load_plan(r)\n"
                    "assert p.buckets == [['a.grad', 'b.grad']] and p.job_id == 'j' "
                    "and p.predicted_iteration_s == 2, p\n")
            for path in (f"{src}:{gen}", f"{gen}:{src}"):
                for order in (["braid.torch", "braid.v1.strategy_pb2"],
                              ["braid.v1.strategy_pb2", "braid.torch"]):
                    r = subprocess.run([sys.executable, "-c", code] + order, cwd=gen,
                                       env=dict(os.environ, PYTHONPATH=path),
                                       stderr=subprocess.PIPE, text=True)
                    self.assertEqual(r.returncode, 0, f"PYTHONPATH={path} {order}: {r.stderr}")


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--braid", default=BRAID)
    args, rest = ap.parse_known_args()
    BRAID = args.braid
    unittest.main(argv=[sys.argv[0]] + rest)
