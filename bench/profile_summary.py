"""Summarise py-spy collapsed stacks (``run.py --profile DIR``): where the workers' time goes.

    python bench/profile_summary.py DIR [--top 30] [--filter workflows/]

Prints the inclusive share of the top functions (a function counts once per sample however
deep it recurses) and the top self-time functions. Idle samples (the worker blocked on the
broker) are reported separately so shares are of busy time.
"""

from __future__ import annotations

import argparse
import re
from collections import Counter
from pathlib import Path

IDLE = ("_brpop_read", "poll (selectors", "select (selectors", "epoll", "drain_events", "_read_from_socket")
LINE = re.compile(r"^(.*) (\d+)$")


def frame_name(frame: str) -> str:
    # "function (path/to/module.py:123)" -> "function (module path without line)"
    m = re.match(r"^(.*) \((.*?)(?::\d+)?\)$", frame)
    if not m:
        return frame
    func, path = m.groups()
    for marker in ("site-packages/", "/work/main/", "lib/python3.11/"):
        if marker in path:
            path = path.split(marker, 1)[1]
    return f"{func} ({path})"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("dir", type=Path)
    ap.add_argument("--top", type=int, default=30)
    ap.add_argument("--filter", default="", help="only functions whose path contains this text")
    args = ap.parse_args()
    inclusive: Counter[str] = Counter()
    own: Counter[str] = Counter()
    busy = idle = 0
    for path in sorted(args.dir.glob("*.txt")):
        for raw in path.read_text().splitlines():
            m = LINE.match(raw.strip())
            if not m:
                continue
            stack, count = m.group(1), int(m.group(2))
            frames = [frame_name(f) for f in stack.split(";") if f]
            if not frames:
                continue
            leaf = frames[-1]
            if any(marker in raw for marker in IDLE) and "workflows" not in stack:
                idle += count
                continue
            busy += count
            own[leaf] += count
            for name in set(frames):
                inclusive[name] += count
    total = busy + idle
    print(f"samples: {total} ({busy} busy, {idle} idle = {100 * idle / max(total, 1):.0f}%)")
    print(f"\ninclusive share of busy samples (top {args.top}):")
    for name, count in inclusive.most_common():
        if args.filter and args.filter not in name:
            continue
        print(f"  {100 * count / max(busy, 1):5.1f}%  {name}")
        args.top -= 1
        if args.top <= 0:
            break
    print("\nself time (top 25):")
    for name, count in own.most_common(25):
        print(f"  {100 * count / max(busy, 1):5.1f}%  {name}")


if __name__ == "__main__":
    main()
