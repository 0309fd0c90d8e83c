"""Tests of as2d.models (mirrors src/as2d/models)."""
