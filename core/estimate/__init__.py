"""core.estimate"""
