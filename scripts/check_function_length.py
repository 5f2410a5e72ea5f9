#!/usr/bin/env python3
"""Functions stay short: every function body in src/ (free functions, methods, inline methods in
class bodies; lambdas count as part of the function around them) spans at most MAX lines, from
the line of its opening brace's statement to its closing brace. Prints each longer one with its
file, line and length, and exits 1 when there is any. kernels/ is exempt (a kernel's body is
its design).

usage: scripts/check_function_length.py [PROJECT_ROOT] [--max N]
"""
import os
import re
import sys

STRING = re.compile(r'"(?:\\.|[^"\\])*"' + r"|'(?:\\.|[^'\\])*'")


def code_lines(text):
    """The text's lines with comments and string/char literals blanked (braces in them ignored)."""
    text = re.sub(r"/\*.*?\*/", lambda m: re.sub(r"[^\n]", " ", m.group(0)), text, flags=re.S)
    out = []
    for line in text.split("\n"):
        line = STRING.sub('""', line)
        cut = line.find("//")
        out.append(line if cut < 0 else line[:cut])
    return out


def long_functions(path, limit):
    """(start line, length, signature) of every function longer than `limit` lines."""
    with open(path, encoding="utf-8") as f:
        lines = code_lines(f.read())
    scopes = []  # kind of each open brace: "outer" (namespace, class, extern) or "function" or "block"
    pending = ""  # text since the last ; { or } at the current level: what a brace opens
    pending_line = None  # where `pending` starts
    start = None  # (line, signature) of the function being read
    found = []
    for number, line in enumerate(lines, 1):
        for ch in line:
            if ch == "{":
                head = pending.strip()
                in_outer = all(kind == "outer" for kind in scopes)
                if re.search(r"\b(namespace|class|struct|union|enum)\b", head) or head.startswith('extern ""'):
                    kind = "outer" if in_outer else "block"
                elif in_outer and ")" in head and "=" not in head.split("(")[0]:
                    kind = "function"
                    start = (pending_line or number, " ".join(head.split())[:90])
                else:
                    kind = "block"
                scopes.append(kind)
                pending, pending_line = "", None
            elif ch == "}":
                kind = scopes.pop() if scopes else "outer"
                if kind == "function" and start is not None:
                    length = number - start[0] + 1
                    if length > limit:
                        found.append((start[0], length, start[1]))
                    start = None
                pending, pending_line = "", None
            elif ch == ";":
                pending, pending_line = "", None
            else:
                if not pending.strip() and not ch.isspace():
                    pending_line = number
                pending += ch
        pending += " "
    return found


def main():
    args = sys.argv[1:]
    limit = 80
    if "--max" in args:
        i = args.index("--max")
        limit = int(args[i + 1])
        del args[i:i + 2]
    root = os.path.abspath(args[0] if args else os.path.join(os.path.dirname(__file__), ".."))
    problems = []
    for dirpath, _, files in os.walk(os.path.join(root, "src")):
        for name in sorted(files):
            if name.endswith((".cpp", ".h")):
                path = os.path.join(dirpath, name)
                for line, length, signature in long_functions(path, limit):
                    problems.append(f"{os.path.relpath(path, root)}:{line}: {length} lines (over {limit}): {signature}")
    for p in problems:
        print(p)
    if problems:
        print(f"check_function_length: {len(problems)} function(s) over {limit} lines")
        return 1
    print(f"check_function_length: every function in src/ within {limit} lines")
    return 0


if __name__ == "__main__":
    sys.exit(main())
