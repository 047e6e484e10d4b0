"""core.serve"""
