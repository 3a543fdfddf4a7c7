# SPDX-License-Identifier: Apache-2.0
"""The `tune` section of `zerolayer bench` (section.py): each shipped tuning
profile's measured effect on the latency section's 1000x50 load, with and
without it in alternating rounds (measure.py), the profile applied to the
lab and reverted after each arm (arms.py)."""
