"""specviz.data.playback: a live playback knows its last round from the stream that made it."""

import json

import pytest

from specviz.device import devqueue
from specviz.decoding import engine
from specviz.data import playback, records
from specviz.decoding.tree import tree_stream
from tiny import tiny_lm
from specviz.core.settings import DecodeSettings

PROMPT = [2, 7, 1, 8, 2, 8]


def _streams(target, draft, n: int, eos: list[int]):
    """Each engine's stream over the same prompt, by name."""
    return {
        "chain": lambda: engine.speculative_stream(target, draft, PROMPT, DecodeSettings(k=3, max_new_tokens=n),
                                                   eos_token_id=eos),
        "target alone": lambda: engine.autoregressive_stream(target, PROMPT, DecodeSettings(max_new_tokens=n),
                                                             eos_token_id=eos),
        "tree": lambda: tree_stream(target, draft, PROMPT, DecodeSettings(max_new_tokens=n), budget=6, max_depth=3,
                                    eos_token_id=eos),
        "spine": lambda: tree_stream(target, draft, PROMPT, DecodeSettings(max_new_tokens=n), budget=6, max_depth=3,
                                     shape="spine", eos_token_id=eos),
    }


@pytest.mark.parametrize("kind", ["chain", "target alone", "tree", "spine"])
@pytest.mark.parametrize("ends_on", ["max_new_tokens", "eos"])
def test_the_last_round_brings_the_run_with_it_and_holds_the_device_no_longer(kind, ends_on, tmp_path, monkeypatch):
    # the playback is given no settings: the stream alone says which round was the last
    target, draft = tiny_lm(100), tiny_lm(200)
    n = 10
    eos: list[int] = []
    if ends_on == "eos":  # a token the target writes third ends the next run there
        first = _streams(target, draft, n, [])[kind]()
        for _ in first:
            pass
        eos = [first.run.token_ids[2]]
    stream = _streams(target, draft, n, eos)[kind]()  # made before the trace: the spine's chooser times passes
    trace = tmp_path / "holds.jsonl"
    monkeypatch.setattr(devqueue.QUEUE, "trace", str(trace))
    pb = playback.Playback.live(stream, PROMPT, "", {})
    revealed = []
    while not pb.done:
        rnd = pb.advance()
        assert rnd is not None, "the stream ended one round late: the last round did not bring the Run"
        revealed.append(rnd)
    monkeypatch.setattr(devqueue.QUEUE, "trace", None)

    assert pb.run is not None and pb.advance() is None
    assert pb.run.stop_reason == ends_on
    assert len(pb.run.rounds) == len(revealed) == len(pb.rounds)
    # one hold per round: collecting the Run after the last round did not queue for the device again
    rows = [json.loads(r) for r in trace.read_text().splitlines()]
    assert len(rows) == len(revealed)
    # each labelled with the Run's mode, so a load test can tell the target alone's one-token holds apart
    want = {"chain": records.SPECULATIVE, "target alone": records.AUTOREGRESSIVE}.get(kind)
    assert all(r.get("what") == want for r in rows), (kind, {r.get("what") for r in rows})


@pytest.mark.parametrize("kind", ["chain", "target alone", "tree"])
def test_each_stream_queues_for_its_models_device(kind):
    # models on another device than the CPU: "meta" holds shapes only, and the stream is never iterated,
    # so nothing is computed (the spine is left out: making its chooser times passes)
    target, draft = tiny_lm(100).to("meta"), tiny_lm(200).to("meta")
    stream = _streams(target, draft, 4, [])[kind]()
    assert stream.device == "meta", f"the {kind} stream would queue for {stream.device!r}, not its models' device"
    stream.close()


def _flagged(run: records.Run, busy: set[int], busy_s: float, quiet_s: float) -> records.Run:
    """The run with the rounds in `busy` marked as timed under outside load, each taking busy_s; others quiet_s."""
    import dataclasses

    rounds = [dataclasses.replace(r, outside_load=i in busy, round_s=busy_s if i in busy else quiet_s)
              for i, r in enumerate(run.rounds)]
    return dataclasses.replace(run, rounds=rounds, decode_s=sum(r.round_s for r in rounds))


def test_the_load_note_weighs_the_time_under_outside_load():
    """A round under outside load that took a small share of the timed time gets a quiet note, not the
    warning that the figures are not the device's speed; a large share, or an unknown one, gets the warning."""
    from specviz.data import runfile

    run = engine.speculative_decode(tiny_lm(100), tiny_lm(200), PROMPT, DecodeSettings(k=2, max_new_tokens=24),
                                    eos_token_id=[])
    n = len(run.rounds)
    assert n >= 8
    assert playback.load_note(_flagged(run, set(), 0.1, 0.1)) is None
    many = _flagged(run, {0}, 0.01, 0.5)  # a short round under load among long quiet ones: 2 % or less
    note = playback.load_note(many)
    assert note.share == pytest.approx(0.01 / (0.01 + 0.5 * (n - 1)))
    assert not note.serious and "Taken under outside load" not in note.text
    assert f"1 of the run's {n} rounds" in note.text and f"{note.share:.1%}" in note.text
    big = playback.load_note(_flagged(run, {0, 1}, 0.5, 0.5))
    assert big.serious and big.text.startswith("Taken under outside load: 2 of the run's")
    # the target alone's passes under load count with their seconds
    base = runfile.baseline_of(run, _flagged(run, {0, 1, 2}, 0.5, 0.5))
    assert base["base_outside_load"] == 3 and base["base_outside_load_s"] == 1.5
    both = playback.load_note(many, base)
    assert both.share == pytest.approx((0.01 + 1.5) / (many.rounds_s + 0.5 * n))
    assert both.serious and "and 3 of the target-alone run's" in both.text
    # a file saved before the seconds were kept: the share is unknown, taken as serious
    old = {k: v for k, v in runfile.baseline_of(run, _flagged(run, {0}, 0.01, 0.5)).items()
           if k != "base_outside_load_s"}
    assert playback.load_note(_flagged(run, set(), 0.1, 0.1), old).serious
    # a sweep's runs together
    sweep = playback.rounds_load_note([*many.rounds, *_flagged(run, set(), 0.1, 0.5).rounds], "the sweep")
    assert f"1 of the sweep's {2 * n} rounds" in sweep.text and not sweep.serious
    assert playback.rounds_load_note(_flagged(run, set(), 0.1, 0.5).rounds, "the sweep") is None


def test_reading_a_playback_never_waits_for_the_round_in_flight():
    """advance() holds the state lock only to hand a round over: while its round waits for the device (another
    owner holds it), a second thread reads the playback at once, and the round still arrives after."""
    import threading

    target, draft = tiny_lm(100), tiny_lm(200)
    stream = engine.speculative_stream(target, draft, PROMPT, DecodeSettings(k=3, max_new_tokens=6), eos_token_id=[])
    pb = playback.Playback.live(stream, PROMPT, "", {})
    got: dict = {}
    release = threading.Event()
    holder = threading.Thread(target=lambda: devqueue.QUEUE.call("cpu", lambda: release.wait(10),
                                                                 owner="another session"), daemon=True)
    holder.start()
    while devqueue.QUEUE.stats("cpu")["holders"] != ["another session"]:
        holder.join(0.005)
    try:
        advancing = threading.Thread(target=lambda: got.update(round=pb.advance()), daemon=True)
        advancing.start()
        for _ in range(200):  # until the round waits in line for the device
            if devqueue.QUEUE.stats("cpu")["waiting"]:
                break
            advancing.join(0.01)
        assert devqueue.QUEUE.stats("cpu")["waiting"], "the round never queued for the device"
        reader = threading.Thread(target=lambda: got.update(read=pb.current_run()), daemon=True)
        reader.start()
        reader.join(2.0)
        assert not reader.is_alive(), "reading the playback waited for the round in flight"
        assert got["read"].rounds == [] and "round" not in got  # the round is still waiting for the device
    finally:
        release.set()
    advancing.join(10.0)
    assert got["round"] is not None and pb.rounds == [got["round"]]
    assert len(pb.current_run().rounds) == 1
