"""`make mutate`'s summary: the kill rate of the last `mutmut run` (mutants/) and the mutants
that survived, by function, with their diffs, for a reader to judge (`mutmut show NAME`)."""

from __future__ import annotations

import json
import subprocess
import sys
from collections import Counter
from pathlib import Path

MUTMUT = str(Path(sys.executable).with_name("mutmut"))
TARGET = 0.95


def main() -> int:
    subprocess.run([MUTMUT, "export-cicd-stats"], check=True, capture_output=True)
    stats = json.loads(Path("mutants/mutmut-cicd-stats.json").read_text())
    results = subprocess.run([MUTMUT, "results"], check=True, capture_output=True, text=True)
    survivors = [
        line.split(":")[0].strip()
        for line in results.stdout.splitlines()
        if line.strip().endswith(("survived", "no tests"))
    ]
    by_function = Counter(name.rsplit("__mutmut_", 1)[0] for name in survivors)
    for function, count in by_function.most_common():
        print(f"{count:4}  {function}")
    for name in survivors:
        shown = subprocess.run([MUTMUT, "show", name], capture_output=True, text=True).stdout
        changed = [ln for ln in shown.splitlines() if ln[:2] in ("- ", "+ ")]
        print(f"\n{name}\n" + "\n".join(ln[:160] for ln in changed))
    total, killed = stats["total"], stats["killed"] + stats["timeout"]
    rate = killed / total if total else 0.0
    print(
        f"\nmutants: {total}, killed {killed}, survived {stats['survived']}, "
        f"not covered {stats['no_tests']}: kill rate {rate:.1%} (target {TARGET:.0%})"
    )
    return 0 if rate >= TARGET else 1


if __name__ == "__main__":
    sys.exit(main())
