# SPDX-License-Identifier: Apache-2.0
"""zerolayer as a service: a declarative configuration (config), the plan
that makes a host match it (plan), its execution (apply) and the loop that
keeps the host matching it (watch). docs/spec.md §10."""
