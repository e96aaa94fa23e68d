#!/usr/bin/python3
"""Checks BENCHMARKS.md: every command it names still parses, every figure
carries a date and a machine, and every file it names exists.

BENCHMARKS.md marks what this script reads (its top section says so too):

  - every section that holds a figure (a table, a ```sh block or a ```text
    block) has, itself or in a parent section, a line "Date: ..." holding a
    YYYY-MM-DD date and a line "Machine: ..." naming the machine;
  - ```sh blocks hold commands, exactly as run, one per line (a trailing
    backslash continues a line; "# ..." comments; "A && B", "A; B",
    "A | B"; VAR=value prefixes; "for X in a b c; do ...; done", on one line
    or over several, is expanded);
  - ```text blocks hold raw output and are not read.

Each command is checked without running anything:
  - braid's programs (build/bin/*) parse them in parse-only mode
    (base/command_line.h), every command line of one program in one process
    (BRAID_PARSE_ONLY=@FILE), which reports each as accepted or refused and
    why; the commands `braid` hands to braid-torch go to braid-torch;
  - GoogleTest binaries (build/tests/*) run with --gtest_list_tests and
    their --gtest_filter, which must select at least one test;
  - shell scripts of the repository must exist, be executable and pass
    `bash -n`; Python scripts must exist and compile, and with
    BRAID_PARSE_ONLY=1 accept their arguments (they exit after argparse);
  - a few external tools (wrk, sqlite3, taskset's and time's wrapped
    command, ...) are skipped with their reason; any other program fails.
Files a command or the text names under the repository's top-level
directories (`tests/data/x.onnx`, `worker/op_clock.h`) must exist.

  benchmarks_commands_test.py --source-dir SRC --build-dir BUILD [--doc FILE] [--built A,B,...]
  benchmarks_commands_test.py --source-dir SRC --build-dir BUILD --self-test

--self-test first checks a small document with one good command, one bad
flag, one section without a date, one without a machine and one missing
script, and fails unless exactly the four bad ones are reported. ctest runs
both (tests/CMakeLists.txt). Exit code 0: all good; 1: problems, listed.
"""

import argparse
import concurrent.futures
import os
import re
import shlex
import subprocess
import sys
import tempfile

DATE_RE = re.compile(r"\b20\d\d-[01]\d-[0-3]\d\b")
DATE_LINE_RE = re.compile(r"^(?:\*\*)?Date:(?:\*\*)?\s*(.*)$")
MACHINE_LINE_RE = re.compile(r"^(?:\*\*)?Machine:(?:\*\*)?\s*(\S.*)$")
HEADING_RE = re.compile(r"^(#{1,6})\s+(.*)$")
FENCE_RE = re.compile(r"^```(\S*)\s*$")
# <!-- braid bench fusion: begin --> ... <!-- braid bench fusion: end -->:
# a benchmark's own output, which `--write` rewrites in place.
MARKER_RE = re.compile(r"^<!--\s*(.+?):\s*(begin|end)\s*-->$")

# Top-level directories of the repository: a path under one of them, named
# by a command or in backquotes, must exist.
REPO_DIRS = ("base", "client", "cmake", "costmodel", "deploy", "graph", "kernels", "proto",
             "search", "server", "tests", "worker")
# Options whose value is a file the command writes: not checked for existence.
OUTPUT_OPTIONS = {"-o", "--out", "--write", "--write-plan", "--write-model", "--trace", "--dump",
                  "--credential-out", "--python-out", "--plan-out"}
# Programs that are not braid's and are not checked, with the reason.
EXTERNAL = {
    "wrk": "HTTP load generator (not installed by deploy/setup.sh); its target is the "
           "braid-server command beside it",
    "sqlite3": "SQLite shell",
    "ctest": "CMake's test driver: the tests it runs are registered in tests/CMakeLists.txt",
    "cmake": "build tool",
    "ldd": "system tool",
    "grep": "system tool",
    "cd": "shell built-in",
    "mkdir": "system tool",
    "export": "shell built-in",
    "uptime": "system tool",
    "lscpu": "system tool",
    "seq": "system tool",
    "sort": "system tool",
    "head": "system tool",
    "tail": "system tool",
    "awk": "system tool",
    "jq": "JSON tool",
}
# Scripts a command names by the path they have where they run, and the
# repository file they are copied from.
SCRIPT_SOURCES = {"gpu-kit/run.sh": "deploy/gpu-kit/run.sh"}  # the GPU kit's copy (deploy/GPU.md)
# `braid` commands that braid-torch parses (`braid` hands them over).
TORCH_COMMANDS = {"profile", "run", "gnn"}
# Wrappers whose command is checked instead: name -> number of arguments
# they take before the command (None: options up to the first non-option).
WRAPPERS = {"taskset": 2, "nice": None, "/usr/bin/time": None, "time": None, "env": None,
            "timeout": 1}


class Section:
    def __init__(self, level, title, line, parent):
        self.level = level
        self.title = title
        self.line = line
        self.parent = parent
        self.dates = []      # Date: lines
        self.machines = []   # Machine: lines
        self.figures = []    # (line, kind) of tables and code blocks

    def inherited(self, attr):
        """This section's `attr` lines, else the nearest enclosing one's."""
        s = self
        while s is not None:
            if getattr(s, attr):
                return getattr(s, attr)
            s = s.parent
        return None

    def date(self):
        return self.inherited("dates")

    def machine(self):
        return self.inherited("machines")


def parse_document(text):
    """Sections (with their Date/Machine lines and figures), the ```sh
    blocks as (first line number, lines), and the prose lines outside code
    blocks as (line number, text)."""
    root = Section(0, "(top)", 1, None)
    sections = [root]
    stack = [root]
    sh_blocks = []
    prose = []
    fence = None  # (tag, start line, lines)
    in_table = False
    marker = None  # the section holding an open <!-- ...: begin --> marker
    for n, line in enumerate(text.split("\n"), start=1):
        if fence is not None:
            if line.strip() == "```":
                tag, start, lines = fence
                if tag == "sh":
                    sh_blocks.append((start, lines, stack[-1]))
                fence = None
            else:
                fence[2].append(line)
            continue
        m = FENCE_RE.match(line)
        if m:
            fence = (m.group(1), n, [])
            stack[-1].figures.append((n, "```" + (m.group(1) or "")))
            in_table = False
            continue
        mk = MARKER_RE.match(line.strip())
        if mk:
            if mk.group(2) == "begin":
                marker = stack[-1]
            elif marker is not None:
                while stack[-1] is not marker:
                    stack.pop()
                marker = None
            continue
        h = HEADING_RE.match(line)
        if h:
            level = len(h.group(1))
            # Headings that a benchmark wrote between its markers belong to
            # the section the markers are in, whatever their level.
            while stack[-1].level >= level and stack[-1] is not marker:
                stack.pop()
            s = Section(level, h.group(2).strip(), n, stack[-1])
            sections.append(s)
            stack.append(s)
            in_table = False
            continue
        d = DATE_LINE_RE.match(line)
        if d:
            stack[-1].dates.append((n, d.group(1)))
        mm = MACHINE_LINE_RE.match(line)
        if mm:
            stack[-1].machines.append((n, mm.group(1)))
        if line.startswith("|"):
            if not in_table:
                stack[-1].figures.append((n, "table"))
            in_table = True
        else:
            in_table = False
        prose.append((n, line))
    if fence is not None:
        raise SystemExit(f"line {fence[1]}: code block never closed")
    return sections, sh_blocks, prose


def check_dates_and_machines(sections):
    problems = []
    for s in sections:
        if s.level < 2 or not s.figures:
            continue  # the introduction above the first section explains; it holds no figure
        first = s.figures[0][0]
        dates = s.date()
        if not dates:
            problems.append(f"line {first}: section '{s.title}' has a figure but no 'Date:' line")
        else:
            for n, d in dates:
                if not DATE_RE.search(d):
                    problems.append(f"line {n}: 'Date:' line without a YYYY-MM-DD date: {d!r}")
        if not s.machine():
            problems.append(f"line {first}: section '{s.title}' has a figure but no 'Machine:' line")
    return problems


def strip_comment(line):
    """Drops a `# comment` that starts a word outside quotes."""
    quote = None
    for i, ch in enumerate(line):
        if quote:
            if ch == quote:
                quote = None
        elif ch in "'\"":
            quote = ch
        elif ch == "#" and (i == 0 or line[i - 1].isspace()):
            return line[:i].rstrip()
    return line


def logical_lines(lines):
    """Joins backslash continuations; drops blank lines and whole-line comments."""
    out, cur, start = [], "", None
    for i, raw in enumerate(lines):
        line = raw.rstrip()
        if start is None:
            start = i
        if line.endswith("\\"):
            cur += line[:-1] + " "
            continue
        cur += line
        cur = strip_comment(cur)
        if cur.strip():
            out.append((start, cur.strip()))
        cur, start = "", None
    if cur.strip():
        out.append((start, cur.strip()))
    return out


def split_statements(line):
    """Splits a logical line at `;` outside quotes."""
    out, cur, quote = [], "", None
    for ch in line:
        if quote:
            cur += ch
            if ch == quote:
                quote = None
        elif ch in "'\"":
            quote = ch
            cur += ch
        elif ch == ";":
            out.append(cur.strip())
            cur = ""
        else:
            cur += ch
    out.append(cur.strip())
    return [x for x in out if x]


FOR_RE = re.compile(r"^for\s+(\w+)\s+in\s+(.*)$")


def expand_loops(lines):
    """`for X in a b; do BODY; done` -- on one line, nested, or with BODY
    over several lines up to `done` -- becomes BODY once per value, $X and
    ${X} replaced. Returns (line offset, statement) pairs."""
    stmts = [(off, st) for off, line in lines for st in split_statements(line)]

    def parse(i, stop_at_done):
        out = []
        while i < len(stmts):
            off, st = stmts[i]
            if st == "done" or st.startswith("done "):
                if stop_at_done:
                    return out, i + 1
                raise ValueError(f"'done' without 'for' (line offset {off})")
            m = FOR_RE.match(st)
            if not m:
                out.append((off, st))
                i += 1
                continue
            var, values = m.group(1), shlex.split(m.group(2))
            i += 1
            if i >= len(stmts) or not re.match(r"^do(\s|$)", stmts[i][1]):
                raise ValueError(f"'for {var}' without 'do' (line offset {off})")
            first = stmts[i][1][2:].strip()
            if first:
                stmts[i] = (stmts[i][0], first)
            else:
                i += 1
            body, i = parse(i, True)
            for v in values:
                for o, b in body:
                    out.append((o, re.sub(r"\$\{?" + var + r"\}?(?!\w)", lambda _m: v, b)))
        if stop_at_done:
            raise ValueError("'for' without 'done'")
        return out, i

    # Expand the loops innermost first: the parser substitutes each value
    # into the body's statements, which may hold inner loops already expanded.
    result, _ = parse(0, False)
    return result


REDIRECT_RE = re.compile(r"(^|\s)(\d*|&)(>>|>&|>|<)\s*[^\s;&|]+")


def strip_redirections(line):
    """Drops `> file`, `2>&1`, `< file` (outside quotes): not arguments."""
    out, seg, quote = "", "", None
    for ch in line:
        if quote:
            out += ch
            if ch == quote:
                quote = None
        elif ch in "'\"":
            out += REDIRECT_RE.sub(r"\1", seg) + ch
            seg = ""
            quote = ch
        else:
            seg += ch
    return out + REDIRECT_RE.sub(r"\1", seg)


def simple_commands(line):
    """Splits a logical line at &&, ||, ;, | (outside quotes) into word lists."""
    lex = shlex.shlex(strip_redirections(line), posix=True, punctuation_chars=";&|")
    lex.whitespace_split = True
    lex.commenters = "#"
    cmds, cur = [], []
    for tok in lex:
        if tok and set(tok) <= set(";&|"):
            if cur:
                cmds.append(cur)
            cur = []
        else:
            cur.append(tok)
    if cur:
        cmds.append(cur)
    # Brace expansion, as bash does it for a word like tests/data/{a,b}.onnx.
    return [[x for word in c for x in (brace_expand(word) if re.search(r"\{[^{}]*,[^{}]*\}", word)
                                       else [word])] for c in cmds]


def strip_prefixes(words):
    """Drops VAR=value assignments and wrappers (taskset -c 0, /usr/bin/time -f ...)."""
    w = list(words)
    while w:
        if re.match(r"^[A-Za-z_][A-Za-z0-9_]*=", w[0]):
            w.pop(0)
            continue
        name = w[0]
        if name in WRAPPERS:
            n = WRAPPERS[name]
            w.pop(0)
            if n is not None:
                del w[:n]
            else:
                while w and w[0].startswith("-"):
                    opt = w.pop(0)
                    if name == "/usr/bin/time" and opt in ("-f", "-o"):
                        w.pop(0)
                    if name == "nice" and opt == "-n":
                        w.pop(0)
            continue
        break
    return w


class Checker:
    def __init__(self, source_dir, build_dir, jobs=2, built=None):
        self.src = os.path.abspath(source_dir)
        self.build = os.path.abspath(build_dir)
        self.jobs = jobs
        self.built = built  # None: every program is expected to be built
        self.skipped = {}

    def repo_path(self, token):
        """The repository file a token names, or None when it names none."""
        t = token.split("=", 1)[1] if token.startswith("--") and "=" in token else token
        if "$" in t or "*" in t or "://" in t:
            return None
        if t.split("/", 1)[0] in REPO_DIRS and "/" in t:
            return t
        return None

    def classify(self, words):
        """(kind, argv or reason) of one simple command."""
        w = strip_prefixes(words)
        if not w:
            return ("none", None)
        prog = w[0]
        base = os.path.basename(prog)
        if prog in ("python3", "/usr/bin/python3", "python"):
            return ("python", w[1:])
        if prog.startswith("build/bin/") or prog.startswith("bin/") or base.startswith("braid"):
            return ("braid", [os.path.join(self.build, "bin", base)] + w[1:])
        if prog.startswith("build/tests/"):
            return ("gtest", [os.path.join(self.build, "tests", base)] + w[1:])
        if prog in SCRIPT_SOURCES:
            return ("script", [SCRIPT_SOURCES[prog]] + w[1:])
        if prog.endswith(".sh") or prog.endswith(".py"):
            return ("script", w)
        if prog in EXTERNAL:
            return ("external", EXTERNAL[prog])
        return ("unknown", prog)

    def file_problems(self, where, tokens):
        problems = []
        prev = None
        for t in tokens:
            p = self.repo_path(t)
            if p and prev not in OUTPUT_OPTIONS:
                for q in brace_expand(p):
                    if not os.path.exists(os.path.join(self.src, q)):
                        problems.append(f"{where}: names {q}, which does not exist")
            prev = t
        return problems

    def run(self, argv, env_extra, where):
        env = dict(os.environ)
        env.update(env_extra)
        try:
            r = subprocess.run(argv, cwd=self.src, env=env, stdin=subprocess.DEVNULL,
                               capture_output=True, text=True, timeout=120)
        except FileNotFoundError:
            return f"{where}: {argv[0]} does not exist (build it)"
        except subprocess.TimeoutExpired:
            return f"{where}: {shlex.join(argv)} ran past 120 s in parse-only mode"
        if r.returncode != 0:
            msg = (r.stderr or r.stdout).strip().splitlines()
            return (f"{where}: exit {r.returncode}: {shlex.join(argv)}: "
                    f"{msg[0] if msg else '(no message)'}")
        return r

    def parser_of(self, argv):
        """The program that parses a braid command line: braid-torch for the
        commands `braid` hands over to it (client/cli.h), else the program."""
        if os.path.basename(argv[0]) == "braid" and len(argv) > 1 and (
                argv[1] in TORCH_COMMANDS or argv[1:3] == ["bench", "service"]):
            return os.path.join(os.path.dirname(argv[0]), "braid-torch")
        return argv[0]

    def check_braid_batch(self, prog, cmds):
        """Parses every command line of one program in one process."""
        if not os.access(prog, os.X_OK):
            return [f"{where}: {prog} does not exist (build it)" for _, where in cmds]
        with tempfile.NamedTemporaryFile("w", suffix=".args", delete=False) as f:
            for argv, _ in cmds:
                if any("\n" in a or a == "" for a in argv[1:]):
                    raise SystemExit(f"an argument of '{shlex.join(argv)}' is empty or has a newline")
                f.write("".join(a + "\n" for a in argv[1:]) + "\n")
            path = f.name
        try:
            r = subprocess.run([prog], cwd=self.src, env=dict(os.environ, BRAID_PARSE_ONLY="@" + path),
                               stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=120)
        finally:
            os.unlink(path)
        results = {}
        for line in r.stdout.splitlines():
            m = re.match(r"^(\d+) (ok|error: (.*))$", line)
            if m:
                results[int(m.group(1))] = m.group(3)
        problems = []
        for i, (argv, where) in enumerate(cmds, start=1):
            if i not in results:
                problems.append(f"{where}: {os.path.basename(prog)} gave no parse result for "
                                f"{shlex.join(argv)} (exit {r.returncode}: "
                                f"{(r.stderr or r.stdout).strip()[:200]})")
            elif results[i] is not None:
                problems.append(f"{where}: {shlex.join(argv)} does not parse: {results[i]}")
        return problems

    def check_gtest(self, argv, where):
        if not os.access(argv[0], os.X_OK):
            return [f"{where}: {argv[0]} does not exist (build it)"]
        extra = [a for a in argv[1:] if not a.startswith("--gtest_")]
        if extra:
            return [f"{where}: {os.path.basename(argv[0])} takes only --gtest_* flags, got {extra}"]
        filt = [a for a in argv[1:] if a.startswith("--gtest_filter")]
        r = self.run([argv[0], "--gtest_list_tests"] + filt, {}, where)
        if isinstance(r, str):
            return [r]
        tests = [l for l in r.stdout.splitlines() if l.startswith("  ")]
        if not tests:
            return [f"{where}: {shlex.join(argv)} selects no test"]
        return []

    def check_script(self, words, where):
        path = os.path.join(self.src, words[0])
        if not os.path.isfile(path):
            return [f"{where}: script {words[0]} does not exist"]
        if words[0].endswith(".py"):
            return self.check_python(words, where)
        if not os.access(path, os.X_OK):
            return [f"{where}: script {words[0]} is not executable"]
        r = subprocess.run(["bash", "-n", path], capture_output=True, text=True)
        if r.returncode != 0:
            return [f"{where}: bash -n {words[0]}: {r.stderr.strip()}"]
        return []

    def check_python(self, words, where):
        if not words:
            return [f"{where}: python without a script"]
        script = words[0]
        if script == "-c" or script == "-m":
            return []  # inline code: nothing of the repository to check
        path = os.path.join(self.src, script)
        if not os.path.isfile(path):
            return [f"{where}: script {script} does not exist"]
        with open(path, encoding="utf-8") as f:
            source = f.read()
        try:
            compile(source, path, "exec")  # what py_compile checks, without writing a .pyc
        except SyntaxError as e:
            return [f"{where}: {script} does not compile: {e}"]
        honours = "BRAID_PARSE_ONLY" in source
        if not honours:
            return []
        r = self.run(["/usr/bin/python3", path] + words[1:], {"BRAID_PARSE_ONLY": "1"}, where)
        return [r] if isinstance(r, str) else []

    def check_commands(self, sh_blocks):
        problems = []
        jobs = {}  # (kind, tuple(argv)) -> first place
        for start, lines, _ in sh_blocks:
            for off, line in expand_loops(logical_lines(lines)):
                where = f"line {start + 1 + off}"
                try:
                    cmds = simple_commands(line)
                except ValueError as e:
                    problems.append(f"{where}: cannot split '{line}': {e}")
                    continue
                for words in cmds:
                    kind, what = self.classify(words)
                    if kind == "none":
                        continue
                    if kind == "external":
                        self.skipped.setdefault(words[0] if words[0] in EXTERNAL
                                                else strip_prefixes(words)[0], what)
                        continue
                    if kind == "unknown":
                        problems.append(f"{where}: '{what}' is neither a braid program, a script "
                                        f"of the repository nor a known external tool")
                        continue
                    problems += self.file_problems(where, strip_prefixes(words)[1:])
                    if kind in ("braid", "gtest") and self.built is not None:
                        prog = os.path.basename(self.parser_of(list(what)) if kind == "braid"
                                                else what[0])
                        if prog not in self.built:
                            self.skipped.setdefault(prog, "not built in this configuration")
                            continue
                    key = (kind, tuple(canonical(what) if kind == "braid" else what))
                    jobs.setdefault(key, where)
        # braid's programs: one parse-only process per program for all its
        # command lines (BRAID_PARSE_ONLY=@FILE).
        by_program = {}
        for (kind, argv), where in jobs.items():
            if kind == "braid":
                argv = list(argv)
                by_program.setdefault(self.parser_of(argv), []).append((argv, where))
        with concurrent.futures.ThreadPoolExecutor(max_workers=self.jobs) as pool:
            futures = [pool.submit(self.check_braid_batch, prog, cmds)
                       for prog, cmds in by_program.items()]
            for (kind, argv), where in jobs.items():
                argv = list(argv)
                if kind == "gtest":
                    futures.append(pool.submit(self.check_gtest, argv, where))
                elif kind == "script":
                    futures.append(pool.submit(self.check_script, argv, where))
                elif kind == "python":
                    futures.append(pool.submit(self.check_python, argv, where))
            for f in concurrent.futures.as_completed(futures):
                problems += f.result()
        self.checked = len(jobs)
        return problems

    def check_prose_files(self, prose):
        problems = []
        for n, line in prose:
            for span in re.findall(r"`([^`\s]+)`", line):
                p = self.repo_path(span.rstrip(".,;:"))
                if p is None or not re.search(r"[./]", p.split("/", 1)[1]):
                    continue
                for q in brace_expand(p):
                    q = q.split(":", 1)[0]  # file.h:123
                    if not os.path.exists(os.path.join(self.src, q)):
                        problems.append(f"line {n}: names {q}, which does not exist")
        return problems

    def check(self, text):
        sections, sh_blocks, prose = parse_document(text)
        problems = check_dates_and_machines(sections)
        problems += self.check_prose_files(prose)
        problems += self.check_commands(sh_blocks)
        return sorted(set(problems), key=lambda p: int(re.match(r"line (\d+)", p).group(1))
                      if re.match(r"line (\d+)", p) else 0)


SCRATCH_PATH_RE = re.compile(r"^(/tmp/|/work/|/var/|/etc/)\S*$|^[\w.-]+\.(db|json|txt|pt|xml|csv)$")


def canonical(argv):
    """The command line with scratch file names (/tmp/x.db, plan.json) made
    one name: a parser accepts any such string alike, so commands that
    differ only in them are checked once (LibTorch programs take about a
    second each to start)."""
    return [a if i == 0 or not SCRATCH_PATH_RE.match(a) else "/tmp/FILE" for i, a in enumerate(argv)]


def brace_expand(s):
    m = re.search(r"\{([^{}]*)\}", s)
    if not m:
        return [s]
    out = []
    for alt in m.group(1).split(","):
        out.extend(brace_expand(s[:m.start()] + alt + s[m.end():]))
    return out


SELF_TEST_DOC = """# benchmarks

## Good

### A command that parses

Date: 2026-11-28.
Machine: the test machine.

```sh
build/bin/braid bench import --reps 10 && taskset -c 0 build/bin/braid bench sim
for m in mlp dlrm; do build/bin/braid graph stats zoo:$m; done
```

## Bad

### A flag that does not exist

Date: 2026-11-28.
Machine: the test machine.

```sh
build/bin/braid plan zoo:mlp --cluster cpu-local --bogus-flag
```

### A table without a date

Machine: the test machine.

| a | b |
| --- | --- |
| 1 | 2 |

### A table without a machine

Date: 2026-11-28.

| a | b |
| --- | --- |
| 1 | 2 |

### A script that does not exist

Date: 2026-11-28.
Machine: the test machine.

```sh
tests/no_such_bench.sh build 3
```
"""


def self_test(checker):
    """The checker finds each kind of problem it exists for, and no other."""
    problems = checker.check(SELF_TEST_DOC)
    expected = [r"--bogus-flag", r"'A table without a date' has a figure but no 'Date:'",
                r"'A table without a machine' has a figure but no 'Machine:'",
                r"tests/no_such_bench.sh does not exist"]
    ok = True
    for e in expected:
        if not any(re.search(re.escape(e) if e.startswith("'") else e, p) for p in problems):
            print(f"self-test: the checker missed: {e}")
            ok = False
    if len(problems) != len(expected):
        print("self-test: expected exactly 4 problems, got:")
        for p in problems:
            print("  " + p)
        ok = False
    print("self-test: " + ("ok, the checker reports a bad flag, a missing date, a missing machine "
                           "and a missing script" if ok else "FAILED"))
    return ok


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--source-dir", required=True)
    ap.add_argument("--build-dir", required=True)
    ap.add_argument("--doc", help="default: SRC/BENCHMARKS.md")
    ap.add_argument("--self-test", action="store_true",
                    help="first check that a document with known defects fails")
    ap.add_argument("--built", help="comma-separated programs and test binaries this build "
                                    "makes; others the document names are skipped, named")
    ap.add_argument("--jobs", type=int, default=2)
    a = ap.parse_args()
    checker = Checker(a.source_dir, a.build_dir, a.jobs,
                      set(a.built.split(",")) if a.built else None)
    if a.self_test and not self_test(checker):
        return 1
    checker.skipped = {}
    doc = a.doc or os.path.join(a.source_dir, "BENCHMARKS.md")
    with open(doc, encoding="utf-8") as f:
        problems = checker.check(f.read())
    for name, why in sorted(checker.skipped.items()):
        print(f"not checked: {name} ({why})")
    print(f"{os.path.basename(doc)}: {checker.checked} distinct commands checked in parse-only mode")
    for p in problems:
        print(p)
    print(f"{len(problems)} problem(s)")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
