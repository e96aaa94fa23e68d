#!/usr/bin/env python3
"""Checks the shipped deployments (deploy/): every one serves gRPC over TLS,
and the worker's plan cache belongs to the user the worker runs as.

  python3 tests/deploy_manifests_test.py [DEPLOY_DIR]   # default: ../deploy

- Kubernetes (deploy/k8s/*.yaml): each braid-server container passes
  --tls-cert and --tls-key, each braid-worker container --tls-ca, all from
  files of a mounted Secret; a worker's --server names a host the certificate
  of deploy/make-tls.sh carries. A hostPath volume mounted by a container that
  does not run as root is given to that container's uid by an init container
  running as root (the kubelet creates hostPath directories root-owned and
  fsGroup does not apply to them); the uid of a container without runAsUser
  is the image's (deploy/Containerfile USER).
- systemd (deploy/systemd/*.service): ExecStart passes the same flags, files
  under %d loaded with LoadCredential=.
- deploy/Containerfile: the default braid-server command passes the flags.

Prints one line per problem and exits 1 when there is any; exits 77 (a skip
for ctest) when PyYAML is missing.
"""
import json
import os
import re
import shlex
import sys

try:
    import yaml
except ImportError:
    print("PyYAML missing (apt-get install python3-yaml): skipped")
    sys.exit(77)

# The names deploy/make-tls.sh puts in the server certificate by default.
CERT_NAMES = {"localhost", "127.0.0.1", "::1", "braid"}
CERT_NAME_RE = re.compile(r"^braid\.[a-z0-9-]+(\.svc(\.cluster\.local)?)?$")

problems = []


def problem(where, what):
    problems.append(f"{where}: {what}")


def flag_value(args, flag):
    """The value of `flag` in an argv list (--flag V or --flag=V); None when absent."""
    for i, a in enumerate(args):
        if a == flag and i + 1 < len(args):
            return str(args[i + 1])
        if isinstance(a, str) and a.startswith(flag + "="):
            return a[len(flag) + 1:]
    return None


def image_uid(deploy):
    """The uid the image runs as (the Containerfile's last USER), or None."""
    uid = None
    with open(os.path.join(deploy, "Containerfile")) as f:
        for line in f:
            m = re.match(r"^USER\s+(\S+)", line)
            if m:
                uid = m.group(1).split(":")[0]
    return int(uid) if uid is not None and uid.isdigit() else None


def pod_specs(doc):
    """(name, pod spec) of a Deployment/DaemonSet/StatefulSet/Job/Pod."""
    kind = doc.get("kind")
    name = f"{kind}/{doc.get('metadata', {}).get('name')}"
    if kind == "Pod":
        yield name, doc["spec"]
    elif kind in ("Deployment", "DaemonSet", "StatefulSet", "ReplicaSet", "Job"):
        yield name, doc["spec"]["template"]["spec"]
    elif kind == "CronJob":
        yield name, doc["spec"]["jobTemplate"]["spec"]["template"]["spec"]


def run_as(container, pod, default_uid):
    uid = (container.get("securityContext") or {}).get("runAsUser")
    if uid is None:
        uid = (pod.get("securityContext") or {}).get("runAsUser")
    return default_uid if uid is None else uid


def secret_file(where, container, volumes, path):
    """Complains unless `path` is a file of a Secret volume the container mounts."""
    for m in container.get("volumeMounts", []):
        mount = m["mountPath"].rstrip("/")
        if not path.startswith(mount + "/"):
            continue
        vol = volumes.get(m["name"], {})
        secret = vol.get("secret")
        if secret is None:
            problem(where, f"{path} is on volume {m['name']}, which is not a Secret")
            return
        rel = path[len(mount) + 1:]
        items = secret.get("items")
        if items is not None and rel not in {i.get("path") for i in items}:
            problem(where, f"{path}: Secret {secret.get('secretName')} mounts no {rel}")
        return
    problem(where, f"{path} is on no mounted volume")


def check_tls_container(where, container, volumes):
    command = [str(c) for c in container.get("command", [])]
    args = [str(a) for a in container.get("args", [])]
    argv = command + args
    if not command:
        return None
    binary = os.path.basename(command[0])
    if binary == "braid-server":
        for flag in ("--tls-cert", "--tls-key"):
            v = flag_value(argv, flag)
            if v is None:
                problem(where, f"braid-server without {flag}: gRPC in plaintext")
            else:
                secret_file(where, container, volumes, v)
    elif binary == "braid-worker":
        v = flag_value(argv, "--tls-ca")
        if v is None:
            problem(where, "braid-worker without --tls-ca: talks to the server in plaintext")
        else:
            secret_file(where, container, volumes, v)
        server = flag_value(argv, "--server")
        if server is not None:
            host = server.rsplit(":", 1)[0].strip("[]")
            if host not in CERT_NAMES and not CERT_NAME_RE.match(host):
                problem(where, f"--server {server}: the certificate of deploy/make-tls.sh does "
                               "not name this host")
    return binary


def check_cache_owner(where, pod, default_uid):
    volumes = {v["name"]: v for v in pod.get("volumes", [])}
    inits = pod.get("initContainers", [])
    for c in pod.get("containers", []):
        uid = run_as(c, pod, default_uid)
        for m in c.get("volumeMounts", []):
            if "hostPath" not in volumes.get(m["name"], {}):
                continue
            if uid == 0:
                continue
            if uid is None:
                problem(where, f"container {c['name']}: no uid known for hostPath {m['name']}")
                continue
            ok = False
            for init in inits:
                if run_as(init, pod, default_uid) != 0:
                    continue
                for im in init.get("volumeMounts", []):
                    if im["name"] != m["name"] or im.get("readOnly"):
                        continue
                    text = " ".join(str(x) for x in init.get("command", []) + init.get("args", []))
                    if re.search(r"\bchown\b", text) and re.search(rf"\b{uid}\b", text) and \
                            im["mountPath"].rstrip("/") in text:
                        ok = True
            if not ok:
                problem(where, f"container {c['name']} runs as uid {uid} but hostPath volume "
                               f"{m['name']} ({volumes[m['name']]['hostPath'].get('path')}) is "
                               "created root-owned and no root init container chowns it to "
                               f"{uid}")
            cache = flag_value([str(a) for a in c.get("command", []) + c.get("args", [])],
                               "--cache-dir")
            if cache is not None and cache.rstrip("/") != m["mountPath"].rstrip("/") and \
                    not cache.startswith(m["mountPath"].rstrip("/") + "/"):
                problem(where, f"--cache-dir {cache} is not on the hostPath mount "
                               f"{m['mountPath']}")


def check_k8s(deploy, default_uid):
    seen = set()
    k8s = os.path.join(deploy, "k8s")
    for name in sorted(os.listdir(k8s)):
        if not name.endswith((".yaml", ".yml")):
            continue
        with open(os.path.join(k8s, name)) as f:
            docs = [d for d in yaml.safe_load_all(f) if d]
        for doc in docs:
            for pod_name, pod in pod_specs(doc):
                volumes = {v["name"]: v for v in pod.get("volumes", [])}
                for c in pod.get("initContainers", []) + pod.get("containers", []):
                    b = check_tls_container(f"k8s/{name} {pod_name} {c['name']}", c, volumes)
                    seen.add(b)
                check_cache_owner(f"k8s/{name} {pod_name}", pod, default_uid)
    for b in ("braid-server", "braid-worker"):
        if b not in seen:
            problem("k8s", f"no {b} container found")


def unit_exec_start(text):
    """ExecStart= of a unit, continuation lines joined; LoadCredential names."""
    joined = re.sub(r"\\\n\s*", " ", text)
    exec_start = None
    creds = set()
    for line in joined.splitlines():
        line = line.strip()
        if line.startswith("ExecStart="):
            exec_start = line[len("ExecStart="):]
        m = re.match(r"^LoadCredential=([^:]+):(.+)$", line)
        if m:
            creds.add(m.group(1))
    return exec_start, creds


def check_systemd(deploy):
    seen = set()
    sd = os.path.join(deploy, "systemd")
    for name in sorted(os.listdir(sd)):
        if not name.endswith(".service"):
            continue
        with open(os.path.join(sd, name)) as f:
            exec_start, creds = unit_exec_start(f.read())
        where = f"systemd/{name}"
        if exec_start is None:
            problem(where, "no ExecStart")
            continue
        argv = shlex.split(exec_start)
        binary = os.path.basename(argv[0])
        seen.add(binary)
        flags = {"braid-server": ("--tls-cert", "--tls-key"), "braid-worker": ("--tls-ca",)}
        for flag in flags.get(binary, ()):
            v = flag_value(argv, flag)
            if v is None:
                problem(where, f"{binary} without {flag}: gRPC in plaintext")
            elif v.startswith("%d/") and v[3:] not in creds:
                problem(where, f"{flag} {v}: no LoadCredential={v[3:]}:...")
    for b in ("braid-server", "braid-worker"):
        if b not in seen:
            problem("systemd", f"no unit runs {b}")


def check_containerfile(deploy):
    with open(os.path.join(deploy, "Containerfile")) as f:
        text = re.sub(r"\\\n\s*", " ", f.read())
    cmd = None
    for line in text.splitlines():
        if line.startswith("CMD "):
            cmd = line[4:].strip()
    if cmd is None:
        problem("Containerfile", "no CMD")
        return
    argv = json.loads(cmd) if cmd.startswith("[") else shlex.split(cmd)
    if os.path.basename(argv[0]) == "braid-server":
        for flag in ("--tls-cert", "--tls-key"):
            if flag_value(argv, flag) is None:
                problem("Containerfile", f"CMD braid-server without {flag}: gRPC in plaintext")


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    deploy = sys.argv[1] if len(sys.argv) > 1 else os.path.join(here, "..", "deploy")
    default_uid = image_uid(deploy)
    check_k8s(deploy, default_uid)
    check_systemd(deploy)
    check_containerfile(deploy)
    for p in problems:
        print(p)
    if problems:
        print(f"{len(problems)} problem(s) in {deploy}")
        return 1
    print(f"{deploy}: every deployment serves TLS; hostPath volumes belong to their users")
    return 0


if __name__ == "__main__":
    sys.exit(main())
