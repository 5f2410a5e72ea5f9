#!/usr/bin/env python3
"""Writes random GPT-2 token ids as one token shard (header: magic 20240520, version 1, count),
the input of the GPU benchmarks: usage random_token_shard.py FILE COUNT."""
import array
import random
import struct
import sys


def main() -> int:
    path, count = sys.argv[1], int(sys.argv[2])
    random.seed(0)
    tokens = array.array("H", (random.randrange(50257) for _ in range(count)))
    with open(path, "wb") as f:
        f.write(struct.pack("<256i", 20240520, 1, count, *([0] * 253)))
        f.write(tokens.tobytes())
    return 0


if __name__ == "__main__":
    sys.exit(main())
