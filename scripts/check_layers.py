#!/usr/bin/env python3
"""No include runs upward: every #include "..." in src/ must name a header of its own module or
of a module it depends on, as src/CMakeLists.txt declares the libraries (strata_module DEPS and
target_link_libraries), and those declarations must form no cycle. Prints each offending file
and line, and exits 1 when there is any.

usage: scripts/check_layers.py [PROJECT_ROOT]
"""
import os
import re
import sys

MODULE_CALL = re.compile(r"strata_module\(\s*(\w+)([^)]*)\)", re.S)
LINK_CALL = re.compile(r"target_link_libraries\(\s*strata_(\w+)([^)]*)\)", re.S)
INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"')
KEYWORDS = {"DIR", "DEPS", "EXCLUDE", "PUBLIC", "PRIVATE", "INTERFACE"}


def parse_modules(cmake_text):
    """(module → folder under src/, module → set of modules it links), strata_ targets only."""
    folders, deps = {}, {}
    for name, args in MODULE_CALL.findall(cmake_text):
        words = args.split()
        folder, current = name, None
        links = set()
        for w in words:
            if w in KEYWORDS:
                current = w
            elif current == "DIR":
                folder = w
            elif current == "DEPS" and w.startswith("strata_"):
                links.add(w[len("strata_"):])
        folders[name] = folder
        deps[name] = links
    for name, args in LINK_CALL.findall(cmake_text):
        if name in deps:
            deps[name] |= {w[len("strata_"):] for w in args.split() if w.startswith("strata_") and w != "strata_warnings"}
    return folders, deps


def find_cycle(deps):
    """One dependency cycle as a list of modules, or None."""
    state = {}

    def visit(m, path):
        state[m] = "open"
        for d in sorted(deps.get(m, ())):
            if state.get(d) == "open":
                return path[path.index(d):] + [d] if d in path else [m, d]
            if d not in state:
                found = visit(d, path + [d])
                if found:
                    return found
        state[m] = "done"
        return None

    for m in sorted(deps):
        if m not in state:
            found = visit(m, [m])
            if found:
                return found
    return None


def closure(deps, module):
    seen, todo = set(), list(deps.get(module, ()))
    while todo:
        m = todo.pop()
        if m not in seen:
            seen.add(m)
            todo.extend(deps.get(m, ()))
    return seen


def module_of(path_in_src, folders):
    """The module whose folder holds path_in_src (the longest folder that is a prefix)."""
    best = None
    for module, folder in folders.items():
        if path_in_src.startswith(folder + "/") and (best is None or len(folder) > len(folders[best])):
            best = module
    return best


def main():
    root = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), ".."))
    src = os.path.join(root, "src")
    with open(os.path.join(src, "CMakeLists.txt")) as f:
        folders, deps = parse_modules(f.read())
    folders.setdefault("kernels", "../kernels")  # beside src/: its headers are included by bare name
    problems = []
    cycle = find_cycle(deps)
    if cycle:
        problems.append("src/CMakeLists.txt: the libraries depend on each other in a cycle: " + " → ".join(cycle))
    for dirpath, _, files in os.walk(src):
        for name in sorted(files):
            if not name.endswith((".h", ".cpp", ".cuh", ".cu")):
                continue
            path = os.path.join(dirpath, name)
            rel = os.path.relpath(path, src)
            own = module_of(rel, folders) if rel != "main.cpp" else None
            if rel != "main.cpp" and own is None:
                problems.append(f"src/{rel}: in no module of src/CMakeLists.txt")
                continue
            allowed = closure(deps, own) | {own} if own else set(folders)
            with open(path, encoding="utf-8") as f:
                for line_no, line in enumerate(f, 1):
                    m = INCLUDE.match(line)
                    if not m:
                        continue
                    header = m.group(1)
                    if os.path.exists(os.path.join(dirpath, header)) and "/" not in header:
                        target = own  # beside the file: its own module
                    elif os.path.exists(os.path.join(root, "kernels", header)):
                        target = "kernels"
                    else:
                        target = module_of(header, folders)
                    if target is None:
                        problems.append(f"src/{rel}:{line_no}: includes \"{header}\", which is in no module")
                    elif target not in allowed:
                        problems.append(f"src/{rel}:{line_no}: includes \"{header}\" of module {target}, "
                                        f"but module {own} does not depend on {target}: an upward include")
    for p in problems:
        print(p)
    if problems:
        print(f"check_layers: {len(problems)} problem(s)")
        return 1
    print(f"check_layers: {len(folders) - 1} modules, no upward include, no cycle")
    return 0


if __name__ == "__main__":
    sys.exit(main())
