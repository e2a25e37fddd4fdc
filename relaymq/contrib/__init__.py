"""Integrations with frameworks; each module needs its framework (an extra), and says so."""
