"""The draft's frequent head (specviz/modeling/vocabhead.py): fewer rows, the same output.

Its logits on the rows it keeps are the full head's (bit for bit in int8); every other token is -inf, so the
draft never proposes one. Greedy output stays the target alone's, and in sampling mode the first two
tokens follow the target's exact distribution although the draft's q is zero on some tokens. A
correction drawn only among the draft's rows must fail the same check.
"""

import collections
import dataclasses
import gzip

import pytest
import torch

import specviz.decoding.engine as engine
from specviz import autoregressive_decode, speculative_decode
from specviz.modeling import quant, vocabhead
from specviz.decoding.drafters import ModelDrafter
from specviz.decoding.sampling import logits_to_probs
from stats import passes, total_variation
from tiny import hf_greedy, tiny_lm
from specviz.core.settings import DecodeSettings


@pytest.fixture
def ranked(tmp_path, monkeypatch):
    """ranked(family, ids): ship a ranked list for `family` (in a temporary vocab folder)."""
    monkeypatch.setattr(vocabhead, "VOCAB_DIR", tmp_path)

    def make(family: str, ids: list[int]) -> None:
        with gzip.open(vocabhead.ranked_path(family), "wt", encoding="ascii") as f:
            f.write("# test list\n")
            f.writelines(f"{i}\n" for i in ids)
    return make


def test_int8_rows_give_the_full_heads_logits_bit_for_bit():
    torch.manual_seed(0)
    full = quant.Int8Linear(torch.nn.Linear(32, 64, bias=False))
    ids = torch.tensor([0, 3, 7, 8, 40, 63])
    sub = full.rows(ids)
    for rows in (1, 5):  # a draft step, and a prompt (each row quantized on its own range)
        x = torch.randn(rows, 32) * 3
        assert torch.equal(sub(x), full(x)[:, ids])


@pytest.mark.parametrize("precision", ["float32", "int8"])
def test_the_head_keeps_its_rows_exact_and_bars_the_rest(ranked, precision):
    model = quant.apply(tiny_lm(3).float(), precision)
    ranked("fam", [5, 9, 2, 60, 33])
    rows = vocabhead.frequent_rows(model, "fam", rows=3, always=[1])
    assert rows.ids.tolist() == [1, 2, 5, 9]  # the first 3 ranked, and the end-of-reply id
    head = vocabhead.VocabHead(model, rows)
    head.start([40, 9, 40])  # the prompt's tokens join
    head.add([12, 2])  # and a round's committed ones
    allowed = [1, 2, 5, 9, 12, 40]
    hidden = torch.randn(2, model.config.hidden_size)
    with torch.no_grad():
        got, want = head.logits(hidden), model.lm_head(hidden)  # (2, V)
    if precision == "int8":  # the same int8 rows and scales: bit for bit
        assert torch.equal(got[:, allowed], want[:, allowed])
    else:  # the same float32 rows in a smaller product: to float rounding
        torch.testing.assert_close(got[:, allowed], want[:, allowed], rtol=1e-6, atol=1e-6)
    barred = [i for i in range(model.config.vocab_size) if i not in allowed]
    assert torch.isneginf(got[:, barred]).all()
    assert head.size == len(allowed)
    head.start([7])  # a new sequence forgets the last one's extras
    assert head.size == 5 and torch.isfinite(head.logits(hidden)[:, 7]).all()


def test_a_model_without_a_list_or_a_plain_head_gets_none(ranked):
    model = tiny_lm(3).float()
    assert vocabhead.frequent_rows(model, "no-such-family") is None
    ranked("fam", [1, 2, 3])
    if "int4" in quant.supported("cpu"):  # torchao's int4 head is neither a Linear nor an Int8Linear
        assert vocabhead.frequent_rows(quant.apply(tiny_lm(3).float(), "int4"), "fam") is None
    assert vocabhead.frequent_rows(model, "fam", rows=2) is vocabhead.frequent_rows(model, "fam", rows=2)  # shared


@pytest.mark.parametrize("precision", ["float32", "int8"])
@pytest.mark.parametrize("k", [2, 5])
def test_greedy_output_is_the_target_alone_with_a_frequent_head(ranked, precision, k):
    target = tiny_lm(5)
    draft = quant.apply(tiny_lm(5).float(), precision)  # the target's own weights: it agrees often
    ranked("fam", list(range(0, 64, 2)))  # the even ids
    rows = vocabhead.frequent_rows(draft, "fam", rows=32)
    for prompt in ([3, 4, 5], [9, 1, 7, 7, 2]):
        drafter = ModelDrafter(draft, rows=rows)
        run = speculative_decode(target, drafter, prompt, DecodeSettings(k=k, max_new_tokens=24))
        assert run.token_ids == hf_greedy(target, prompt, 24)
        assert run.token_ids == autoregressive_decode(target, prompt, DecodeSettings(max_new_tokens=24)).token_ids
        seen = set(prompt)
        for r in run.rounds:  # every drafted token was allowed when it was drafted
            assert all(t % 2 == 0 or t in seen for t in r.drafted), (r.drafted, seen)
            seen |= set(r.emitted)
        committed = prompt + [t for r in run.rounds[:-1] for t in r.emitted]
        assert {t for t in committed if t % 2} <= set(drafter.head.extra)  # the run's own tokens joined
    assert run.n_accepted > 0


# --------------------------------------------------------------------------
# sampling: exact although q is zero outside the draft's rows

VOCAB, PROMPT, N_RUNS, KEPT = 6, [1, 3], 3000, [2, 4]  # the target's first token is 0 or 5 18 % of the time


def exact_two_token_distribution(target):
    dist = {}
    with torch.no_grad():
        p1 = logits_to_probs(target(torch.tensor([PROMPT])).logits[0, -1], 1.0)
        for x1 in range(VOCAB):
            p2 = logits_to_probs(target(torch.tensor([PROMPT + [x1]])).logits[0, -1], 1.0)
            for x2 in range(VOCAB):
                dist[(x1, x2)] = float(p1[x1] * p2[x2])
    return dist


def two_token_counts(target, draft, rows, k):
    counts, kinds, drafted = collections.Counter(), collections.Counter(), collections.Counter()
    for seed in range(N_RUNS):
        run = speculative_decode(target, ModelDrafter(draft, rows=rows), PROMPT,
                                 DecodeSettings(k=k, temperature=1.0, max_new_tokens=2, seed=seed))
        counts[tuple(run.token_ids)] += 1
        kinds.update(r.extra_kind for r in run.rounds)
        drafted.update(run.rounds[0].drafted[:1])
    return counts, kinds, drafted


@pytest.fixture
def sampling_setup(ranked):
    target = tiny_lm(11, vocab=VOCAB, init=1.0)
    draft = quant.apply(tiny_lm(11, vocab=VOCAB, init=1.0).float(), "int8")
    ranked("fam", KEPT)
    return target, draft, vocabhead.frequent_rows(draft, "fam", rows=len(KEPT))


@pytest.mark.parametrize("k", [1, 2])
def test_sampling_with_a_frequent_head_matches_the_target_distribution(sampling_setup, k):
    target, draft, rows = sampling_setup
    exact = exact_two_token_distribution(target)
    counts, kinds, drafted = two_token_counts(target, draft, rows, k)
    assert passes(counts, exact, N_RUNS), total_variation(counts, exact, N_RUNS)
    assert set(drafted) <= set(KEPT + PROMPT)  # the first draft never proposed tokens 0 or 5 ...
    assert sum(exact[(a, b)] for a in (0, 5) for b in range(VOCAB)) > 0.15  # ... which the target often writes
    assert sum(counts[(a, b)] for a in (0, 5) for b in range(VOCAB)) > 0.15 * N_RUNS * 0.8
    assert kinds["correction"] > N_RUNS // 10


def test_a_correction_drawn_only_among_the_drafts_rows_fails_the_check(sampling_setup, monkeypatch):
    """The residual norm(max(0, p - q)) restricted to tokens the draft could propose: the check must fail."""
    target, draft, rows = sampling_setup
    exact = exact_two_token_distribution(target)
    real = engine.residual
    monkeypatch.setattr(engine, "residual", lambda p, q, d: real(p * (q > 0) if q is not None else p, q, d))
    counts, _, _ = two_token_counts(target, draft, rows, 2)
    assert not passes(counts, exact, N_RUNS)


# --------------------------------------------------------------------------
# the pair decides


def test_a_pair_drafts_through_the_frequent_head_only_when_asked_and_listed(tiny_pair, ranked):
    pair = dataclasses.replace(tiny_pair, draft_head="frequent")
    assert pair.drafter() is pair.draft  # no list for the family 'tiny': the full head
    ranked("tiny", list(range(2, 20)))
    drafter = pair.drafter()
    assert isinstance(drafter, ModelDrafter) and drafter.head_name == "frequent-18"  # all of a short list
    assert 1 in drafter.head.rows.members  # the pair's end-of-reply id is always allowed
    assert tiny_pair.drafter() is tiny_pair.draft  # draft_head 'full'


def test_runs_record_the_head_and_the_bench_compares_it_with_the_full_one(tiny_pair, ranked):
    from types import SimpleNamespace

    from specviz.tools import bench
    from specviz.teaching import explain

    ranked("tiny", list(range(2, 20)))
    pair = dataclasses.replace(tiny_pair, draft_head="frequent")
    args = SimpleNamespace(max_new_tokens=6, temperature=0.7)
    best = bench.run_method(pair, "best", [3, 4, 5], "greedy", args, seed=0).run
    full = bench.run_method(pair, bench.BEST_FULL_HEAD, [3, 4, 5], "greedy", args, seed=0).run
    assert best.settings["draft_head"] == "frequent-18" and "draft_head" not in full.settings
    assert best.token_ids == full.token_ids  # greedy: the same text either way
    assert "18 most written tokens" in explain.drafter_words("int8", best.settings["draft_head"])
    assert explain.drafter_words("int8") == "int8 draft model"


def test_the_head_setting_is_checked_and_full_is_the_default():
    from specviz.tools import cli
    from specviz.core.errors import InvalidSetting

    assert vocabhead.check(None, "cpu") == vocabhead.check("auto", "cuda") == "full"
    assert vocabhead.check("frequent", "cpu") == "frequent"
    # against an int8 target the draft's step weighs more: auto drafts through the frequent head
    assert vocabhead.check(None, "cpu", "int8") == vocabhead.check("auto", "cpu", "int8") == "frequent"
    assert vocabhead.check("full", "cpu", "int8") == "full"
    with pytest.raises(InvalidSetting, match="draft head"):
        vocabhead.check("half", "cpu")
    assert cli.parse_bench_args(["--tiny", "--draft-head", "frequent"]).draft_head == "frequent"
    assert cli.parse_bench_args(["--tiny"]).draft_head == "auto"
