"""core.results"""
