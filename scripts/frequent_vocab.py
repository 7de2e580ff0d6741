"""Rank a pair's tokens by how much the draft itself writes them: the list behind its frequent head.

There is no text corpus on these machines, and the one a user has may not match what the draft
writes. So the draft ranks its own vocabulary: from each seed instruction below (none of them a
bench or held-out prompt of specviz/core/prompts.py), it writes GEN_TOKENS tokens, sampled at T = 1, and
at every position the whole next-token distribution is added up. A token's score is the total
probability the draft gave it; ties (tokens it never gave any weight) go by id, which in a BPE
vocabulary is the order the merges were learned, roughly the training corpus's frequency.

    python scripts/frequent_vocab.py [--pair NAME] [--rows 65536] [--out specviz/vocab/<family>.txt.gz]

The output keeps the first --rows ids, most frequent first, one per line (gzip). It is data, built
once per tokenizer family; specviz/modeling/vocabhead.py reads it.
"""

from __future__ import annotations

import argparse
import gzip
import time

import torch

from specviz.core import prompts
from specviz.modeling.lm import CachedLM
from specviz.decoding.models import load_pair
from specviz.modeling.vocabhead import ranked_path

GEN_TOKENS = 96
SEED = 0

INSTRUCTIONS = [
    # stories, poems, description
    "Write a short story about a fox who learns to sail.", "Write a poem about winter mornings in a small village.",
    "Describe a dream in which the city floats above the ocean.", "Tell a bedtime story about a dragon who is afraid of the dark.",
    "Write a haiku about rain on a window.", "Write a limerick about a forgetful wizard.",
    "Describe a sunset over the desert in vivid language.", "Write the opening paragraph of a mystery novel set on a train.",
    "Write a fairy tale about a baker and a talking loaf of bread.", "Describe an abandoned castle at midnight.",
    "Write a love letter from a robot to the moon.", "Write a short fable with a moral about patience.",
    # explanations and facts
    "Explain how photosynthesis works.", "Why is the sky blue? Answer in three sentences.",
    "What causes earthquakes?", "Explain the water cycle to a ten-year-old.",
    "Who was Ada Lovelace and why is she remembered?", "Summarize the causes of the French Revolution.",
    "What is the difference between a virus and a bacterium?", "How does a refrigerator keep food cold?",
    "Explain what inflation is in economics.", "What is the role of the heart in the human body?",
    "How do vaccines train the immune system?", "What was the Silk Road?",
    "Explain how a bill becomes a law.", "What is machine learning, in plain words?",
    # lists
    "List five fruits that are high in vitamin C.", "List the continents of the world, one per line.",
    "List ten common English verbs.", "Give me a packing list for a weekend camping trip.",
    "List the steps to make a cup of tea.", "Name six famous painters and one work by each.",
    "List the months of the year with their number of days.", "List the primary and secondary colours.",
    "List six kitchen utensils and what each is for.", "Name five programming languages and their creators.",
    # code
    "Write a Python function that reverses a linked list.", "Write a JavaScript function that debounces another function.",
    "Write a SQL query that finds the top five customers by total order value.",
    "Write a Python class for a bank account with deposit and withdraw methods.",
    "Write a bash script that counts the lines in every .txt file in a folder.", "Write a C function that computes the length of a string.",
    "Write a Python function that parses a CSV file and returns a list of dictionaries.",
    "Explain what a hash table is, with a short Python example.", "Write unit tests in pytest for a function add(a, b).",
    "Write a Rust function that returns the largest element of a vector.",
    "Write a Python function that merges two sorted lists.", "Write a Python script that downloads a web page and prints its title.",
    "Write a binary search in Python with comments.", "Write a Java class for a point with x and y coordinates.",
    # everyday writing
    "Write a polite email asking a colleague to review a document.", "Write a product description for a reusable water bottle.",
    "Give three tips for studying effectively.", "Write a recipe for pancakes.",
    "Translate 'good morning, how are you?' into French and Spanish.", "Write a short dialogue between a teacher and a student about homework.",
    "What are the benefits of regular exercise?", "Write a motivational speech for a sports team.", "Compare cats and dogs as pets.",
    "Write a cover letter for a job as a librarian.",
]
CONTINUATIONS = ["Once upon a time", "The history of Rome", "def main():", "In the beginning", "Chapter 1\n\n",
                 "The following table shows"]


@torch.inference_mode()
def draft_mass(pair, log=print) -> torch.Tensor:
    """(V,) the probability the draft gave each token, summed over every position it wrote."""
    lm, g = CachedLM(pair.draft), torch.Generator().manual_seed(SEED)
    mass = torch.zeros(pair.draft.lm_head.out_features, dtype=torch.float64)
    eos = set(pair.eos_token_ids)
    items = [(s, True) for s in INSTRUCTIONS] + [(s, False) for s in CONTINUATIONS]
    t0 = time.perf_counter()
    for n, (text, chat) in enumerate(items):
        lm.reset()
        pending = prompts.encode(pair.tokenizer, text, chat)
        for _ in range(GEN_TOKENS):
            p = torch.softmax(lm.feed(pending, keep=1)[-1].double(), -1)  # (V,)
            mass += p
            tok = int(torch.multinomial(p, 1, generator=g))
            if tok in eos:
                break
            pending = [tok]
        log(f"{n + 1}/{len(items)} {time.perf_counter() - t0:.0f} s")
    return mass


def ranked(mass: torch.Tensor, vocab: int) -> list[int]:
    """Token ids below `vocab`, by mass (highest first), ties by id."""
    return torch.sort(-mass[:vocab], stable=True).indices.tolist()


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pair", default=None)
    ap.add_argument("--rows", type=int, default=65536)
    ap.add_argument("--out", default=None)
    ap.add_argument("--mass", default=None, help="also save the raw mass (torch.save) here")
    a = ap.parse_args(argv)
    pair = load_pair(a.pair)  # the draft as it drafts (int8 on a CPU): 3-6 times faster than float32 here
    mass = draft_mass(pair)
    if a.mass:
        torch.save(mass, a.mass)
    order = ranked(mass, pair.shared_vocab)[: a.rows]
    out = a.out or ranked_path(pair.spec.draft.tokenizer)
    with gzip.open(out, "wt", encoding="ascii", compresslevel=9) as f:
        f.write(f"# {pair.spec.draft.tokenizer}: token ids, most written first, by scripts/frequent_vocab.py "
                f"on the pair {pair.name}, {pair.draft_precision} draft "
                f"({len(INSTRUCTIONS) + len(CONTINUATIONS)} seeds x {GEN_TOKENS} tokens)\n")
        f.writelines(f"{i}\n" for i in order)
    print(f"wrote {len(order)} ids to {out}")


if __name__ == "__main__":
    main()
