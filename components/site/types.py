"""The value types of the site spec: the base model and the patterns every name, host, path and label obeys.

Spec values land in config files, command lines, units, labels and object names, so each type admits only what all
of its consumers accept.
"""

import ipaddress
from typing import Annotated, Any

from pydantic import AfterValidator, BaseModel, BeforeValidator, ConfigDict, Field


def _not_a_boolean(value: Any) -> Any:
    if isinstance(value, bool):
        raise ValueError("a boolean is not a number")
    return value


# JSON's true and YAML 1.1's yes and on would pass as 1: every number of the spec is one of these, never a bool.
Int = Annotated[int, BeforeValidator(_not_a_boolean)]
Float = Annotated[float, BeforeValidator(_not_a_boolean)]
# DNS-1123 label: these names become Kubernetes object names, Slurm node names and hostnames.
Name = Annotated[str, Field(pattern=r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$", max_length=63)]
Percent = Annotated[Float, Field(ge=0, lt=100)]
# A Kubernetes user as RBAC subjects name it (a client certificate's CN, the user a token maps to): DNS-like here, so
# it reads the same in a binding and in a kubeconfig.
KubernetesUser = Annotated[str, Field(pattern=r"^[a-z0-9]([-a-z0-9.:]*[a-z0-9])?$", max_length=253)]
# RFC 1123 host names (or dotted IPv4): they land in slurm.conf, mount units, SSH and StorageClass parameters, so
# nothing but letters, digits, hyphens and dots.
_HOST_LABEL = r"[A-Za-z0-9]([-A-Za-z0-9]*[A-Za-z0-9])?"
Hostname = Annotated[str, Field(pattern=rf"^{_HOST_LABEL}(\.{_HOST_LABEL})*$", max_length=253)]
# A Kubernetes label value (GPU model names become labels and Kueue flavor names).
LabelValue = Annotated[str, Field(pattern=r"^[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$", max_length=63)]


def _one_interface(address: str) -> str:
    try:
        parsed = ipaddress.ip_address(address)
    except ValueError:
        raise ValueError("must be an IPv4 or IPv6 address (a listener binds it as given, no name lookup)") from None
    if parsed.is_unspecified:
        raise ValueError(f"{address} listens on every interface: name the one address that must reach it")
    return address


# The address a listener binds: one interface, as an IP literal. 127.0.0.1 keeps it on the host itself.
ListenAddress = Annotated[str, Field(max_length=45), AfterValidator(_one_interface)]


def _no_dot_parts(path: str) -> str:
    if any(part in (".", "..") for part in path.split("/")):
        raise ValueError("must not have . or .. parts")
    return path


class Spec(BaseModel):
    # Infinity and NaN pass every bound (and then break the pack's JSON or silence an alert): numbers are finite.
    model_config = ConfigDict(extra="forbid", frozen=True, use_attribute_docstrings=True, allow_inf_nan=False)


# Paths land in slurm.conf, shell commands, unit files and hostPath volumes: plain characters only, no . or .. parts.
AbsolutePath = Annotated[str, Field(pattern=r"^(/[A-Za-z0-9._+@-]+)+$", max_length=1024),
                         AfterValidator(_no_dot_parts)]
# A model directory relative to the model registry and the NVMe cache: path parts without . or .. parts.
ModelPath = Annotated[str, Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]*(/[A-Za-z0-9][A-Za-z0-9._-]*)*$",
                                 max_length=255), AfterValidator(_no_dot_parts)]
