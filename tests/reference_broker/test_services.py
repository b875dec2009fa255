"""Broker services: start in order, periodic work, stop in reverse; and the clocks they use."""

from __future__ import annotations

import asyncio

from reference_broker.clock import LoopClock, ManualClock
from reference_broker.services import PeriodicTask, ServiceRunner


class Recorder:
    def __init__(self, name: str, events: list[str], interval_s: float | None = None):
        self.name = name
        self.events = events
        self.interval_s = interval_s

    async def start(self) -> None:
        self.events.append(f"start {self.name}")

    def periodic_tasks(self) -> list[PeriodicTask]:
        if self.interval_s is None:
            return []

        def tick() -> None:
            self.events.append(f"tick {self.name}")
            if self.events.count(f"tick {self.name}") == 2:
                raise RuntimeError("a failing run is logged, not fatal")

        return [PeriodicTask("tick", self.interval_s, tick)]

    async def stop(self) -> None:
        self.events.append(f"stop {self.name}")


async def test_services_start_in_order_tick_and_stop_in_reverse() -> None:
    events: list[str] = []
    runner = ServiceRunner()
    runner.add(Recorder("a", events, interval_s=0.01))
    runner.add(Recorder("b", events))
    await runner.start()

    async def ticked_three_times() -> None:
        while events.count("tick a") < 3:
            await asyncio.sleep(0.01)

    await asyncio.wait_for(ticked_three_times(), 30)  # a busy machine may run the loop late
    await runner.stop()
    assert events[:2] == ["start a", "start b"] and events[-2:] == ["stop b", "stop a"]
    assert events.count("tick a") >= 3  # kept running after the failing second run
    assert runner.get("b") is not None and runner.get("c") is None


def test_manual_clock_fires_due_timers_in_order_and_skips_cancelled() -> None:
    clock = ManualClock(start_ms=0)
    fired: list[tuple[str, int]] = []
    clock.call_later(20, lambda: fired.append(("b", clock.now_ms())))
    clock.call_later(10, lambda: clock.call_later(5, lambda: fired.append(("nested", clock.now_ms()))))
    clock.call_later(12, lambda: fired.append(("cancelled", 0))).cancel()
    clock.advance(19)
    assert fired == [("nested", 15)] and clock.now_ms() == 19
    clock.advance(1)
    assert fired[-1] == ("b", 20) and clock.pending == 0


async def test_loop_clock_uses_the_running_loop() -> None:
    clock = LoopClock()
    done = asyncio.Event()
    start = clock.now_ms()
    clock.call_later(20, done.set)
    await asyncio.wait_for(done.wait(), 30)
    assert clock.now_ms() - start >= 15
