# SPDX-License-Identifier: Apache-2.0
"""Helpers shared by the `zerolayer bench` tests: the bench run as a user
runs it, and the shape of its figures."""

import json

from support.cli_runner import run_cli

FIGURE_KEYS = {"median", "min", "max", "rounds", "values"}
# The delivery section's keys, in order (docs/spec.md §5.9).
DELIVERY_KEYS = [
    "xsk_mode", "delivery_frames_offered", "delivery_load",
    "xsk_fps", "udp_fps", "delivery_ratio",
    "xsk_touch_fps", "udp_touch_fps", "delivery_touch_ratio",
    "xsk_act_fps", "udp_act_fps", "delivery_act_ratio",
    "c_touch_fps", "xsk_touch_vs_c_ratio", "c_consumer",
    "xsk_lost", "udp_lost", "xsk_touch_lost", "udp_touch_lost", "xsk_act_lost", "udp_act_lost",
    "c_touch_lost", "delivery_last_round",
]
# The tx section's keys, in order (docs/spec.md §5.9).
TX_KEYS = ["tx_mode", "tx_load", "tx_datagrams", "tx_sinks", "tx_dps", "tx_ratio", "tx_lost",
           "tx_cpu", "tx_last_round"]


def bench_json(*args) -> tuple[dict, str]:
    """`zerolayer bench --json ARGS`: the report, and the progress lines
    (stderr); a skip, with the bench's one line, on a kernel whose XDP test
    runs send nothing (the lab's sections need the generator)."""
    import pytest

    from pyxdp.lab import generator

    proc = run_cli("bench", "--json", *args)
    if proc.returncode != 0 and not generator.live_frames() \
            and f"zerolayer: {generator.no_live_frames()}" in proc.stderr:
        pytest.skip(generator.no_live_frames())
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout), proc.stderr


def assert_figure(fig: dict, rounds: int) -> None:
    assert set(fig) == FIGURE_KEYS
    assert fig["rounds"] == rounds == len(fig["values"])
    assert fig["min"] <= fig["median"] <= fig["max"]


def usage_error(proc) -> str:
    """The one line that says what was wrong with a `zerolayer bench` usage
    (click's format: the usage, a hint, then `Error: ...`), exit 2."""
    assert proc.returncode == 2, (proc.returncode, proc.stdout, proc.stderr)
    assert "Traceback" not in proc.stderr and not proc.stdout, proc.stderr
    errors = [ln for ln in proc.stderr.splitlines() if ln.startswith("Error: ")]
    assert len(errors) == 1, proc.stderr
    return errors[0]
