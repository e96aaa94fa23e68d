"""A braid plan enacted inside a PyTorch training script.

braid plans gradient AllReduce buckets for the training graph it imported from
ONNX. This module reads such a plan and runs its buckets in a PyTorch script:
one flattened ``torch.distributed.all_reduce`` per bucket, launched while
backward is still running, strictly in the plan's issue order, on whatever
process group the script uses (Gloo on CPU, NCCL with CUDA tensors: the same
code; only the Gloo path is tested here).

    import torch.distributed as dist
    import braid.torch

    dist.init_process_group("gloo")
    model = make_model()                       # same init on every rank
    handle = braid.torch.enact(model, os.environ["BRAID_PLAN"])
    opt = handle.wrap_optimizer(torch.optim.SGD(model.parameters(), lr=0.1))
    for x, y in data:
        opt.zero_grad()
        loss_fn(model(x), y).backward()        # buckets launch during backward
        opt.step()                             # handle.synchronize(), then step

Gradient names in a plan are "<name>.grad" where <name> is the ONNX
initializer/input name; ``torch.onnx.export`` of an nn.Module names them after
``named_parameters()`` ("14.weight.grad" is the gradient of parameter
"14.weight"). Weights the exporter constant-folded (a Linear weight feeding a
MatMul becomes its transpose "onnx::MatMul_568") get their parameter names from
``onnx_name_map(model, example_args, **export_kwargs)``.

One backward per step: gradient accumulation over several backward passes
between two ``synchronize()`` calls is refused. Only this module's own
functions import the gRPC stubs (``report``), so it works without grpc.
"""
import copy
import hashlib
import io
import json
import os
from dataclasses import dataclass, field

import torch  # absolute import: the real PyTorch, not this module
import torch.distributed as dist

__all__ = ["Plan", "load_plan", "enact", "EnactHandle", "DistributedOptimizer",
           "onnx_name_map", "report"]

PLAN_FORMAT = "braid.plan.v1"


@dataclass
class Plan:
    """A plan's buckets (gradient names, in issue order) and what is known about it."""
    buckets: list
    predicted_iteration_s: float = 0.0
    job_id: str = ""
    graph_fingerprint: str = ""
    plan_sha256: str = ""
    rolled_back: bool = False
    source: str = ""                   # the file or object it was read from
    extra: dict = field(default_factory=dict)


# ---------------------------------------------------------------- load_plan

def _get(d, name, default=None):
    """A field of a protobuf JSON mapping: proto names or lowerCamelCase."""
    if name in d:
        return d[name]
    parts = name.split("_")
    camel = parts[0] + "".join(p[:1].upper() + p[1:] for p in parts[1:])
    return d.get(camel, default)


def _check_buckets(buckets, where):
    if not isinstance(buckets, list):
        raise ValueError(f"{where}: 'buckets' is not a list")
    seen = {}
    out = []
    for i, b in enumerate(buckets):
        if not isinstance(b, list) or not b:
            raise ValueError(f"{where}: bucket {i} is not a non-empty list of gradient names")
        for g in b:
            if not isinstance(g, str):
                raise ValueError(f"{where}: bucket {i} holds a non-string {g!r}")
            if g in seen:
                raise ValueError(f"{where}: gradient '{g}' is in buckets {seen[g]} and {i}")
            seen[g] = i
        out.append(list(b))
    return out


def _from_plan_v1(d, where):
    fmt = d.get("format", PLAN_FORMAT)
    if fmt != PLAN_FORMAT:
        raise ValueError(f"{where}: unsupported plan format {fmt!r} (want {PLAN_FORMAT!r})")
    return Plan(buckets=_check_buckets(d.get("buckets"), where),
                predicted_iteration_s=float(d.get("predicted_iteration_s", 0.0) or 0.0),
                graph_fingerprint=str(d.get("graph_fingerprint", "") or ""), source=where)


def _is_plan_v1(d):
    b = d.get("buckets")
    return isinstance(b, list) and (d.get("format") == PLAN_FORMAT or
                                    all(isinstance(x, list) for x in b))


def _from_dict(d, where):
    if not isinstance(d, dict):
        raise ValueError(f"{where}: a plan is a JSON object, not {type(d).__name__}")
    if _is_plan_v1(d):                                   # braid plan -o
        return _from_plan_v1(d, where)
    inner = d.get("plan")
    if isinstance(inner, dict) and _is_plan_v1(inner):   # braid plan --json
        p = _from_plan_v1(inner, where)
        ms = d.get("iteration_ms")
        if not p.predicted_iteration_s and isinstance(ms, dict) and "braid" in ms:
            p.predicted_iteration_s = float(ms["braid"]) / 1e3
        return p
    plan_json = _get(d, "plan_json")
    if isinstance(inner, dict) or plan_json:             # GetPlanResponse (JSON mapping)
        inner = inner or {}
        buckets = [list(_get(b, "gradients", [])) for b in inner.get("buckets", [])]
        if buckets:
            buckets = _check_buckets(buckets, where)
        elif plan_json:
            buckets = _from_plan_v1(json.loads(plan_json), where + " plan_json").buckets
        else:
            raise ValueError(f"{where}: the GetPlanResponse holds no buckets")
        return Plan(buckets=buckets,
                    predicted_iteration_s=float(_get(inner, "predicted_iteration_s", 0.0) or 0.0),
                    job_id=str(_get(d, "job_id", "") or ""),
                    graph_fingerprint=str(_get(inner, "graph_fingerprint", "") or ""),
                    plan_sha256=str(_get(d, "plan_sha256", "") or ""),
                    rolled_back=bool(_get(d, "rolled_back", False)), source=where,
                    extra={k: _get(d, k) for k in ("origin", "rollback_reason",
                                                   "calibrated_iteration_s")
                           if _get(d, k) is not None})
    raise ValueError(f"{where}: not a braid plan (no 'buckets', 'plan' or 'plan_json')")


def load_plan(src):
    """Reads a plan: a path to any JSON braid writes (`braid plan -o`, `braid plan
    --json`, `braid-worker plan get -o`, the launcher's GetPlanResponse), a dict
    of one of those, a GetPlanResponse message or a Plan. ValueError if it is none."""
    if isinstance(src, Plan):
        return src
    if hasattr(src, "DESCRIPTOR") and hasattr(src, "plan_json"):
        from google.protobuf import json_format
        return _from_dict(json_format.MessageToDict(src, preserving_proto_field_name=True),
                          "GetPlanResponse")
    if isinstance(src, dict):
        return _from_dict(src, "plan")
    if isinstance(src, (str, bytes, os.PathLike)):
        where = os.fsdecode(src)
        with open(src, "r", encoding="utf-8") as f:
            try:
                d = json.load(f)
            except json.JSONDecodeError as e:
                raise ValueError(f"{where}: not JSON: {e}") from None
        return _from_dict(d, where)
    raise TypeError(f"load_plan: cannot read a plan from {type(src).__name__}")


# ---------------------------------------------------------------- enact

def _param_name(grad_name, name_map):
    if not grad_name.endswith(".grad"):
        raise ValueError(f"plan gradient '{grad_name}' does not end in '.grad'")
    name = grad_name[:-len(".grad")]
    if name_map is None:
        return name
    return name_map(name) if callable(name_map) else name_map.get(name, name)


def _resolve(model, plan, name_map):
    """Plan buckets as lists of (name, parameter); ValueError on any mismatch."""
    every = dict(model.named_parameters())
    trainable = {n: p for n, p in every.items() if p.requires_grad}
    owner = {}
    buckets = []
    for i, b in enumerate(plan.buckets):
        resolved = []
        for g in b:
            n = _param_name(g, name_map)
            if n not in trainable:
                why = ("does not require grad" if n in every else "is missing from the model")
                raise ValueError(f"plan gradient '{g}': parameter '{n}' {why} "
                                 f"({plan.source or 'plan'}, bucket {i})")
            if n in owner:
                raise ValueError(f"parameter '{n}' is in buckets {owner[n]} and {i} of the plan")
            owner[n] = i
            resolved.append((n, trainable[n]))
        kinds = {(p.dtype, p.device) for _, p in resolved}
        if len(kinds) > 1:
            raise ValueError(f"bucket {i} mixes dtypes/devices {sorted(map(str, kinds))}")
        buckets.append(resolved)
    for n in trainable:
        if n not in owner:
            raise ValueError(f"parameter '{n}' is missing from the plan (no gradient "
                             f"'{n}.grad' in any bucket of {plan.source or 'the plan'})")
    return buckets


class EnactHandle:
    """The plan's buckets bound to a model's parameters through gradient hooks.

    A bucket is flattened and its all_reduce launched (async) as soon as its
    last gradient is accumulated and every earlier bucket has been launched.
    Call synchronize() after backward and before optimizer.step() (or use
    wrap_optimizer). last_order and last_in_backward tell, for the last step,
    which buckets were launched in which order and how many during backward.
    """

    def __init__(self, buckets, process_group, average):
        self.buckets = buckets
        self.process_group = process_group
        self.average = average
        self.steps = 0
        self.last_order = []
        self.last_in_backward = 0
        self._index = {}
        for i, b in enumerate(buckets):
            for _, p in b:
                self._index[id(p)] = i
        self._buffers = [None] * len(buckets)
        self._accumulators = []   # keeps AccumulateGrad nodes (and their hooks) alive
        self._hooks = []
        self._reset()
        for b in buckets:
            for n, p in b:
                acc = p.expand_as(p).grad_fn.next_functions[0][0]
                self._hooks.append(acc.register_hook(self._make_hook(n, p)))
                self._accumulators.append(acc)

    def _reset(self):
        self._pending = [len(b) for b in self.buckets]
        self._ready = set()
        self._next = 0
        self._works = [None] * len(self.buckets)
        self._order = []
        self._in_synchronize = False

    def _make_hook(self, name, p):
        def hook(*_):
            self._on_grad(name, p)
        return hook

    def _on_grad(self, name, p):
        if id(p) in self._ready:
            raise RuntimeError(f"braid.torch: the gradient of '{name}' was accumulated twice "
                               "before synchronize(); one backward per step is supported")
        self._ready.add(id(p))
        i = self._index[id(p)]
        self._pending[i] -= 1
        if self._pending[i] == 0:
            while self._next < len(self.buckets) and self._pending[self._next] == 0:
                self._launch(self._next)

    def _launch(self, i):
        params = [p for _, p in self.buckets[i]]
        if self._buffers[i] is None:
            self._buffers[i] = torch.empty(sum(p.numel() for p in params),
                                           dtype=params[0].dtype, device=params[0].device)
        grads = []
        for p in params:
            g = p.grad
            if g is None:        # unused in this step: zeros keep the ranks' collectives equal
                g = torch.zeros_like(p)
            elif g.is_sparse:
                raise RuntimeError("braid.torch: sparse gradients are not supported")
            grads.append(g.reshape(-1))
        torch.cat(grads, out=self._buffers[i])
        self._works[i] = dist.all_reduce(self._buffers[i], group=self.process_group,
                                         async_op=True)
        self._order.append(i)
        self._next = i + 1

    def synchronize(self):
        """Launches the buckets not launched yet (parameters unused in this step),
        waits for all, averages over the world when `average`, and writes the
        result back into every parameter's .grad."""
        in_backward = len(self._order)
        while self._next < len(self.buckets):
            self._launch(self._next)
        world = dist.get_world_size(self.process_group) if self.average else 1
        for i, work in enumerate(self._works):
            work.wait()
            buf = self._buffers[i]
            if world > 1:
                buf.div_(world)
            off = 0
            for _, p in self.buckets[i]:
                g = buf[off:off + p.numel()].view_as(p)
                off += p.numel()
                if p.grad is None:
                    p.grad = g.clone()
                else:
                    p.grad.copy_(g)
        self.last_order = self._order
        self.last_in_backward = in_backward
        self.steps += 1
        self._reset()

    def wrap_optimizer(self, optimizer):
        """Makes optimizer.step() call synchronize() first; returns the optimizer
        (the same object, its class swapped for a subclass, so LR schedulers and
        isinstance checks keep working)."""
        handle = self
        base = type(optimizer)
        if getattr(base, "_braid_synchronizing", False):
            raise ValueError("optimizer is already wrapped")

        def step(self, *args, **kwargs):
            handle.synchronize()
            return base.step(self, *args, **kwargs)

        optimizer.__class__ = type(base.__name__, (base,),
                                   {"step": step, "_braid_synchronizing": True})
        return optimizer

    def remove(self):
        """Removes the gradient hooks: the model trains without the plan again."""
        for h in self._hooks:
            h.remove()
        self._hooks, self._accumulators = [], []


def enact(model, plan, process_group=None, average=True, name_map=None):
    """Binds `plan` (anything load_plan reads) to `model`'s parameters and returns
    an EnactHandle. Every planned gradient must be a trainable parameter's and
    every trainable parameter must be in exactly one bucket (ValueError naming the
    first that is not). `name_map` maps ONNX names to parameter names (a dict or
    a callable; see onnx_name_map). torch.distributed must be initialized before
    the first backward."""
    plan = load_plan(plan)
    return EnactHandle(_resolve(model, plan, name_map), process_group, average)


def DistributedOptimizer(optimizer, handle):
    """Horovod-style spelling of handle.wrap_optimizer(optimizer)."""
    return handle.wrap_optimizer(optimizer)


# ---------------------------------------------------------------- ONNX names

def _varint(b, i):
    r = s = 0
    while True:
        c = b[i]
        i += 1
        r |= (c & 0x7F) << s
        s += 7
        if c < 0x80:
            return r, i


def _fields(b):
    """(field number, wire type, value) of a serialized protobuf message."""
    i, n = 0, len(b)
    while i < n:
        key, i = _varint(b, i)
        num, wt = key >> 3, key & 7
        if wt == 0:
            v, i = _varint(b, i)
        elif wt == 1:
            v, i = b[i:i + 8], i + 8
        elif wt == 2:
            ln, i = _varint(b, i)
            v, i = b[i:i + ln], i + ln
        elif wt == 5:
            v, i = b[i:i + 4], i + 4
        else:
            raise ValueError(f"unsupported protobuf wire type {wt}")
        yield num, wt, v


def _onnx_initializers(model_bytes):
    """{name: (dims, sha256 of raw_data)} of an ONNX ModelProto's initializers
    (ModelProto.graph = 7, GraphProto.initializer = 5, TensorProto dims = 1,
    name = 8, raw_data = 9): enough of ONNX to need no onnx package."""
    out = {}
    for num, _, graph in _fields(memoryview(model_bytes)):
        if num != 7:
            continue
        for gnum, _, t in _fields(graph):
            if gnum != 5:
                continue
            dims, name, raw = [], "", None
            for tnum, twt, v in _fields(t):
                if tnum == 1 and twt == 0:
                    dims.append(v)
                elif tnum == 1 and twt == 2:
                    j = 0
                    while j < len(v):
                        d, j = _varint(v, j)
                        dims.append(d)
                elif tnum == 8:
                    name = bytes(v).decode()
                elif tnum == 9:
                    raw = hashlib.sha256(v).digest()
            out[name] = (tuple(dims), raw)
    return out


def _digest(t):
    t = t.detach().cpu().contiguous()
    return tuple(t.shape), hashlib.sha256(t.numpy().tobytes()).digest()


def onnx_name_map(model, args, **export_kwargs):
    """{ONNX name: parameter name} for the weights torch.onnx.export renames.

    Exports a copy of `model` with distinct random weights, in memory, with
    export_params=True and the caller's other export arguments (use those the plan's ONNX file was exported with: the
    exporter numbers folded constants such as "onnx::MatMul_568" by graph
    position), then matches each initializer that is not named after a
    parameter to the parameter it equals, as is or transposed."""
    # A copy whose parameters all differ: equal weights (nn.TransformerEncoder
    # deep-copies its layer) would be ambiguous and merged by the exporter.
    model = copy.deepcopy(model)
    gen = torch.Generator().manual_seed(0x6272616964)
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(torch.randn(p.shape, generator=gen).to(p.dtype))
    f = io.BytesIO()
    torch.onnx.export(model, args, f, **dict(export_kwargs, export_params=True))
    inits = _onnx_initializers(f.getvalue())
    params = dict(model.named_parameters())
    index = {}
    for n, p in params.items():
        index.setdefault(_digest(p), n)
        if p.dim() == 2:
            index.setdefault(_digest(p.t()), n)
    return {name: index[key] for name, key in inits.items()
            if name not in params and key in index}


# ---------------------------------------------------------------- report

def _channel(server, tls_ca):
    import grpc
    if tls_ca:
        with open(tls_ca, "rb") as f:
            return grpc.secure_channel(server, grpc.ssl_channel_credentials(f.read()))
    return grpc.insecure_channel(server)


def start_run(server, token, job_id, world_size, report_credential=None, source="braid.torch",
              tls_ca=None, timeout=30.0):
    """Begins one run of the job's plan on its ranks (Strategy.StartRun) and
    returns the attempt id every rank of the run reports under (call it once,
    on one rank or in the launcher, and hand the id to the others).
    report_credential: the job's (SubmitGraphResponse.report_credential);
    default $BRAID_REPORT_CREDENTIAL."""
    from braid.v1 import strategy_pb2, strategy_pb2_grpc
    cred = report_credential or os.environ.get("BRAID_REPORT_CREDENTIAL", "")
    if not cred:
        raise ValueError("start_run: no report credential (BRAID_REPORT_CREDENTIAL)")
    with _channel(server, tls_ca) as channel:
        r = strategy_pb2_grpc.StrategyStub(channel).StartRun(
            strategy_pb2.StartRunRequest(job_id=job_id.encode(), report_credential=cred.encode(),
                                         world_size=world_size, source=source.encode()),
            metadata=[("authorization", "Bearer " + token)], timeout=timeout)
    return r.attempt_id


def report(server, token, job_id, rank, world_size, plan_iteration_s, baseline_iteration_s=(),
           source="braid.torch", plan_sha256="", tls_ca=None, timeout=30.0,
           report_credential=None, attempt_id=None):
    """Sends this rank's measured iteration times to braid-server
    (Strategy.ReportMeasurement) and returns its ReportMeasurementResponse.
    baseline_iteration_s, when given, are the DDP-bucket baseline's times
    interleaved with the plan's (pairs by index). The server accepts only the
    job's own ranks: report_credential (default $BRAID_REPORT_CREDENTIAL) and
    attempt_id, the run's (start_run; default $BRAID_ATTEMPT_ID). Needs grpc
    and the stubs of client/python/generate.sh on the path; raises
    grpc.RpcError on failure and ValueError without a credential or run."""
    from braid.v1 import strategy_pb2, strategy_pb2_grpc
    cred = report_credential or os.environ.get("BRAID_REPORT_CREDENTIAL", "")
    attempt = attempt_id or os.environ.get("BRAID_ATTEMPT_ID", "")
    if not cred or not attempt:
        raise ValueError("report: needs the job's report credential and the run's attempt id "
                         "(BRAID_REPORT_CREDENTIAL, BRAID_ATTEMPT_ID: braid_launcher.py sets them)")
    with _channel(server, tls_ca) as channel:
        req = strategy_pb2.ReportMeasurementRequest(
            job_id=job_id.encode(), rank=rank, world_size=world_size,
            plan_sha256=plan_sha256.encode(), plan_iteration_s=list(plan_iteration_s),
            baseline_iteration_s=list(baseline_iteration_s), source=source.encode(),
            report_credential=cred.encode(), attempt_id=attempt.encode())
        return strategy_pb2_grpc.StrategyStub(channel).ReportMeasurement(
            req, metadata=[("authorization", "Bearer " + token)], timeout=timeout)
