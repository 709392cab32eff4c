from typing import Any

import pytest

from tests.builders import prod_values


@pytest.fixture
def prod() -> dict[str, Any]:
    return prod_values()
