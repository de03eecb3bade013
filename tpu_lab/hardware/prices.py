"""Cloud TPU list prices per chip-hour (USD): one table, each price with its source, region and
the date it was read. List prices, never a quote: discounts, taxes, spot swings, storage and
networking are not in them.

Sources (the keys of :data:`SOURCES`):

- ``skypilot``: SkyPilot's catalog of Google Cloud's price list,
  skypilot-org/skypilot-catalog ``catalogs/v7/gcp/vms.csv`` at commit
  017e2502fb63c7a28757acd94002b2d6099d3e3d, read 2026-12-06. Prices per slice, linear in its
  chips; per chip-hour: ``tpu-v4-8`` 12.88 / 4 = 3.22 (us-central2, the only region listed;
  spot 3.686 / 4); ``tpu-v5litepod-8`` 9.6 / 8 = 1.20 (us-central1; spot 1.70383 / 8);
  ``tpu-v5p-8`` 16.8 / 4 = 4.20 (us-central1; spot 6.72 / 4); ``tpu-v6e-8`` 21.6 / 8 = 2.70
  (us-central1; spot 5.18666 / 8). No TPU7x row.
- ``trillium-ga``: Google's Trillium (v6e) general-availability announcement of December 2024,
  as relayed by Neowin (https://neowin.net/amp/google-takes-on-nvidia-blackwell-gpus-with-the-new-trillium-tpus),
  read 2026-12-06: "available starting at $2.7000 per chip-hour. With 1-year and 3-year
  commitments, it is available starting at $1.8900 per chip-hour and $1.2200 per chip-hour".

No price for TPU7x (Ironwood) was found published, nor committed-use prices for v4, v5e and v5p:
those are ``None``, and what would be priced with them says so instead of guessing. Set your
own with :func:`set_price` (for the session) or :func:`prices` (in a block).
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass

from ..errors import TpuLabError

#: The ways of paying for a chip-hour.
COMMITMENTS = ("on-demand", "1-year", "3-year", "spot")
#: Where each source is published (see the module's docstring for what was read there).
SOURCES = {
    "skypilot": "skypilot-org/skypilot-catalog catalogs/v7/gcp/vms.csv @ 017e2502fb63c7a28757acd9",
    "trillium-ga": "Google's Trillium GA announcement, Dec 2024 (via neowin.net)",
    "set": "set in this session",
}


@dataclass(frozen=True)
class Price:
    """USD per chip-hour for one generation and commitment (``None``: none published), where
    it comes from, its region and the date it was read."""

    generation: str
    commitment: str
    usd_per_chip_hour: float | None
    source: str
    region: str
    read: str

    @property
    def known(self) -> bool:
        return self.usd_per_chip_hour is not None


def _p(generation, commitment, usd, source, region="us-central1", read="2026-12-06") -> Price:
    return Price(generation, commitment, usd, source, region, read)


_TABLE: dict[tuple[str, str], Price] = {(p.generation, p.commitment): p for p in (
    _p("v4", "on-demand", 3.22, "skypilot", "us-central2"),
    _p("v4", "spot", 3.686 / 4, "skypilot", "us-central2"),
    _p("v5e", "on-demand", 1.20, "skypilot"),
    _p("v5e", "spot", 1.70383 / 8, "skypilot"),
    _p("v5p", "on-demand", 4.20, "skypilot"),
    _p("v5p", "spot", 1.68, "skypilot"),
    _p("v6e", "on-demand", 2.70, "skypilot"),
    _p("v6e", "spot", 5.18666 / 8, "skypilot"),
    _p("v6e", "1-year", 1.89, "trillium-ga", "North America"),
    _p("v6e", "3-year", 1.22, "trillium-ga", "North America"),
)}
_current = [dict(_TABLE)]


def price(generation: str, commitment: str = "on-demand") -> Price:
    """The list price of one chip-hour of ``generation`` (``'v6e'``) paid ``commitment``
    (:data:`COMMITMENTS`); a :class:`Price` whose ``usd_per_chip_hour`` is ``None`` where none is
    published."""
    if commitment not in COMMITMENTS:
        raise TpuLabError(f"commitment must be one of {', '.join(COMMITMENTS)}; got "
                          f"{commitment!r}.")
    found = _current[0].get((generation, commitment))
    return found or Price(generation, commitment, None, "none published", "", "2026-12-06")


def set_price(generation: str, usd_per_chip_hour: float, commitment: str = "on-demand") -> None:
    """Price ``generation``'s chip-hour at ``usd_per_chip_hour`` for the rest of the session
    (your negotiated price, another region's); :func:`reset` restores the table."""
    _current[0] = {**_current[0], (generation, commitment): _checked(
        generation, usd_per_chip_hour, commitment)}


def _checked(generation: str, usd, commitment: str) -> Price:
    price(generation, commitment)  # the commitment is one we know
    if isinstance(usd, bool) or not isinstance(usd, (int, float)) or usd <= 0:
        raise TpuLabError(f"a price is USD per chip-hour above 0, got {usd!r}; for example "
                          f"set_price({generation!r}, 2.70).")
    return Price(generation, commitment, float(usd), "set", "", "")


@contextlib.contextmanager
def prices(**usd_per_chip_hour):
    """On-demand prices changed inside the block, e.g. ``with prices(v7=6.0): ...``."""
    before = _current[0]
    _current[0] = {**before, **{(g, "on-demand"): _checked(g, usd, "on-demand")
                                for g, usd in usd_per_chip_hour.items()}}
    try:
        yield
    finally:
        _current[0] = before


def reset() -> None:
    """Back to the published table."""
    _current[0] = dict(_TABLE)


def table() -> tuple[Price, ...]:
    """Every price in force, known or not, one per generation and commitment."""
    from .chips import CHIPS

    return tuple(price(g, c) for g in CHIPS for c in COMMITMENTS)
