#!/usr/bin/env python3
"""Turns a GPU-kit run's folder into its two result files.

  summarize.py KIT_DIR OUT_DIR             # writes OUT_DIR/summary.json, OUT_DIR/junit.xml
  summarize.py --validate KIT_DIR OUT_DIR  # checks summary.json against the schema below

Inputs (written by run.sh): machine.txt, libraries.tsv, steps.tsv (name, exit
code, milliseconds), logs/<step>.log, junit/<test binary>.xml (gtest's XML;
a binary killed by its timeout has none, and its log's [ RUN ] / [ OK ] /
[ FAILED ] / [ SKIPPED ] lines give the verdicts), profile.jsonl and
nccl-1rank.txt.

summary.json (schema "braid-gpu-kit/1"):
  machine: {date, host, cpu, glibc, gpu, gpus, kit_commit, check}
  libraries: {soname: path or null}
  steps: [{name, exit_code, seconds, verdict}]  verdict: passed|failed|skipped|timeout
  tests: [{binary, name, verdict, seconds, message}]  verdict: passed|failed|skipped
  counts: {passed, failed, skipped}
  failures: ["binary name: message"]
  profile: [{...one JSON line of braid-cuda-profile...}]
  nccl_1rank: the one-rank NCCL rank program's result lines
  runtime: [{"name", ...braid-cuda-rank's result (braid-cuda-rank-result/1)}]
"""
import json
import os
import re
import sys
import xml.etree.ElementTree as ET
from xml.sax.saxutils import escape, quoteattr

SCHEMA = "braid-gpu-kit/1"
STEP_VERDICTS = {"passed", "failed", "skipped", "timeout"}
TEST_VERDICTS = {"passed", "failed", "skipped"}


def read(path, default=""):
    try:
        with open(path, errors="replace") as f:
            return f.read()
    except OSError:
        return default


def step_verdict(rc):
    if rc == 0:
        return "passed"
    if rc == 77:
        return "skipped"
    if rc in (124, 137):
        return "timeout"
    return "failed"


def tests_from_xml(binary, path):
    tests = []
    root = ET.parse(path).getroot()
    for case in root.iter("testcase"):
        name = f"{case.get('classname')}.{case.get('name')}"
        failure = case.find("failure")
        skipped = case.find("skipped") is not None or case.get("result") == "skipped"
        if failure is not None:
            verdict, message = "failed", (failure.get("message") or "")[:2000]
        elif skipped:
            verdict = "skipped"
            s = case.find("skipped")
            message = (s.get("message") if s is not None else "") or ""
        else:
            verdict, message = "passed", ""
        tests.append({"binary": binary, "name": name, "verdict": verdict,
                      "seconds": float(case.get("time") or 0), "message": message[:2000]})
    return tests


def tests_from_log(binary, log, killed):
    """Verdicts from gtest's console output, for a binary without its XML."""
    tests, running = [], None
    for line in log.splitlines():
        m = re.match(r"^\[ +(RUN|OK|FAILED|SKIPPED) +\] (\S+)( \((\d+) ms\))?", line)
        if not m:
            continue
        tag, name = m.group(1), m.group(2)
        if tag == "RUN":
            running = name
            continue
        if name != running:
            continue
        verdict = {"OK": "passed", "FAILED": "failed", "SKIPPED": "skipped"}[tag]
        tests.append({"binary": binary, "name": name, "verdict": verdict,
                      "seconds": int(m.group(4) or 0) / 1000.0, "message": ""})
        running = None
    if running is not None:
        tests.append({"binary": binary, "name": running, "verdict": "failed", "seconds": 0.0,
                      "message": "did not finish: " + ("killed by the step's timeout" if killed
                                                       else "the binary exited")})
    return tests


def summarize(kit, out):
    machine = {}
    for line in read(os.path.join(out, "machine.txt")).splitlines():
        if "=" in line:
            k, v = line.split("=", 1)
            machine[k] = v
    libraries = {}
    for line in read(os.path.join(out, "libraries.tsv")).splitlines():
        parts = line.split("\t")
        if len(parts) == 2:
            libraries[parts[0]] = None if parts[1] == "-" else parts[1]
    steps = []
    for line in read(os.path.join(out, "steps.tsv")).splitlines():
        parts = line.split("\t")
        if len(parts) != 3:
            continue
        rc = int(parts[1])
        steps.append({"name": parts[0], "exit_code": rc, "seconds": int(parts[2]) / 1000.0,
                      "verdict": step_verdict(rc)})
    tests = []
    for st in steps:
        if not st["name"].startswith("test-"):
            continue
        binary = st["name"][len("test-"):]
        xml_path = os.path.join(out, "junit", binary + ".xml")
        got = []
        if os.path.exists(xml_path):
            try:
                got = tests_from_xml(binary, xml_path)
            except ET.ParseError:
                got = []
        if not got:
            got = tests_from_log(binary, read(os.path.join(out, "logs", st["name"] + ".log")),
                                 st["verdict"] == "timeout")
        if not got and st["verdict"] != "passed":
            got = [{"binary": binary, "name": "(binary)", "verdict": "failed", "seconds": st["seconds"],
                    "message": f"exit code {st['exit_code']}: "
                               + read(os.path.join(out, "logs", st["name"] + ".log"))[-1500:]}]
        tests += got
    counts = {v: sum(1 for t in tests if t["verdict"] == v) for v in ("passed", "failed", "skipped")}
    failures = [f"{t['binary']} {t['name']}: {t['message']}" for t in tests if t["verdict"] == "failed"]
    runtime = []
    for name in sorted(os.listdir(out)):
        if name.startswith("runtime-") and name.endswith(".json"):
            try:
                r = json.loads(read(os.path.join(out, name)))
            except ValueError:
                continue
            r["name"] = name[len("runtime-"):-len(".json")]
            runtime.append(r)
    for st in steps:
        if not st["name"].startswith("test-") and st["verdict"] in ("failed", "timeout"):
            log = read(os.path.join(out, "logs", st["name"] + ".log"))
            failures.append(f"{st['name']}: exit code {st['exit_code']}: {log[-1500:]}")
    profile = []
    for line in read(os.path.join(out, "profile.jsonl")).splitlines():
        try:
            profile.append(json.loads(line))
        except ValueError:
            pass
    summary = {"schema": SCHEMA, "machine": machine, "libraries": libraries, "steps": steps,
               "tests": tests, "counts": counts, "failures": failures, "profile": profile,
               "nccl_1rank": read(os.path.join(out, "nccl-1rank.txt")).splitlines(),
               "runtime": runtime}
    tmp = os.path.join(out, "summary.json.tmp")
    with open(tmp, "w") as f:
        json.dump(summary, f, indent=1)
    os.replace(tmp, os.path.join(out, "summary.json"))
    write_junit(out, steps, tests)
    return summary


def write_junit(out, steps, tests):
    by_binary = {}
    for t in tests:
        by_binary.setdefault(t["binary"], []).append(t)
    lines = ['<?xml version="1.0" encoding="UTF-8"?>', "<testsuites>"]
    for binary, ts in by_binary.items():
        fails = sum(t["verdict"] == "failed" for t in ts)
        skips = sum(t["verdict"] == "skipped" for t in ts)
        lines.append(f'  <testsuite name={quoteattr(binary)} tests="{len(ts)}" failures="{fails}" '
                     f'skipped="{skips}">')
        for t in ts:
            lines.append(f'    <testcase classname={quoteattr(binary)} name={quoteattr(t["name"])} '
                         f'time="{t["seconds"]:.3f}">')
            if t["verdict"] == "failed":
                lines.append(f'      <failure message={quoteattr(t["message"][:500])}>'
                             f'{escape(t["message"])}</failure>')
            elif t["verdict"] == "skipped":
                lines.append(f'      <skipped message={quoteattr(t["message"][:500])}/>')
            lines.append("    </testcase>")
        lines.append("  </testsuite>")
    other = [s for s in steps if not s["name"].startswith("test-")]
    fails = sum(s["verdict"] in ("failed", "timeout") for s in other)
    lines.append(f'  <testsuite name="steps" tests="{len(other)}" failures="{fails}" skipped="0">')
    for s in other:
        lines.append(f'    <testcase classname="steps" name={quoteattr(s["name"])} '
                     f'time="{s["seconds"]:.3f}">')
        if s["verdict"] in ("failed", "timeout"):
            lines.append(f'      <failure message="{s["verdict"]}, exit code {s["exit_code"]}"/>')
        lines.append("    </testcase>")
    lines.append("  </testsuite>")
    lines.append("</testsuites>")
    tmp = os.path.join(out, "junit.xml.tmp")
    with open(tmp, "w") as f:
        f.write("\n".join(lines) + "\n")
    os.replace(tmp, os.path.join(out, "junit.xml"))


def validate(kit, out):
    errors = []

    def need(cond, what):
        if not cond:
            errors.append(what)

    try:
        s = json.load(open(os.path.join(out, "summary.json")))
    except (OSError, ValueError) as e:
        print(f"summary.json: {e}")
        return 1
    need(s.get("schema") == SCHEMA, "schema")
    need(isinstance(s.get("machine"), dict) and "date" in s["machine"], "machine.date")
    need(isinstance(s.get("libraries"), dict), "libraries")
    for so, path in (s.get("libraries") or {}).items():
        need(path is None or isinstance(path, str), f"libraries[{so}]")
    for st in s.get("steps", []):
        need(isinstance(st.get("name"), str) and isinstance(st.get("exit_code"), int)
             and isinstance(st.get("seconds"), (int, float)) and st.get("verdict") in STEP_VERDICTS,
             f"step {st}")
    for t in s.get("tests", []):
        need(isinstance(t.get("binary"), str) and isinstance(t.get("name"), str)
             and t.get("verdict") in TEST_VERDICTS and isinstance(t.get("seconds"), (int, float))
             and isinstance(t.get("message"), str), f"test {t}")
    counts = s.get("counts", {})
    for v in ("passed", "failed", "skipped"):
        need(counts.get(v) == sum(1 for t in s.get("tests", []) if t["verdict"] == v), f"counts.{v}")
    need(isinstance(s.get("failures"), list), "failures")
    need(isinstance(s.get("profile"), list), "profile")
    need(isinstance(s.get("nccl_1rank"), list), "nccl_1rank")
    need(isinstance(s.get("runtime"), list), "runtime")
    binaries = {t["binary"] for t in s.get("tests", [])}
    for b in read(os.path.join(kit, "tests.txt")).split():
        need(b in binaries, f"no result for test binary {b}")
    try:
        ET.parse(os.path.join(out, "junit.xml"))
    except (OSError, ET.ParseError) as e:
        errors.append(f"junit.xml: {e}")
    for e in errors:
        print(f"summary.json does not follow {SCHEMA}: {e}")
    return 1 if errors else 0


def main():
    args = sys.argv[1:]
    if args and args[0] == "--validate":
        sys.exit(validate(args[1], args[2]))
    summarize(args[0], args[1])


if __name__ == "__main__":
    main()
