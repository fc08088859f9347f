"""fastane.td"""
