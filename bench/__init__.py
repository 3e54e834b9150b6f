"""Benchmarks: each compares atwhois with a baseline measured in the same run."""

from typing import NamedTuple


class Row(NamedTuple):
    """One line of `make bench`'s summary: atwhois's figure and its baseline's, same run."""

    what: str
    ours: float
    baseline: float
    against: str  # what the baseline is
    unit: str
    lower_is_better: bool = False

    def line(self) -> str:
        ratio = self.ours / self.baseline if self.baseline else float("nan")
        better = "lower is better" if self.lower_is_better else ""
        return (
            f"  {self.what:<46} {self.ours:11,.2f} {self.unit:<12} {self.against:<28} "
            f"{self.baseline:11,.2f}   ratio {ratio:5.2f} {better}"
        )
