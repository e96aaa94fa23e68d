#!/usr/bin/env python3
"""Relinks one target of braid's CMake/Ninja build for the GPU kit.

Takes the target's link command from `ninja -t commands`, keeps its objects
and braid's static libraries, and replaces every shared library outside the
allow-list by its static archive (with the static archives of that library's
own dependencies), so that the binary runs on a machine with none of
Debian's libraries: libstdc++ and libgcc are linked statically too. What
stays dynamic is the CUDA toolkit and driver (cudart, NVRTC, cuBLAS(Lt),
cuDNN, NCCL, libcuda) and glibc.

  relink.py BUILD_DIR TARGET OUTPUT

Prints the shared libraries the kit must carry in lib/ for it, one a line.
"""
import os
import re
import shlex
import subprocess
import sys

SYSLIB = "/usr/lib/x86_64-linux-gnu"
GCCLIB = "/usr/lib/gcc/x86_64-linux-gnu"
# Sonames the system or the CUDA installation provides (the kit's allow-list).
GLIBC = {"libc.so.6", "libm.so.6", "libpthread.so.0", "libdl.so.2", "librt.so.1",
         "ld-linux-x86-64.so.2"}
# Linked statically through the compiler's flags, not as archives.
TOOLCHAIN = {"libstdc++", "libgcc_s", "libc", "libm", "libpthread", "libdl", "librt", "libatomic"}
# ONNX import is not in any kit binary; Debian ships no static ONNX.
UNUSED = {"libonnx", "libonnx_proto"}
# Shared libraries the kit carries in its lib/ (found through the binary's
# RUNPATH $ORIGIN/../lib), with what they need: Debian's libunwind.a (glog's
# stack traces) is not position-independent and clashes with libgcc_eh.
BUNDLE = {"libunwind"}


def base_name(path):
    name = os.path.basename(path)
    return re.sub(r"\.so(\.[0-9.]+)?$", "", name)


def needed(path):
    out = subprocess.run(["readelf", "-d", path], capture_output=True, text=True, check=True).stdout
    return re.findall(r"\(NEEDED\).*\[(.+)\]", out)


def static_for(lib_base):
    a = os.path.join(SYSLIB, lib_base + ".a")
    return a if os.path.exists(a) else None


def bundled_closure(so_path, bundle):
    """A bundled shared library and the shared libraries it needs."""
    bundle.add(so_path)
    for soname in needed(so_path):
        dep = os.path.join(SYSLIB, soname)
        if soname not in GLIBC and dep not in bundle:
            if not os.path.exists(dep):
                sys.exit(f"relink: {soname} (needed by {so_path}) not in {SYSLIB}")
            bundled_closure(dep, bundle)


def closure(so_path, seen, bundle):
    """Static archives for a shared library and everything it needs."""
    archives = []
    for soname in needed(so_path):
        if soname in GLIBC:
            continue
        b = base_name(soname)
        if b in TOOLCHAIN or b in seen:
            continue
        seen.add(b)
        if b in BUNDLE:
            dep = os.path.join(SYSLIB, soname)
            bundled_closure(dep, bundle)
            archives.append(dep)
            continue
        a = static_for(b)
        if a is None:
            sys.exit(f"relink: no static archive for {soname} (needed by {so_path})")
        archives.append(a)
        dep = os.path.join(SYSLIB, soname)
        if os.path.exists(dep):
            archives += closure(dep, seen, bundle)
    return archives


def main():
    build, target, output = sys.argv[1], sys.argv[2], sys.argv[3]
    cmds = subprocess.run(["ninja", "-C", build, "-t", "commands", target], capture_output=True,
                          text=True, check=True).stdout.strip().splitlines()
    link = cmds[-1]
    m = re.match(r"^: && (.*) && :$", link)
    if m:
        link = m.group(1)
    words = shlex.split(link)
    if "-o" not in words:
        sys.exit(f"relink: the last command of {target} is not a link: {link[:200]}")
    out = [words[0], "-static-libstdc++", "-static-libgcc", "-Wl,--gc-sections"]
    libs, seen, bundle, skip = [], set(), set(), False
    for i, w in enumerate(words[1:], 1):
        if skip:
            skip = False
            continue
        if w == "-o":
            out += ["-o", os.path.abspath(output)]
            skip = True
            continue
        if w.startswith("-Wl,-rpath"):
            continue
        if w in ("-Wl,--push-state,--as-needed", "-Wl,--pop-state"):
            continue
        if w == "-latomic":
            libs.append(os.path.join(GCCLIB, "12", "libatomic.a"))
            continue
        if w.startswith(SYSLIB) and re.search(r"\.so(\.[0-9.]+)?$", w):
            b = base_name(w)
            if b in UNUSED or b in TOOLCHAIN or b in seen:
                continue
            seen.add(b)
            a = static_for(b)
            if a is None:
                sys.exit(f"relink: no static archive for {w}")
            libs.append(a)
            libs += closure(os.path.realpath(w), seen, bundle)
            continue
        if w.endswith(".a") or w.endswith(".so") or w.startswith("-l"):
            libs.append(w)
            continue
        out.append(w)
    out += ["-Wl,--start-group"] + libs + ["-Wl,--end-group", "-ldl", "-lpthread", "-lrt", "-lm",
            "-Wl,-rpath,$ORIGIN/../lib", "-Wl,--enable-new-dtags"]
    r = subprocess.run(out, cwd=build)
    if r.returncode != 0:
        sys.exit(f"relink: linking {target} failed: {shlex.join(out)[:2000]}")
    for b in sorted(bundle):
        print(b)


if __name__ == "__main__":
    main()
