import os
from typing import List, Optional


class Counter:
    """Count things, politely."""

    def __init__(self, start: int = 0) -> None:
        self.value = start

    def bump(self, by: int = 1) -> int:
        self.value += by
        return self.value


def main(argv: Optional[List[str]] = None) -> int:
    c = Counter()
    for _ in range(10):
        c.bump()
    print(f"value={c.value!r}", os.getcwd())
    return 0 if c.value == 10 else 1


if __name__ == "__main__":
    raise SystemExit(main())
