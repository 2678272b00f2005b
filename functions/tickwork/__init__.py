"""Tickwork: a serverless, AWS-native cron job scheduler with at-least-once runs."""
