"""A small real service used by the runtime tests and as a template: it forwards TrafficSample
messages from ``traffic`` to ``forecast`` as a naive LoadForecast after ``work_s`` of "work", so a test
can check that SIGTERM lets in-flight work finish."""

from __future__ import annotations

import asyncio
from typing import Annotated

from msgspec import Meta

from planner_proto import LoadForecast, TrafficSample
from planner_runtime.service import Service, run_service
from planner_runtime.settings import BaseSettings


class EchoSettings(BaseSettings, frozen=True, kw_only=True):
    """Echo service: TrafficSample in, naive LoadForecast out."""

    work_s: Annotated[float, Meta(ge=0.0, le=60.0)] = 0.0
    heartbeat_s: Annotated[float, Meta(gt=0.0, le=3600.0)] = 1.0


class EchoService(Service[EchoSettings]):
    name = "echo"
    settings_type = EchoSettings

    def __init__(self, settings: EchoSettings) -> None:
        super().__init__(settings)
        self.in_flight = 0
        self.done = 0
        self._idle = asyncio.Event()
        self._idle.set()

    async def setup(self) -> None:
        await self.bus.subscribe(self.subjects.traffic(), TrafficSample, self._on_traffic)
        self.every(self.settings.heartbeat_s, self._beat, "heartbeat")

    async def _beat(self) -> None:
        self.log.debug("heartbeat", done=self.done)

    async def _on_traffic(self, sample: TrafficSample, subject: str) -> None:
        if self.stopping.is_set():
            return
        self.in_flight += 1
        self._idle.clear()
        try:
            await asyncio.sleep(self.settings.work_s)
            fc = LoadForecast(
                namespace=sample.namespace,
                issued_at_s=sample.start_s + sample.interval_s,
                for_start_s=sample.start_s + sample.interval_s,
                interval_s=sample.interval_s,
                num_requests=sample.num_requests,
                mean_isl_tokens=sample.mean_isl_tokens,
                mean_osl_tokens=sample.mean_osl_tokens,
                model="echo",
            )
            await self.bus.publish(self.subjects.forecast(), fc)
            self.done += 1
        finally:
            self.in_flight -= 1
            if self.in_flight == 0:
                self._idle.set()

    async def drain(self) -> None:
        await self._idle.wait()
        self.log.info("drained", done=self.done)


if __name__ == "__main__":
    raise SystemExit(run_service(EchoService))
