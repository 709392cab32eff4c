"""Hygiene: Helm charts pinned to an exact version from a named repository; secrets never stored in plain text.

A validation cannot tell a Pulumi secret from a plain string: the SDK unwraps secrets before Analyze and
AnalyzeStack call a policy (pulumi/pulumi-policy#241). Only Remediate keeps them wrapped, so the secret rule is a
remediation: it seals every plain string under a secret-like key as a Pulumi secret before the engine stores it.
"""

import re
from collections.abc import Mapping
from typing import Any, cast

from common import ViolationError, describe, fact, text
from pulumi_policy import (
    EnforcementLevel,
    ReportViolation,
    ResourceRemediation,
    ResourceValidationArgs,
    ResourceValidationPolicy,
    Secret,
)

HELM_RELEASE_TYPE = "kubernetes:helm.sh/v3:Release"
EXACT_VERSION = re.compile(r"^v?\d+\.\d+\.\d+(?:[-+][0-9A-Za-z.+-]+)?$")
"""`1.2.3`, `v25.3.3`, `1.2.3-rc.1`: one release, never a range (`^1.2`, `~1`, `>=1`, `1.x`) or `latest`."""
OCI_PREFIX = "oci://"
"""An OCI chart reference carries its registry; other charts need repositoryOpts.repo."""
ARCHIVE_SUFFIX = ".tgz"
"""A chart named as an archive file (the site's chart mirror folder, mirror.charts) carries its version in its name."""
SECRET_KEY_ENDINGS = ("password", "passwd", "token", "privatekey", "secret", "apikey")
ENVIRONMENT_REFERENCE = "os.environ/"
"""Input keys, lower-cased without `_`/`-`, that hold credentials: `bmcPassword`, `slack_token`, `private_key`."""


def check_release_pinned(args: ResourceValidationArgs, report: ReportViolation) -> None:
    if args.resource_type != HELM_RELEASE_TYPE:
        return
    try:
        chart = text(args, "chart")
        version = fact(args, "version", None)
        if not isinstance(version, str) or not EXACT_VERSION.match(version):
            raise ViolationError(f"{describe(args)}: chart {chart} has version {version!r}; pin one exact release")
        if chart.endswith(ARCHIVE_SUFFIX):
            # A chart archive of the site's mirror folder: Helm installs the file, so its name must be the version's.
            if not chart.endswith(f"-{version}{ARCHIVE_SUFFIX}"):
                raise ViolationError(f"{describe(args)}: chart archive {chart} is not the pinned version {version}")
        elif not chart.startswith(OCI_PREFIX):
            text(args, "repositoryOpts.repo")
    except ViolationError as problem:
        report(str(problem), None)


def is_secret_key(key: str) -> bool:
    return re.sub(r"[_-]", "", key.lower()).endswith(SECRET_KEY_ENDINGS)


def _raw(value: Any) -> Any:
    # In Remediate the SDK deserializes every object into a secrets-preserving proxy that unwraps `Secret` on
    # read; "__target" is how its own serializer reaches the raw object, secrets still wrapped.
    return value["__target"] if isinstance(value, Mapping) and not isinstance(value, dict) else value


def _seal(value: Any, secret_key: bool) -> tuple[Any, bool]:
    """The value with plain strings under secret-like keys wrapped as secrets, and whether anything changed."""
    value = _raw(value)
    if isinstance(value, Secret):
        return value, False
    if isinstance(value, str):
        # `os.environ/NAME` is LiteLLM's reference to an environment variable (its proxy config): it names a
        # credential, it holds none.
        holds_one = secret_key and value and not value.startswith(ENVIRONMENT_REFERENCE)
        return (Secret(value), True) if holds_one else (value, False)
    if isinstance(value, dict):
        # Only a key's own strings are judged: `secret: {secretName: ...}` references a Secret, it holds none.
        sealed = {k: _seal(v, is_secret_key(k)) for k, v in value.items()}
        return {k: v for k, (v, _) in sealed.items()}, any(changed for _, changed in sealed.values())
    if isinstance(value, list):
        elements = [_seal(v, secret_key) for v in value]
        return [v for v, _ in elements], any(changed for _, changed in elements)
    return value, False


def seal_plaintext_secrets(args: ResourceValidationArgs) -> Mapping[str, Any] | None:
    sealed, changed = _seal(args.props, False)
    return sealed if changed else None


HELM_RELEASE_PINNED = ResourceValidationPolicy(
    name="helm-release-pinned",
    description="Every Helm release names its chart, one exact chart version and the repository it comes from.",
    validate=check_release_pinned,
)
SECRETS_STAY_SECRET = ResourceValidationPolicy(
    name="secrets-stay-secret",
    description="A password, token, private key, secret or API key input is stored only as a Pulumi secret.",
    # The SDK types a remediation as returning an awaitable; its servicer takes a plain mapping or None as well.
    remediate=cast(ResourceRemediation, seal_plaintext_secrets),
    enforcement_level=EnforcementLevel.REMEDIATE,
)

POLICIES = [HELM_RELEASE_PINNED, SECRETS_STAY_SECRET]
