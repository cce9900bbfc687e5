"""SIGTERM and SIGHUP are handled as Ctrl-C: KeyboardInterrupt at a safe point, exit status 128 + signal."""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Iterator

import pytest

from xpushare.transport import interrupt


@pytest.fixture(autouse=True)
def _forget_the_signal() -> Iterator[None]:
    """Leave no request behind: a later test in this worker whose waits call ``interrupt.check()`` would raise."""
    yield
    with interrupt.installed():  # an outer block starts from a clean state
        pass


@pytest.mark.parametrize(("sig", "status"), [(signal.SIGINT, 130), (signal.SIGTERM, 143), (signal.SIGHUP, 129)])
def test_each_handled_signal_interrupts_and_names_its_exit_status(sig: signal.Signals, status: int) -> None:
    before = signal.getsignal(sig)
    with pytest.raises(KeyboardInterrupt), interrupt.installed():
        os.kill(os.getpid(), sig)
        time.sleep(5)  # the handler raises long before
    assert interrupt.requested() and interrupt.received() == sig
    assert interrupt.exit_status() == status
    assert signal.getsignal(sig) is before  # restored after the block


def test_the_first_signal_wins_and_a_nested_block_keeps_it() -> None:
    with interrupt.installed():
        with pytest.raises(KeyboardInterrupt):
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(5)
        with interrupt.installed():  # e.g. the engine inside a guarded task
            assert interrupt.received() == signal.SIGTERM
            with pytest.raises(KeyboardInterrupt):
                interrupt.check()
    assert interrupt.exit_status() == 143


def test_a_plain_keyboard_interrupt_is_130() -> None:
    with interrupt.installed():
        pass
    assert interrupt.received() is None and interrupt.exit_status() == 130
