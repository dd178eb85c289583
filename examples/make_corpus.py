"""Writes a text corpus for the examples and benchmarks: words drawn from a Zipf-like
distribution over a fixed vocabulary, seeded, so every run writes the same text.

usage: python examples/make_corpus.py OUTPUT_FILE [--megabytes N] [--seed S]
"""

from __future__ import annotations

import argparse
import itertools
import random
from pathlib import Path

SYLLABLES = ["ka", "lo", "mi", "ne", "ru", "ta", "vo", "zi", "pe", "shu", "an", "or", "el",
             "ix", "um", "yo", "dra", "fle", "gri", "bo"]


def vocabulary(size: int, rng: random.Random) -> list[str]:
    words = set()
    while len(words) < size:
        words.add("".join(rng.choice(SYLLABLES) for _ in range(rng.randint(1, 4))))
    return sorted(words)


def write_corpus(path: Path, megabytes: float, seed: int = 7, words_per_line: int = 12) -> None:
    rng = random.Random(seed)
    vocab = vocabulary(5000, rng)
    cum_weights = list(itertools.accumulate(1.0 / (rank + 1) for rank in range(len(vocab))))
    punctuation = [" ", " ", " ", ", ", ". ", "; ", " - ", "! "]
    target = int(megabytes * (1 << 20))
    written = 0
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w") as out:
        while written < target:
            lines = []
            for _ in range(1000):
                words = rng.choices(vocab, cum_weights=cum_weights, k=words_per_line)
                if rng.random() < 0.1:
                    words[0] = words[0].capitalize()
                if rng.random() < 0.05:
                    words.append(str(rng.randint(0, 2030)))
                line = "".join(w + rng.choice(punctuation) for w in words).rstrip()
                lines.append(line)
            chunk = "\n".join(lines) + "\n"
            out.write(chunk)
            written += len(chunk)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("output", type=Path)
    parser.add_argument("--megabytes", type=float, default=1.0)
    parser.add_argument("--seed", type=int, default=7)
    args = parser.parse_args()
    write_corpus(args.output, args.megabytes, args.seed)


if __name__ == "__main__":
    main()
