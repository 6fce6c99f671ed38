"""How close the local model with int8 activations stays to the packaged model, and how much faster it is, on this
CPU (docs/retrieval.md, "The local model with int8 activations").

    python scripts/int8_agreement.py --data ../shared/data/locomo --texts 300

Embeds the first ``--texts`` turns of the LoCoMo conversations ("Speaker: text", as the eval writes them) with both
models and prints the cosine between each text's two vectors (mean, 5th percentile, worst). Then times both models
in turn on the same machine minutes, ``--rounds`` rounds: a short query embedded alone (p50 ms) and the texts
embedded as documents (texts/s). Whether the CPU has int8 dot-product instructions (VNNI) decides how onnxruntime
computes the int8 products, so the figures are the machine's: the script prints which it has.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time
from pathlib import Path

import numpy as np
from recall_hub.bench import locomo
from recall_hub.bench.machine import int8_flags
from recall_hub.embedders.local import LocalEmbedder

QUERY = "What did Caroline research after the support group?"


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", type=Path, default=Path("../shared/data/locomo"))
    parser.add_argument("--texts", type=int, default=300)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    texts = [turn.title() for conv in locomo.load_locomo(args.data) for turn in conv.turns][: args.texts]
    models = {"packaged": LocalEmbedder(int8_activations=False), "int8 activations": LocalEmbedder()}
    try:
        vectors = [np.asarray(await m.embed(texts)) for m in models.values()]
        cos = np.einsum("ij,ij->i", *vectors)
        print(f"CPU flags: {int8_flags()}")
        print(f"{len(texts)} LoCoMo turns, cosine between the two models' vectors: mean {cos.mean():.4f}, "
              f"5th percentile {np.percentile(cos, 5):.4f}, worst {cos.min():.4f}")
        query_ms: dict[str, list[float]] = {name: [] for name in models}
        texts_per_s: dict[str, list[float]] = {name: [] for name in models}
        for _ in range(args.rounds):  # the two in turn: this machine's speed drifts between minutes
            for name, model in models.items():
                for _ in range(40):
                    start = time.perf_counter()
                    await model.embed_queries([QUERY])
                    query_ms[name].append((time.perf_counter() - start) * 1e3)
                start = time.perf_counter()
                await model.embed(texts[:64])
                texts_per_s[name].append(min(64, len(texts)) / (time.perf_counter() - start))
        for name in models:
            print(f"{name:>17}: a short query p50 {statistics.median(query_ms[name]):.2f} ms; documents "
                  f"{statistics.median(texts_per_s[name]):.0f} texts/s (median of {args.rounds} rounds)")
    finally:
        for model in models.values():
            await model.aclose()


if __name__ == "__main__":
    asyncio.run(main())
