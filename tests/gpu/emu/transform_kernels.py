#!/usr/bin/env python3
# Build-time source transform of the tensor-core attention kernels for the CPU emulator: copies
# the kernel sources and the local headers they include into an output folder, swapping the
# device-only pieces for emulator hooks. Fails, naming the marker, when the sources changed shape.
"""Prepare the CUDA sources (kernels/*.cu, src/backend/cuda/*) for compilation by the host compiler.

Rewrites, per file (sources named on the command line and the local headers they reach):
  * strata::cuda, namespace cuda, cuda::   -> strata::<--namespace> etc., so the emulated code
                                             never shares a symbol with the real kernels library
                                             linked into the same test;
  * mma_ptx.cuh                             -> each '// ---- ptx section: NAME' (mma.sync, ldmatrix,
                                             cp.async, ex2) becomes the emulator calls of PTX_HOOKS[NAME];
  * extern __shared__ T name[];             -> T* const name = the block's dynamic shared memory;
  * __shared__ T name[dims];                -> T (&name)[dims] = this declaration's static shared
                                             memory in the running block;
  * k<<<grid, block, smem, s>>>(args)       -> ::strata::emu::launch(k, grid, block, smem, s)(args),
                                             or launch_deduced when k is a kernel template whose
                                             arguments the call deduces;
  * --mutant NAME                           -> one planted bug the tests must catch (MUTANTS): the mma.sync
                                             forward without its cp.async wait (cp-async-wait), or with V's
                                             ldmatrix.trans lanes passing the rows of K's mapping
                                             (lane-mapping).
Kernel files are named relative to --kernels, backend files (backend/...) relative to --src; the
output tree mirrors both. Each output starts with a #line directive, so diagnostics point at the
original sources.
"""
import argparse
import os
import re
import sys

LOCAL_INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)
# kernels/mma_ptx.cuh: each section, from its opening marker to its closing one, is replaced by the
# hooks of the same name, which must define the same functions (the warp-collective semantics
# live in the emulator: tests/gpu/emu/emu_ptx.cpp).
PTX_FILE = "mma_ptx.cuh"
PTX_SECTION = re.compile(r'^[ \t]*// ---- ptx section: (\S+) ----[^\n]*\n(.*?)^[ \t]*// ---- end of ptx section: (\S+) ----[^\n]*\n',
                         re.M | re.S)
PTX_HOOK_HEADER = "// ---- ptx section {}: routed to the CPU emulator by tests/gpu/emu/transform_kernels.py ----\n"
PTX_HOOKS = {
    "mma.sync": """\
__device__ __forceinline__ void mma_m16n8k16_bf16(float (&d)[4], const uint32_t (&a)[4], const uint32_t (&b)[2],
                                                  const float (&c)[4]) {
  ::strata::emu::mma_m16n8k16(::strata::emu::MmaInput::BF16, d, a, b, c);
}
__device__ __forceinline__ void mma_m16n8k16_f16(float (&d)[4], const uint32_t (&a)[4], const uint32_t (&b)[2],
                                                 const float (&c)[4]) {
  ::strata::emu::mma_m16n8k16(::strata::emu::MmaInput::F16, d, a, b, c);
}
""",
    "ldmatrix": """\
__device__ __forceinline__ void ldmatrix_x1(uint32_t (&r)[1], const void* row) { ::strata::emu::ldmatrix(1, false, row, r); }
__device__ __forceinline__ void ldmatrix_x2(uint32_t (&r)[2], const void* row) { ::strata::emu::ldmatrix(2, false, row, r); }
__device__ __forceinline__ void ldmatrix_x4(uint32_t (&r)[4], const void* row) { ::strata::emu::ldmatrix(4, false, row, r); }
__device__ __forceinline__ void ldmatrix_x1_trans(uint32_t (&r)[1], const void* row) { ::strata::emu::ldmatrix(1, true, row, r); }
__device__ __forceinline__ void ldmatrix_x2_trans(uint32_t (&r)[2], const void* row) { ::strata::emu::ldmatrix(2, true, row, r); }
__device__ __forceinline__ void ldmatrix_x4_trans(uint32_t (&r)[4], const void* row) { ::strata::emu::ldmatrix(4, true, row, r); }
""",
    "cp.async": """\
__device__ __forceinline__ void cp_async_16(void* smem_dst, const void* gmem_src) {
  ::strata::emu::async_copy(smem_dst, gmem_src, 16);
}
__device__ __forceinline__ void cp_async_16_zfill(void* smem_dst, const void* gmem_src, int src_bytes) {
  ::strata::emu::async_copy(smem_dst, gmem_src, 16, src_bytes);
}
__device__ __forceinline__ void cp_async_commit() { ::strata::emu::async_commit(); }
template <int kPending>
__device__ __forceinline__ void cp_async_wait() { ::strata::emu::async_wait(kPending); }
""",
    "ex2": """\
__device__ __forceinline__ float exp2_approx(float x) { return ::strata::emu::exp2_approx(x); }
""",
}
DEFINED_FUNCTION = re.compile(r'__forceinline__\s+[\w:<>]+\s+(\w+)\s*\(')
SHARED_DECL = re.compile(
    r'extern\s+__shared__\s+(?:__align__\(\s*(\d+)\s*\)\s+)?([A-Za-z_][\w\s:]*?)\s+(\w+)\s*\[\s*\]\s*;')
STATIC_SHARED_DECL = re.compile(
    r'\b__shared__\s+(?:__align__\(\s*(\d+)\s*\)\s+)?([A-Za-z_][\w:<>, ]*?)\s+(\w+)\s*((?:\[[^\]]+\]\s*)*);')
LAUNCH = re.compile(r'([A-Za-z_][\w:]*(?:<[^<>;{}()]*>)?)\s*<<<(.*?)>>>\s*\(', re.S)
TEMPLATE_KERNEL = re.compile(
    r'\btemplate\s*<[^{};]*?>\s*__global__\s+(?:void\s+)?(?:__launch_bounds__\s*\([^)]*\)\s*)?(?:void\s+)?(\w+)\s*\(')
# Each mutant: (file, anchor, target, replacement): the first `target` after `anchor` in `file`
# becomes `replacement`.
KEY_LOOP = "for (int kt = 0; kt <= q_tile_index; ++kt) {"
MUTANTS = {
    "cp-async-wait": ("attention_mma_forward.cu", KEY_LOOP, "ptx::cp_async_wait<1>();", "/* mutant: wait removed */"),
    "lane-mapping": ("attention_mma.cuh", "load_v_fragments(", "offsets.rows_first[step]",
                     "offsets.keys_first[step] /* mutant: K's lane mapping */"),
}


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
    stray = re.search(r'(?<![\w])::cuda::|\bnamespace\s+cuda\s*=', code)
    if stray:
        die(f"{name}: '{stray.group(0)}' (line {line_of(code, stray.start())}): the emulated build renames "
            f"strata::cuda, 'namespace cuda' and 'cuda::' inside strata only (teach tests/gpu/emu/transform_kernels.py)")
    text = re.sub(r'\bstrata::cuda\b', f"strata::{namespace}", text)
    text = re.sub(r'\bnamespace\s+cuda\b', f"namespace {namespace}", text)
    return re.sub(r'(?<![\w:.])cuda::', f"{namespace}::", text)


def replace_ptx_sections(text, name):
    found = []

    def section(m):
        opened, body, closed = m.group(1), m.group(2), m.group(3)
        if opened != closed:
            die(f"{name}: ptx section '{opened}' closed by the marker of '{closed}'")
        if opened not in PTX_HOOKS:
            die(f"{name}: ptx section '{opened}' has no emulator hooks; add them to PTX_HOOKS in "
                f"tests/gpu/emu/transform_kernels.py")
        hooks = PTX_HOOK_HEADER.format(opened) + PTX_HOOKS[opened]
        defined = set(DEFINED_FUNCTION.findall(without_comments(body)))
        hooked = set(DEFINED_FUNCTION.findall(hooks))
        if defined != hooked:
            die(f"{name}: ptx section '{opened}' defines {sorted(defined)}, its emulator hooks "
                f"{sorted(hooked)}; update PTX_HOOKS in tests/gpu/emu/transform_kernels.py")
        if hooks.count("\n") > m.group(0).count("\n"):
            die(f"{name}: the emulator hooks of ptx section '{opened}' are longer than the section; the lines "
                f"after it would lose their numbers")
        found.append(opened)
        return pad_to_lines(hooks, m.group(0))

    text = PTX_SECTION.sub(section, text)
    if sorted(found) != sorted(PTX_HOOKS):
        die(f"{name}: found the ptx sections {sorted(found)}, expected {sorted(PTX_HOOKS)} "
            f"('// ---- ptx section: NAME ----' ... '// ---- end of ptx section: NAME ----')")
    return text


def replace_shared(text):
    def dynamic(m):
        alignment = m.group(1) or "16"
        element, variable = m.group(2), m.group(3)
        return (f"{element}* const {variable} = reinterpret_cast<{element}*>("
                f"::strata::emu::dynamic_shared_memory({alignment}));")

    def static(m):
        element, variable, dims = m.group(2), m.group(3), m.group(4).strip()
        key, alias = f"strata_emu_shared_{variable}", f"strata_emu_shared_{variable}_t"
        alignment = m.group(1) or f"alignof({alias})"
        # One line, so the lines after it keep their numbers.
        return (f"static const char {key} = 0; using {alias} = {element}{dims}; {alias}& {variable} = "
                f"*reinterpret_cast<{alias}*>(::strata::emu::static_shared_memory(&{key}, sizeof({alias}), "
                f"{alignment}));")

    text = SHARED_DECL.sub(dynamic, text)
    return STATIC_SHARED_DECL.sub(static, text)


def replace_launches(text, template_kernels):
    def launch(m):
        kernel, config = m.group(1), m.group(2)
        if kernel in template_kernels:  # a kernel template called with deduced arguments
            return (f"::strata::emu::launch_deduced([](auto... strata_emu_args) {{ {kernel}(strata_emu_args...); }}, "
                    f"{config})(")
        return f"::strata::emu::launch({kernel}, {config})("

    return LAUNCH.sub(launch, text)


def plant_mutant(text, name, mutant):
    _, anchor, target, replacement = MUTANTS[mutant]
    at = text.find(anchor)
    if at < 0:
        die(f"{name}: marker '{anchor}' of mutant {mutant} not found")
    at = text.find(target, at)
    if at < 0:
        die(f"{name}: no '{target}' after '{anchor}' (mutant {mutant})")
    return text[:at] + replacement + text[at + len(target):]


def check_no_device_only_syntax(text, name):
    code = without_comments(text)
    for pattern, what in ((r'\basm\b', "inline assembly"), (r'\b__shared__\b', "a __shared__ declaration"),
                          (r'<<<', "a kernel launch"), (r'\b__cvta_\w+', "an address-space conversion")):
        m = re.search(pattern, code)
        if m:
            die(f"{name}: line {line_of(code, m.start())}: {what} the emulator does not handle "
                f"('{m.group(0)}'); extend tests/gpu/emu/transform_kernels.py")


class Tree:
    """Where a file named by an include or on the command line lives, and where its copy goes."""

    def __init__(self, kernels, src, out):
        self.kernels, self.src, self.out = os.path.abspath(kernels), src and os.path.abspath(src), out
        self.cuda_backend = self.src and os.path.join(self.src, "backend", "cuda")

    def transformed(self, path):
        inside = lambda root: root and os.path.commonpath([root, path]) == root
        return inside(self.kernels) or inside(self.cuda_backend)

    def find(self, name, including_dir):
        for root in (including_dir, self.kernels, self.src):
            if root and os.path.isfile(os.path.join(root, name)):
                return os.path.abspath(os.path.join(root, name))
        return None

    def output(self, path):
        root = self.kernels if os.path.commonpath([self.kernels, path]) == self.kernels else self.src
        relative = os.path.relpath(path, root)
        return os.path.join(self.out, relative[:-3] + ".cpp" if relative.endswith(".cu") else relative)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--kernels", required=True, help="the kernels/ folder")
    parser.add_argument("--src", help="the src/ folder (for backend/cuda/... sources)")
    parser.add_argument("--out", required=True, help="output folder")
    parser.add_argument("--namespace", required=True, help="replaces 'cuda' in strata::cuda")
    parser.add_argument("--depfile", help="write the files read, as a Makefile rule for the outputs")
    parser.add_argument("--mutant", choices=sorted(MUTANTS), help="plant this bug (see MUTANTS)")
    parser.add_argument("sources", nargs="+", help="kernel .cu files (relative to --kernels) and backend/cuda "
                                                   "sources (relative to --src) to transform")
    args = parser.parse_args()

    tree = Tree(args.kernels, args.src, args.out)
    repo_root = os.path.dirname(tree.kernels)
    # The sources and every local header of kernels/ or src/backend/cuda/ they reach.
    pending, texts = [], {}
    for name in args.sources:
        path = tree.find(name, None)
        if not path or not tree.transformed(path):
            die(f"{name}: not found in {args.kernels}" + (f" or {args.src}/backend/cuda" if args.src else ""))
        pending.append(path)
    while pending:
        path = pending.pop(0)
        if path in texts:
            continue
        with open(path, encoding="utf-8") as f:
            texts[path] = f.read()
        for include in LOCAL_INCLUDE.findall(without_comments(texts[path])):
            found = tree.find(include, os.path.dirname(path))
            if found and tree.transformed(found):
                pending.append(found)

    mutant_file = args.mutant and MUTANTS[args.mutant][0]
    if mutant_file and not any(os.path.basename(path) == mutant_file for path in texts):
        die(f"--mutant {args.mutant} needs {mutant_file} among the sources or the headers they include")

    template_kernels = set()
    for text in texts.values():
        template_kernels.update(TEMPLATE_KERNEL.findall(without_comments(text)))

    declared = []
    for path, text in texts.items():
        display = os.path.relpath(path, repo_root)
        base = os.path.basename(path)
        text = rename_namespace(text, display, args.namespace)
        if base == PTX_FILE:
            text = replace_ptx_sections(text, display)
        if base.endswith((".cu", ".cuh")):
            text = replace_launches(replace_shared(text), template_kernels)
        if base == mutant_file:
            text = plant_mutant(text, display, args.mutant)
        check_no_device_only_syntax(text, display)

        header = (f"// Generated by tests/gpu/emu/transform_kernels.py from {display}; do not edit.\n"
                  f"#line 1 \"{path}\"\n")
        out = tree.output(path)
        os.makedirs(os.path.dirname(out), exist_ok=True)
        if any(tree.find(name, None) == path for name in args.sources):
            declared.append(os.path.abspath(out))
        with open(out, "w", encoding="utf-8") as f:
            f.write(header + text)
    if args.depfile:
        def escape(path):
            return path.replace(" ", "\\ ")
        with open(args.depfile, "w", encoding="utf-8") as f:
            # The declared outputs: the copies of the files named on the command line.
            f.write(" ".join(map(escape, declared)) + ": " + " ".join(map(escape, texts)) + "\n")


if __name__ == "__main__":
    main()
