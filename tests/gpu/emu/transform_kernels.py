#!/usr/bin/env python3
# Build-time source transform of the tensor-core attention kernels for the CPU emulator: copies
# the kernel sources and the local headers they include into an output folder, swapping the
# device-only pieces for emulator hooks. Fails, naming the marker, when the sources changed shape.
"""Prepare kernels/attention_wmma_*.cu for compilation by the host compiler.

Rewrites, per file:
  * namespace strata::cuda      -> strata::<--namespace>, so the emulated kernels never share a
                                   symbol with the real kernels library linked into the same test;
  * attention_wmma.cuh          -> its cp.async section (inline PTX) becomes emulator calls;
  * extern __shared__ T name[]; -> T* const name = emulator's dynamic shared memory;
  * k<<<grid, block, smem, s>>>(args) -> ::strata::emu::launch(k, grid, block, smem, s)(args);
  * --mutant                    -> the forward kernel loses the first __syncthreads() of its
                                   key-tile loop (a planted race the tests must catch).
Headers named with --standin are taken from the given file instead of the kernels folder.
Each output starts with a #line directive, so diagnostics point at the original kernel sources.
"""
import argparse
import os
import re
import sys

LOCAL_INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)
CP_ASYNC_MARKER = "// ---- cp.async"
CP_ASYNC_FUNCTIONS = {"cp_async_16", "cp_async_4", "cp_async_commit", "cp_async_wait"}
CP_ASYNC_HOOKS = """\
// ---- cp.async, routed to the CPU emulator by tests/gpu/emu/transform_kernels.py ----
__device__ __forceinline__ void cp_async_16(void* smem_dst, const void* gmem_src) {
  ::strata::emu::async_copy(smem_dst, gmem_src, 16);
}
__device__ __forceinline__ void cp_async_4(void* smem_dst, const void* gmem_src) {
  ::strata::emu::async_copy(smem_dst, gmem_src, 4);
}
__device__ __forceinline__ void cp_async_commit() { ::strata::emu::async_commit(); }
template <int kPending>
__device__ __forceinline__ void cp_async_wait() { ::strata::emu::async_wait(kPending); }
"""
SHARED_DECL = re.compile(
    r'extern\s+__shared__\s+(?:__align__\(\s*(\d+)\s*\)\s+)?([A-Za-z_][\w\s:]*?)\s+(\w+)\s*\[\s*\]\s*;')
LAUNCH = re.compile(r'([A-Za-z_][\w:]*(?:<[^<>;{}()]*>)?)\s*<<<(.*?)>>>\s*\(', re.S)
MUTANT_FILE = "attention_wmma_forward.cu"
MUTANT_LOOP = "for (int kt = 0; kt <= q_tile_index; ++kt) {"
MUTANT_BARRIER = "__syncthreads();"


def die(message):
    print(f"transform_kernels.py: error: {message}", file=sys.stderr)
    sys.exit(1)


def without_comments(text):
    text = re.sub(r'/\*.*?\*/', ' ', text, flags=re.S)
    return re.sub(r'//[^\n]*', '', text)


def line_of(text, index):
    return text.count("\n", 0, index) + 1


def pad_to_lines(replacement, original):
    """Pads a replacement with blank lines so the lines after it keep their numbers."""
    missing = original.count("\n") - replacement.count("\n")
    return replacement + "\n" * max(missing, 0)


def rename_namespace(text, name, namespace):
    code = without_comments(text)
    stray = re.search(r'\bnamespace\s+cuda\b|(?<![\w:])cuda::', code)
    if stray:
        die(f"{name}: '{stray.group(0)}' (line {line_of(code, stray.start())}): the emulated build renames "
            f"'strata::cuda' only; spell the namespace as strata::cuda (or teach tests/gpu/emu/transform_kernels.py)")
    return re.sub(r'\bstrata::cuda\b', f"strata::{namespace}", text)


def replace_cp_async(text, name):
    start = text.find(CP_ASYNC_MARKER)
    if start < 0:
        die(f"{name}: marker '{CP_ASYNC_MARKER}' not found; the emulator replaces the cp.async inline assembly "
            f"that follows it with emulator calls")
    start = text.rfind("\n", 0, start) + 1
    asm_uses = [m.start() for m in re.finditer(r'\basm\b', text)]
    if not asm_uses or asm_uses[0] < start:
        die(f"{name}: expected the inline assembly inside the section opened by '{CP_ASYNC_MARKER}'")
    closing = re.compile(r'^}[ \t]*$', re.M).search(text, asm_uses[-1])
    if not closing:
        die(f"{name}: no closing '}}' at the start of a line after the last inline assembly of the cp.async section")
    end = closing.end() + 1
    section = without_comments(text[start:end])
    defined = set(re.findall(r'\b(cp_async_\w+)\s*\(', section))
    if defined != CP_ASYNC_FUNCTIONS:
        die(f"{name}: the cp.async section defines {sorted(defined)}, the emulator hooks cover "
            f"{sorted(CP_ASYNC_FUNCTIONS)}; update CP_ASYNC_HOOKS in tests/gpu/emu/transform_kernels.py")
    return text[:start] + pad_to_lines(CP_ASYNC_HOOKS, text[start:end]) + text[end:]


def replace_shared_and_launches(text, name):
    def shared(m):
        alignment = m.group(1) or "16"
        element, variable = m.group(2), m.group(3)
        return (f"{element}* const {variable} = reinterpret_cast<{element}*>("
                f"::strata::emu::dynamic_shared_memory({alignment}));")

    text = SHARED_DECL.sub(shared, text)
    text, launches = LAUNCH.subn(lambda m: f"::strata::emu::launch({m.group(1)}, {m.group(2)})(", text)
    if launches == 0:
        die(f"{name}: no kernel launch 'kernel<<<...>>>(' found; the emulator runs the kernels through them")
    return text


def plant_mutant(text, name):
    loop = text.find(MUTANT_LOOP)
    if loop < 0:
        die(f"{name}: marker '{MUTANT_LOOP}' not found (the mutant drops the first {MUTANT_BARRIER} after it)")
    barrier = text.find(MUTANT_BARRIER, loop)
    if barrier < 0:
        die(f"{name}: no '{MUTANT_BARRIER}' after '{MUTANT_LOOP}'")
    return text[:barrier] + "/* mutant: barrier removed */" + text[barrier + len(MUTANT_BARRIER):]


def check_no_device_only_syntax(text, name):
    code = without_comments(text)
    for pattern, what in ((r'\basm\b', "inline assembly"), (r'\b__shared__\b', "a __shared__ declaration"),
                          (r'<<<', "a kernel launch"), (r'\b__cvta_\w+', "an address-space conversion")):
        m = re.search(pattern, code)
        if m:
            die(f"{name}: line {line_of(code, m.start())}: {what} the emulator does not handle "
                f"('{m.group(0)}'); extend tests/gpu/emu/transform_kernels.py")


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--kernels", required=True, help="the kernels/ folder")
    parser.add_argument("--out", required=True, help="output folder")
    parser.add_argument("--namespace", required=True, help="replaces 'cuda' in strata::cuda")
    parser.add_argument("--standin", action="append", default=[], metavar="HEADER=PATH")
    parser.add_argument("--depfile", help="write the files read, as a Makefile rule for the outputs")
    parser.add_argument("--mutant", action="store_true", help=f"plant the missing-barrier bug in {MUTANT_FILE}")
    parser.add_argument("sources", nargs="+", help=".cu files of the kernels folder to transform")
    args = parser.parse_args()

    standins = {}
    for item in args.standin:
        header, _, path = item.partition("=")
        standins[header] = path
    if args.mutant and MUTANT_FILE not in args.sources:
        die(f"--mutant needs {MUTANT_FILE} among the sources")

    repo_root = os.path.dirname(os.path.abspath(args.kernels))
    # The sources and every local header they reach, stand-ins taking the place of originals.
    pending, seen, read, written = list(args.sources), [], [], []
    while pending:
        name = pending.pop(0)
        if name in seen:
            continue
        seen.append(name)
        path = standins.get(name, os.path.join(args.kernels, name))
        if not os.path.isfile(path):
            die(f"{path}: not found (included by the attention kernels)")
        with open(path, encoding="utf-8") as f:
            text = f.read()
        read.append(os.path.abspath(path))
        pending.extend(LOCAL_INCLUDE.findall(without_comments(text)))

        display = os.path.relpath(path, repo_root)
        text = rename_namespace(text, display, args.namespace)
        if name == "attention_wmma.cuh":
            text = replace_cp_async(text, display)
        if name.endswith(".cu"):
            text = replace_shared_and_launches(text, display)
        if args.mutant and name == MUTANT_FILE:
            text = plant_mutant(text, display)
        check_no_device_only_syntax(text, display)

        out_name = name[:-3] + ".cpp" if name.endswith(".cu") else name
        header = (f"// Generated by tests/gpu/emu/transform_kernels.py from {display}; do not edit.\n"
                  f"#line 1 \"{os.path.abspath(path)}\"\n")
        os.makedirs(args.out, exist_ok=True)
        written.append(os.path.abspath(os.path.join(args.out, out_name)))
        with open(written[-1], "w", encoding="utf-8") as f:
            f.write(header + text)
    if "attention_wmma.cuh" not in seen:
        die("the sources no longer include attention_wmma.cuh, whose cp.async section the emulator replaces")
    if args.depfile:
        def escape(path):
            return path.replace(" ", "\\ ")
        with open(args.depfile, "w", encoding="utf-8") as f:
            targets = [path for path in written if path.endswith(".cpp")]  # the declared outputs
            f.write(" ".join(map(escape, targets)) + ": " + " ".join(map(escape, read)) + "\n")


if __name__ == "__main__":
    main()
