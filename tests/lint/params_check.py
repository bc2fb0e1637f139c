#!/usr/bin/env python3
"""tests/lint/params_check.py: no function takes more than six parameters.

A function that needs more takes an options struct (STYLE.md, from libbpf). Checked in every
C source and header in git: function definitions, and function-pointer declarators (vtable
members, typedefs, parameters), since a wide pointer type forces wide definitions.

Prints each function over the limit that params_allow.txt does not list, and each line of
params_allow.txt that no longer matches one (so the list only shrinks); exits 1 if either.
    params_check.py [--list]    --list: print every function over the limit, as the allow-list
                                takes them ("path name parameters")
"""
import os
import re
import subprocess
import sys

MAX_PARAMS = 6
HERE = os.path.dirname(os.path.abspath(__file__))
ALLOW = os.path.join(HERE, "params_allow.txt")
KEYWORDS = {"if", "for", "while", "switch", "return", "sizeof", "do", "else", "case",
            "_Generic", "_Alignof", "alignof", "__attribute__", "__typeof__", "typeof",
            "defined", "_Static_assert", "static_assert"}


def strip(src):
    """src with comments, string and character literals and preprocessor lines blanked
    (newlines kept, so that offsets still give line numbers)."""
    out = []
    i, n = 0, len(src)
    line_start = True
    while i < n:
        c = src[i]
        if line_start and c == "#":
            # a directive, with its continuation lines
            j = i
            while j < n and src[j] != "\n":
                if src[j] == "\\" and j + 1 < n and src[j + 1] == "\n":
                    j += 1
                j += 1
            out.append(re.sub(r"[^\n]", " ", src[i:j]))
            i = j
            continue
        if c == "/" and src.startswith("/*", i):
            j = src.find("*/", i + 2)
            j = n if j < 0 else j + 2
            out.append(re.sub(r"[^\n]", " ", src[i:j]))
            i = j
            continue
        if c == "/" and src.startswith("//", i):
            j = src.find("\n", i)
            j = n if j < 0 else j
            out.append(" " * (j - i))
            i = j
            continue
        if c in "\"'":
            j = i + 1
            while j < n and src[j] != c and src[j] != "\n":
                j += 2 if src[j] == "\\" else 1
            j = min(j + 1, n)
            out.append(c + " " * (j - i - 2) + c if j - i >= 2 else " ")
            i = j
            line_start = False
            continue
        out.append(c)
        if c == "\n":
            line_start = True
        elif not c.isspace():
            line_start = False
        i += 1
    return "".join(out)


def matching(s, i):
    """Index of the parenthesis closing the one at s[i], or -1."""
    depth = 0
    for j in range(i, len(s)):
        if s[j] == "(":
            depth += 1
        elif s[j] == ")":
            depth -= 1
            if depth == 0:
                return j
    return -1


def count_params(inner):
    inner = inner.strip()
    if inner in ("", "void"):
        return 0
    depth, n = 0, 1
    for c in inner:
        if c in "([{":
            depth += 1
        elif c in ")]}":
            depth -= 1
        elif c == "," and depth == 0:
            n += 1
    return n


def scan(path, src):
    """(line, name, parameters) of every definition and function-pointer declarator."""
    s = strip(src)
    found = []
    depth = 0
    ident = re.compile(r"[A-Za-z_]\w*")
    outer, outer_end = None, -1  # the function whose parameter list is being read
    i, n = 0, len(s)
    while i < n:
        c = s[i]
        if c == "{":
            depth += 1
        elif c == "}":
            depth -= 1
        elif c == "(":
            close = matching(s, i)
            if close < 0:
                break
            before = s[max(0, i - 300):i].rstrip()
            m = re.search(r"\(\s*\*\s*(?:const\s+)?([A-Za-z_]\w*)\s*\)\s*$", before)
            if m:  # (*name)(params): a function-pointer declarator
                name = m.group(1)
                if outer and i < outer_end:  # a parameter: named after its function
                    name = outer + "." + name
                found.append((s.count("\n", 0, i) + 1, name, count_params(s[i + 1:close])))
                i += 1
                continue
            m = re.search(r"([A-Za-z_]\w*)\s*$", before)
            if m and i > outer_end and m.group(1) not in KEYWORDS:
                outer, outer_end = m.group(1), close
            after = s[close + 1:].lstrip()
            if depth == 0 and m and m.group(1) not in KEYWORDS and after.startswith("{"):
                # at file scope, name(params) { : a definition (its return type is before it)
                prev = before[:m.start()].rstrip()
                if prev and (ident.search(prev[-1:]) or prev[-1] in "*"):
                    found.append((s.count("\n", 0, i) + 1, m.group(1),
                                  count_params(s[i + 1:close])))
                i = close + 1
                continue
        i += 1
    return found


def sources(root):
    try:
        out = subprocess.run(["git", "ls-files", "*.c", "*.h"], cwd=root, check=True,
                             capture_output=True, text=True).stdout.split()
        if out:
            return sorted(out)
    except (OSError, subprocess.CalledProcessError):
        pass
    files = []
    for d, dirs, fs in os.walk(root):
        dirs[:] = [x for x in dirs if not x.startswith(("build", ".")) and x != "node_modules"]
        files += [os.path.relpath(os.path.join(d, f), root) for f in fs if f.endswith((".c", ".h"))]
    return sorted(files)


def main():
    root = os.environ.get("AIRLOCK_SOURCE_DIR") or os.path.dirname(os.path.dirname(HERE))
    wide = set()
    where = {}
    for rel in sources(root):
        with open(os.path.join(root, rel), errors="replace") as f:
            src = f.read()
        for line, name, n in scan(rel, src):
            if n > MAX_PARAMS:
                wide.add((rel, name))
                where.setdefault((rel, name), (line, n))
    if "--list" in sys.argv[1:]:
        for rel, name in sorted(wide):
            print(rel, name, where[(rel, name)][1])
        return 0
    allowed = set()
    with open(ALLOW) as f:
        for ln in f:
            ln = ln.split("#", 1)[0].split()
            if ln:
                allowed.add((ln[0], ln[1]))
    new = sorted(wide - allowed)
    stale = sorted(allowed - wide)
    for rel, name in new:
        line, n = where[(rel, name)]
        print(f"{rel}:{line}: {name} takes {n} parameters (at most {MAX_PARAMS}): give it an "
              f"options struct, or pass the object the values come from")
    for rel, name in stale:
        print(f"tests/lint/params_allow.txt: {rel} {name} no longer takes more than "
              f"{MAX_PARAMS} parameters (or is gone): remove its line")
    if new or stale:
        return 1
    print(f"params_check: no function over {MAX_PARAMS} parameters but the "
          f"{len(allowed)} of params_allow.txt")
    return 0


if __name__ == "__main__":
    sys.exit(main())
