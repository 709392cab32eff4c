"""The XIDs the site may name, with NVIDIA's meaning of each: the catalogue `health.drain_xids` and
`alerting.xid_hardware` are checked against, so a typo (an XID the driver never logs, or one that means something
else) fails the spec instead of silently watching nothing.

Source: NVIDIA's Xid catalogue for Ampere and newer GPUs ("Analyzing Xid Errors with the Xid Catalog",
docs.nvidia.com/deploy/xid-errors/analyzing-xid-catalog.html, its Mnemonic and Description columns) and, for 48, 63
and 64, the Dynamic Page Retirement guide (docs.nvidia.com/deploy/dynamic-page-retirement/visibility.html). Only the
XIDs this site has reason to name are listed; an XID added here must come with its catalogue description.
"""

from typing import Final

XID_CATALOGUE: Final[dict[int, str]] = {
    13: "Graphics Engine Exception (usually the application: an illegal address or instruction)",
    31: "GPU memory page fault (usually the application: an illegal memory access)",
    43: "GPU stopped processing (the driver reset a channel the application used)",
    45: "Preemptive cleanup, due to previous errors (the driver ended the application's channels)",
    48: "Double Bit ECC Error: an uncorrectable double-bit error (DBE) was detected",
    61: "Internal micro-controller breakpoint/warning (the PMU halted: reset the GPU)",
    62: "Internal micro-controller halt",
    63: "ECC page retirement or row remapping recording event: a reset activates the remap",
    64: "ECC page retirement or row remapper recording failure",
    74: "NVLINK Error: a link failed or retrained",
    79: "GPU has fallen off the bus",
    92: "High single-bit ECC error rate",
    94: "Contained ECC error: the affected application was stopped, the GPU may continue",
    95: "Uncontained ECC error: every application on the GPU is affected; reset the GPU",
    119: "GSP RPC Timeout: the GPU System Processor did not answer the driver",
    120: "GSP Error",
    140: "Unrecovered ECC Error",
}
"""XID -> NVIDIA's description (the catalogue's words, shortened)."""


def unknown_xids(xids: tuple[int, ...]) -> list[int]:
    """The XIDs of `xids` the catalogue does not list."""
    return [xid for xid in xids if xid not in XID_CATALOGUE]
