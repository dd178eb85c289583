"""docs/configuration.md is the option registry as integration/make-config-docs renders it."""

from __future__ import annotations

import config_docs  # integration/, on the path through tests/conftest.py
from flinkyarn.configuration import registered_options


def test_the_configuration_page_is_up_to_date():
    assert config_docs.PAGE.read_text() == config_docs.render(), (
        "docs/configuration.md is stale: run integration/make-config-docs")


def test_the_page_names_every_option_with_its_default():
    text = config_docs.render()
    for key, opt in registered_options().items():
        row = next(line for line in text.splitlines() if line.startswith(f"| `{key}` |"))
        assert (f"`{opt.default}`" if opt.default.strip() else "(empty)") in row, key
