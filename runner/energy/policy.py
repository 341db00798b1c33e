"""Energy as a policy: the mode decides, once, what the loop does with energy (``EnergyPolicy``: its
hooks profile, rank and decide), and the record of what was measured and chosen (``EnergyOutcome``)."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from ..config import ENERGY_MODES
from ..evidence import Profile
from .meter import Meter, WorkloadEnergy, _paced, with_energy
from .objective import choose, energy_eps
from .proxy import ProxyEnergy, notes_for_prompt, proxy


@dataclass(frozen=True)
class EnergyOutcome:
    """What the run measured and decided about energy (result.json 'energy')."""

    mode: str
    """off | passive | active."""
    eps: float = 0.0
    """Weight of the energy term in the reward (0 unless active)."""
    noise: float = 1.0
    """Timing noise factor eps was derived from."""
    workloads: tuple[WorkloadEnergy, ...] = ()
    """NVML measurements of the baseline (and the winner, and tied candidates), per workload."""
    arms: Mapping[str, str] = field(default_factory=dict)
    """Arm name -> solution name."""
    proxy: Mapping[str, dict[str, float]] = field(default_factory=dict)
    """Candidate key -> proxy terms (pJ), for the profiled candidates."""
    winner_arm: str | None = None
    """The arm of the published winner (None when the baseline stands)."""
    choice: str = ""
    """How the final choice used energy."""
    notes: tuple[str, ...] = ()
    """Why something was not measured."""

    def to_json(self) -> dict[str, Any]:
        return {"mode": self.mode, "eps": self.eps, "noise": self.noise, "arms": dict(self.arms),
                "winner_arm": self.winner_arm, "workloads": [w.to_json() for w in self.workloads],
                "proxy": dict(self.proxy), "choice": self.choice, "notes": list(self.notes)}

    def ratio(self, arm: str) -> float | None:
        """Geometric mean over workloads of the arm's paired dynamic-energy ratio to the baseline."""
        rs = [w.measurement.ratios[arm].median for w in self.workloads
              if w.measurement is not None and arm in w.measurement.ratios]
        rs = [r for r in rs if math.isfinite(r) and r > 0]
        return math.exp(sum(map(math.log, rs)) / len(rs)) if rs else None




def decide(mode: str, target: Any, baseline: Any, passing: Sequence[Any], workloads: Sequence[Any],
           meter: Meter | None, noise: float, eps: float,
           proxies: Mapping[str, ProxyEnergy]) -> tuple[Any | None, EnergyOutcome | None]:
    """After the gate: the published winner (a gate result) and the energy record.

    ``passing`` are the gate results that passed, in gate order. Off: the first, nothing measured.
    Passive: the baseline and the first are measured; the first is published. Active: the baseline
    and every passing candidate are measured in one interleaved run; among those within ``noise`` of
    the fastest, the least dynamic energy (paired ratio to the baseline) is published.
    """
    first = passing[0] if passing else None
    if mode == "off":
        return first, None
    proxy_json = {k: e.to_json() for k, e in proxies.items()}
    cands = list(passing) if mode == "active" else list(passing[:1])
    arms = {"baseline": baseline, **{f"candidate{i + 1}": g.candidate.solution for i, g in enumerate(cands)}}
    names = {a: sol.name for a, sol in arms.items()}
    if meter is None:
        return first, EnergyOutcome(mode, eps, noise, (), names, proxy_json, "candidate1" if first else None,
                                    "energy not measured: no GPU (NVML measures only on a GPU)",
                                    ("no GPU: energy was not measured",))
    measured = _paced(meter(target, arms, workloads), baseline_rows=cands[0].per_workload if cands else (),
                      arms_rows={f"candidate{i + 1}": g.per_workload for i, g in enumerate(cands)})
    notes = tuple(f"{w.uuid}: {w.note}" for w in measured if w.note)
    out = EnergyOutcome(mode, eps, noise, measured, names, proxy_json, None, "", notes)
    if not cands:
        return None, replace(out, choice="no candidate passed the gate: the baseline's energy alone")
    if mode == "active":
        c = choose([g.speedup for g in cands], [out.ratio(f"candidate{i + 1}") for i in range(len(cands))], mode, noise)
        idx, why = c.index, c.reason
    else:
        idx, why = 0, "passive: measured and reported; the choice is speed's alone"
    arm = f"candidate{idx + 1}"
    return with_energy(cands[idx], measured, arm), replace(out, winner_arm=arm, choice=why)




@dataclass(frozen=True)
class EnergyPolicy:
    """What a run does with energy, decided once from the configuration's ``energy:`` and the
    ``--energy`` flag (the flag wins, kernelpro/pipeline.py). The loop calls its hooks (profile,
    rank, decide) and never branches on the mode itself."""

    mode: str = "off"
    """off | passive (measure the winner and report) | active (also rank by the proxy and choose among ties)."""
    meter: Meter | None = None
    """Measures arms with NVML (runner.energy.nvml_meter on a GPU); None: nothing can be measured."""
    noise: float = 1.0
    """The factor within which two speedups tie (runner.energy.timing_noise); known once the baseline is timed."""
    energy_tools: frozenset[str] = frozenset()
    """The energy-only tools, whose findings go to the prompt's own energy section, not its findings."""

    def __post_init__(self) -> None:
        if self.mode not in ENERGY_MODES:
            raise ValueError(f"energy mode {self.mode!r} is not one of {', '.join(ENERGY_MODES)}")

    @property
    def active(self) -> bool:
        """Energy takes part in the search (the proxy, the energy-only tools, the tie-break)."""
        return self.mode == "active"

    @property
    def eps(self) -> float:
        """The energy term's weight in the reward (runner.energy.energy_eps); 0 unless active."""
        return energy_eps(self.noise) if self.active else 0.0

    def calibrated(self, noise: float, tools: Sequence[Any]) -> EnergyPolicy:
        """After the baseline: its timing noise, and which of the run's tools are energy-only."""
        return replace(self, noise=noise, energy_tools=frozenset(t.name for t in tools if t.energy_only))

    # -- profile

    def profiles(self, speedup: float, best: float) -> bool:
        """Whether a passing candidate is profiled: a new best or, active, one within the noise of the
        best, so that the proxy can rank the two."""
        return speedup > best or self.active and speedup * self.noise >= best

    def timeline_bar(self, best: float) -> float:
        """The speedup from which an evaluation records its launch timeline (what ``profiles`` will ask)."""
        return best / self.noise if self.active else best

    def proxy(self, prof: Profile) -> ProxyEnergy | None:
        """The counter-based energy of a profile (paper Eq. 4) when energy is active."""
        return proxy(prof) if self.active else None

    def feedback(self, findings: Sequence[Any]) -> tuple[Any, ...]:
        """The findings the prompt's main section shows: active, the energy-only ones go to ``notes``."""
        return tuple(f for f in findings if not (self.active and f.tool in self.energy_tools))

    def notes(self, findings: Sequence[Any], current: ProxyEnergy | None, baseline: ProxyEnergy | None) -> str:
        """The prompt's energy section (empty unless active): the proxy and the energy-only findings."""
        if not self.active:
            return ""
        return notes_for_prompt([f for f in findings if f.tool in self.energy_tools], current, baseline)

    # -- rank

    def scored(self, scored: Any, baseline: ProxyEnergy | None, current: ProxyEnergy | None) -> Any:
        """A search record (runner.search.Scored) with its energy reduction against the baseline's proxy
        and the term's weight, when energy is active and both were profiled; else as it was."""
        if not self.active or baseline is None or current is None or current.total_pj <= 0:
            return scored
        return replace(scored, energy_reduction=baseline.total_pj / current.total_pj, energy_eps=self.eps)

    def rank(self, scored: Any) -> float:
        """The gate's order: the reward (speed, then the proxy within the noise) when active, speed otherwise."""
        return float(scored.reward if self.active else scored.speedup)

    def gates_also(self, speedup: float, first: float) -> bool:
        """After a first winner, whether a candidate is gated too: active, the ones as fast as it within
        the noise, for the tie-break."""
        return self.active and speedup * self.noise >= first

    # -- decide

    def decide(self, target: Any, baseline: Any, passing: Sequence[Any], workloads: Sequence[Any],
               proxies: Mapping[str, ProxyEnergy]) -> tuple[Any | None, EnergyOutcome | None]:
        """After the gate: the published winner and the energy record (``decide``)."""
        return decide(self.mode, target, baseline, passing, workloads, self.meter, self.noise, self.eps, proxies)
