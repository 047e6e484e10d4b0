"""core.sweep"""
