"""While a live run waits for the device, the notice offers the shipped recording of its prompt and settings."""

from __future__ import annotations

from dataclasses import replace

import pytest
from test_app import APP, TINY, start

from specviz.core import prompts
from specviz.core.settings import DecodeSettings
from specviz.data import runfile

pytestmark = pytest.mark.skipif(not TINY.exists(), reason="tests/models_tiny.yaml (the tiny test registry) is missing")
FIRST = prompts.FIRST_RUN
CODE, STORY = prompts.preset(FIRST.preset), prompts.preset("Creative story")


@pytest.fixture(scope="module", autouse=True)
def tiny_registry(tiny_app_registry):
    return tiny_app_registry(TINY)


def _match(text: str, chat: bool | None, recs=None, pair: str = "", **decode) -> str | None:
    rec = runfile.matching_recording(runfile.list_recorded() if recs is None else recs, text, chat,
                                     DecodeSettings(**decode), pair)
    return None if rec is None else rec.name


def test_a_run_is_matched_with_the_recording_of_its_prompt_and_settings():
    first = dict(k=FIRST.k, k_policy=FIRST.k_policy, max_new_tokens=FIRST.max_new_tokens)
    assert _match(CODE.text, CODE.chat, **first) == "first-run-greedy"  # what Run does on a fresh page
    assert _match(CODE.text, CODE.chat) == "code-greedy"  # the same prompt at a fixed k
    assert _match(CODE.text, CODE.chat, seed=7, top_p=0.5) == "code-greedy"  # greedy: the draw does not matter
    assert _match(STORY.text, STORY.chat, temperature=1.0, seed=1) == "creative-sampling-t1"
    # what the text depends on must be the same: the seed when sampling, k, the prompt, the template, the length
    assert _match(STORY.text, STORY.chat, temperature=1.0, seed=2) is None
    assert _match(CODE.text, CODE.chat, k=5) is None
    assert _match(CODE.text + " ", CODE.chat) is None
    assert _match(CODE.text, not CODE.chat) is None
    assert _match(CODE.text, CODE.chat, max_new_tokens=47) is None
    # two recordings of the same settings: the one made on the run's pair
    (code,) = [r for r in runfile.list_recorded() if r.name == "code-greedy"]
    other = replace(code, pair="other-pair", name="code-other")
    assert _match(CODE.text, CODE.chat, [code, other], pair="other-pair") == "code-other"
    assert _match(CODE.text, CODE.chat, [code, other], pair="a third") == "code-greedy"


def test_a_live_run_of_a_recorded_prompt_offers_its_recording_in_the_waiting_notice():
    from streamlit.testing.v1 import AppTest

    at = AppTest.from_file(APP, default_timeout=120).run()
    at = start(at, prompt=CODE.text, chat=CODE.chat, max_new=48)
    job = at.session_state["main.job"]
    assert job.source == "live" and "watch=code-greedy" in job.meta["recording_offer"]
    at = start(at, prompt="one fish", chat=False, max_new=8)  # no recording of this prompt
    assert at.session_state["main.job"].meta["recording_offer"] is None

    def page():  # a session in line: its notice has its place and the offer
        import streamlit as st

        from pages.common import ui
        from specviz.device import devqueue

        ui.join_device_queue()
        st.session_state[ui.WAIT_OFFER] = "Meanwhile, [watch it](?source=recorded&watch=code-greedy)"
        devqueue._owner.get()[1](2)  # what a hold of this session calls while it waits

    at = AppTest.from_function(page).run()
    assert not at.exception, at.exception
    (notice,) = [i.value for i in at.info if "2 sessions ahead of you" in i.value]
    assert notice.endswith("[watch it](?source=recorded&watch=code-greedy)")


def test_the_offers_link_opens_the_main_page_playing_that_recording():
    from streamlit.testing.v1 import AppTest

    at = AppTest.from_file(APP, default_timeout=120)
    at.query_params.update(source="recorded", watch="code-greedy")
    at.run()
    assert not at.exception, at.exception
    job = at.session_state["main.job"]
    assert job.source == "replay" and job.meta["origin"] == "recording"
    code = next(r for r in runfile.list_recorded() if r.name == "code-greedy")
    assert job.run.token_ids == code.run.token_ids and job.done
    assert "watch" not in at.query_params  # a reload does not start it again
