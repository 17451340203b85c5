"""The README's Prometheus scrape configuration is docs/prometheus-scrape.yaml, word for word
(tests/container runs Prometheus with that file)."""

from __future__ import annotations

import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def test_readme_shows_the_scrape_config_the_container_test_uses() -> None:
    readme = (REPO / "README.md").read_text()
    blocks = [b for b in re.findall(r"```yaml\n(.*?)```", readme, re.S) if "scrape_configs:" in b]
    assert blocks == [(REPO / "docs" / "prometheus-scrape.yaml").read_text()]
