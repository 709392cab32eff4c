"""The GPU catalog's names: the GRES type Slurm and the Kueue flavors share."""

import pytest

from components.site.catalog import gres_type


@pytest.mark.parametrize(
    ("model", "expected"),
    [
        pytest.param("A800-SXM4-80GB", "a800", id="A800 SXM4 80GB is gres type a800"),
        pytest.param("RTX-4090", "rtx4090", id="RTX 4090 is gres type rtx4090"),
        pytest.param("H100-SXM5-80GB", "h100", id="H100 SXM5 80GB is gres type h100"),
        pytest.param("L40S", "l40s", id="L40S is gres type l40s"),
    ],
)
def test_should_name_the_gres_type_after_the_gpu_not_its_form_factor(model: str, expected: str) -> None:
    assert gres_type(model) == expected
