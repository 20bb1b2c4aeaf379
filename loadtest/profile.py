"""What one load test does: the load, the fleet's size and settings, the faults; and the two presets."""

from __future__ import annotations

from dataclasses import asdict, dataclass, replace
from typing import Any

from loadtest.jobs import WorkArgs, parse_distribution


@dataclass(frozen=True)
class LoadConfig:
    # The load: `schedules` schedules running loadtest.work, their periods cycling through `periods`
    # (seconds), every other one a 6-field cron (`*/P * * * * *`), the others `every = "Ps"`.
    duration_s: float = 60.0
    schedules: int = 24
    periods: tuple[int, ...] = (1, 2, 3)
    job_duration: str = "exp:0.3"
    job_duration_max_s: float = 3.0
    transient: float = 0.05
    permanent: float = 0.01
    max_attempts: int = 6
    retry_base: str = "500ms"
    retry_cap: str = "2s"
    unsafe_effects: bool = False
    # The fleet, under supervisord.
    workers: int = 4
    tickers: int = 2
    concurrency: int = 4
    claim_batch: int = 4
    lease_s: float = 2.0
    heartbeat_s: float = 0.5
    poll_s: float = 1.0
    ticker_poll_s: float = 1.0
    grace_s: float = 0.5
    # The faults, at moments drawn from the seed.
    seed: int = 1
    kills: int = 24
    zombies: int = 3
    zombie_s: float | None = None  # how long a zombie stays stopped; None: lease + poll + 1 s
    restarts: int = 3  # graceful worker restarts through supervisord (SIGTERM: finish or hand back)
    ticker_kills: int = 1
    pg_restarts: int = 1
    starvations: int = 1
    starve_s: float = 5.0
    starve_keep: int = 3  # connections left free while starving
    drain_timeout_s: float = 120.0

    @property
    def zombie_stop_s(self) -> float:
        return self.zombie_s if self.zombie_s is not None else self.lease_s + self.poll_s + 1.0

    @property
    def reclaim_bound_s(self) -> float:
        """What the design promises for a crashed worker's run: reclaimed within lease + poll."""
        return self.lease_s + self.poll_s

    def slots_per_s(self) -> float:
        return sum(1.0 / self.periods[i % len(self.periods)] for i in range(self.schedules))

    def work_args(self) -> WorkArgs:
        return WorkArgs(
            seed=self.seed,
            transient=self.transient,
            permanent=self.permanent,
            duration=self.job_duration,
            duration_max=self.job_duration_max_s,
            idempotent=not self.unsafe_effects,
        )

    def as_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["periods"] = list(self.periods)
        return d

    def validate(self) -> list[str]:
        """One line per setting that cannot work."""
        bad: list[str] = []
        if self.duration_s < 10:
            bad.append("--duration: at least 10 s")
        if self.schedules < 1 or self.workers < 1 or self.tickers < 1 or self.concurrency < 1:
            bad.append("--schedules, --workers, --tickers, --concurrency: at least 1")
        if not self.periods or any(p < 1 or 60 % p for p in self.periods):
            bad.append("--periods: whole seconds that divide 60 (1, 2, 3, 4, 5, 6, 10, 12, 15, 20, 30)")
        try:
            parse_distribution(self.job_duration)
        except ValueError as e:
            bad.append(f"--job-duration: {e}")
        for name, p in (("--transient", self.transient), ("--permanent", self.permanent)):
            if not 0 <= p < 1:
                bad.append(f"{name}: a probability in [0, 1)")
        if not 0 < self.heartbeat_s < self.lease_s:
            bad.append("--heartbeat: positive and shorter than --lease")
        if self.poll_s <= 0:
            bad.append("--poll: positive")
        if (
            min(
                self.kills, self.zombies, self.restarts, self.ticker_kills, self.pg_restarts, self.starvations
            )
            < 0
        ):
            bad.append("fault counts must not be negative")
        if self.zombies and self.workers < 2:
            bad.append("--zombies: needs at least 2 workers (another one must reclaim the runs)")
        return bad


SHORT = LoadConfig()
LONG = replace(
    SHORT,
    duration_s=600.0,
    schedules=60,
    workers=8,
    kills=150,
    zombies=15,
    restarts=10,
    ticker_kills=6,
    pg_restarts=2,
    starvations=3,
    drain_timeout_s=180.0,
)
PROFILES: dict[str, LoadConfig] = {"short": SHORT, "long": LONG}
