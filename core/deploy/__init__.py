"""core.deploy"""
