"""Bootstrapping a bank: conversations, documents and trajectories into the learning pipeline."""
