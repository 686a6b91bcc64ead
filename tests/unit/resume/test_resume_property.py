"""A resume is exact, or it says so: a differential property test over loaders, accumulation, optimizers,
schedulers, precision, stop points and changes between save and resume (tests/helpers/resume_cases.py).

Each case runs the uninterrupted fit and resumes from its saves (a chain of stops), in this process, and
asserts bit-equal weights, optimizer and scheduler states and metrics.csv rows, or the line saying why not
(only a case that changed its loader may take that way out). The default tier runs a sample of
:data:`SAMPLE` cases; ``pytest -m full`` runs :data:`FULL`. Cases it found (and issue 57's) are plain tests.
"""

from __future__ import annotations

import contextlib
import io
import logging
import warnings

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.helpers.resume_cases import Case, Loader, check

SAMPLE, FULL = 10, 200
SAMPLERS = ("sequential", "random", "random_generator", "distributed")


@st.composite
def loaders(draw: st.DrawFn) -> Loader:
    batch_size = draw(st.integers(1, 6))
    samples = draw(st.integers(2 * batch_size, min(30, 8 * batch_size)))  # 2..8 batches an epoch
    workers = draw(st.sampled_from((0, 0, 2)))
    return Loader(
        samples=samples,
        batch_size=batch_size,
        drop_last=draw(st.booleans()),
        sampler=draw(st.sampled_from(SAMPLERS)),
        loader_generator=draw(st.booleans()),
        workers=workers,
        persistent=bool(workers) and draw(st.booleans()),
        seed=draw(st.integers(0, 3)),
    )


@st.composite
def changes(draw: st.DrawFn, loader: Loader) -> tuple[str, object] | None:
    kinds = (None, None, "batch_size", "samples", "drop_last", "sampler", "workers", "seed")
    kind = draw(st.sampled_from(kinds))
    if kind is None:
        return None
    value = {
        "batch_size": loader.batch_size + draw(st.sampled_from((-1, 1))) if loader.batch_size > 1 else 2,
        "samples": loader.samples + draw(st.sampled_from((-1, 1))),
        "drop_last": not loader.drop_last,
        "sampler": draw(st.sampled_from([s for s in SAMPLERS if s != loader.sampler])),
        "workers": 0 if loader.workers else 2,
        "seed": loader.seed + 1,
    }[kind]
    return (kind, value)


@st.composite
def cases(draw: st.DrawFn) -> Case:
    loader = draw(loaders())
    return Case(
        loader=loader,
        epochs=draw(st.integers(1, 3)),
        accumulate=draw(st.sampled_from((1, 1, 2, 3))),
        optimizer=draw(st.sampled_from(("sgd", "adam", "adamw"))),
        scheduler=draw(st.sampled_from(("none", "step", "epoch"))),
        precision=draw(st.sampled_from(("32-true", "bf16-mixed"))),
        stops=tuple(sorted(draw(st.lists(st.floats(0, 0.99), min_size=1, max_size=3)))),
        change=draw(changes(loader)),
    )


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    """A folder per run of a case, and one for the uninterrupted fits (kept for the module)."""
    count = iter(range(10**6))
    references = tmp_path_factory.mktemp("references")
    return lambda: (tmp_path_factory.mktemp(f"case{next(count)}"), references)


def run(case: Case, folders) -> list[str]:
    """``check(case)`` quietly; the lines a resume said why it is not exact."""
    root, references = folders()
    err, lines = io.StringIO(), []

    def said() -> str:
        text = err.getvalue()
        err.seek(0)
        err.truncate()
        return text

    with contextlib.redirect_stderr(err), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        logging.getLogger("lightning.pytorch").setLevel(logging.ERROR)
        problems = check(case, root, said, references, lines)
    assert problems == [], f"{case}: {problems}"
    return lines


def _property(examples: int):
    return settings(
        max_examples=examples,
        derandomize=True,  # the same cases every run: a deterministic test
        database=None,
        deadline=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
    )


@pytest.mark.integration  # trains for seconds: out of --fast, in `pytest`
@_property(SAMPLE)
@given(case=cases())
def test_a_sample_of_resumes_is_exact_or_says_why(case, folders):
    run(case, folders)


@pytest.mark.full
@_property(FULL)
@given(case=cases())
def test_every_resume_is_exact_or_says_why(case, folders):
    run(case, folders)


# ---- the cases of issue 57, and those the property test found ---------------------------------------
def test_persistent_workers_resume_exactly_in_a_later_epoch(folders):
    """A stop in epoch 2 or 3 with persistent shuffled workers: the uninterrupted run reset its iterator, the
    resume makes one; its workers' base seed is drawn as the stopped run's was, the shuffle's seed is the
    saved one. One line says the workers' random streams restart (an augmentation in them would differ)."""
    loader = Loader(samples=24, batch_size=4, workers=2, persistent=True)
    lines = run(Case(loader=loader, epochs=3, stops=(0.45, 0.8)), folders)
    assert lines and all("(started in an earlier epoch) restart their random" in line for line in lines)


@pytest.mark.parametrize("sampler", ["random", "random_generator"])
def test_a_resume_at_an_epoch_start_continues_the_loaders_own_generators(sampler, folders):
    """A loader (or sampler) with its own generator, resumed from the save at an epoch's end: the next epoch's
    order is drawn from the generators as the saved epoch left them, not as a new process builds them."""
    loader = Loader(samples=12, batch_size=4, sampler=sampler, loader_generator=True, workers=0)
    assert run(Case(loader=loader, epochs=3, stops=(0.3,)), folders) == []  # the save at step 3
    workers = Loader(samples=12, batch_size=4, sampler=sampler, loader_generator=True, workers=2)
    assert run(Case(loader=workers, epochs=2, stops=(0.3,)), folders) == []


@pytest.mark.parametrize("scheduler", ["none", "epoch"])
def test_a_second_resume_after_one_from_an_epochs_last_batch(scheduler, folders):
    """Found by the property test: resumed from the save at epoch 1's last batch, the fit's own save in
    epoch 3 resumed with its rows logged one step lower (Lightning left the next epoch's counters unstarted:
    lit_gpu.upstream.start_next_epoch_after_a_finished_one)."""
    from tests.helpers import resume_cases as rc

    loader = Loader(samples=12, batch_size=4, sampler="random", loader_generator=True)
    case = Case(loader=loader, epochs=3, scheduler=scheduler)
    root, references = folders()
    ref = rc.reference(case, references)
    first = rc.fit(case, case.loader, root / "first", ref.saves[2])  # step 3: epoch 1's last batch
    assert rc.differences(ref, first, 3) == []
    second = rc.fit(case, case.loader, root / "second", first.saves[3])  # step 7: epoch 3's first batch
    assert rc.differences(ref, second, 7) == []


def test_a_save_with_the_older_unstarted_epoch_counters_resumes_at_its_steps(folders, monkeypatch):
    """A save written by a fit that resumed at an epoch's last batch before lit_gpu started the next epoch
    (its epoch_progress one short) is repaired on load (lit_gpu.upstream.repair_unstarted_epoch); it
    holds no logged aggregates either, and the line says so."""
    from lit_gpu import messages
    from lit_gpu.resume import state as rng_state
    from tests.helpers import resume_cases as rc

    loader = Loader(samples=12, batch_size=4, sampler="random", loader_generator=True)
    case = Case(loader=loader, epochs=3)
    root, references = folders()
    ref = rc.reference(case, references)
    with monkeypatch.context() as m:
        m.setattr(rng_state, "start_next_epoch_after_a_finished_one", lambda trainer: False)  # the older fit
        first = rc.fit(case, case.loader, root / "first", ref.saves[2])
    older = torch.load(first.saves[3], weights_only=True)["loops"]["fit_loop"]["epoch_progress"]["current"]
    assert older["ready"] == older["started"] == older["processed"] == 2  # epoch 3 running, counted unstarted
    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        second = rc.fit(case, case.loader, root / "second", first.saves[3])
    lines = [line for line in err.getvalue().splitlines() if line.startswith("lit-gpu:")]
    assert lines == ["lit-gpu: " + messages.RESUMED_UNSTARTED_EPOCH], lines
    # the steps continue exactly; the epoch's aggregate (the older file kept none) is what the line names
    assert rc.differences(ref, second, 7) == ["metrics.csv rows [('train/loss_epoch', 8)]"]


@pytest.mark.parametrize(
    ("change", "named"),
    [
        (("batch_size", 9), "batch_size 8 -> 9"),  # 8 batches either way: the batch count alone missed it
        (("samples", 63), "samples 64 -> 63"),
        (("sampler", "random"), "sampler SequentialSampler -> RandomSampler, shuffle False -> True"),
    ],
)
def test_a_loader_changed_between_save_and_resume_is_named(change, named, folders):
    loader = Loader(samples=64, batch_size=8, sampler="sequential" if change[0] == "sampler" else "random")
    lines = run(Case(loader=loader, epochs=1, stops=(0.5,), change=change), folders)
    assert len(lines) == 1 and named in lines[0] and "changed since the checkpoint" in lines[0], lines


def test_a_loader_whose_generators_changed_is_named_not_refused(folders):
    """Found by the property test: a sampler with a generator saved, a sequential one resumed (one generator
    state fewer) was refused as a malformed state; it is a change, named in one line."""
    loader = Loader(samples=2, batch_size=1, sampler="random_generator")
    lines = run(Case(loader=loader, epochs=1, stops=(0.0,), change=("sampler", "sequential")), folders)
    assert len(lines) == 1 and "sampler RandomSampler -> SequentialSampler" in lines[0], lines
