"""FeedbackWriter and Projection against a real mount that takes feedback
(--strategy grab where the binary has it, else any strategy with the test
hook CORGIFS_TEST_FEEDBACK=1)."""

import errno
import os
import re
import subprocess

import numpy as np
import pytest

import corgifs
from conftest import FLAGS, RECORDS


@pytest.fixture(scope="module")
def feedback_mount(mounter, source, corgifs_bin):
    helptext = subprocess.run([corgifs_bin, "mount", "-h"], capture_output=True, text=True).stderr
    flags = (*FLAGS, "--parts", "1", "--feedback-dim", "16")
    if re.search(r"^\s+grab\s", helptext, re.M):
        return mounter(source, *flags, "--strategy", "grab")
    old = os.environ.get("CORGIFS_TEST_FEEDBACK")
    os.environ["CORGIFS_TEST_FEEDBACK"] = "1"
    try:
        return mounter(source, *flags)
    finally:
        if old is None:
            del os.environ["CORGIFS_TEST_FEEDBACK"]
        else:
            os.environ["CORGIFS_TEST_FEEDBACK"] = old


def test_feedback_is_refused_with_the_mounts_reason_then_accepted(feedback_mount):
    mnt = feedback_mount.dir
    # Too few vectors: the mount refuses the file at close, and says why.
    with pytest.raises(corgifs.FeedbackRefused, match="too few vectors") as e:
        with corgifs.FeedbackWriter(mnt, 0, 0, 1, dim=8) as fb:
            fb.write(np.ones((RECORDS - 1, 8)))
    assert e.value.errno == errno.EBADMSG
    # Past the budget (--feedback-dim 16): refused while writing.
    with pytest.raises(corgifs.FeedbackRefused, match="budget") as e:
        with corgifs.FeedbackWriter(mnt, 0, 0, 1, dim=17) as fb:
            fb.write(np.ones((RECORDS, 17)))
    assert e.value.errno == errno.EFBIG
    # The count, checked before the mount sees the file.
    with pytest.raises(ValueError, match="5999 vectors written for the 6000 records"):
        with corgifs.FeedbackWriter(mnt, 0, 0, 1, dim=8, records=RECORDS) as fb:
            fb.write(np.ones((RECORDS - 1, 8)))
    with corgifs.FeedbackWriter(mnt, 0, 0, 1, dim=8) as fb:
        with pytest.raises(ValueError, match="want"):
            fb.write(np.ones((3, 7)))
        with pytest.raises(ValueError, match="NaN"):
            fb.write(np.full((1, 8), np.nan))
        fb.abort()

    # Any batch sizes, in served order.
    rng = np.random.default_rng(0)
    with corgifs.FeedbackWriter(mnt, 0, 0, 1, dim=8, records=RECORDS) as fb:
        done = 0
        while done < RECORDS:
            n = min(RECORDS - done, int(rng.integers(1, 700)))
            fb.write(rng.standard_normal((n, 8)))
            done += n
        fb.write(np.zeros((0, 8)))
    st = corgifs.feedback_status(mnt)
    assert st["accepted"] == 1 and st["dim"] == 8, st
    (part,) = [p for p in st["parts"] if p["epoch"] == 0]
    assert part["state"] == "accepted" and part["records"] == RECORDS, part

    # Accepted feedback is final.
    with pytest.raises(corgifs.FeedbackRefused, match="accepted already") as e:
        corgifs.FeedbackWriter(mnt, 0, 0, 1, dim=8)
    assert e.value.errno == errno.EEXIST


def test_projection_is_seeded_and_keeps_inner_products():
    a, b = corgifs.Projection(100, 64, seed=7), corgifs.Projection(100, 64, seed=7)
    assert np.array_equal(a.matrix, b.matrix)
    assert not np.array_equal(a.matrix, corgifs.Projection(100, 64, seed=8).matrix)
    x = np.random.default_rng(1).standard_normal((200, 100)).astype(np.float32)
    y = corgifs.Projection(100, 2048, seed=3)(x)
    assert y.shape == (200, 2048) and y.dtype == np.float32
    ratio = np.linalg.norm(y, axis=1) ** 2 / np.linalg.norm(x, axis=1) ** 2
    assert abs(ratio.mean() - 1) < 0.05, ratio.mean()
    with pytest.raises(ValueError):
        a(np.ones((2, 99)))


def test_feedback_path_names_the_part():
    p = corgifs.feedback_path("/mnt/c", 3, 1, 4)
    assert p == "/mnt/c/.corgifs/feedback/epoch-0003/part-00001-of-00004.f32"
    with pytest.raises(ValueError):
        corgifs.feedback_path("/mnt/c", 0, 4, 4)
