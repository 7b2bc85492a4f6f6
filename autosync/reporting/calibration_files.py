"""`autosync calibrate`'s files: the calibrated job, its calibration as a comment on top, and
calibration.json beside it. `Calibrated` is what `autosync.api.calibrate` returns: the calibration and the
job to tune, which writes itself (`.write(job_file)`)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, NamedTuple

import yaml

from autosync.core import strict_json
from autosync.core.job import JobSpec, job_from_dict

if TYPE_CHECKING:
    from autosync.measure.calibration import Calibration

CALIBRATION_FILE = "calibration.json"  # beside a calibrated job file: the calibration as data


def write_calibration(calibration: "Calibration", job: JobSpec, job_file: Path) -> list[Path]:
    """`job` as `job_file` (a round-trip trace beside it named relatively, elsewhere absolutely), with the
    calibration as a comment on top, and calibration.json beside it; returns [calibration.json, job_file]."""
    job_file.parent.mkdir(parents=True, exist_ok=True)
    data = job.model_dump(mode="json")
    trace = data["cluster"]["round_trip"].get("path")
    if trace is not None and Path(trace).parent.resolve() == job_file.parent.resolve():
        data["cluster"]["round_trip"]["path"] = Path(trace).name
    record = job_file.parent / CALIBRATION_FILE
    record.write_text(strict_json.dumps(calibration.to_dict(), indent=2))
    lines = [f"# Calibrated against real runs ({calibration.execution}): {calibration.verdict()}."]
    if calibration.units is not None:
        lines.append(f"# The workers share {calibration.units['count']} compute units, the worker processes of the real "
                     "runs, timed before the fit (cluster.compute_units).")
    if calibration.server is not None:
        units = calibration.server.get("units_factor")
        lines.append(f"# Server costs fitted to them: {calibration.server['apply_seconds']:.6g} s per update, "
                     f"{calibration.server['gradient_seconds']:.6g} s per gradient (cluster.server; {record.name})"
                     + (f"; the compute units' times x {units:.3g}." if units is not None else "."))
    job_file.write_text("\n".join(lines) + "\n" + yaml.safe_dump(data, sort_keys=False))
    job_from_dict(yaml.safe_load(job_file.read_text()), str(job_file))  # what was written must load
    return [record, job_file]


class Calibrated(NamedTuple):
    """A calibration and the job it fitted (unpacked as the pair `calibration, job` the API returned)."""

    calibration: "Calibration"
    job: JobSpec  # the job to tune: with the fitted server costs when the calibration fitted them

    def write(self, job_file: str | Path) -> list[Path]:
        """Write the job as `job_file`, its calibration as a comment on top, and calibration.json beside it;
        returns the two paths (the job file last)."""
        return write_calibration(self.calibration, self.job, Path(job_file))
