"""core.simulate"""
