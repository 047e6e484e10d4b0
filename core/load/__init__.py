"""core.load"""
