"""Every listener's address in the spec: one interface as an IP literal, loopback by default (issue 41)."""

from typing import Any

import pytest

from components.site.health import Health
from components.site.lending import Lending
from components.site.site import SlurmSettings
from tests.builders import parse, problems, prod_values, with_changes

LISTENERS = ("lending__metrics_address", "slurm__exporter_address", "slack__receiver_address")


def with_address(key: str, address: str) -> dict[str, Any]:
    values = prod_values()
    values.setdefault(key.split("__")[0], {})  # a section the prod site leaves to its defaults
    return with_changes(values, **{key: address})


def test_should_listen_on_loopback_unless_the_site_names_an_address() -> None:
    # A scraped listener must be given the controller's address (the rule below); the receiver stays on loopback.
    assert Lending().metrics_address == Health().metrics_address == "127.0.0.1"
    assert SlurmSettings.model_fields["exporter_address"].default == "127.0.0.1"
    assert parse(prod_values()).slack.receiver_address == "127.0.0.1"


@pytest.mark.parametrize(("key", "what", "port"), [
    pytest.param("slurm__exporter_address", "Slurm exporter", 9341, id="the Slurm exporter"),
    pytest.param("lending__metrics_address", "lending controller", 9342, id="the lending controller"),
    pytest.param("health__metrics_address", "health controller", 9343, id="the health controller"),
])
def test_should_refuse_a_loopback_listener_that_prometheus_scrapes_from_the_cluster(key: str, what: str,
                                                                                   port: int) -> None:
    assert problems(with_address(key, "127.0.0.1")) == [
        f"{key.replace('__', '.')}: 127.0.0.1 is a loopback address, but Prometheus scrapes the {what} from the "
        f"cluster at slurm-controller:{port}: set the address the controller has there"]


@pytest.mark.parametrize("key", LISTENERS)
@pytest.mark.parametrize(("address", "rule"), [
    pytest.param("0.0.0.0", "0.0.0.0 listens on every interface", id="every IPv4 interface"),
    pytest.param("::", ":: listens on every interface", id="every IPv6 interface"),
    pytest.param("slurm-controller", "must be an IPv4 or IPv6 address", id="a name to look up"),
])
def test_should_refuse_an_address_that_is_not_one_interface_naming_its_key(key: str, address: str,
                                                                           rule: str) -> None:
    (problem,) = problems(with_address(key, address))
    assert problem.startswith(key.replace("__", ".") + ":") and rule in problem, problem


@pytest.mark.parametrize("key", LISTENERS)
def test_should_take_one_interface_of_the_site(key: str) -> None:
    assert parse(with_address(key, "10.20.0.5")) and parse(with_address(key, "fd00::5"))
