"""Summarise a mutmut run for `make mutate`: score per module, survivors, untested functions.

Reads ``mutants/attention_src/*.py.meta`` (mutmut 3's results). ``MUTATE_GLOBS``
(space-separated mutmut name patterns) restricts the report to the mutants `make mutate` was
asked to run. Score = killed / tested: killed counts timeouts and crashes too; tested is every
mutant some test ran (suspicious ones count as not killed); "no tests", skipped and not-checked
mutants are listed apart. mutmut does not mutate decorated functions (other than
``@staticmethod`` and ``@classmethod``): they are listed, to be covered by planted bugs.
"""

from __future__ import annotations

import ast
import fnmatch
import json
import os
import pathlib
from collections import Counter, defaultdict

from mutmut.stats import status_by_exit_code

DEAD = ("killed", "timeout", "segfault")
UNTESTED = ("no tests", "skipped", "not checked")


def statuses(globs: list[str]) -> dict[str, str]:
    status = {}
    for meta in sorted(pathlib.Path("mutants/attention_src").glob("*.py.meta")):
        for name, code in json.loads(meta.read_text())["exit_code_by_key"].items():
            if any(fnmatch.fnmatchcase(name, g) for g in globs):
                status[name] = status_by_exit_code[code]
    return status


def decorated_functions(globs: list[str]) -> list[str]:
    """Functions mutmut skips because of a decorator, named as mutmut names them."""
    skipped = []

    def walk(node: ast.AST, prefix: str, stem: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.ClassDef):
                walk(child, f"xǁ{child.name}ǁ", stem)
            elif isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef):
                decorators = [ast.unparse(d) for d in child.decorator_list]
                if decorators and decorators not in (["staticmethod"], ["classmethod"]):
                    name = f"attention_src.{stem}.{prefix or 'x_'}{child.name}"
                    if any(fnmatch.fnmatchcase(name + "__mutmut_1", g) for g in globs):
                        skipped.append(f"{name} (@{', @'.join(decorators)})")

    for path in sorted(pathlib.Path("attention_src").glob("*.py")):
        walk(ast.parse(path.read_text()), "", path.stem)
    return skipped


def main() -> None:
    globs = os.environ.get("MUTATE_GLOBS", "").split() or ["*"]
    status = statuses(globs)
    counts = Counter(status.values())
    for_module: dict[str, Counter] = defaultdict(Counter)
    for name, st in status.items():
        for_module[name.split(".")[1]][st] += 1
    print(f"{'module':18s} {'killed':>7s} {'tested':>7s} {'no tests':>8s} {'score':>7s}")
    for module, c in sorted(for_module.items()):
        killed = sum(c[s] for s in DEAD)
        tested = sum(c.values()) - sum(c[s] for s in UNTESTED)
        score = f"{100 * killed / tested:6.1f}%" if tested else "    -"
        print(f"{module:18s} {killed:7d} {tested:7d} {c['no tests']:8d} {score:>7s}")
    killed = sum(counts[s] for s in DEAD)
    total = sum(counts.values()) - sum(counts[s] for s in UNTESTED)
    print(f"MUTATION SCORE {killed}/{total} = {100 * killed / max(total, 1):.1f}% "
          f"(killed incl. {counts['timeout']} timeouts / tested; excluded: "
          f"{counts['no tests']} no tests, {counts['skipped']} skipped, "
          f"{counts['not checked']} not checked; suspicious: {counts['suspicious']})")
    untested = Counter(n.rsplit("__mutmut_", 1)[0] for n, s in status.items() if s == "no tests")
    if untested:
        print("Untested functions (no unit test reaches them):")
        for function, n in sorted(untested.items()):
            print(f"  {function} ({n} mutants)")
    skipped = decorated_functions(globs)
    if skipped:
        print("Not mutated at all (mutmut skips decorated functions; test them by planting bugs):")
        for name in skipped:
            print("  " + name)
    survivors = sorted(n for n, s in status.items() if s == "survived")
    print(f"Surviving mutants ({len(survivors)}; see one with: .venv/bin/mutmut show NAME):")
    for name in survivors:
        print("  " + name)


if __name__ == "__main__":
    main()
